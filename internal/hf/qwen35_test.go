package hf

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/internal/testenv"
)

// hybridCounts counts a Qwen3.5 hybrid model's parameters from its dimensions by hand,
// independently of ExpectedTensors: per layer two norms and the FFN (router, E experts and
// the shared expert, or a dense SwiGLU), plus Gated DeltaNet (qkv, z, b, a, conv, dt_bias,
// A_log, norm, out) or gated attention (q and gate, k, v, o, q/k norms); embeddings, LM head,
// final norm; the MTP block (a full-attention layer, fc over [embedding, hidden], 3 norms).
// active counts used experts only and no MTP.
func hybridCounts(h, layers, interval, heads, kv, hd, vocab, hk, hv, dk, dv, K, experts, used, moeFF, sharedFF, ff, mtp float64) (total, active float64) {
	key, val := hk*dk, hv*dv
	conv := 2*key + val
	linear := conv*h + val*h + 2*hv*h + conv*K + 2*hv + dv + h*val
	full := 2*heads*hd*h + 2*kv*hd*h + h*heads*hd + 2*hd
	var ffnAll, ffnActive float64
	if experts > 0 {
		router := experts*h + h // mlp.gate + shared_expert_gate
		shared := 3 * h * sharedFF
		ffnAll = router + shared + experts*3*h*moeFF
		ffnActive = router + shared + used*3*h*moeFF
	} else {
		ffnAll, ffnActive = 3*h*ff, 3*h*ff
	}
	nFull := math.Floor(layers / interval)
	nLinear := layers - nFull
	trunk := nLinear*linear + nFull*full + layers*2*h
	head := 2*vocab*h + h
	mtpP := mtp * (full + 2*h + ffnAll + 2*h*h + 3*h)
	total = trunk + layers*ffnAll + head + mtpP
	active = trunk + layers*ffnActive + head
	return total, active
}

