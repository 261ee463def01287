package quant

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tq-project/tq/quant/kernels"
)

// cholBlock is the rows of U one step of cholUpper finishes before it updates the rest of the
// matrix with them; cholStrip the rows finished at a time inside a step.
const (
	cholBlock = 64
	cholStrip = 8
)

// cholUpper factorises the symmetric positive definite n×n matrix whose upper triangle is in
// a (row-major, row i holding a[i*n+i:] from the diagonal) as UᵀU, U upper triangular, in
// place: on return the upper triangle holds U (what LAPACK's dpotrf with Uplo = Upper
// computes; the strictly lower triangle is used as scratch). It reports false, like dpotrf,
// when a pivot is not positive (or NaN): the matrix is not positive definite.
//
// It is right-looking and blocked: the rows of a step of cholBlock rows are finished eight at
// a time (the earlier strips' contributions subtracted with kernels.SubATB8x16, then an
// unblocked rank-one pass over the eight rows), and the rest of the matrix gets the step's
// contribution, n²·cholBlock multiply-adds of the n³/3 in all, through the same tile, its
// 8-row blocks spread over threads goroutines. The tile takes one fused multiply-subtract
// per term, so the result does not depend on threads.
func cholUpper(a []float64, n, threads int) bool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	for j0 := 0; j0 < n; j0 += cholBlock {
		j1 := min(n, j0+cholBlock)
		for r0 := j0; r0 < j1; r0 += cholStrip {
			r1 := min(j1, r0+cholStrip)
			// the earlier strips of this step: rows [r0, r1), columns from r0
			if k := r0 - j0; k > 0 {
				subTiles(a, n, j0, k, r0, r1, r0)
			}
			for r := r0; r < r1; r++ {
				d := a[r*n+r]
				if !(d > 0) {
					return false
				}
				d = math.Sqrt(d)
				a[r*n+r] = d
				inv := 1 / d
				row := a[r*n : (r+1)*n]
				for c := r + 1; c < n; c++ {
					row[c] *= inv
				}
				for s := r + 1; s < r1; s++ {
					f := -row[s]
					dst := a[s*n : (s+1)*n]
					for c := s; c < n; c++ {
						dst[c] = math.FMA(f, row[c], dst[c])
					}
				}
			}
		}
		if j1 == n {
			break
		}
		// the rest: rows and columns from j1 get the step's rows [j0, j1)
		nblk := (n - j1 + cholStrip - 1) / cholStrip
		var next atomic.Int64
		work := func() {
			for {
				b := int(next.Add(1) - 1)
				if b >= nblk {
					return
				}
				i0 := j1 + b*cholStrip
				subTiles(a, n, j0, j1-j0, i0, min(n, i0+cholStrip), i0)
			}
		}
		if t := min(threads, nblk); t > 1 && (n-j1)*(n-j1) >= 64*64 {
			var wg sync.WaitGroup
			for range t - 1 {
				wg.Add(1)
				go func() { defer wg.Done(); work() }()
			}
			work()
			wg.Wait()
		} else {
			work()
		}
	}
	return true
}

// subTiles subtracts Σ_{p∈[p0, p0+k)} a[p][i]·a[p][c] from a[i][c] for rows i in [i0, i1)
// (at most cholStrip of them) and columns c from c0 to n, in tiles of 8×16.
func subTiles(a []float64, n, p0, k, i0, i1, c0 int) {
	m := i1 - i0
	c := c0
	if m == cholStrip {
		for ; c+16 <= n; c += 16 {
			kernels.SubATB8x16(k, a[p0*n+i0:], n, a[p0*n+c:], n, a[i0*n+c:], n)
		}
	}
	if c < n {
		kernels.SubATB(k, m, n-c, a[p0*n+i0:], n, a[p0*n+c:], n, a[i0*n+c:], n)
	}
}
