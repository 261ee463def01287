//go:build linux && amd64

package kernels_test

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/tq-project/tq/quant/kernels"
)

// TestExpMatchesLlamaCpp: SoftMaxExp and SwiGLU against ggml_vec_soft_max_f32 and
// ggml_vec_swiglu_f32 of llama.cpp's AVX2 CPU backend, bit for bit (values and the float64
// sum), in asm and pure Go, on normal, Student-t and extreme inputs (underflow, overflow,
// −Inf as in masked attention scores, subnormal results).
func TestExpMatchesLlamaCpp(t *testing.T) {
	var softMax func(n int32, y, x unsafe.Pointer, max float32) float64
	var swiglu func(n int32, y, x, g unsafe.Pointer)
	oracleFunc(t, &softMax, "ggml_vec_soft_max_f32")
	oracleFunc(t, &swiglu, "ggml_vec_swiglu_f32")

	for _, n := range []int{8, 64, 256, 4096} {
		for variant := 0; variant < 4; variant++ {
			t.Run(fmt.Sprintf("n=%d/variant=%d", n, variant), func(t *testing.T) {
				r := extRNG(uint64(n*10 + variant))
				x := extFloats(r, n, variant >= 1, []float64{1, 3, 30, 60}[variant])
				if variant == 3 {
					for i := 0; i < n; i += 7 {
						x[i] = float32(math.Inf(-1)) // masked scores
					}
					x[1], x[2] = 100, -100 // exp overflow / underflow for SiLU
				}
				mx := float32(math.Inf(-1))
				for _, v := range x {
					mx = max(mx, v)
				}
				want := make([]float32, n)
				wantSum := softMax(int32(n), unsafe.Pointer(&want[0]), unsafe.Pointer(&x[0]), mx)
				g := extFloats(r, n, true, 1)
				wantSw := make([]float32, n)
				swiglu(int32(n), unsafe.Pointer(&wantSw[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&g[0]))
				for _, pure := range []bool{false, true} {
					kernels.SetPureGo(pure)
					got := make([]float32, n)
					sum := kernels.SoftMaxExp(got, x, mx)
					gotSw := make([]float32, n)
					kernels.SwiGLU(gotSw, x, g)
					kernels.SetPureGo(false)
					if math.Float64bits(sum) != math.Float64bits(wantSum) {
						t.Errorf("pure=%v: softmax sum %v, ggml %v", pure, sum, wantSum)
					}
					bad := 0
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) && bad < 5 {
							bad++
							t.Errorf("pure=%v: exp(%v−max) = %v, ggml %v", pure, x[i], got[i], want[i])
						}
						if math.Float32bits(gotSw[i]) != math.Float32bits(wantSw[i]) && bad < 5 {
							bad++
							t.Errorf("pure=%v: swiglu(%v, %v) = %v, ggml %v", pure, x[i], g[i], gotSw[i], wantSw[i])
						}
					}
				}
			})
		}
	}
}
