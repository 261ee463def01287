package kernels

import (
	"encoding/binary"
	"math"
	"testing"
)

// The float dots reproduce ggml's x86 vec_dot_f32/f16/bf16 operation for operation, so the
// assembly and the pure-Go twin must agree to the bit (lengths with and without the n%32
// leftovers, Gaussian and heavy-tailed data), and both stay within float32 rounding of a
// float64 reference.
func TestFloatDotsAsmEqualsGoExactly(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	r := newRNG(17)
	for _, n := range []int{1, 7, 8, 31, 32, 33, 64, 95, 96, 100, 256, 1000, 4096, 4099} {
		for rep := 0; rep < 4; rep++ {
			a := randFloats(r, n, rep%2 == 1, 3)
			b := randFloats(r, n, rep >= 2, 3)
			h := make([]byte, 2*n)
			bf := make([]byte, 2*n)
			var ref, refAbs float64
			for i := range a {
				binary.LittleEndian.PutUint16(h[2*i:], floatToHalf(a[i]))
				binary.LittleEndian.PutUint16(bf[2*i:], uint16(math.Float32bits(a[i])>>16))
				ref += float64(a[i]) * float64(b[i])
				refAbs += math.Abs(float64(a[i]) * float64(b[i]))
			}
			checks := []struct {
				name string
				f    func() float32
			}{
				{"f32", func() float32 { return DotF32(a, b) }},
				{"f16", func() float32 { return DotF16F32(h, b) }},
				{"bf16", func() float32 { return DotBF16F32(bf, b) }},
			}
			for _, c := range checks {
				g := withImpl(true, c.f)
				s := withImpl(false, c.f)
				if math.Float32bits(g) != math.Float32bits(s) {
					t.Fatalf("%s n=%d rep=%d: asm %.9g != purego %.9g", c.name, n, rep, s, g)
				}
			}
			if got := DotF32(a, b); math.Abs(float64(got)-ref) > 4e-7*float64(n)*refAbs+1e-30 {
				t.Fatalf("f32 n=%d: %.9g vs float64 %.9g", n, got, ref)
			}
		}
	}
}
