//go:build linux && amd64

package kernels_test

import (
	"math"
	"testing"
	"unsafe"

	"github.com/tq-project/tq/quant/kernels"
)

// TestFloatDotsMatchLlamaCpp: DotF32, DotF16F32 and DotBF16F32 against ggml_vec_dot_f32/f16/
// bf16 of llama.cpp's AVX2 CPU backend for every length from 1 to 200 and some long odd ones
// (the leftover elements past the last multiple of 32 follow the compiler's code for ggml's
// scalar loop), bit for bit, asm and pure Go. The f16/bf16 activations are rounded to the
// weight type first, as ggml's vec_dot_type conversion does.
func TestFloatDotsMatchLlamaCpp(t *testing.T) {
	var dotF32, dotF16, dotBF16 func(n int32, s unsafe.Pointer, bs uintptr, x unsafe.Pointer, bx uintptr, y unsafe.Pointer, by uintptr, nrc int32)
	oracleFunc(t, &dotF32, "ggml_vec_dot_f32")
	oracleFunc(t, &dotF16, "ggml_vec_dot_f16")
	oracleFunc(t, &dotBF16, "ggml_vec_dot_bf16")
	lengths := []int{1000, 1003, 4099, 5121}
	for n := 1; n <= 200; n++ {
		lengths = append(lengths, n)
	}
	r := extRNG(42)
	bad := 0
	for _, n := range lengths {
		for heavy := 0; heavy < 2; heavy++ {
			a := extFloats(r, n, heavy == 1, 1)
			b := extFloats(r, n, heavy == 1, 1)
			ah := make([]byte, 2*n)
			bh := make([]byte, 2*n)
			ab := make([]byte, 2*n)
			bb := make([]byte, 2*n)
			bhf := make([]float32, n)
			bbf := make([]float32, n)
			for i := range a {
				h := f32ToHalf(a[i])
				ah[2*i], ah[2*i+1] = byte(h), byte(h>>8)
				h = f32ToHalf(b[i])
				bh[2*i], bh[2*i+1] = byte(h), byte(h>>8)
				bhf[i] = halfBitsToFloat(h)
				ab[2*i], ab[2*i+1] = byte(math.Float32bits(a[i])>>16), byte(math.Float32bits(a[i])>>24)
				bf := math.Float32bits(b[i]) &^ 0xffff
				bb[2*i], bb[2*i+1] = byte(bf>>16), byte(bf>>24)
				bbf[i] = math.Float32frombits(bf)
			}
			var w32, w16, wbf float32
			dotF32(int32(n), unsafe.Pointer(&w32), 0, unsafe.Pointer(&a[0]), 0, unsafe.Pointer(&b[0]), 0, 1)
			dotF16(int32(n), unsafe.Pointer(&w16), 0, unsafe.Pointer(&ah[0]), 0, unsafe.Pointer(&bh[0]), 0, 1)
			dotBF16(int32(n), unsafe.Pointer(&wbf), 0, unsafe.Pointer(&ab[0]), 0, unsafe.Pointer(&bb[0]), 0, 1)
			for _, pure := range []bool{false, true} {
				kernels.SetPureGo(pure)
				g32 := kernels.DotF32(a, b)
				g16 := kernels.DotF16F32(ah, bhf)
				gbf := kernels.DotBF16F32(ab, bbf)
				kernels.SetPureGo(false)
				for _, c := range []struct {
					name      string
					got, want float32
				}{{"f32", g32, w32}, {"f16", g16, w16}, {"bf16", gbf, wbf}} {
					if math.Float32bits(c.got) != math.Float32bits(c.want) {
						bad++
						if bad <= 10 {
							t.Errorf("%s n=%d heavy=%d pure=%v: ours %v, ggml %v", c.name, n, heavy, pure, c.got, c.want)
						}
					}
				}
			}
		}
	}
	if bad > 10 {
		t.Errorf("%d mismatches in all", bad)
	}
}

// halfBitsToFloat widens an fp16 bit pattern (normal or zero values only; test inputs).
func halfBitsToFloat(h uint16) float32 {
	if h&0x7fff == 0 {
		return math.Float32frombits(uint32(h) << 16)
	}
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}
