package infer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkDeltaNetHead times one token of one Qwen3.6-35B-A3B value head (dS = 128, from the
// same state every iteration) through
// deltaNetHead (ggml's arithmetic: FMA updates, libc expf) against a baseline in the same run:
// the same recurrence with unfused updates and Go's exp (what tq ran before it matched ggml).
func BenchmarkDeltaNetHead(b *testing.B) {
	useSystemLibm()
	const ds = 128
	r := rand.New(rand.NewPCG(1, 1))
	q, k, v := oracleRand(r, ds), oracleRand(r, ds), oracleRand(r, ds)
	l2NormHeads(q, ds, 1e-6)
	l2NormHeads(k, ds, 1e-6)
	state0 := oracleRand(r, ds*ds)
	for i := range state0 {
		state0[i] *= 0.05
	}
	state := make([]float32, ds*ds)
	g, beta := []float32{-0.1}, []float32{0.7}
	out, delta := make([]float32, ds), make([]float32, ds)
	scale := 1 / float32(math.Sqrt(ds))
	b.Run("ggml-exact", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			copy(state, state0) // every iteration from the same state
			deltaNetHead(state, q, k, v, g, beta, out, delta, 1, ds, ds, ds, ds, 1, ds, scale)
		}
	})
	b.Run("baseline-unfused", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			copy(state, state0)
			decay := float32(math.Exp(float64(g[0])))
			for j := range state {
				state[j] *= decay
			}
			for j := 0; j < ds; j++ {
				delta[j] = (v[j] - kDotF32(state[j*ds:(j+1)*ds], k)) * beta[0]
			}
			for j := 0; j < ds; j++ {
				axpyF32(state[j*ds:(j+1)*ds], delta[j], k)
			}
			for j := 0; j < ds; j++ {
				out[j] = kDotF32(state[j*ds:(j+1)*ds], q) * scale
			}
		}
	})
}

func oracleRand(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}
