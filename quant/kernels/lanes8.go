package kernels

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// The "lanes8" kernels reproduce, bit for bit, the per-element summation order of
// llama.cpp's CPU matrix product for prompt batches on an AVX2 build (llamafile's tinyBLAS,
// ggml-cpu/llamafile/sgemm.cpp, instantiated as tinyBLAS<8, __m256, __m256, T, T, float>).
// tinyBLAS computes each C element with its own 8-lane float32 accumulator v (all lanes +0):
//
//	for s = 0, 8, 16, ... < k:  v[l] = fma(a[s+l], b[s+l], v[l])   for l = 0..7
//
// followed by its hsum(__m256): w[l] = v[l+4] + v[l] (l = 0..3), then hsum(__m128):
// x0 = w0 + w2, x1 = w1 + w3, result = x0 + x1. fma is a single-rounding float32 fused
// multiply-add (_mm256_fmadd_ps); k is never split. ggml uses it for F32, F16 and BF16
// products with n_tokens ≥ 2, k % 8 == 0 and a multiple of 4 weight rows; F16 and BF16
// operands (the activations are first rounded to the weight's type) are widened exactly to
// float32 before the FMA (SgemmLanes8F16, SgemmLanes8BF16).

// lanes8Block is the number of lanes of the accumulator: k must be a multiple of it.
const lanes8Block = 8

// DotLanes8 returns Σ a[i]·b[i] over len(a) elements in tinyBLAS's order (see the comment
// at the top of lanes8.go): one 8-lane float32 FMA accumulator, lane l taking elements
// l, l+8, l+16, ..., then the lanes summed as ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
// Both paths return the same bits for finite inputs. It panics with a *LengthError if
// len(a) is not a multiple of 8 or len(b) < len(a).
func DotLanes8(a, b []float32) float32 {
	n := len(a)
	if n%lanes8Block != 0 {
		lengthPanic("DotLanes8", "len(a) = %d is not a multiple of %d", n, lanes8Block)
	}
	if len(b) < n {
		lengthPanic("DotLanes8", "len(b) = %d < len(a) = %d", len(b), n)
	}
	if n == 0 {
		return 0
	}
	if useAsm() {
		return dotLanes8AVX2(&a[0], &b[0], n)
	}
	return dotLanes8Go(a, b[:n])
}

// SgemmLanes8 computes C[i·ldc+j] = A_i·B_j for i < m, j < n, where A is m×k (row i at
// a[i·lda:]), B is n×k (row j at b[j·ldb:]) and C is m×n (row i at c[i·ldc:]), all
// row-major float32. Every element is bit-identical to DotLanes8(A_i, B_j) — tinyBLAS's
// order — whatever the shape, blocking or implementation; k must be a multiple of 8 (k = 0
// gives C = +0). C is overwritten, never accumulated into, and must not overlap A or B.
//
// With the activation rows X as A and the weight rows W as B, C[t·ldc+r] is llama.cpp's
// dst[t][r] (ggml's src0 is B here, its src1 A). Because each element is independent and
// fma(a, b, c) = fma(b, a, c) exactly, swapping A and B gives exactly the transposed C.
//
// It runs single-threaded on the calling goroutine; to parallelise, call it on disjoint
// sub-blocks (a[i0·lda:], b[j0·ldb:], c[i0·ldc+j0:] with smaller m, n), which reproduces a
// whole call bit for bit. The assembly path works in 3×4 register tiles (one YMM
// accumulator per element) and wastes least on edges when m is a multiple of 3 and n of 4.
// It returns an error, and writes nothing, for negative or non-multiple-of-8 dimensions,
// strides smaller than the rows, or slices too short for the shape.
func SgemmLanes8(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	if err := checkLanes8("SgemmLanes8", m, n, k, len(a), lda, len(b), ldb, len(c), ldc); err != nil {
		return err
	}
	return sgemmLanes8(l8F32, m, n, k, a, lda, unsafe.Pointer(unsafe.SliceData(b)), b, nil, ldb, c, ldc)
}

