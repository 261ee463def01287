package infer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionGemmMatchesLanes8: the calibration forward's GEMM attention (FullPrecision)
// computes what the tinyBLAS-order attention computes, up to float32 summation order: same
// cache, same queries, prompt batches that start at position 0 and after earlier positions,
// chunk tails, F32 and F16 caches (q and p unrounded in the GEMM form, so the F16 case is
// compared with a looser bound). The outputs are attention-weighted means of values of
// magnitude ≤ 1; the bound is 1e-5 absolute (F32: about 60 ulps at 1) and 2e-3 (F16).
func TestAttentionGemmMatchesLanes8(t *testing.T) {
	for _, ct := range []string{"f32", "f16"} {
		// {T, pos0, threads}: with one thread and 100 queries a worker's run of (group, chunk)
		// items crosses from one KV group to the next
		for _, sh := range [][3]int{{37, 0, 2}, {16, 21, 2}, {50, 9, 2}, {100, 3, 1}} {
			T, pos0 := sh[0], sh[1]
			m, err := Load(defaultSource(t, "llama"), Options{CtxSize: 128, CacheTypeK: ct, CacheTypeV: ct, Threads: sh[2]})
			if err != nil {
				t.Fatal(err)
			}
			s, err := m.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			if pos0 > 0 {
				if _, err := s.Eval(randTokens(5, pos0, m.cfg.NVocab), LogitsLast); err != nil {
					t.Fatal(err)
				}
			}
			if !s.useLanes8Attention(T) {
				t.Fatalf("%s: the lanes8 attention does not apply", ct)
			}
			c := m.cfg
			qd, kvd := c.QDim(), c.NHeadKV*c.HeadDim
			r := rand.New(rand.NewPCG(uint64(T), uint64(pos0)))
			k := make([]float32, T*kvd)
			v := make([]float32, T*kvd)
			for i := range k {
				k[i], v[i] = float32(r.NormFloat64()), float32(2*r.Float64()-1)
			}
			for u := 0; u < T; u++ {
				s.kv.store(0, pos0+u, k[u*kvd:(u+1)*kvd], v[u*kvd:(u+1)*kvd])
			}
			s.q = grow(s.q, T*qd)
			s.att = grow(s.att, T*qd)
			for i := range s.q[:T*qd] {
				s.q[i] = float32(r.NormFloat64())
			}
			s.attentionLanes8(0, T, pos0)
			want := append([]float32(nil), s.att[:T*qd]...)
			clear(s.att)
			s.attentionGemm(0, T, pos0)
			tol := 1e-5
			if ct == "f16" {
				tol = 2e-3
			}
			for i, w := range want {
				if d := math.Abs(float64(s.att[i] - w)); !(d <= tol) {
					t.Fatalf("%s T=%d pos0=%d: output %d: GEMM %g, lanes8 %g", ct, T, pos0, i, s.att[i], w)
				}
			}
			m.Close()
		}
	}
}
