package infer

import (
	"fmt"
	"math"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

var allArchs = []string{"llama", "qwen2", "qwen3", "qwen3moe"}

// logitErr compares fast logits against the float64 reference: the largest absolute logit
// difference relative to the reference logits' RMS, and the largest probability difference.
func logitErr(fast []float32, ref []float64) (relLogit, dp float64) {
	var rms float64
	f := make([]float64, len(fast))
	for i, v := range fast {
		f[i] = float64(v)
		rms += ref[i] * ref[i]
	}
	rms = math.Sqrt(rms / float64(len(ref)))
	return maxAbsDiff(f, ref) / rms, maxAbsDiff(softmax64(f), softmax64(ref))
}

// With f32 weights and an f32 KV cache the fast path computes exactly the reference math in
// float32, so logits must agree to float32 rounding (relative 1e-4 of the logit scale).
func TestFastMatchesReferenceF32(t *testing.T) {
	for _, arch := range allArchs {
		t.Run(arch, func(t *testing.T) {
			spec := testmodel.Default(arch)
			src := buildSource(t, spec)
			ref, err := NewReference(src)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(src, Options{Threads: 2, CtxSize: 64, CacheTypeK: "f32", CacheTypeV: "f32"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			toks := randTokens(1, 20, spec.Vocab)
			want, err := ref.Logits(toks)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := m.NewSession()
			got, err := s.Eval(toks, LogitsAll)
			if err != nil {
				t.Fatal(err)
			}
			var worstL, worstP float64
			for i := range toks {
				l, p := logitErr(got[i], want[i])
				worstL, worstP = math.Max(worstL, l), math.Max(worstP, p)
			}
			t.Logf("%s: max rel logit err %.2e, max |dp| %.2e", arch, worstL, worstP)
			if worstL > 1e-4 || worstP > 1e-5 {
				t.Errorf("fast path deviates from the float64 reference: rel logit %.3e, |dp| %.3e", worstL, worstP)
			}
		})
	}
}

// The default f16 cache and quantized weights move results by the rounding llama.cpp also
// applies; the reference (on the same dequantized weights) bounds how far.
func TestFastNearReferenceQuantized(t *testing.T) {
	cases := []struct {
		arch  string
		typ   gguf.GGMLType
		cache string
		tolP  float64
	}{
		{"qwen3", gguf.TypeF32, "f16", 2e-3},
		{"qwen3moe", gguf.TypeF16, "f16", 3e-3},
		{"qwen3", gguf.TypeQ8_0, "q8_0", 3e-2},
		{"qwen3moe", gguf.TypeQ4_K, "f16", 3e-2},
		{"llama", gguf.TypeQ6_K, "q4_0", 0.2},
	}
	for _, c := range cases {
		{
			arch := c.arch
			t.Run(fmt.Sprintf("%s/%s/%s", arch, c.typ, c.cache), func(t *testing.T) {
				spec := testmodel.Default(arch)
				spec.Types = typesAll(c.typ)
				src := buildSource(t, spec)
				ref, err := NewReference(src)
				if err != nil {
					t.Fatal(err)
				}
				m, err := Load(src, Options{Threads: 2, CtxSize: 64, CacheTypeK: c.cache, CacheTypeV: c.cache})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				toks := randTokens(2, 16, spec.Vocab)
				want, _ := ref.Logits(toks)
				s, _ := m.NewSession()
				got, err := s.Eval(toks, LogitsAll)
				if err != nil {
					t.Fatal(err)
				}
				var worstP float64
				for i := range toks {
					_, p := logitErr(got[i], want[i])
					worstP = math.Max(worstP, p)
				}
				t.Logf("max |dp| %.2e (tolerance %.0e)", worstP, c.tolP)
				if worstP > c.tolP {
					t.Errorf("max |dp| %.3e > %.0e", worstP, c.tolP)
				}
			})
		}
	}
}

// On the dot-product path, evaluating a prompt in one batch, in small batches, or token by
// token gives bitwise identical logits: every row goes through the same kernels.
func TestBatchingInvariance(t *testing.T) {
	for _, arch := range allArchs {
		t.Run(arch, func(t *testing.T) {
			spec := testmodel.Default(arch)
			spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ8_0, "ffn_down": gguf.TypeQ6_K, "ffn_down_exps": gguf.TypeQ6_K}
			src := buildSource(t, spec)
			toks := randTokens(3, 13, spec.Vocab)
			var runs [][][]float32
			for _, bs := range []int{64, 5, 1} {
				all := evalIn(t, src, Options{Threads: 2, CtxSize: 32, BatchSize: bs, gemmMin: -1}, toks, bs == 1)
				runs = append(runs, all)
			}
			for r := 1; r < len(runs); r++ {
				for i := range toks {
					for j := range runs[0][i] {
						if runs[r][i][j] != runs[0][i][j] {
							t.Fatalf("run %d token %d logit %d: %v != %v", r, i, j, runs[r][i][j], runs[0][i][j])
						}
					}
				}
			}
		})
	}
}

// evalIn loads src with opts and evaluates toks (one call, or token by token).
func evalIn(t *testing.T, src Source, opts Options, toks []int32, oneByOne bool) [][]float32 {
	t.Helper()
	m, err := Load(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, _ := m.NewSession()
	if !oneByOne {
		all, err := s.Eval(toks, LogitsAll)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	var all [][]float32
	for _, tok := range toks {
		l, err := s.Eval([]int32{tok}, LogitsLast)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, l...)
	}
	return all
}

// The GEMM path (prompt batches) and the dot path (decode) compute the same products in a
// different float order: with f32 weights and cache they agree to float32 rounding; with
// quantized weights the activation rounding is emulated on both paths, so most positions agree
// to float rounding and the rest by at most a rounding flip.
func TestGemmMatchesDotPath(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen3moe"} {
		t.Run(arch+"/f32", func(t *testing.T) {
			src := defaultSource(t, arch)
			toks := randTokens(4, 20, 512)
			o := Options{Threads: 2, CtxSize: 32, CacheTypeK: "f32", CacheTypeV: "f32"}
			a := evalIn(t, src, o, toks, false)
			o.gemmMin = -1
			b := evalIn(t, src, o, toks, false)
			var worst float64
			for i := range toks {
				ref := make([]float64, len(b[i]))
				for j, v := range b[i] {
					ref[j] = float64(v)
				}
				l, _ := logitErr(a[i], ref)
				worst = math.Max(worst, l)
			}
			t.Logf("max rel logit difference %.2e", worst)
			if worst > 1e-5 {
				t.Errorf("GEMM and dot paths differ by %.3e (relative logits)", worst)
			}
		})
		t.Run(arch+"/mixed", func(t *testing.T) {
			spec := testmodel.Default(arch)
			spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ4_K, "attn_v": gguf.TypeQ8_0, "ffn_up": gguf.TypeF16, "ffn_down": gguf.TypeQ6_K}
			src := buildSource(t, spec)
			toks := randTokens(5, 20, 512)
			o := Options{Threads: 2, CtxSize: 32, BatchGEMM: true}
			a := evalIn(t, src, o, toks, false)
			o.gemmMin = -1
			b := evalIn(t, src, o, toks, false)
			near := 0
			var worst float64
			for i := range toks {
				d := maxAbsDiff(softmax32(a[i]), softmax32(b[i]))
				worst = math.Max(worst, d)
				if d <= 1e-5 {
					near++
				}
			}
			t.Logf("max |dp| %.2e, %d/%d positions within 1e-5", worst, near, len(toks))
			if worst > 3e-2 || near < len(toks)/2 {
				t.Errorf("GEMM and dot paths disagree: max |dp| %.3e, %d/%d positions within 1e-5", worst, near, len(toks))
			}
		})
	}
}
