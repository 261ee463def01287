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

// TestDotF16F32Rows: DotF16F32Rows equals DotF16F32 row by row, bit for bit, for lengths
// that take the multi-row kernel (multiples of 32) and those that do not, strides wider than
// a row, heavy-tailed values, and rejects rows outside w.
func TestDotF16F32Rows(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(73)
		for _, n := range []int{32, 64, 128, 96, 40, 7} {
			for _, rows := range []int{1, 3, 17} {
				stride := 2*n + 2*r.IntN(40)
				w := make([]byte, (rows-1)*stride+2*n)
				for i := 0; i+1 < len(w); i += 2 {
					h := floatToHalf(float32(studentT3(r)))
					w[i], w[i+1] = byte(h), byte(h>>8)
				}
				x := randFloats(r, n, true, 1)
				got := make([]float32, rows)
				DotF16F32Rows(got, w, stride, x)
				for k := range got {
					want := DotF16F32(w[k*stride:k*stride+2*n], x)
					if math.Float32bits(got[k]) != math.Float32bits(want) {
						t.Fatalf("n=%d rows=%d row %d: %g, DotF16F32 %g", n, rows, k, got[k], want)
					}
				}
			}
		}
		defer func() {
			if _, ok := recover().(*LengthError); !ok {
				t.Fatal("a row outside w did not panic with a *LengthError")
			}
		}()
		DotF16F32Rows(make([]float32, 2), make([]byte, 100), 64, make([]float32, 32))
	})
}
