package hf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/internal/testenv"
)

const tinyMoE = `{"architectures":["Qwen3MoeForCausalLM"],"hidden_size":256,"intermediate_size":512,
 "moe_intermediate_size":256,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
 "head_dim":64,"num_experts":4,"num_experts_per_tok":2,"vocab_size":320,"mlp_only_layers":[1],
 "quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`

func needRef(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if os.Getenv("TQ_REQUIRE_REFS") == "1" {
			t.Fatalf("reference %s missing (run testdata/llamacpp/setup.sh): %v", path, err)
		}
		t.Skipf("reference %s missing (run testdata/llamacpp/setup.sh): %v", path, err)
	}
	return b
}

// TestNamesKnownToLlamaCpp checks every expected HF tensor name against llama.cpp's own
// converter tables (gguf-py tensor_mapping.py and the Qwen MoE expert merging code).
func TestNamesKnownToLlamaCpp(t *testing.T) {
	src := filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp", "src")
	mapping := string(needRef(t, filepath.Join(src, "gguf-py", "gguf", "tensor_mapping.py")))
	qwen := string(needRef(t, filepath.Join(src, "conversion", "qwen.py")))
	if !strings.Contains(qwen, `mlp.experts.{xid}.{w_name}.weight`) {
		t.Fatal("conversion/qwen.py no longer names experts mlp.experts.{xid}.{w_name}.weight")
	}
	layer := regexp.MustCompile(`^model\.layers\.\d+\.`)
	expert := regexp.MustCompile(`\.experts\.\d+\.(gate_proj|up_proj|down_proj)\.weight$`)
	configs := map[string]string{
		"llama":    `{"architectures":["LlamaForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":320,"attention_bias":true}`,
		"qwen2":    `{"architectures":["Qwen2ForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":320}`,
		"qwen3":    `{"architectures":["Qwen3ForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":320}`,
		"qwen3moe": strings.Replace(tinyMoE, `"num_experts":4`, `"shared_expert_intermediate_size":256,"num_experts":4`, 1),
	}
	for arch, js := range configs {
		c := parse(t, js)
		specs, err := c.ExpectedTensors()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range specs {
			if expert.MatchString(s.Name) {
				continue // merged by the converter code checked above
			}
			base := strings.TrimSuffix(strings.TrimSuffix(s.Name, ".weight"), ".bias")
			base = layer.ReplaceAllString(base, "model.layers.{bid}.")
			if !strings.Contains(mapping, `"`+base+`"`) {
				t.Errorf("%s: %s (as %q) is not in llama.cpp's tensor_mapping.py", arch, s.Name, base)
			}
		}
	}
}

func TestExpectedTensorsLayout(t *testing.T) {
	c := parse(t, tinyMoE)
	specs, err := c.ExpectedTensors()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]TensorSpec{}
	for _, s := range specs {
		if _, dup := byName[s.Name]; dup {
			t.Fatalf("duplicate %s", s.Name)
		}
		byName[s.Name] = s
	}
	want := map[string]string{
		"model.embed_tokens.weight":                     "[320 256]",
		"model.layers.0.self_attn.q_proj.weight":        "[256 256]",
		"model.layers.0.self_attn.k_proj.weight":        "[128 256]",
		"model.layers.0.self_attn.o_proj.weight":        "[256 256]",
		"model.layers.0.self_attn.q_norm.weight":        "[64]",
		"model.layers.0.mlp.gate.weight":                "[4 256]",
		"model.layers.0.mlp.experts.3.down_proj.weight": "[256 256]",
		"model.layers.1.mlp.up_proj.weight":             "[512 256]", // mlp_only_layers: dense
		"model.layers.1.mlp.down_proj.weight":           "[256 512]",
		"lm_head.weight":                                "[320 256]",
	}
	for name, shape := range want {
		if s, ok := byName[name]; !ok || fmt.Sprint(s.Shape) != shape {
			t.Errorf("%s: %v, want %s", name, s.Shape, shape)
		}
	}
	for _, absent := range []string{"model.layers.1.mlp.gate.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.self_attn.q_proj.bias"} {
		if _, ok := byName[absent]; ok {
			t.Errorf("%s should not exist", absent)
		}
	}
}

// writeWeights writes a checkpoint with the given specs (zero data) into dir, letting
// mutate change names, shapes and dtypes first.
func writeWeights(t *testing.T, dir string, specs []TensorSpec, fp8 bool, mutate func(*safetensors.WriteTensor) bool) {
	t.Helper()
	var wts []safetensors.WriteTensor
	for _, s := range specs {
		wt := safetensors.WriteTensor{Name: s.Name, DType: safetensors.BF16, Shape: s.Shape}
		if fp8 && s.Role == RoleLinear {
			wt.DType = safetensors.F8E4M3
			sc := safetensors.WriteTensor{Name: s.Name + ScaleSuffix, DType: safetensors.F32,
				Shape: []int64{(s.Shape[0] + 127) / 128, (s.Shape[1] + 127) / 128}}
			if mutate == nil || mutate(&sc) {
				wts = append(wts, sc)
			}
		}
		if mutate == nil || mutate(&wt) {
			wts = append(wts, wt)
		}
	}
	for i := range wts {
		size, _ := safetensors.ByteSize(wts[i].DType, wts[i].Shape)
		wts[i].Write = func(w io.Writer) error { _, err := w.Write(make([]byte, size)); return err }
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), wts, nil); err != nil {
		t.Fatal(err)
	}
}

func TestFolderCheckWeights(t *testing.T) {
	c := parse(t, tinyMoE)
	specs, _ := c.ExpectedTensors()
	cases := []struct {
		name   string
		mutate func(*safetensors.WriteTensor) bool
		want   string
	}{
		{"ok", nil, ""},
		{"missing", func(w *safetensors.WriteTensor) bool { return w.Name != "model.layers.1.mlp.up_proj.weight" }, "lack 1 tensor"},
		{"shape", func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.layers.0.self_attn.k_proj.weight" {
				w.Shape = []int64{256, 256}
			}
			return true
		}, "config.json implies [128 256]"},
		{"no scale", func(w *safetensors.WriteTensor) bool {
			return w.Name != "model.layers.0.mlp.experts.1.up_proj.weight_scale_inv"
		}, "has no"},
		{"scale shape", func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.layers.0.self_attn.q_proj.weight_scale_inv" {
				w.Shape = []int64{2, 3}
			}
			return true
		}, "want [2 2]"},
		{"fp8 norm", func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.norm.weight" {
				w.DType = safetensors.F8E4M3
			}
			return true
		}, "declares no block-scaled fp8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(tinyMoE), 0o644)
			os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{}`), 0o644)
			writeWeights(t, dir, specs, true, tc.mutate)
			f, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.TokenizerJSON == "" || f.TokenizerConfig != "" || f.GenerationConfig != "" {
				t.Errorf("side files: %+v", f)
			}
			err = f.CheckWeights()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("no config: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(tinyMoE), 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "safetensors") {
		t.Errorf("no weights: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "config.json")); err == nil {
		t.Error("a file opened as a folder")
	}
}
