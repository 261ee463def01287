package kernels

import (
	"math"
	"testing"
)

// TestSumSqMaxAbs: both paths against a float64 reference (exact: the square of a float32
// is exact in float64, one rounding per addition as the reference does) over lengths with and
// without a tail, Gaussian and heavy-tailed rows with NaN, ±Inf and ±0 mixed in, NaNs already in mx.
func TestSumSqMaxAbs(t *testing.T) {
	nan := float32(math.NaN())
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 1283} {
			r := newRNG(uint64(n) + 5)
			sum := make([]float64, n)
			mx := make([]float32, n)
			for i := range sum {
				sum[i] = r.Float64()
				if i%13 == 5 {
					mx[i] = nan
				}
			}
			wantS := append([]float64(nil), sum...)
			wantM := append([]float32(nil), mx...)
			for row := 0; row < 5; row++ {
				x := randFloats(r, n, row%2 == 1, 3)
				for i := range x {
					switch (i + row) % 17 {
					case 3:
						x[i] = nan
					case 7:
						x[i] = float32(math.Inf(-1))
					case 11:
						x[i] = float32(math.Copysign(0, -1))
					}
				}
				SumSqMaxAbs(sum, mx, x)
				for i, v := range x {
					wantS[i] += float64(v) * float64(v)
					a := float32(math.Abs(float64(v)))
					if a > wantM[i] || math.IsNaN(float64(a)) {
						wantM[i] = a
					}
				}
			}
			for i := range sum {
				if math.Float64bits(sum[i]) != math.Float64bits(wantS[i]) && !(math.IsNaN(sum[i]) && math.IsNaN(wantS[i])) {
					t.Fatalf("n=%d sum[%d] = %v, want %v", n, i, sum[i], wantS[i])
				}
				if math.Float32bits(mx[i]) != math.Float32bits(wantM[i]) {
					t.Fatalf("n=%d mx[%d] = %v (%#x), want %v (%#x)", n, i, mx[i], math.Float32bits(mx[i]), wantM[i], math.Float32bits(wantM[i]))
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short sum did not panic with a *LengthError")
		}
	}()
	SumSqMaxAbs(make([]float64, 3), make([]float32, 4), make([]float32, 4))
}
