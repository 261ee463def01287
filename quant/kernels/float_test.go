package kernels

import (
	"encoding/binary"
	"math"
	"testing"
)

func floatDotCase(seed uint64, n int, heavy bool) (f32 []float32, f16, bf16 []byte, x []float32) {
	r := newRNG(seed)
	f32 = randFloats(r, n, heavy, 1)
	x = randFloats(r, n, heavy, 1)
	f16 = make([]byte, 2*n)
	bf16 = make([]byte, 2*n)
	for i, v := range f32 {
		binary.LittleEndian.PutUint16(f16[2*i:], floatToHalf(v))
		binary.LittleEndian.PutUint16(bf16[2*i:], uint16(math.Float32bits(v)>>16))
	}
	return
}

// TestFloatDots: DotF32, DotF16F32 and DotBF16F32, both paths, against a float64 reference
// of the exactly widened weights; tolerance (n + 8)·2⁻²⁴·Σ|w·x| (float32 products and sums).
func TestFloatDots(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		var worst float64
		for n := 0; n <= 80; n++ {
			for _, heavy := range []bool{false, true} {
				checkFloatDots(t, n, heavy, &worst)
			}
		}
		for _, n := range []int{127, 128, 129, 1000, 4096, 4099} {
			checkFloatDots(t, n, true, &worst)
		}
		t.Logf("worst |err|/S = %.3g", worst)
	})
}

func checkFloatDots(t *testing.T, n int, heavy bool, worst *float64) {
	t.Helper()
	f32, f16, bf16, x := floatDotCase(uint64(n)*2+map[bool]uint64{false: 0, true: 1}[heavy], n, heavy)
	check := func(name string, got float32, w func(i int) float64) {
		var ref, s float64
		for i := 0; i < n; i++ {
			ref += w(i) * float64(x[i])
			s += math.Abs(w(i) * float64(x[i]))
		}
		err := math.Abs(float64(got) - ref)
		if err > float64(n+8)*u32*s {
			t.Errorf("%s n=%d heavy=%v: got %.9g, reference %.9g, |err|/S = %.3g", name, n, heavy, got, ref, err/s)
		}
		if s > 0 {
			*worst = max(*worst, err/s)
		}
	}
	check("DotF32", DotF32(f32, x), func(i int) float64 { return float64(f32[i]) })
	check("DotF16F32", DotF16F32(f16, x), func(i int) float64 {
		return float64(halfToFloat(binary.LittleEndian.Uint16(f16[2*i:])))
	})
	check("DotBF16F32", DotBF16F32(bf16, x), func(i int) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(bf16[2*i:])) << 16))
	})
}

// TestFloatDotsSpecials: infinities and NaNs propagate the same way in both paths.
func TestFloatDotsSpecials(t *testing.T) {
	a := []float32{1, 2, float32(math.Inf(1)), 4, 5, 6, 7, 8, 9}
	b := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}
	forEachImpl(t, func(t *testing.T) {
		if got := DotF32(a, b); !math.IsInf(float64(got), 1) {
			t.Fatalf("DotF32 with +Inf = %g", got)
		}
		w := make([]byte, 18)
		binary.LittleEndian.PutUint16(w[8:], 0x7e00) // NaN in lane 4
		if got := DotF16F32(w, b); !math.IsNaN(float64(got)) {
			t.Fatalf("DotF16F32 with NaN = %g", got)
		}
	})
}