// SgemmLanes8F16 is SgemmLanes8 with B held as little-endian IEEE fp16 values (row j at
// byte 2·j·ldb; ldb counts elements), widened exactly to float32 as they are read — ggml's
// F16 path, where B is the F16 weight or KV-cache matrix. ggml first rounds the activations
// (A) to fp16 too; to reproduce it, pass A already rounded to fp16 and widened back.
// Reading B as fp16 measured faster than a float32 B even before counting the widening (half
// the bytes to stream; see docs/kernels.md). Elements are bit-identical to DotLanes8 of A_i
// and the widened B_j. Sub-blocks for parallel callers start at b[2·j0·ldb:].
func SgemmLanes8F16(m, n, k int, a []float32, lda int, b []byte, ldb int, c []float32, ldc int) error {
	if err := checkLanes8("SgemmLanes8F16", m, n, k, len(a), lda, len(b)/2, ldb, len(c), ldc); err != nil {
		return err
	}
	return sgemmLanes8(l8F16, m, n, k, a, lda, unsafe.Pointer(unsafe.SliceData(b)), nil, b, ldb, c, ldc)
}

// SgemmLanes8BF16 is SgemmLanes8F16 for little-endian bfloat16 B values (ggml's BF16 path,
// whose activations are rounded to bfloat16 first).
func SgemmLanes8BF16(m, n, k int, a []float32, lda int, b []byte, ldb int, c []float32, ldc int) error {
	if err := checkLanes8("SgemmLanes8BF16", m, n, k, len(a), lda, len(b)/2, ldb, len(c), ldc); err != nil {
		return err
	}
	return sgemmLanes8(l8BF16, m, n, k, a, lda, unsafe.Pointer(unsafe.SliceData(b)), nil, b, ldb, c, ldc)
}

// B element types of the lanes8 GEMM.
const (
	l8F32 = iota
	l8F16
	l8BF16
)

// sgemmLanes8 dispatches a validated product; B is at bp (bf for float32, bh for 16-bit).
func sgemmLanes8(kind, m, n, k int, a []float32, lda int, bp unsafe.Pointer, bf []float32, bh []byte, ldb int, c []float32, ldc int) error {
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return nil
	}
	if useAsm() {
		sgemmLanes8Asm(kind, m, n, k, a, lda, bp, ldb, c, ldc)
	} else {
		sgemmLanes8Go(kind, m, n, k, a, lda, bf, bh, ldb, c, ldc)
	}
	return nil
}

// checkLanes8 validates a product's shape; lenB counts B elements.
func checkLanes8(name string, m, n, k, lenA, lda, lenB, ldb, lenC, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("kernels: %s: negative dimension m=%d n=%d k=%d", name, m, n, k)
	}
	if k%lanes8Block != 0 {
		return fmt.Errorf("kernels: %s: k = %d is not a multiple of %d", name, k, lanes8Block)
	}
	if lda < max(1, k) || ldb < max(1, k) || ldc < max(1, n) {
		return fmt.Errorf("kernels: %s: strides lda=%d ldb=%d ldc=%d too small for k=%d n=%d", name, lda, ldb, ldc, k, n)
	}
	if !fitsMatrix(m, k, lda, lenA) {
		return fmt.Errorf("kernels: %s: A has %d elements, too few for %d×%d with stride %d", name, lenA, m, k, lda)
	}
	if !fitsMatrix(n, k, ldb, lenB) {
		return fmt.Errorf("kernels: %s: B has %d elements, too few for %d×%d with stride %d", name, lenB, n, k, ldb)
	}
	if !fitsMatrix(m, n, ldc, lenC) {
		return fmt.Errorf("kernels: %s: C has %d elements, too few for %d×%d with stride %d", name, lenC, m, n, ldc)
	}
	return nil
}

