package convert

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/quant"
)

type variant struct {
	name string
	opts fixtures.Options
}

func variants() []variant {
	llamaSharded := fixtures.Preset("llama")
	llamaSharded.Shards = 3
	qwen2F16 := fixtures.Preset("qwen2")
	qwen2F16.DType = safetensors.F16
	qwen3F32Tied := fixtures.Preset("qwen3")
	qwen3F32Tied.DType = safetensors.F32
	qwen3F32Tied.TieEmbeddings = true
	qwen3FP8 := fixtures.Preset("qwen3")
	qwen3FP8.FP8 = true
	moeFP8 := fixtures.Preset("qwen3moe")
	moeFP8.FP8 = true
	return []variant{
		{"llama-bf16-sharded", llamaSharded},
		{"qwen2-f16", qwen2F16},
		{"qwen3-f32-tied", qwen3F32Tied},
		{"qwen3-fp8", qwen3FP8},
		{"qwen3moe-bf16", fixtures.Preset("qwen3moe")},
		{"qwen3moe-fp8", moeFP8},
	}
}

// F32/F16/BF16 outputs hold exactly the checkpoint's values after the converter's transforms
// (rounded to the output type with ggml's conversions): every tensor, every element.
func TestConvertExactValues(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			dir := genModel(t, v.opts)
			ref := referenceTensors(t, dir, v.opts)
			outs := []string{"f32", "f16"}
			if v.name == "qwen3moe-bf16" {
				outs = append(outs, "bf16")
			}
			for _, ot := range outs {
				out := filepath.Join(t.TempDir(), "m.gguf")
				res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{OutType: ot}})
				if err != nil {
					t.Fatalf("%s: %v", ot, err)
				}
				m, err := gguf.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				if len(m.Tensors()) != len(ref) {
					t.Errorf("%s: %d tensors, reference has %d", ot, len(m.Tensors()), len(ref))
				}
				for name, r := range ref {
					got, mt := ggufFloats(t, m, name)
					if fmtShape(shapeOf(mt)) != fmtShape(r.shape) && !(len(r.shape) == 2 && r.shape[1] == 1 && len(mt.Dims) == 1) {
						t.Errorf("%s %s: shape %v, want %v", ot, name, shapeOf(mt), r.shape)
						continue
					}
					want := gguf.TypeF32
					if mt.NumElements() > 0 && len(r.shape) >= 2 && r.shape[1] > 1 && !strings.HasSuffix(name, "_norm.weight") &&
						!strings.Contains(name, "ffn_gate_inp") {
						want, _ = gguf.ParseType(ot)
					}
					if mt.Type != want {
						t.Errorf("%s %s: type %v, want %v", ot, name, mt.Type, want)
					}
					bad := 0
					for i, x := range r.vals {
						var exp float32
						switch mt.Type {
						case gguf.TypeF32:
							exp = x
						case gguf.TypeF16:
							exp = quant.FP16ToFP32(quant.FP32ToFP16(x))
						case gguf.TypeBF16:
							exp = quant.BF16ToFP32(quant.FP32ToBF16(x))
						}
						if math.Float32bits(got[i]) != math.Float32bits(exp) {
							if bad == 0 {
								t.Errorf("%s %s[%d] = %v, want %v", ot, name, i, got[i], exp)
							}
							bad++
						}
					}
					if bad > 0 {
						t.Errorf("%s %s: %d of %d values differ", ot, name, bad, len(r.vals))
					}
				}
				// metadata basics
				md := m.Metadata()
				arch, _ := md.GetString("general.architecture")
				if arch != v.opts.Arch {
					t.Errorf("architecture %q", arch)
				}
				ft, _ := md.GetUint("general.file_type")
				qv, _ := md.GetUint("general.quantization_version")
				wantFT := map[string]uint64{"f32": 0, "f16": 1, "bf16": 32}[ot]
				if ft != wantFT || qv != 2 {
					t.Errorf("%s: file_type %d quantization_version %d", ot, ft, qv)
				}
				if _, err := md.GetStringArray("tokenizer.ggml.tokens"); err != nil {
					t.Errorf("tokenizer tokens: %v", err)
				}
				if res.Plan.Bytes != sumTensorBytes(m) {
					t.Errorf("plan says %d bytes, file has %d", res.Plan.Bytes, sumTensorBytes(m))
				}
				m.Close()
			}
		})
	}
}

func sumTensorBytes(m *gguf.Model) int64 {
	var n int64
	for _, t := range m.Tensors() {
		n += int64(t.Bytes)
	}
	return n
}

// The HF adapter yields the same float32 values as the F32 GGUF.
func TestOpenHFAsGGUFMatchesF32(t *testing.T) {
	o := fixtures.Preset("llama")
	o.FP8 = true
	dir := genModel(t, o)
	out := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{OutType: "f32"}}); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if len(src.Tensors()) != len(m.Tensors()) {
		t.Fatalf("%d tensors vs %d", len(src.Tensors()), len(m.Tensors()))
	}
	for _, d := range src.Tensors() {
		want, _ := ggufFloats(t, m, d.Name)
		got := make([]float32, len(want))
		if err := src.ReadFloat32(d.Name, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d]: %v vs %v", d.Name, i, got[i], want[i])
			}
		}
		// row access in the middle
		if len(d.Shape) >= 2 && d.Shape[1] > 3 {
			rows := make([]float32, 2*d.Shape[0])
			if err := src.ReadRows(d.Name, 1, 2, rows); err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				if rows[i] != want[int(d.Shape[0])+i] {
					t.Fatalf("%s ReadRows mismatch at %d", d.Name, i)
				}
			}
		}
	}
	if err := src.ReadRows("token_embd.weight", -1, 1, make([]float32, 1024)); err == nil {
		t.Error("negative row accepted")
	}
	md := src.Metadata()
	if ft, _ := md.GetUint("general.file_type"); ft != 0 {
		t.Errorf("file_type %d", ft)
	}
	for _, k := range []string{"llama.rope.dimension_count", "llama.vocab_size", "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model"} {
		if !md.Has(k) {
			t.Errorf("metadata lacks %s", k)
		}
	}
}

