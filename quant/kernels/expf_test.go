package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The assembly softmax/SwiGLU loops against their pure-Go twins (which the oracle test ties
// to ggml), over the whole float range that matters: underflow, overflow, subnormal results.
func TestExpAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine")
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1 << 14
	x := make([]float32, n)
	g := make([]float32, n)
	for i := range x {
		x[i] = float32((r.Float64()*2 - 1) * 200)
		g[i] = float32(r.NormFloat64())
	}
	x[5], x[6] = float32(math.Inf(-1)), -87.5
	run := func(pure bool) ([]float32, float64, []float32) {
		SetPureGo(pure)
		defer SetPureGo(false)
		y := make([]float32, n)
		s := SoftMaxExp(y, x, 10)
		z := make([]float32, n)
		SwiGLU(z, x, g)
		return y, s, z
	}
	ya, sa, za := run(false)
	yg, sg, zg := run(true)
	if math.Float64bits(sa) != math.Float64bits(sg) {
		t.Errorf("sum: asm %v, Go %v", sa, sg)
	}
	for i := range ya {
		if math.Float32bits(ya[i]) != math.Float32bits(yg[i]) || math.Float32bits(za[i]) != math.Float32bits(zg[i]) {
			t.Fatalf("x=%v: exp asm %v Go %v; swiglu asm %v Go %v", x[i], ya[i], yg[i], za[i], zg[i])
		}
	}
	// exp must stay within 2 ulp of the correctly rounded value where it is normal
	for i := range yg {
		want := float32(math.Exp(float64(x[i] - 10)))
		if want > 1e-37 && math.Abs(float64(yg[i]-want)) > 2*float64(math.Nextafter32(want, float32(math.Inf(1)))-want) {
			t.Fatalf("exp(%v) = %v, want about %v", x[i]-10, yg[i], want)
		}
	}
}

func BenchmarkSoftMaxExp(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%97) * -0.1
	}
	y := make([]float32, len(x))
	benchImpls(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			SoftMaxExp(y, x, 0)
		}
	})
}

func BenchmarkSwiGLU(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%97)*0.1 - 5
	}
	y := make([]float32, len(x))
	benchImpls(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			SwiGLU(y, x, x)
		}
	})
}
