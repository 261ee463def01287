package kernels

import (
	"math"
	"testing"
)

// TestScaleMax: both paths against the Go fold (x[i] *= scale; mx = max(mx, x[i])) bit for
// bit, scaled values included, over lengths around the 8- and 32-wide steps, on Gaussian and
// heavy-tailed rows and rows with NaN, ±Inf, ±0, all-negative and all-zero values.
func TestScaleMax(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 517} {
			for kind := 0; kind < 7; kind++ {
				r := newRNG(uint64(n*10 + kind))
				x := randFloats(r, n, kind%2 == 1, 2)
				for i := range x {
					switch {
					case kind == 2 && i == n/2:
						x[i] = nan
					case kind == 3 && i%9 == 4:
						x[i] = inf
					case kind == 4:
						x[i] = -float32(math.Abs(float64(x[i]))) // all negative
					case kind == 5:
						x[i] = negZero // all −0
					case kind == 6:
						if i%3 == 0 {
							x[i] = 0
						} else {
							x[i] = negZero
						}
					}
				}
				scale := float32(0.125)
				if kind == 1 {
					scale = -0.3
				}
				want := append([]float32(nil), x...)
				wm := float32(math.Inf(-1))
				for i := range want {
					want[i] *= scale
					wm = max(wm, want[i])
				}
				got := ScaleMax(x, scale)
				if math.Float32bits(got) != math.Float32bits(wm) && !(got != got && wm != wm) {
					t.Fatalf("n=%d kind=%d: max %v (%#x), want %v (%#x)", n, kind, got, math.Float32bits(got), wm, math.Float32bits(wm))
				}
				for i := range x {
					if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d kind=%d: x[%d] = %v, want %v", n, kind, i, x[i], want[i])
					}
				}
			}
		}
	})
}
