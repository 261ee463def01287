package infer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// studentT draws Student-t(3) samples (heavy tails).
func studentT(r *rand.Rand) float64 {
	n := r.NormFloat64()
	var chi float64
	for i := 0; i < 3; i++ {
		g := r.NormFloat64()
		chi += g * g
	}
	return n / math.Sqrt(chi/3)
}

// refDeltaRule64 is the gated delta rule in float64, step by step, with S[a][b] stored
// row-major (not transposed) and q scaled before the product.
func refDeltaRule64(q, k, v, g, beta [][]float64, ds int) [][]float64 {
	S := make([]float64, ds*ds)
	out := make([][]float64, len(q))
	for t := range q {
		e := math.Exp(g[t][0])
		for i := range S {
			S[i] *= e
		}
		d := make([]float64, ds)
		for b := 0; b < ds; b++ {
			var m float64
			for a := 0; a < ds; a++ {
				m += S[a*ds+b] * k[t][a]
			}
			d[b] = beta[t][0] * (v[t][b] - m)
		}
		for a := 0; a < ds; a++ {
			for b := 0; b < ds; b++ {
				S[a*ds+b] += k[t][a] * d[b]
			}
		}
		o := make([]float64, ds)
		for b := 0; b < ds; b++ {
			for a := 0; a < ds; a++ {
				o[b] += S[a*ds+b] * q[t][a] / math.Sqrt(float64(ds))
			}
		}
		out[t] = o
	}
	return out
}