// Blocking of the assembly path. The micro-kernel is a 3×4 register tile: 3 rows of A × 4
// rows of B, one YMM accumulator per element, i.e. 12 FMAs per 7 row loads per 8 k-steps
// (15 of the 16 YMM registers; with AVX2 no larger tile fits). One kernel call runs a strip
// of tiles that share their A rows (row order) or their B rows (column order), reusing them
// from L1. One matrix is cut into blocks of rows whose full k fits in ~256 KiB (half the L2
// of the Zen 3 cores this was tuned on) and the other streams past each block: B is blocked
// unless A is the larger matrix and B does not fit in one block, since re-streaming the
// smaller matrix from L3 measured faster. (Splitting k into chunks, with the accumulators
// parked in memory between them, was tried to keep the rows in L1; it measured no faster
// at k = 4096 or k = 14336.)
const (
	l8MR       = 3
	l8NR       = 4
	l8MaxTiles = 16       // tiles per strip
	l8Block    = 64 << 10 // floats per L2 block
)

// lanes8Blocking returns the A and B block heights (multiples of 3 and 4) and whether the
// assembly path blocks A (column order) rather than B (row order).
func lanes8Blocking(m, n, k int) (mb, nb int, columnOrder bool) {
	rowsPerBlock := l8Block / k
	nb = min(l8MaxTiles*l8NR, max(l8NR, rowsPerBlock/l8NR*l8NR))
	mb = min(l8MaxTiles*l8MR, max(l8MR, rowsPerBlock/l8MR*l8MR))
	return mb, nb, m > n && n > nb
}

// lanes8Run calls the tile kernel for B elements of the given kind.
func lanes8Run(kind int, a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int) {
	switch kind {
	case l8F32:
		lanes8Run3x4F32AVX2(a0, a1, a2, b0, b1, b2, b3, k, c, ldc, ntiles, astep, bstep, cstep)
	case l8F16:
		lanes8Run3x4F16AVX2(a0, a1, a2, b0, b1, b2, b3, k, c, ldc, ntiles, astep, bstep, cstep)
	default:
		lanes8Run3x4BF16AVX2(a0, a1, a2, b0, b1, b2, b3, k, c, ldc, ntiles, astep, bstep, cstep)
	}
}

// sgemmLanes8Asm is the assembly path (k > 0, m, n > 0; B at bp, ldb elements per row).
// Partial tiles at the bottom or right edge run the same kernel with their missing rows
// pointing at a real row, into a scratch tile, and only the real elements are copied out —
// every element still sees exactly DotLanes8's operations.
func sgemmLanes8Asm(kind, m, n, k int, a []float32, lda int, bp unsafe.Pointer, ldb int, c []float32, ldc int) {
	var tmp [l8MR * l8MaxTiles * l8NR]float32
	esize := 4
	if kind != l8F32 {
		esize = 2
	}
	mb, nb, columnOrder := lanes8Blocking(m, n, k)
	var ap [l8MR]*float32
	var bq [l8NR]unsafe.Pointer
	// aRows and bRows point ap/bq at rows r, r+1, ... (have of them; the rest repeat row r).
	aRows := func(r, have int) {
		for u := range ap {
			ap[u] = &a[(r+min(u, have-1))*lda]
		}
	}
	bRows := func(r, have int) {
		for u := range bq {
			bq[u] = unsafe.Add(bp, (r+min(u, have-1))*ldb*esize)
		}
	}
	if columnOrder {
		// Blocks of mb A rows; every B row quad runs one strip down a block.
		for i0 := 0; i0 < m; i0 += mb {
			i1 := min(m, i0+mb)
			full, remRows := (i1-i0)/l8MR, (i1-i0)%l8MR
			it := i0 + full*l8MR // first row of the partial triple
			for j := 0; j < n; j += l8NR {
				cols := min(l8NR, n-j)
				bRows(j, cols)
				if full > 0 {
					aRows(i0, l8MR)
					if cols == l8NR {
						lanes8Run(kind, ap[0], ap[1], ap[2], bq[0], bq[1], bq[2], bq[3], k, &c[i0*ldc+j], ldc, full, l8MR*lda, 0, l8MR*ldc)
					} else {
						lanes8Run(kind, ap[0], ap[1], ap[2], bq[0], bq[1], bq[2], bq[3], k, &tmp[0], l8NR, full, l8MR*lda, 0, l8MR*l8NR)
						for r := 0; r < full*l8MR; r++ {
							copy(c[(i0+r)*ldc+j:][:cols], tmp[r*l8NR:][:cols])
						}
					}
				}
				if remRows > 0 {
					aRows(it, remRows)
					lanes8Run(kind, ap[0], ap[1], ap[2], bq[0], bq[1], bq[2], bq[3], k, &tmp[0], l8NR, 1, 0, 0, 0)
					for r := 0; r < remRows; r++ {
						copy(c[(it+r)*ldc+j:][:cols], tmp[r*l8NR:][:cols])
					}
				}
			}
		}
		return
	}
	// Row order: blocks of nb B rows; every A row triple runs one strip along a block.
	for j0 := 0; j0 < n; j0 += nb {
		j1 := min(n, j0+nb)
		full, remCols := (j1-j0)/l8NR, (j1-j0)%l8NR
		jt := j0 + full*l8NR // first column of the partial quad
		for i := 0; i < m; i += l8MR {
			rows := min(l8MR, m-i)
			aRows(i, rows)
			if full > 0 {
				bRows(j0, l8NR)
				if rows == l8MR {
					lanes8Run(kind, ap[0], ap[1], ap[2], bq[0], bq[1], bq[2], bq[3], k, &c[i*ldc+j0], ldc, full, 0, l8NR*ldb, l8NR)
				} else {
					w := full * l8NR
					lanes8Run(kind, ap[0], ap[1], ap[2], bq[0], bq[1], bq[2], bq[3], k, &tmp[0], w, full, 0, l8NR*ldb, l8NR)
					for r := 0; r < rows; r++ {
						copy(c[(i+r)*ldc+j0:][:w], tmp[r*w:][:w])
					}
				}
			}
			if remCols > 0 {
				bRows(jt, remCols)
				lanes8Run(kind, ap[0], ap[1], ap[2], bq[0], bq[1], bq[2], bq[3], k, &tmp[0], l8NR, 1, 0, 0, 0)
				for r := 0; r < rows; r++ {
					copy(c[(i+r)*ldc+jt:][:remCols], tmp[r*l8NR:][:remCols])
				}
			}
		}
	}
}