func loadTestConfig(t *testing.T, name string) *Config {
	t.Helper()
	c, err := LoadConfig(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestQwen36MoEConfig(t *testing.T) {
	c := loadTestConfig(t, "qwen3.6-35b-a3b.config.json")
	if a, err := c.Arch(); err != nil || a != "qwen35moe" {
		t.Fatalf("arch %q %v", a, err)
	}
	h := c.Hybrid
	if h == nil || !h.Multimodal || h.LinearNumKeyHeads != 16 || h.LinearNumValueHeads != 32 || h.LinearKeyHeadDim != 128 ||
		h.LinearValueHeadDim != 128 || h.LinearConvKernelDim != 4 || h.MTPLayers != 1 || !h.AttnOutputGate || h.FullAttentionInterval != 4 {
		t.Fatalf("hybrid fields %+v", h)
	}
	if c.HiddenSize != 2048 || c.HeadDim != 256 || c.NumExperts != 256 || c.NumExpertsPerTok != 8 || c.MoeIntermediateSize != 512 ||
		c.SharedExpertIntermediateSize != 512 || c.RopeTheta != 1e7 || c.RopeScaling != nil || c.VocabSize != 248320 {
		t.Fatalf("text_config not merged: %+v", c)
	}
	if c.RopeDims() != 64 || !slices.Equal(h.MRopeSection, []int{11, 11, 10}) || h.ConvDim() != 8192 {
		t.Errorf("rope dims %d sections %v conv %d", c.RopeDims(), h.MRopeSection, h.ConvDim())
	}
	var full []int
	for i := 0; i < c.NumHiddenLayers; i++ {
		if !c.IsLinearAttentionLayer(i) {
			full = append(full, i)
		}
	}
	if !slices.Equal(full, []int{3, 7, 11, 15, 19, 23, 27, 31, 35, 39}) {
		t.Errorf("full-attention layers %v", full)
	}
	total, active, err := c.ParamCount()
	if err != nil {
		t.Fatal(err)
	}
	wt, wa := hybridCounts(2048, 40, 4, 16, 2, 256, 248320, 16, 32, 128, 128, 4, 256, 8, 512, 512, 0, 1)
	if float64(total) != wt || float64(active) != wa {
		t.Errorf("counts %d / %d, hand formula %.0f / %.0f", total, active, wt, wa)
	}
	// Published: 35B total, 3B activated (the model card; about 3.3-3.5B counting the LM head).
	if math.Abs(float64(total)/35e9-1) > 0.03 || float64(active) < 3.0e9 || float64(active) > 3.6e9 {
		t.Errorf("%d total / %d active, published 35B / 3B", total, active)
	}
	t.Logf("Qwen3.6-35B-A3B: %d total (%.2fB), %d active (%.2fB)", total, float64(total)/1e9, active, float64(active)/1e9)
}

func TestQwen35DenseConfig(t *testing.T) {
	c := loadTestConfig(t, "qwen3.5-27b.config.json")
	if a, err := c.Arch(); err != nil || a != "qwen35" {
		t.Fatalf("arch %q %v", a, err)
	}
	total, active, err := c.ParamCount()
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := hybridCounts(5120, 64, 4, 24, 4, 256, 248320, 16, 48, 128, 128, 4, 0, 0, 0, 0, 17408, 1)
	if float64(total) != wt {
		t.Errorf("total %d, hand formula %.0f", total, wt)
	}
	if math.Abs(float64(total)/27e9-1) > 0.03 || active >= total {
		t.Errorf("%d total / %d active, published 27B (MTP excluded from active)", total, active)
	}
}

func TestHybridExpectedTensors(t *testing.T) {
	c := loadTestConfig(t, "qwen3.6-35b-a3b.config.json")
	specs, err := c.ExpectedTensors()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]TensorSpec{}
	for _, s := range specs {
		if _, dup := by[s.Name]; dup {
			t.Fatalf("duplicate %s", s.Name)
		}
		by[s.Name] = s
	}
	want := map[string][]int64{
		"model.language_model.embed_tokens.weight":                       {248320, 2048},
		"model.language_model.layers.0.linear_attn.in_proj_qkv.weight":   {8192, 2048},
		"model.language_model.layers.0.linear_attn.in_proj_z.weight":     {4096, 2048},
		"model.language_model.layers.0.linear_attn.in_proj_a.weight":     {32, 2048},
		"model.language_model.layers.0.linear_attn.conv1d.weight":        {8192, 1, 4},
		"model.language_model.layers.0.linear_attn.A_log":                {32},
		"model.language_model.layers.0.linear_attn.norm.weight":          {128},
		"model.language_model.layers.0.linear_attn.out_proj.weight":      {2048, 4096},
		"model.language_model.layers.3.self_attn.q_proj.weight":          {8192, 2048},
		"model.language_model.layers.3.self_attn.k_proj.weight":          {512, 2048},
		"model.language_model.layers.3.self_attn.o_proj.weight":          {2048, 4096},
		"model.language_model.layers.3.mlp.experts.gate_up_proj":         {256, 1024, 2048},
		"model.language_model.layers.3.mlp.experts.down_proj":            {256, 2048, 512},
		"model.language_model.layers.3.mlp.shared_expert_gate.weight":    {1, 2048},
		"model.language_model.layers.39.post_attention_layernorm.weight": {2048},
		"mtp.fc.weight":                                     {2048, 4096},
		"mtp.layers.0.self_attn.q_proj.weight":              {8192, 2048},
		"mtp.layers.0.mlp.experts.255.down_proj.weight":     {2048, 512},
		"mtp.layers.0.mlp.shared_expert.up_proj.weight":     {512, 2048},
		"mtp.pre_fc_norm_embedding.weight":                  {2048},
		"lm_head.weight":                                    {248320, 2048},
		"model.language_model.norm.weight":                  {2048},
		"model.language_model.layers.0.linear_attn.dt_bias": {32},
	}
	for n, shape := range want {
		if s, ok := by[n]; !ok || !slices.Equal(s.Shape, shape) {
			t.Errorf("%s: %v (present %v), want %v", n, s.Shape, ok, shape)
		}
	}
	for _, absent := range []string{"model.language_model.layers.0.self_attn.q_proj.weight", "model.language_model.layers.3.linear_attn.A_log",
		"model.layers.0.input_layernorm.weight", "model.language_model.layers.0.mlp.experts.0.up_proj.weight"} {
		if _, ok := by[absent]; ok {
			t.Errorf("%s should not be listed", absent)
		}
	}
	if s := by["mtp.layers.0.self_attn.q_proj.weight"]; !s.MTP || s.Layer != 40 {
		t.Errorf("MTP spec %+v", s)
	}
}

// TestHybridNamesKnownToLlamaCpp checks the expected names against llama.cpp's converter:
// after removing "language_model." and renaming mtp.* as conversion/qwen.py does, each name
// must be in tensor_mapping.py (fused experts and per-expert MTP tensors are handled by the
// merging code of Qwen2MoeModel).
func TestHybridNamesKnownToLlamaCpp(t *testing.T) {
	src := filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp", "src")
	mapping := string(needRef(t, filepath.Join(src, "gguf-py", "gguf", "tensor_mapping.py")))
	qwen := string(needRef(t, filepath.Join(src, "conversion", "qwen.py")))
	for _, frag := range []string{`"pre_fc_norm_embedding": "enorm"`, `"fc":                    "eh_proj"`, `mlp.experts.gate_up_proj`, `name.endswith(".A_log")`} {
		if !strings.Contains(qwen, frag) {
			t.Fatalf("conversion/qwen.py no longer contains %q", frag)
		}
	}
	layer := regexp.MustCompile(`^model\.layers\.\d+\.`)
	expert := regexp.MustCompile(`\.experts\.(\d+\.(gate_proj|up_proj|down_proj)\.weight|gate_up_proj|down_proj)$`)
	mtpGlobal := map[string]string{"mtp.fc.weight": "eh_proj", "mtp.pre_fc_norm_embedding.weight": "enorm",
		"mtp.pre_fc_norm_hidden.weight": "hnorm", "mtp.norm.weight": "shared_head.norm"}
	for _, cfg := range []string{"qwen3.6-35b-a3b.config.json", "qwen3.5-27b.config.json"} {
		c := loadTestConfig(t, cfg)
		specs, _ := c.ExpectedTensors()
		for _, s := range specs {
			if expert.MatchString(s.Name) {
				continue
			}
			n := strings.Replace(s.Name, "language_model.", "", 1)
			if g, ok := mtpGlobal[n]; ok {
				n = "model.layers.{bid}." + g
			}
			n = regexp.MustCompile(`^mtp\.layers\.\d+\.`).ReplaceAllString(n, "model.layers.{bid}.")
			base := strings.TrimSuffix(strings.TrimSuffix(n, ".weight"), ".bias")
			base = strings.TrimSuffix(base, ".dt_bias") // renamed to dt_proj.bias by the converter
			if strings.HasSuffix(n, ".dt_bias") {
				base += ".dt_proj"
			}
			base = layer.ReplaceAllString(base, "model.layers.{bid}.")
			if !strings.Contains(mapping, `"`+base+`"`) {
				t.Errorf("%s: %s (as %q) is not in llama.cpp's tensor_mapping.py", cfg, s.Name, base)
			}
		}
	}
}

const tinyHybrid = `{"architectures":["Qwen3_5MoeForCausalLM"],"hidden_size":256,"num_hidden_layers":4,
 "num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"num_experts":4,"num_experts_per_tok":2,
 "moe_intermediate_size":256,"shared_expert_intermediate_size":256,"vocab_size":320,
 "linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":64,"linear_value_head_dim":64,
 "linear_conv_kernel_dim":4,"mtp_num_hidden_layers":1,"rope_parameters":{"rope_theta":1e7,"partial_rotary_factor":0.25,"mrope_section":[3,3,2]}}`

func TestHybridCheckWeights(t *testing.T) {
	c := parse(t, tinyHybrid)
	if c.Hybrid.Multimodal || c.hybridPrefix() != "model." || c.RopeDims() != 16 {
		t.Fatalf("causal LM variant: %+v", c.Hybrid)
	}
	specs, _ := c.ExpectedTensors()
	// the per-expert layout stands in for the fused one
	var alt []TensorSpec
	for _, s := range specs {
		if l := perExpertLayout(s); l != nil {
			alt = append(alt, l...)
			continue
		}
		alt = append(alt, s)
	}
	for name, list := range map[string][]TensorSpec{"fused": specs, "per-expert": alt} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(tinyHybrid), 0o644)
		writeWeights(t, dir, list, false, nil)
		f, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.CheckWeights(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(tinyHybrid), 0o644)
	writeWeights(t, dir, specs, false, func(w *safetensors.WriteTensor) bool {
		if w.Name == "model.layers.0.linear_attn.conv1d.weight" {
			w.Shape = []int64{1024, 4}
		}
		return w.Name != "model.layers.2.linear_attn.A_log"
	})
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.CheckWeights(); err == nil || !strings.Contains(err.Error(), "conv1d") {
		t.Errorf("bad conv shape accepted: %v", err)
	}
}

