//go:build linux && amd64

package kernels_test

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// TestVecDotMatchesLlamaCpp: our one-row integer dot products (the decode path) against
// ggml_vec_dot_*_q8_* of llama.cpp's AVX2 CPU backend, bit for bit, on weights from the quant
// package and activations quantized by ggml's own quantize_row_q8_*, in asm and pure Go.
func TestVecDotMatchesLlamaCpp(t *testing.T) {
	sym := func(name string) uintptr { return oracleSym(t, name) }
	cases := []struct {
		wt  kernels.Type
		gt  gguf.GGMLType
		fn  string
		act kernels.Type
		blk int
		wb  int
		dot func(n int, w, x []byte) float32
	}{
		{kernels.Q8_0, gguf.TypeQ8_0, "ggml_vec_dot_q8_0_q8_0", kernels.Q8_0, 32, kernels.BlockBytesQ8_0, kernels.DotQ8_0Q8_0},
		{kernels.Q4_0, gguf.TypeQ4_0, "ggml_vec_dot_q4_0_q8_0", kernels.Q8_0, 32, kernels.BlockBytesQ4_0, kernels.DotQ4_0Q8_0},
		{kernels.Q4_K, gguf.TypeQ4_K, "ggml_vec_dot_q4_K_q8_K", kernels.Q8_K, 256, kernels.BlockBytesQ4_K, kernels.DotQ4_KQ8K},
		{kernels.Q5_K, gguf.TypeQ5_K, "ggml_vec_dot_q5_K_q8_K", kernels.Q8_K, 256, kernels.BlockBytesQ5_K, kernels.DotQ5_KQ8K},
		{kernels.Q6_K, gguf.TypeQ6_K, "ggml_vec_dot_q6_K_q8_K", kernels.Q8_K, 256, kernels.BlockBytesQ6_K, kernels.DotQ6_KQ8K},
	}
	qrowQ8_0, qrowQ8K := sym("quantize_row_q8_0"), sym("quantize_row_q8_K")
	for _, c := range cases {
		fn := sym(c.fn)
		for _, n := range []int{256, 1024, 4096, 16384} {
			for heavy := 0; heavy < 2; heavy++ {
				t.Run(fmt.Sprintf("%s/n=%d/heavy=%d", c.fn, n, heavy), func(t *testing.T) {
					r := extRNG(uint64(n*3 + heavy))
					const rows = 8
					src := make([]float32, 0, rows*n)
					for i := 0; i < rows; i++ {
						src = append(src, extFloats(r, n, heavy == 1, 0.02*math.Exp(r.NormFloat64()))...)
					}
					rowBytes := n / c.blk * c.wb
					w := make([]byte, rows*rowBytes)
					if err := quant.Quantize(c.gt, w, src, rows, n, nil); err != nil {
						t.Fatal(err)
					}
					xf := extFloats(r, n, heavy == 1, 1)
					var xq []byte
					if c.act == kernels.Q8_0 {
						xq = aligned(n / 32 * kernels.BlockBytesQ8_0)
						ccall(qrowQ8_0, uintptr(unsafe.Pointer(&xf[0])), ptr(xq), uintptr(n))
					} else {
						xq = aligned(n / 256 * kernels.BlockBytesQ8_K)
						ccall(qrowQ8K, uintptr(unsafe.Pointer(&xf[0])), ptr(xq), uintptr(n))
					}
					for i := 0; i < rows; i++ {
						wr := w[i*rowBytes : (i+1)*rowBytes]
						var want float32
						ccall(fn, uintptr(n), uintptr(unsafe.Pointer(&want)), 0, ptr(wr), 0, ptr(xq), 0, 1)
						for _, pure := range []bool{false, true} {
							kernels.SetPureGo(pure)
							got := c.dot(n, wr, xq)
							kernels.SetPureGo(false)
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Errorf("row %d pure=%v: ours %v (%08x), ggml %v (%08x), Δ=%g", i, pure, got, math.Float32bits(got), want, math.Float32bits(want), got-want)
							}
						}
					}
				})
			}
		}
	}
}