// lanes8RowPool holds the pure-Go path's buffers for one widened 16-bit B row.
var lanes8RowPool = sync.Pool{New: func() any { return new([]float32) }}

// sgemmLanes8Go is the pure-Go twin: every element is dotLanes8Go of its two rows, a
// 16-bit B row being widened exactly first.
func sgemmLanes8Go(kind, m, n, k int, a []float32, lda int, bf []float32, bh []byte, ldb int, c []float32, ldc int) {
	var row []float32
	if kind != l8F32 {
		rp := lanes8RowPool.Get().(*[]float32)
		defer lanes8RowPool.Put(rp)
		if cap(*rp) < k {
			*rp = make([]float32, k)
		}
		row = (*rp)[:k]
	}
	for j := 0; j < n; j++ {
		bj := row
		switch kind {
		case l8F32:
			bj = bf[j*ldb:][:k]
		case l8F16:
			src := bh[2*j*ldb:][:2*k]
			for p := range row {
				row[p] = halfToFloat(le16(src[2*p:]))
			}
		default:
			src := bh[2*j*ldb:][:2*k]
			for p := range row {
				row[p] = bf16ToFloat(le16(src[2*p:]))
			}
		}
		for i := 0; i < m; i++ {
			c[i*ldc+j] = dotLanes8Go(a[i*lda:][:k], bj)
		}
	}
}

