package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// spdUpper is the upper triangle (row-major n×n) of GᵀG/k + δI for a k×n Gaussian G with
// correlated columns and an outlier column: positive definite, condition number in the
// hundreds to thousands.
func spdUpper(n int, seed uint64) []float64 {
	r := rand.New(rand.NewPCG(seed, 5))
	k := n + 16
	g := make([]float64, k*n)
	for i := range g {
		g[i] = r.NormFloat64()
	}
	for i := 0; i < k; i++ {
		if n > 1 {
			g[i*n+1] += 0.9 * g[i*n]
		}
		g[i*n+n/2] *= 20
	}
	a := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += g[p*n+i] * g[p*n+j]
			}
			a[i*n+j] = s / float64(k)
		}
		a[i*n+i] += 1e-3
	}
	return a
}

// TestCholUpper checks the blocked factorisation against gonum's dpotrf (LAPACK's algorithm)
// on sizes around the strip and block widths: U agrees to 1e-10 relative to its row's
// diagonal, UᵀU reproduces the matrix to 1e-12 of √(a_ii a_jj), the result is the same bits
// for 1 and 3 goroutines, and a matrix that is not positive definite is refused.
func TestCholUpper(t *testing.T) {
	for _, n := range []int{1, 5, 8, 17, 63, 64, 65, 130, 300} {
		a0 := spdUpper(n, uint64(n))
		got := append([]float64(nil), a0...)
		if !cholUpper(got, n, 1) {
			t.Fatalf("n=%d: refused a positive definite matrix", n)
		}
		got3 := append([]float64(nil), a0...)
		cholUpper(got3, n, 3)
		want := append([]float64(nil), a0...)
		if _, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: n, Stride: n, Data: want}); !ok {
			t.Fatalf("n=%d: gonum refused the matrix", n)
		}
		for i := 0; i < n; i++ {
			for j := i; j < n; j++ {
				g, w := got[i*n+j], want[i*n+j]
				if math.Float64bits(g) != math.Float64bits(got3[i*n+j]) {
					t.Fatalf("n=%d: U[%d][%d] differs between 1 and 3 goroutines", n, i, j)
				}
				if math.Abs(g-w) > 1e-10*math.Abs(want[i*n+i]) {
					t.Fatalf("n=%d: U[%d][%d] = %v, dpotrf %v", n, i, j, g, w)
				}
				var s float64
				for p := 0; p <= i; p++ {
					s += got[p*n+i] * got[p*n+j]
				}
				if math.Abs(s-a0[i*n+j]) > 1e-12*math.Sqrt(a0[i*n+i]*a0[j*n+j]) {
					t.Fatalf("n=%d: (UᵀU)[%d][%d] = %v, matrix %v", n, i, j, s, a0[i*n+j])
				}
			}
		}
		// not positive definite: a negative pivot appears at the last row
		bad := append([]float64(nil), a0...)
		bad[(n-1)*n+n-1] = -1
		if cholUpper(bad, n, 2) {
			t.Errorf("n=%d: accepted a matrix with a negative diagonal entry", n)
		}
		bad = append([]float64(nil), a0...)
		bad[0] = math.NaN()
		if cholUpper(bad, n, 2) {
			t.Errorf("n=%d: accepted a NaN pivot", n)
		}
	}
}

// BenchmarkCholUpper compares the blocked factorisation with gonum's dpotrf at n = 2048.
func BenchmarkCholUpper(b *testing.B) {
	const n = 2048
	a0 := spdUpper(n, 1)
	a := make([]float64, n*n)
	flops := float64(n) * float64(n) * float64(n) / 3
	b.Run("tq", func(b *testing.B) {
		for b.Loop() {
			copy(a, a0)
			cholUpper(a, n, 0)
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("gonum", func(b *testing.B) {
		for b.Loop() {
			copy(a, a0)
			lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: n, Stride: n, Data: a})
		}
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
