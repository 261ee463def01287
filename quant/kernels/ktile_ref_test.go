package kernels

import (
	"math"
	"testing"
)

// TestMatMulKAccuracy checks MatMulK against a float64 reference of the same quantized
// operands (refDot: exact dequantized products summed in float64) on random and
// heavy-tailed data, on both paths. Tolerance: refTol(super-blocks)·S with S the sum of
// |scale part| + |min part| of every term, the bound the Dot kernels are tested to.
func TestMatMulKAccuracy(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(56)
		const rows, n, T = 7, 2048, 9
		nb := n / QK_K
		for _, wt := range []Type{Q4_K, Q5_K, Q6_K} {
			for _, heavy := range []bool{false, true} {
				w := randWeights(r, wt, rows*nb, 0.02, heavy)
				xRow := nb * BlockBytesQ8_K
				xq := make([]byte, T*xRow)
				for k := 0; k < T; k++ {
					copy(xq[k*xRow:], quantizeActs(Q8_K, randFloats(r, n, heavy, 1)))
				}
				rowBytes := nb * BlockBytes(wt)
				y := make([]float32, T*rows)
				if err := MatMulK(wt, y, rows, w, rowBytes, xq, xRow, T, 0, rows); err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for k := 0; k < T; k++ {
					for i := 0; i < rows; i++ {
						ref, s := refDot(wt, w[i*rowBytes:], Q8_K, xq[k*xRow:], n)
						d := math.Abs(float64(y[k*rows+i]) - ref)
						if d > refTol(nb)*s || s == 0 {
							t.Fatalf("%v heavy=%v token %d row %d: %g, reference %g (S %g, tolerance %g)", wt, heavy, k, i, y[k*rows+i], ref, s, refTol(nb)*s)
						}
						worst = max(worst, d/s)
					}
				}
				t.Logf("%v heavy=%v: worst |err|/S = %.3g (tolerance %.3g)", wt, heavy, worst, refTol(nb))
			}
		}
	})
}