func TestHybridConfigErrors(t *testing.T) {
	base := strings.TrimSuffix(strings.TrimSpace(tinyHybrid), "}")
	cases := []struct{ extra, field, want string }{
		{`,"linear_num_value_heads":3}`, "linear_num_value_heads", "not a multiple"},
		{`,"layer_types":["linear_attention","full_attention","linear_attention","full_attention"]}`, "layer_types", "full_attention_interval"},
		{`,"layer_types":["linear_attention"]}`, "layer_types", "entries for 4 layers"},
		{`,"layer_types":["linear_attention","linear_attention","linear_attention","sliding"]}`, "layer_types", "entry 3"},
		{`,"partial_rotary_factor":1.5,"rope_parameters":{"rope_theta":1e7}}`, "partial_rotary_factor", "not in (0, 1]"},
		{`,"rope_parameters":{"partial_rotary_factor":0.01}}`, "partial_rotary_factor", "even"},
		{`,"rope_parameters":{"mrope_section":[1,2,3,4,5]}}`, "rope_parameters", "at most 4"},
		{`,"rope_parameters":{"mrope_section":[1,"x"]}}`, "rope_parameters", "non-negative"},
		{`,"linear_key_head_dim":0}`, "linear_key_head_dim", "out of range"},
		{`,"full_attention_interval":0}`, "full_attention_interval", "out of range"},
	}
	for _, c := range cases {
		js := base + c.extra
		_, err := ParseConfig("/m/config.json", []byte(js))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"`+c.field+`"`) {
			t.Errorf("%s: error %v, want field %q and %q", c.extra, err, c.field, c.want)
		}
	}
	missing := strings.Replace(tinyHybrid, `"linear_conv_kernel_dim":4,`, "", 1)
	if _, err := ParseConfig("/m/config.json", []byte(missing)); err == nil || !strings.Contains(err.Error(), "linear_conv_kernel_dim") {
		t.Errorf("missing conv kernel: %v", err)
	}
}
