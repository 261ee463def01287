package kernels

import (
	"math"
	"testing"
)

// TestNarrowRoundF16: NarrowF16 and RoundF16 (F16C on amd64, floatToHalf otherwise) give
// floatToHalf's bits for every combination of sign, exponent and the 7 high mantissa bits
// with the 16 low bits set to round-down, tie (normal and subnormal positions), round-up
// and pseudo-random patterns: every overflow, underflow and tie boundary; NaNs become
// 0x7e00 with their sign, and the results do not depend on the position in the slice.
func TestNarrowRoundF16(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x8000, 0xffff}
		r := newRNG(71)
		var x []float32
		for hi := uint32(0); hi < 1<<16; hi++ {
			for _, lo := range lows {
				x = append(x, math.Float32frombits(hi<<16|lo))
			}
			x = append(x, math.Float32frombits(hi<<16|uint32(r.Uint32()&0xffff)))
		}
		x = append(x, 1, 2, 3) // a tail that is not a multiple of 8
		h := make([]byte, 2*len(x))
		NarrowF16(h, x)
		y := append([]float32(nil), x...)
		RoundF16(y)
		for i, v := range x {
			want := floatToHalf(v)
			got := uint16(h[2*i]) | uint16(h[2*i+1])<<8
			if got != want {
				t.Fatalf("NarrowF16(%#08x) = %#04x, want %#04x", math.Float32bits(v), got, want)
			}
			if w := halfToFloat(want); math.Float32bits(y[i]) != math.Float32bits(w) {
				t.Fatalf("RoundF16(%#08x) = %#08x, want %#08x", math.Float32bits(v), math.Float32bits(y[i]), math.Float32bits(w))
			}
		}
	})
}