// A dry-run plan predicts the written file: same tensors, types and sizes; JSON round-trips.
func TestPlanMatchesOutput(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3moe"))
	opts := Options{Types: TypeOptions{OutType: "q4_k_m"}}
	plan, err := PlanConvert(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := Convert(context.Background(), dir, out, opts); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(plan.Tensors) != len(m.Tensors()) {
		t.Fatalf("plan %d tensors, file %d", len(plan.Tensors), len(m.Tensors()))
	}
	for i, pt := range plan.Tensors {
		mt := m.Tensors()[i]
		if pt.Name != mt.Name || pt.Type != mt.Type.String() || pt.Bytes != int64(mt.Bytes) {
			t.Errorf("plan %+v vs file %s %s %d", pt, mt.Name, mt.Type, mt.Bytes)
		}
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil || back.Bytes != plan.Bytes || len(back.Tensors) != len(plan.Tensors) {
		t.Errorf("JSON round trip: %v", err)
	}
	var sb strings.Builder
	if err := plan.WriteTable(&sb); err != nil || !strings.Contains(sb.String(), "blk.1.ffn_down_exps.weight") {
		t.Errorf("table: %v\n%s", err, sb.String())
	}
	if plan.BPW <= 4 || plan.BPW >= 7 {
		t.Errorf("q4_k_m bpw %.3f", plan.BPW)
	}
}

// Quantized outputs decode close to the F32 values, and more bits mean less error.
func TestQuantizedErrorOrdering(t *testing.T) {
	o := fixtures.Preset("qwen3")
	dir := genModel(t, o)
	ref := referenceTensors(t, dir, o)
	errOf := func(ot string) float64 {
		out := filepath.Join(t.TempDir(), ot+".gguf")
		if _, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{OutType: ot, Overrides: nil, Pure: true}}); err != nil {
			t.Fatal(err)
		}
		m, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var worst float64
		for name, r := range ref {
			got, _ := ggufFloats(t, m, name)
			worst = max(worst, relRMS(r.vals, got))
		}
		return worst
	}
	// Student-t weights with outlier channels: bounds are loose multiples of the uniform
	// rounding error of each format.
	order := []struct {
		typ   string
		bound float64
	}{{"q2_k", 0.5}, {"q4_0", 0.2}, {"q4_k_m", 0.15}, {"q6_k", 0.05}, {"q8_0", 0.02}}
	prev := math.Inf(1)
	for _, c := range order {
		e := errOf(c.typ)
		t.Logf("%s: worst tensor rel. RMS error %.4f", c.typ, e)
		if e >= c.bound || e >= prev {
			t.Errorf("%s: error %.4f (bound %.2f, previous %.4f)", c.typ, e, c.bound, prev)
		}
		prev = e
	}
}

func TestUnsupportedArchitecture(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen2"))
	cfg := filepath.Join(dir, "config.json")
	b, _ := os.ReadFile(cfg)
	b = []byte(strings.Replace(string(b), "Qwen2ForCausalLM", "GPTNeoXForCausalLM", 1))
	os.WriteFile(cfg, b, 0o644)
	_, err := PlanConvert(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "GPTNeoXForCausalLM") || !strings.Contains(err.Error(), "Qwen3MoeForCausalLM") {
		t.Fatalf("want an error naming the architecture and the supported ones, got %v", err)
	}
}

// qwen3moe with a Qwen2-MoE-style shared expert: served under gguf-py names by the HF adapter,
// converted with a warning that llama.cpp's qwen3moe will not load it.
func TestSharedExperts(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.SharedExpertIntermediate = 256
	dir := genModel(t, o)
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, d := range src.Tensors() {
		found[d.Name] = true
	}
	src.Close()
	for _, n := range []string{"blk.0.ffn_gate_shexp.weight", "blk.0.ffn_up_shexp.weight", "blk.1.ffn_down_shexp.weight", "blk.1.ffn_gate_inp_shexp.weight"} {
		if !found[n] {
			t.Errorf("missing %s", n)
		}
	}
	var warns []string
	plan, err := PlanConvert(dir, Options{Types: TypeOptions{OutType: "q8_0"}, Report: ReportOptions{Warn: func(s string) { warns = append(warns, s) }}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "shared") {
		t.Errorf("warnings %v", warns)
	}
	for _, pt := range plan.Tensors {
		if strings.Contains(pt.Name, "ffn_gate_inp_shexp") && pt.Type != "f32" {
			t.Errorf("%s: %s", pt.Name, pt.Type)
		}
	}
	md := plan.Metadata()
	if v, err := md.GetUint("qwen3moe.expert_shared_feed_forward_length"); err != nil || v != 256 {
		t.Errorf("expert_shared_feed_forward_length %d %v", v, err)
	}
}
