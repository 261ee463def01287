package convert

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/fixtures"
)

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// importance that strongly favours columns 0..7 of every tensor
type spikeImportance struct{ cols map[string]int }

func (s spikeImportance) Importance(name string, expert int) ([]float32, bool) {
	n, ok := s.cols[name]
	if !ok {
		return nil, false
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = 0.01
		if i < 8 {
			v[i] = 1000
		}
	}
	return v, true
}

func TestTurboQuantOutput(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	dir := genModel(t, o)
	cfg := filepath.Join(t.TempDir(), "quantize_config.json")
	writeFile(t, cfg, `{"quant_method":"turboquant","weight_dtype":"int4","kv_cache_dtype":"q8_0","group_size":128,
		"symmetric":true,"calibration_method":"imatrix-mse","num_prompts":64,"calibration_hash":"abc123",
		"layers_to_quantize":["q_proj","k_proj","v_proj","gate_proj","up_proj"],"skip_layers":["lm_head"],
		"tensor_types":{"blk.1.attn_v.weight":"q6_K"}}`)
	out := filepath.Join(t.TempDir(), "tq.gguf")
	res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfg}, Version: "test-1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// expected type by role, restated from the policy description
	for _, mt := range m.Tensors() {
		n := mt.Name
		var want gguf.GGMLType
		switch {
		case n == "blk.1.attn_v.weight":
			want = gguf.TypeQ6_K
		case strings.HasSuffix(n, "norm.weight") || strings.Contains(n, "ffn_gate_inp"):
			want = gguf.TypeF32
		case n == "output.weight":
			want = gguf.TypeF16
		case n == "token_embd.weight":
			want = gguf.TypeQ8_0
		case strings.Contains(n, "attn_q.") || strings.Contains(n, "attn_k.") || strings.Contains(n, "attn_v.") ||
			strings.Contains(n, "ffn_gate_exps") || strings.Contains(n, "ffn_up_exps"):
			want = gguf.TypeQ4_K
		case strings.Contains(n, "attn_output") || strings.Contains(n, "ffn_down_exps"):
			want = gguf.TypeQ8_0
		default:
			t.Errorf("unexpected tensor %s", n)
		}
		if mt.Type != want {
			t.Errorf("%s: %v, want %v", n, mt.Type, want)
		}
	}
	md := m.Metadata()
	str := func(k string) string { s, err := md.GetString(k); checkKey(t, k, err); return s }
	u := func(k string) uint64 { v, err := md.GetUint(k); checkKey(t, k, err); return v }
	if str("turboquant.weight_dtype") != "int4" || str("turboquant.kv_cache_dtype") != "q8_0" ||
		u("turboquant.group_size") != 128 || str("turboquant.calibration_method") != "imatrix-mse" ||
		u("turboquant.num_prompts") != 64 || str("turboquant.calibration_hash") != "abc123" ||
		str("turboquant.tq_version") != "test-1" || u("turboquant.version") != TurboProvenanceVersion {
		t.Error("turboquant provenance values wrong")
	}
	if b, err := md.GetBool("turboquant.symmetric"); err != nil || !b {
		t.Error("turboquant.symmetric")
	}
	if l, _ := md.GetStringArray("turboquant.layers_to_quantize"); len(l) != 5 {
		t.Errorf("layers_to_quantize %v", l)
	}
	if l, _ := md.GetStringArray("turboquant.skip_layers"); len(l) != 1 || l[0] != "lm_head" {
		t.Errorf("skip_layers %v", l)
	}
	if len(str("turboquant.config_sha256")) != 64 {
		t.Error("config hash")
	}
	if u("general.file_type") != uint64(policy.FileTypeQ4_K_M) || u("general.quantization_version") != 2 {
		t.Error("general.file_type / quantization_version")
	}
	if res.Plan.Policy != "turboquant" {
		t.Errorf("policy %q", res.Plan.Policy)
	}
}

func checkKey(t *testing.T, k string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("metadata %s: %v", k, err)
	}
}

// Importance reaches the quantizer: columns with high importance come out more accurately.
func TestTurboQuantUsesImportance(t *testing.T) {
	o := fixtures.Preset("qwen3")
	dir := genModel(t, o)
	ref := referenceTensors(t, dir, o)
	cols := map[string]int{}
	for n, r := range ref {
		if len(r.shape) == 2 {
			cols[n] = int(r.shape[0])
		}
	}
	colErr := func(imp ImportanceSource, group int) (hot, cold float64) {
		cfg := filepath.Join(t.TempDir(), "quantize_config.json")
		writeFile(t, cfg, fmt.Sprintf(`{"quant_method":"turboquant","group_size":%d,"layers_to_quantize":["q_proj","k_proj"]}`, group))
		out := filepath.Join(t.TempDir(), "m.gguf")
		res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfg, Importance: imp}})
		if err != nil {
			t.Fatal(err)
		}
		if imp != nil && res.Plan.Importance == 0 {
			t.Fatal("no tensor used importance")
		}
		m, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var hs, hx, cs, cx float64
		for _, name := range []string{"blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.0.attn_k.weight"} {
			got, _ := ggufFloats(t, m, name)
			r := ref[name]
			n := int(r.shape[0])
			for i, x := range r.vals {
				d := float64(got[i] - x)
				if i%n < 8 {
					hs, hx = hs+d*d, hx+float64(x)*float64(x)
				} else {
					cs, cx = cs+d*d, cx+float64(x)*float64(x)
				}
			}
		}
		return math.Sqrt(hs / hx), math.Sqrt(cs / cx)
	}
	for _, g := range []int{32, 128} {
		hot0, cold0 := colErr(nil, g)
		hot1, cold1 := colErr(spikeImportance{cols}, g)
		t.Logf("group %d: hot-column error %.4f -> %.4f with importance; other columns %.4f -> %.4f", g, hot0, hot1, cold0, cold1)
		if hot1 > 0.7*hot0 {
			t.Errorf("group %d: importance did not reduce the error of important columns (%.4f vs %.4f)", g, hot1, hot0)
		}
	}
}

func TestTurboQuantRefusesLMHeadAndDefaults(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen2"))
	cfg := filepath.Join(t.TempDir(), "quantize_config.json")
	writeFile(t, cfg, `{"quant_method":"turboquant","skip_layers":[]}`)
	outDir := t.TempDir()
	out := filepath.Join(outDir, "m.gguf")
	_, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfg}})
	if !errors.Is(err, policy.ErrLMHeadNotSkipped) || !strings.Contains(err.Error(), "logit") {
		t.Fatalf("want the lm_head refusal, got %v", err)
	}
	if f := dirFiles(t, outDir); len(f) != 0 {
		t.Errorf("files left: %v", f)
	}
	var warns []string
	res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfg, Force: true}, Report: ReportOptions{Warn: func(s string) { warns = append(warns, s) }}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) == 0 {
		t.Error("--force gave no warning")
	}
	for _, pt := range res.Plan.Tensors {
		if pt.Name == "output.weight" && pt.Type != "q8_0" {
			t.Errorf("forced lm_head: %s", pt.Type)
		}
	}
	// no config at all: default policy, warned
	warns = nil
	plan, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true}, Report: ReportOptions{Warn: func(s string) { warns = append(warns, s) }}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) == 0 || !strings.Contains(warns[0], "default") || plan.Importance != 0 {
		t.Errorf("default policy: warnings %v, importance %d", warns, plan.Importance)
	}
}
