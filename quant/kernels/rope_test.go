package kernels

import (
	"math"
	"testing"
)

// TestRope: RopeNeox and RopeNorm, assembly against the pure-Go twin bit for bit, and both
// against a float64 evaluation of the rotation (|err| ≤ 2⁻²³·(|x0·c| + |x1·s|) + tiny: two
// float32 roundings), for head sizes with and without an 8-pair tail and values from 1e-30
// to 1e30 (products near the float32 limits are excluded).
func TestRope(t *testing.T) {
	for _, n := range []int{2, 14, 16, 18, 32, 64, 80, 128, 130} {
		r := newRNG(uint64(n))
		x := randFloats(r, n, true, 1)
		for i := range x {
			if i%7 == 3 {
				x[i] *= 1e25
			} else if i%11 == 5 {
				x[i] *= 1e-25
			}
		}
		cs := make([]float32, n)
		for j := 0; j < n/2; j++ {
			th := r.Float64() * 7
			cs[2*j], cs[2*j+1] = float32(math.Cos(th)), float32(math.Sin(th))
		}
		for _, mode := range []string{"neox", "norm"} {
			rot := RopeNeox
			pair := func(j int) (int, int) { return j, j + n/2 }
			if mode == "norm" {
				rot = RopeNorm
				pair = func(j int) (int, int) { return 2 * j, 2*j + 1 }
			}
			var got [2][]float32
			for k, pure := range []bool{true, false} {
				SetPureGo(pure)
				y := append([]float32(nil), x...)
				rot(y, cs)
				got[k] = y
			}
			SetPureGo(false)
			for i := range x {
				if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
					t.Fatalf("%s n=%d: x[%d]: Go %v, assembly %v", mode, n, i, got[0][i], got[1][i])
				}
			}
			for j := 0; j < n/2; j++ {
				i0, i1 := pair(j)
				c, s := float64(cs[2*j]), float64(cs[2*j+1])
				x0, x1 := float64(x[i0]), float64(x[i1])
				w0, w1 := x0*c-x1*s, x0*s+x1*c
				b := math.Abs(x0*c) + math.Abs(x1*s) + math.Abs(x0*s) + math.Abs(x1*c)
				if math.Abs(float64(got[0][i0])-w0) > 0x1p-23*b+1e-44 || math.Abs(float64(got[0][i1])-w1) > 0x1p-23*b+1e-44 {
					t.Fatalf("%s n=%d pair %d: (%v, %v), float64 (%v, %v)", mode, n, j, got[0][i0], got[0][i1], w0, w1)
				}
			}
		}
	}
}
