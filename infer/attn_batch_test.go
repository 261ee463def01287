package infer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/quant/kernels"
)

// TestAttentionGemmMatchesLanes8: the calibration forward's GEMM attention (FullPrecision)
// computes what the tinyBLAS-order attention computes, up to float32 summation order: same
// cache, same queries, prompt batches that start at position 0 and after earlier positions,
// chunk tails, F32 and F16 caches (q and p unrounded in the GEMM form, so the F16 case is
// compared with a looser bound). The outputs are attention-weighted means of values of
// magnitude ≤ 1; the bound is 1e-5 absolute (F32: about 60 ulps at 1) and 2e-3 (F16). Every
// tinyBLAS-order output is also checked bit for bit against one DotLanes8 per pair
// (checkLanes8Dots), for BF16 caches too (whose rounding is too coarse for the GEMM bound).
func TestAttentionGemmMatchesLanes8(t *testing.T) {
	for _, ct := range []string{"f32", "f16", "bf16"} {
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
			checkLanes8Dots(t, s, ct, T, pos0, want)
			if ct == "bf16" {
				m.Close()
				continue
			}
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

// checkLanes8Dots checks attentionLanes8's output of layer 0 (got) bit for bit against the
// definition it reproduces, one DotLanes8 per (query, position) and per (query, channel),
// each over the query's own causal positions (padded to 8 with zero probabilities): the
// chunked GEMM form computes scores past a query's limit and runs V·p to the chunk's last
// query, which must change no bit.
func checkLanes8Dots(t *testing.T, s *Session, ct string, T, pos0 int, got []float32) {
	t.Helper()
	c := s.m.cfg
	hd, nh, nkv, qd := c.HeadDim, c.NHead, c.NHeadKV, c.QDim()
	scale := 1 / float32(math.Sqrt(float64(hd)))
	P := pos0 + T
	Pp := (P + 7) &^ 7
	kf, vf := make([]float32, P*hd), make([]float32, hd*Pp)
	q, p := make([]float32, hd), make([]float32, Pp)
	for g := 0; g < nkv; g++ {
		s.kvGroupFloats(0, g, P, Pp, kf, vf)
		for hh := g * nh / nkv; hh < (g+1)*nh/nkv; hh++ {
			for tk := 0; tk < T; tk++ {
				n := pos0 + tk + 1
				copy(q, s.q[tk*qd+hh*hd:tk*qd+(hh+1)*hd])
				roundTo(s.kv.tk, q)
				for u := 0; u < n; u++ {
					p[u] = kernels.DotLanes8(kf[u*hd:(u+1)*hd], q)
				}
				softmaxMasked(p[:n], scale)
				roundTo(s.kv.tv, p[:n])
				np := (n + 7) &^ 7
				clear(p[n:np])
				for d := 0; d < hd; d++ {
					want := kernels.DotLanes8(vf[d*Pp:d*Pp+np], p[:np])
					if g := got[tk*qd+hh*hd+d]; math.Float32bits(g) != math.Float32bits(want) {
						t.Fatalf("%s T=%d pos0=%d: query %d head %d channel %d: %g, one dot per pair gives %g", ct, T, pos0, tk, hh, d, g, want)
					}
				}
			}
		}
	}
}