// The float32 delta-rule kernel follows the float64 recurrence on random and heavy-tailed
// inputs, over a whole sequence at once and split into one-token (decode) calls and uneven
// chunks continuing from the carried state — the three agree bit for bit. Tolerance against
// float64: max |Δ| <= 2e-5·(1 + max |o|) over 96 tokens (the state is bounded: |k| = 1,
// 0 < β < 1, e^g <= 1).
func TestDeltaNetHeadMatchesFloat64(t *testing.T) {
	const ds, T = 64, 96
	for _, heavy := range []bool{false, true} {
		r := rand.New(rand.NewPCG(3, uint64(map[bool]int{false: 1, true: 2}[heavy])))
		draw := func() float64 {
			if heavy {
				return studentT(r)
			}
			return r.NormFloat64()
		}
		q64, k64, v64 := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		g64, b64 := make([][]float64, T), make([][]float64, T)
		q32, k32, v32 := make([]float32, T*ds), make([]float32, T*ds), make([]float32, T*ds)
		g32, b32 := make([]float32, T), make([]float32, T)
		for tok := 0; tok < T; tok++ {
			q, k, v := make([]float32, ds), make([]float32, ds), make([]float32, ds)
			for i := 0; i < ds; i++ {
				q[i], k[i], v[i] = float32(draw()), float32(draw()), float32(draw())
			}
			l2NormHeads(q, ds, 1e-6)
			l2NormHeads(k, ds, 1e-6)
			copy(q32[tok*ds:], q)
			copy(k32[tok*ds:], k)
			copy(v32[tok*ds:], v)
			g32[tok] = -float32(math.Abs(draw())) * 0.5 // log decay <= 0, some near 0 (long memory)
			b32[tok] = sigmoid(float32(draw()))
			q64[tok], k64[tok], v64[tok] = f64(q), f64(k), f64(v)
			g64[tok], b64[tok] = []float64{float64(g32[tok])}, []float64{float64(b32[tok])}
		}
		want := refDeltaRule64(q64, k64, v64, g64, b64, ds)
		scale := 1 / float32(math.Sqrt(ds))
		run := func(splits []int) []float32 {
			state := make([]float32, ds*ds)
			out := make([]float32, T*ds)
			delta := make([]float32, ds)
			t0 := 0
			for _, n := range splits {
				deltaNetHead(state, q32[t0*ds:], k32[t0*ds:], v32[t0*ds:], g32[t0:], b32[t0:], out[t0*ds:], delta, n, ds, ds, ds, ds, 1, ds, scale)
				t0 += n
			}
			return out
		}
		whole := run([]int{T})
		ones := make([]int, T)
		for i := range ones {
			ones[i] = 1
		}
		decode := run(ones)
		chunks := run([]int{5, 1, 17, 64, 9})
		var worst, mag float64
		for tok := 0; tok < T; tok++ {
			for b := 0; b < ds; b++ {
				i := tok*ds + b
				if whole[i] != decode[i] || whole[i] != chunks[i] {
					t.Fatalf("heavy=%v token %d: whole %v, one-token %v, chunked %v differ", heavy, tok, whole[i], decode[i], chunks[i])
				}
				worst = math.Max(worst, math.Abs(float64(whole[i])-want[tok][b]))
				mag = math.Max(mag, math.Abs(want[tok][b]))
			}
		}
		t.Logf("heavy=%v: max |Δ| vs float64 %.2e (max |o| %.2f)", heavy, worst, mag)
		if worst > 2e-5*(1+mag) {
			t.Errorf("heavy=%v: max |Δ| %.3e exceeds 2e-5·(1+%.2f)", heavy, worst, mag)
		}
	}
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// The causal conv with carried state gives the same rows for a whole sequence, one token at a
// time and uneven chunks, and matches a float64 convolution with zero history.
func TestCausalConv1dState(t *testing.T) {
	const C, K, T = 40, 4, 23
	r := rand.New(rand.NewPCG(5, 5))
	x := make([]float32, T*C)
	w := make([]float32, C*K)
	for i := range x {
		x[i] = float32(studentT(r))
	}
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.5)
	}
	run := func(splits []int) []float32 {
		state := make([]float32, (K-1)*C)
		tmp := make([]float32, (K-1)*C)
		out := make([]float32, T*C)
		t0 := 0
		for _, n := range splits {
			causalConv1d(out[t0*C:], x[t0*C:], state, w, tmp, n, C, K)
			t0 += n
		}
		return out
	}
	whole := run([]int{T})
	ones := make([]int, T)
	for i := range ones {
		ones[i] = 1
	}
	for name, got := range map[string][]float32{"one-token": run(ones), "chunks": run([]int{2, 7, 1, 13})} {
		for i := range whole {
			if got[i] != whole[i] {
				t.Fatalf("%s: element %d = %v, whole sequence %v", name, i, got[i], whole[i])
			}
		}
	}
	for tt := 0; tt < T; tt++ {
		for c := 0; c < C; c++ {
			var s float64
			for i := 0; i < K; i++ {
				if src := tt - K + 1 + i; src >= 0 {
					s += float64(w[c*K+i]) * float64(x[src*C+c])
				}
			}
			want := s / (1 + math.Exp(-s))
			if d := math.Abs(float64(whole[tt*C+c]) - want); d > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("token %d channel %d: %v, float64 %v", tt, c, whole[tt*C+c], want)
			}
		}
	}
}

func TestL2NormAndSoftplus(t *testing.T) {
	x := []float32{3, 4, 0, 0, 1e-9, 0}
	l2NormHeads(x, 2, 1e-6)
	if x[0] != 0.6 || x[1] != 0.8 || x[2] != 0 || x[3] != 0 || math.Abs(float64(x[4])-1e-3) > 1e-9 {
		t.Errorf("l2 norm %v (eps floor 1e-6 for the tiny head)", x)
	}
	for _, v := range []float32{-30, -1, 0, 1, 19.9, 20.1, 80} {
		want := math.Log1p(math.Exp(float64(v)))
		if v > 20 {
			want = float64(v)
		}
		if got := softplus(v); math.Abs(float64(got)-want) > 1e-6*(1+want) {
			t.Errorf("softplus(%v) = %v, want %v", v, got, want)
		}
	}
}
