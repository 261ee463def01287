package convert

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/quant"
)

// dequantFP8 replaces the decoded F8_E4M3 values v of tensor ti by value·scale of its
// 128x128 block, computed in float64 (exact: 4 significant bits times 24) and rounded once to
// float32. A 3-D tensor [E, R, C] has one grid per expert: scale shape [E, ceil(R/128),
// ceil(C/128)]. Other dtypes are left alone.
func dequantFP8(t testing.TB, st *safetensors.Model, ti safetensors.TensorInfo, v []float32) {
	t.Helper()
	if ti.DType != safetensors.F8E4M3 {
		return
	}
	si, ok := st.Lookup(ti.Name + "_scale_inv")
	if !ok {
		t.Fatalf("FP8 tensor %s has no scale", ti.Name)
	}
	sc := make([]float32, si.NumElements())
	if err := st.ReadFloat32(si.Name, sc); err != nil {
		t.Fatal(err)
	}
	nd := len(ti.Shape)
	R, C := int(ti.Shape[nd-2]), int(ti.Shape[nd-1])
	gr, gc := (R+127)/128, (C+127)/128
	if len(sc) != len(v)/(R*C)*gr*gc {
		t.Fatalf("%s: scale %v does not fit weight %v", si.Name, si.Shape, ti.Shape)
	}
	for i := range v {
		m, r, c := i/(R*C), i/C%R, i%C
		v[i] = float32(float64(v[i]) * float64(sc[(m*gr+r/128)*gc+c/128]))
	}
}

// fp8Variants are FP8 Qwen3.5 fixtures: the multimodal MoE layout (fused 3-D expert stacks
// with one scale grid per expert in the trunk, per-expert tensors in the MTP block) and dense.
func fp8Variants() []fixtures.Options {
	moe, dense := fixtures.Preset("qwen35moe"), fixtures.Preset("qwen35")
	moe.FP8, dense.FP8 = true, true
	return []fixtures.Options{moe, dense}
}

// Converting an FP8 Qwen3.5 checkpoint to F32 writes exactly the dequantized values
// (fp8·block scale, float64 reference) after every Qwen3.5 transform (value-head tiling of
// in_proj_qkv / in_proj_z / out_proj columns, expert split and stacking); F16 is the same
// values rounded once. The fixture really is FP8 where Qwen3.5 FP8 releases are, and only there.
func TestHybridFP8ConvertExactValues(t *testing.T) {
	for _, o := range fp8Variants() {
		t.Run(o.Arch, func(t *testing.T) {
			dir := genModel(t, o)
			st, err := safetensors.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			var fp8, fused int
			for _, ti := range st.Tensors() {
				n := ti.Name
				if strings.HasSuffix(n, "_scale_inv") {
					continue
				}
				keep := !strings.HasSuffix(n, ".weight") && !strings.Contains(n, "mlp.experts.") ||
					strings.Contains(n, "norm") || strings.Contains(n, "conv1d") || strings.Contains(n, "embed") ||
					strings.Contains(n, "in_proj_a") || strings.Contains(n, "in_proj_b") || strings.HasSuffix(n, "mlp.gate.weight") ||
					strings.Contains(n, "shared_expert_gate") || n == "lm_head.weight" || n == "mtp.fc.weight" ||
					strings.HasPrefix(n, "model.visual.")
				if isFP8 := ti.DType == safetensors.F8E4M3; isFP8 == keep {
					t.Errorf("%s: dtype %v (expected unquantized: %v)", n, ti.DType, keep)
				}
				if ti.DType == safetensors.F8E4M3 {
					fp8++
					if len(ti.Shape) == 3 {
						fused++
					}
				}
			}
			st.Close()
			if fp8 == 0 || (o.Arch == "qwen35moe" && fused == 0) {
				t.Fatalf("%d FP8 tensors, %d fused expert stacks", fp8, fused)
			}
			ref := hybridReference(t, dir, o)
			for _, ot := range []string{"f32", "f16"} {
				out := filepath.Join(t.TempDir(), "m.gguf")
				if _, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{OutType: ot}}); err != nil {
					t.Fatal(err)
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
					if !modelsrc.EqualShape(shapeOf(mt), r.shape) {
						t.Errorf("%s %s: shape %v, want %v", ot, name, shapeOf(mt), r.shape)
						continue
					}
					bad := 0
					for i, x := range r.vals {
						exp := x
						if mt.Type == gguf.TypeF16 {
							exp = quant.FP16ToFP32(quant.FP32ToFP16(x))
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
				m.Close()
			}
			t.Logf("%s: %d FP8 tensors (%d fused expert stacks) dequantized exactly", o.Arch, fp8, fused)
		})
	}
}

// llama.cpp loads the F16 conversion of the FP8 fixtures and returns proper next-token
// distributions.
func TestLlamaCppLoadsQwen35FP8(t *testing.T) {
	harness := llamaCppHarness(t)
	tokens := []int32{1, 17, 300, 42, 5, 900, 77, 1200, 3, 64}
	var reqs []llamaReq
	var names []string
	for _, o := range fp8Variants() {
		out := filepath.Join(t.TempDir(), o.Arch+".gguf")
		res, err := Convert(context.Background(), genModel(t, o), out, Options{Types: TypeOptions{OutType: "f16"}})
		if err != nil {
			t.Fatalf("%s: %v", o.Arch, err)
		}
		reqs = append(reqs, llamaReq{Model: res.Files[0].Path, Tokens: tokens, Positions: []int{0, 4, 9}})
		names = append(names, o.Arch+"-fp8/f16")
	}
	for i, r := range runLlamaCpp(t, harness, reqs) {
		if len(r.Probs) != 3 {
			t.Errorf("%s: %d distributions", names[i], len(r.Probs))
			continue
		}
		for _, p := range r.Probs {
			n, sum, nonfinite, top := p.stats()
			if n != fixtures.VocabSize() || nonfinite != 0 || math.Abs(sum-1) > 1e-3 || top < 0 {
				t.Errorf("%s pos %d: n=%d sum=%.6f nonfinite=%d top=%d", names[i], p.Pos, n, sum, nonfinite, top)
			}
			t.Logf("%s pos %d: top %d", names[i], p.Pos, top)
		}
	}
}
