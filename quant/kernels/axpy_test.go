package kernels

import (
	"math"
	"testing"
)

// AxpyFMA and ScaleF32: assembly against the pure-Go twins (exact FMA, plain multiply) for
// every length 0..100 and a long odd one, on normal and heavy-tailed data including values
// whose products land on float32 rounding midpoints.
func TestAxpyScaleAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine")
	}
	r := newRNG(5)
	lengths := []int{1031}
	for n := 0; n <= 100; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		x := make([]float32, n)
		y := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(3*r.NormFloat64()))
			y[i] = float32(r.NormFloat64())
			if i%7 == 3 { // x·a exactly representable plus half an ulp of y: a midpoint case
				x[i], y[i] = 1+0x1p-23, 1
			}
		}
		a := float32(1 + 0x1p-23)
		run := func(pure bool) ([]float32, []float32) {
			SetPureGo(pure)
			defer SetPureGo(false)
			ya := append([]float32(nil), y...)
			AxpyFMA(ya, a, x)
			ys := append([]float32(nil), y...)
			ScaleF32(ys, 0.7)
			return ya, ys
		}
		aa, sa := run(false)
		ag, sg := run(true)
		for i := range aa {
			if math.Float32bits(aa[i]) != math.Float32bits(ag[i]) || math.Float32bits(sa[i]) != math.Float32bits(sg[i]) {
				t.Fatalf("n=%d i=%d: axpy asm %v go %v; scale asm %v go %v", n, i, aa[i], ag[i], sa[i], sg[i])
			}
			if want := float32(math.FMA(float64(x[i]), float64(a), float64(y[i]))); math.Abs(float64(ag[i]-want)) > 1e-6*math.Abs(float64(want))+1e-30 {
				t.Fatalf("n=%d i=%d: axpy %v, float64 fma %v", n, i, ag[i], want)
			}
		}
	}
}
