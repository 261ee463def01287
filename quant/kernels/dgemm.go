package kernels

import "math"

// SubATB8x16 sets C[i][j] -= Σ_{p<k} A[p][i]·B[p][j] for i < 8 and j < 16, where A, B and C are
// row-major with leading dimensions lda, ldb and ldc (A's and B's rows p hold the 8 and 16
// values the tile needs contiguously). Each element takes one fused multiply-subtract per p,
// p in order, so the AVX-512 assembly and the Go loop give the same bits. It is the inner tile
// of the blocked float64 Cholesky factorisation of quant's error-compensating search.
func SubATB8x16(k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if k <= 0 {
		return
	}
	if len(a) < (k-1)*lda+8 || len(b) < (k-1)*ldb+16 || len(c) < 7*ldc+16 || lda < 8 || ldb < 16 || ldc < 16 {
		lengthPanic("SubATB8x16", "k %d: len(a) %d lda %d, len(b) %d ldb %d, len(c) %d ldc %d", k, len(a), lda, len(b), ldb, len(c), ldc)
	}
	if use512() {
		subATB8x16AVX512(k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		return
	}
	subATBGo(k, 8, 16, a, lda, b, ldb, c, ldc)
}

// SubATB is SubATB8x16 for any m × n tile (m, n ≥ 0) in Go: the same operations per element.
func SubATB(k, m, n int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if k <= 0 || m <= 0 || n <= 0 {
		return
	}
	if len(a) < (k-1)*lda+m || len(b) < (k-1)*ldb+n || len(c) < (m-1)*ldc+n || lda < m || ldb < n || ldc < n {
		lengthPanic("SubATB", "k %d m %d n %d: len(a) %d lda %d, len(b) %d ldb %d, len(c) %d ldc %d", k, m, n, len(a), lda, len(b), ldb, len(c), ldc)
	}
	subATBGo(k, m, n, a, lda, b, ldb, c, ldc)
}

func subATBGo(k, m, n int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for p := 0; p < k; p++ {
			av := -a[p*lda+i]
			br := b[p*ldb : p*ldb+n]
			for j, bv := range br {
				row[j] = math.FMA(av, bv, row[j])
			}
		}
	}
}
