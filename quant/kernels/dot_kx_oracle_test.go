//go:build linux && amd64

package kernels_test

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/tq-project/tq/quant/kernels"
)

// TestDotKXMatchesLlamaCpp: DotQ2_KQ8K, DotQ3_KQ8K and DotIQ4_XSQ8K against
// ggml_vec_dot_{q2_K,q3_K,iq4_xs}_q8_K of llama.cpp's AVX2 CPU backend, every output bit, in
// assembly and pure Go. Weights: quant.Quantize of normal and Student-t rows with wide per-row
// scales, and raw random bytes with finite fp16 scales. Activations: ggml's own
// quantize_row_q8_K of normal and Student-t vectors (our QuantizeRowQ8K must give the same
// bytes), and raw random Q8_K bytes (quants including −128, arbitrary bsums).
func TestDotKXMatchesLlamaCpp(t *testing.T) {
	sym := func(name string) uintptr { return oracleSym(t, name) }
	qrow := sym("quantize_row_q8_K")
	fns := map[string]uintptr{
		"q2_K":   sym("ggml_vec_dot_q2_K_q8_K"),
		"q3_K":   sym("ggml_vec_dot_q3_K_q8_K"),
		"iq4_xs": sym("ggml_vec_dot_iq4_xs_q8_K"),
	}
	sizes := []int{256, 1024, 4096, 16384}
	if testing.Short() {
		sizes = []int{256, 4096}
	}
	for ci, c := range kxCases {
		fn := fns[c.name]
		for _, n := range sizes {
			for kind := 0; kind < 3; kind++ { // quantized normal, quantized Student-t, raw bytes
				t.Run(fmt.Sprintf("%s/n=%d/kind=%d", c.name, n, kind), func(t *testing.T) {
					r := extRNG(uint64(31*ci + 7*n + kind))
					const rows = 6
					var w []byte
					if kind < 2 {
						w = kxQuantWeights(t, r, c, rows, n, kind == 1)
					} else {
						w = kxRawWeights(r, c, rows, n)
					}
					rowBytes := n / kernels.QK_K * c.wb
					var acts [][]byte
					for _, heavy := range []bool{false, true} {
						xf := extFloats(r, n, heavy, 1)
						xq := aligned(n / kernels.QK_K * kernels.BlockBytesQ8_K)
						ccall(qrow, uintptr(unsafe.Pointer(&xf[0])), ptr(xq), uintptr(n))
						if ours := kxQ8K(xf); !bytes.Equal(ours, xq) {
							t.Fatalf("QuantizeRowQ8K differs from ggml's quantize_row_q8_K (heavy=%v)", heavy)
						}
						acts = append(acts, xq)
					}
					acts = append(acts, kxRawActs(r, n))
					for i := 0; i < rows; i++ {
						wr := w[i*rowBytes : (i+1)*rowBytes]
						for ai, xq := range acts {
							var want float32
							ccall(fn, uintptr(n), uintptr(unsafe.Pointer(&want)), 0, ptr(wr), 0, ptr(xq), 0, 1)
							a, g := kxBoth(c, n, wr, xq)
							for _, got := range []struct {
								impl string
								v    float32
							}{{"asm", a}, {"go", g}} {
								if math.Float32bits(got.v) != math.Float32bits(want) {
									t.Errorf("row %d acts %d %s: ours %v (%08x), ggml %v (%08x), Δ=%g", i, ai, got.impl,
										got.v, math.Float32bits(got.v), want, math.Float32bits(want), got.v-want)
								}
							}
						}
					}
				})
			}
		}
	}
}