// dotLanes8Go is the pure-Go twin of dotLanes8AVX2 (len(a) a multiple of 8, len(b) ≥ len(a)).
func dotLanes8Go(a, b []float32) float32 {
	b = b[:len(a)]
	// vl = lanes8FMA(x[l], y[l], vl). Its result is float32(t) for t = x·y + v rounded to
	// float64 whenever t is not on a float32 midpoint, i.e. whenever one of the low 28 bits
	// of t's significand is set (see lanes8FMA); that test is written out here because the
	// call would not be inlined and costs a factor 3 in speed.
	const midMask = 1<<28 - 1
	var v0, v1, v2, v3, v4, v5, v6, v7 float32
	for s := 0; s+8 <= len(a); s += 8 {
		x := (*[8]float32)(a[s:])
		y := (*[8]float32)(b[s:])
		if t := float64(x[0])*float64(y[0]) + float64(v0); math.Float64bits(t)&midMask != 0 {
			v0 = float32(t)
		} else {
			v0 = lanes8FMA(x[0], y[0], v0)
		}
		if t := float64(x[1])*float64(y[1]) + float64(v1); math.Float64bits(t)&midMask != 0 {
			v1 = float32(t)
		} else {
			v1 = lanes8FMA(x[1], y[1], v1)
		}
		if t := float64(x[2])*float64(y[2]) + float64(v2); math.Float64bits(t)&midMask != 0 {
			v2 = float32(t)
		} else {
			v2 = lanes8FMA(x[2], y[2], v2)
		}
		if t := float64(x[3])*float64(y[3]) + float64(v3); math.Float64bits(t)&midMask != 0 {
			v3 = float32(t)
		} else {
			v3 = lanes8FMA(x[3], y[3], v3)
		}
		if t := float64(x[4])*float64(y[4]) + float64(v4); math.Float64bits(t)&midMask != 0 {
			v4 = float32(t)
		} else {
			v4 = lanes8FMA(x[4], y[4], v4)
		}
		if t := float64(x[5])*float64(y[5]) + float64(v5); math.Float64bits(t)&midMask != 0 {
			v5 = float32(t)
		} else {
			v5 = lanes8FMA(x[5], y[5], v5)
		}
		if t := float64(x[6])*float64(y[6]) + float64(v6); math.Float64bits(t)&midMask != 0 {
			v6 = float32(t)
		} else {
			v6 = lanes8FMA(x[6], y[6], v6)
		}
		if t := float64(x[7])*float64(y[7]) + float64(v7); math.Float64bits(t)&midMask != 0 {
			v7 = float32(t)
		} else {
			v7 = lanes8FMA(x[7], y[7], v7)
		}
	}
	w0, w1, w2, w3 := v4+v0, v5+v1, v6+v2, v7+v3
	return (w0 + w2) + (w1 + w3)
}

// lanes8FMA returns a·b + c rounded once to float32 (round to nearest even), exactly like
// the VFMADD231PS lanes of the assembly, for all finite inputs; non-finite values propagate
// as in IEEE arithmetic (NaN payloads are not specified).
//
// The product of two float32 values has at most 48 significant bits and an exponent in
// [−298, 256], so p = float64(a)·float64(b) is exact (and normal) in float64, and any fusion
// the compiler may apply to the expressions below gives the same values. s = p + c is then
// the exact sum rounded once to float64, and float32(s) rounds a second time. The naive
// float32(math.FMA(float64(a), float64(b), float64(c))) is that double rounding. It is wrong
// exactly when s lands on a float32 midpoint (a tie) that the exact sum is not on, e.g.
// a = 1+2⁻²³, b = 2−2⁻²², c = 2²⁵+4 gives 2²⁵+8 instead of 2²⁵+4. That is rare but not
// negligible: on Gaussian data, accumulating lanes of length-4096 dots, it happened 3 times
// in 1.6·10⁹ FMAs, i.e. about once per four 64×4096×512 products. So the float64 sum is
// rounded to odd instead (Boldo–Melquiond): TwoSum recovers the exact rounding error e of
// p + c, and when e ≠ 0 and s is even, s moves one float64 ulp towards the exact sum. A
// round-to-odd value with at least 2 extra bits rounds to the correctly rounded float32, for
// every finite input, subnormal and overflowing results included.
//
// A float32 midpoint has 25 significant bits, so in float64 its low 28 significand bits are
// zero; dotLanes8Go skips this function (float32(s) is then already correct) when they are not.
func lanes8FMA(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b)) // exact
	cc := float64(c)
	s := p + cc
	bits := math.Float64bits(s)
	if bits&0x7ff0000000000000 == 0x7ff0000000000000 {
		return float32(s) // ±Inf or NaN
	}
	// TwoSum: p + cc == s + e exactly.
	bb := s - p
	e := (p - (s - bb)) + (cc - bb)
	if e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++ // away from zero, towards the exact sum
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}
