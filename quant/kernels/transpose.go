package kernels

// ToLanes16 writes the sixteen n-element sub-blocks x[n·j : n·j+n] and their weights (qw[n·j+i],
// or x² when qw is nil) lane-major into X and W, element i of sub-block j at [16·i+j]: the
// layout of QkxSearch16 and QxSearch16. With AVX-512 and n a multiple of 16 it transposes
// 16×16 blocks in registers; the values are moved, not computed (x² is v·v rounded to float32
// either way). It panics with a *LengthError if a slice is shorter than 16·n.
func ToLanes16(X, W, x, qw []float32, n int) {
	m := 16 * n
	if n < 0 || len(X) < m || len(W) < m || len(x) < m || qw != nil && len(qw) < m {
		lengthPanic("ToLanes16", "n = %d needs %d values: X %d, W %d, x %d, qw %d", n, m, len(X), len(W), len(x), len(qw))
	}
	if n > 0 && n%16 == 0 && have512 && useAsm() {
		var q *float32
		if qw != nil {
			q = &qw[0]
		}
		toLanes16AVX512(&X[0], &W[0], &x[0], q, n)
		return
	}
	toLanes(X, W, x, qw, 16, n)
}

// FromLanes16 reads the lane-major labels src (element i of sub-block j at [16·i+j]) back into
// L[n·j+i] for the sixteen sub-blocks, each truncated to its low byte. With AVX-512 and n a
// multiple of 16 it transposes 16×16 blocks in registers. It panics with a *LengthError if a
// slice is shorter than 16·n.
func FromLanes16(L []uint8, src []int32, n int) {
	m := 16 * n
	if n < 0 || len(L) < m || len(src) < m {
		lengthPanic("FromLanes16", "n = %d needs %d values: L %d, src %d", n, m, len(L), len(src))
	}
	if n > 0 && n%16 == 0 && have512 && useAsm() {
		fromLanes16AVX512(&L[0], &src[0], n)
		return
	}
	FromLanes(L, src, 16, n)
}

// ToLanes8 is ToLanes16 for eight sub-blocks (QkxSearch8 and QxSearch8's layout, element i of
// sub-block j at [8·i+j]), transposing 8×8 blocks with AVX2 where n is a multiple of 8.
func ToLanes8(X, W, x, qw []float32, n int) {
	m := 8 * n
	if n < 0 || len(X) < m || len(W) < m || len(x) < m || qw != nil && len(qw) < m {
		lengthPanic("ToLanes8", "n = %d needs %d values: X %d, W %d, x %d, qw %d", n, m, len(X), len(W), len(x), len(qw))
	}
	if n > 0 && n%8 == 0 && useAsm() {
		var q *float32
		if qw != nil {
			q = &qw[0]
		}
		toLanes8AVX2(&X[0], &W[0], &x[0], q, n)
		return
	}
	toLanes(X, W, x, qw, 8, n)
}

// toLanes is the Go path of ToLanes16 and ToLanes8 for nl sub-blocks.
func toLanes(X, W, x, qw []float32, nl, n int) {
	for j := 0; j < nl; j++ {
		for i := 0; i < n; i++ {
			v := x[n*j+i]
			X[nl*i+j] = v
			if qw != nil {
				W[nl*i+j] = qw[n*j+i]
			} else {
				W[nl*i+j] = v * v
			}
		}
	}
}

// FromLanes8 is FromLanes16 for eight sub-blocks (element i of sub-block j at src[8·i+j]),
// transposing 8×8 blocks with AVX2 where n is a multiple of 8; each value truncated to its
// low byte.
func FromLanes8(L []uint8, src []int32, n int) {
	m := 8 * n
	if n < 0 || len(L) < m || len(src) < m {
		lengthPanic("FromLanes8", "n = %d needs %d values: L %d, src %d", n, m, len(L), len(src))
	}
	if n > 0 && n%8 == 0 && useAsm() {
		fromLanes8AVX2(&L[0], &src[0], n)
		return
	}
	FromLanes(L, src, 8, n)
}

// FromLanes reads the lane-major labels src (element i of sub-block j at [nl·i+j]) back into
// L[n·j+i] for nl sub-blocks, each truncated to T, in Go: FromLanes16 and FromLanes8's Go
// path, and the one for signed labels (Q3_K, Q6_K). The caller gives nl·n values of each.
func FromLanes[T int8 | uint8](L []T, src []int32, nl, n int) {
	for j := 0; j < nl; j++ {
		for i := 0; i < n; i++ {
			L[n*j+i] = T(src[nl*i+j])
		}
	}
}

// Transpose writes the rows × cols matrix src (rows lds values apart) into dst as its
// transpose: dst[i·ldd + r] = src[r·lds + i]. With AVX2, eight rows by eight columns at a
// time (8×8 register transposes); the edges in Go. It panics with a *LengthError if a slice
// is too short for its stride.
func Transpose(dst []float32, ldd int, src []float32, lds int, rows, cols int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	if ldd < rows || lds < cols || len(dst) < (cols-1)*ldd+rows || len(src) < (rows-1)*lds+cols {
		lengthPanic("Transpose", "%d×%d with strides %d (src, %d values) and %d (dst, %d values)", rows, cols, lds, len(src), ldd, len(dst))
	}
	r := 0
	if useAsm() && cols >= 8 {
		nb := cols / 8
		for ; r+8 <= rows; r += 8 {
			transpose8PanelAVX2(&dst[r], ldd, &src[r*lds], lds, nb)
		}
		for r0 := 0; r0 < r; r0++ {
			for i := 8 * nb; i < cols; i++ {
				dst[i*ldd+r0] = src[r0*lds+i]
			}
		}
	}
	// eight rows at a time: each column gets eight adjacent values (half a cache line)
	for ; r+8 <= rows; r += 8 {
		x0, x1, x2, x3 := src[r*lds:][:cols], src[(r+1)*lds:][:cols], src[(r+2)*lds:][:cols], src[(r+3)*lds:][:cols]
		x4, x5, x6, x7 := src[(r+4)*lds:][:cols], src[(r+5)*lds:][:cols], src[(r+6)*lds:][:cols], src[(r+7)*lds:][:cols]
		for i := range x0 {
			o := i*ldd + r
			d := dst[o : o+8 : o+8]
			d[0], d[1], d[2], d[3] = x0[i], x1[i], x2[i], x3[i]
			d[4], d[5], d[6], d[7] = x4[i], x5[i], x6[i], x7[i]
		}
	}
	for ; r < rows; r++ {
		for i, v := range src[r*lds:][:cols] {
			dst[i*ldd+r] = v
		}
	}
}
