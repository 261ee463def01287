package kernels

import (
	"math"
	"testing"
)

// TestLanes: ToLanes16/FromLanes16 and ToLanes8/FromLanes8 on both paths (AVX-512 and AVX2
// where present) against the definition, for sub-block lengths that take the transposes
// (multiples of the lane count) and ones that do not, with weights given and with x²
// (including values whose square is subnormal or overflows); labels truncated to a byte,
// negatives included; nothing written past the end.
func TestLanes(t *testing.T) {
	type impl struct {
		lanes int
		to    func(X, W, x, qw []float32, n int)
		from  func(L []uint8, src []int32, n int)
		ns    []int
	}
	for _, c := range []impl{
		{16, ToLanes16, FromLanes16, []int{0, 5, 16, 17, 32, 48}},
		{8, ToLanes8, FromLanes8, []int{0, 5, 8, 16, 17, 32}},
	} {
		nl := c.lanes
		forEachImpl(t, func(t *testing.T) {
			for _, n := range c.ns {
				r := newRNG(uint64(n*nl) + 29)
				x := randFloats(r, nl*n, true, 1)
				for i := range x {
					switch i % 13 {
					case 3:
						x[i] = 1e-25 // square subnormal
					case 8:
						x[i] = -3e30 // square overflows
					}
				}
				qw := randFloats(r, nl*n, false, 2)
				for _, w := range [][]float32{qw, nil} {
					X := make([]float32, nl*n+3)
					W := make([]float32, nl*n+3)
					c.to(X, W, x, w, n)
					for j := 0; j < nl; j++ {
						for i := 0; i < n; i++ {
							v := x[n*j+i]
							ww := float32(v * v)
							if w != nil {
								ww = w[n*j+i]
							}
							if math.Float32bits(X[nl*i+j]) != math.Float32bits(v) || math.Float32bits(W[nl*i+j]) != math.Float32bits(ww) {
								t.Fatalf("%d lanes, n=%d weights=%v: lane %d of element %d: (%v, %v), want (%v, %v)",
									nl, n, w != nil, j, i, X[nl*i+j], W[nl*i+j], v, ww)
							}
						}
					}
					if X[nl*n] != 0 || W[nl*n+2] != 0 {
						t.Fatalf("%d lanes, n=%d: written past the lanes", nl, n)
					}
				}
				src := make([]int32, nl*n)
				for i := range src {
					src[i] = int32(r.IntN(1<<20)) - 1<<19
				}
				L := make([]uint8, nl*n+1)
				L[nl*n] = 0xAB
				c.from(L, src, n)
				for j := 0; j < nl; j++ {
					for i := 0; i < n; i++ {
						if want := uint8(src[nl*i+j]); L[n*j+i] != want {
							t.Fatalf("%d lanes, n=%d: L[%d] = %d, want %d", nl, n, n*j+i, L[n*j+i], want)
						}
					}
				}
				if L[nl*n] != 0xAB {
					t.Fatalf("%d lanes, n=%d: labels written past the end", nl, n)
				}
			}
		})
	}
	for _, f := range []func(){
		func() { ToLanes16(make([]float32, 31), make([]float32, 32), make([]float32, 32), nil, 2) },
		func() { FromLanes8(make([]uint8, 16), make([]int32, 15), 2) },
	} {
		func() {
			defer func() {
				if _, ok := recover().(*LengthError); !ok {
					t.Error("a short slice did not panic with a *LengthError")
				}
			}()
			f()
		}()
	}
}

// BenchmarkLanes16 moves a pair of Q4_K super-blocks (16 sub-blocks of 32) into the lanes and
// the labels back, on the assembly and pure-Go paths.
func BenchmarkLanes16(b *testing.B) {
	x := make([]float32, 512)
	for i := range x {
		x[i] = float32(i%37) - 18
	}
	X, W := make([]float32, 512), make([]float32, 512)
	src, L := make([]int32, 512), make([]uint8, 512)
	benchImpls(b, func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			ToLanes16(X, W, x, x, 32)
			FromLanes16(L, src, 32)
		}
	})
}

// TestTranspose: both paths against the definition on shapes with and without whole 8×8
// blocks, strides wider than the matrix (the values between rows left alone), one row or
// column.
func TestTranspose(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(47)
		for _, sh := range [][4]int{{8, 8, 8, 8}, {16, 24, 29, 20}, {1, 13, 13, 1}, {13, 1, 1, 13}, {37, 70, 75, 40}, {64, 64, 64, 512}, {7, 9, 9, 7}} {
			rows, cols, lds, ldd := sh[0], sh[1], sh[2], sh[3]
			src := randFloats(r, (rows-1)*lds+cols, true, 1)
			dst := make([]float32, (cols-1)*ldd+rows+5)
			for i := range dst {
				dst[i] = -7
			}
			Transpose(dst, ldd, src, lds, rows, cols)
			for i := 0; i < cols; i++ {
				for k := 0; k < ldd && i*ldd+k < len(dst); k++ {
					want := float32(-7)
					if k < rows {
						want = src[k*lds+i]
					}
					if math.Float32bits(dst[i*ldd+k]) != math.Float32bits(want) {
						t.Fatalf("%v: dst[%d·%d+%d] = %v, want %v", sh, i, ldd, k, dst[i*ldd+k], want)
					}
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("a short dst did not panic with a *LengthError")
		}
	}()
	Transpose(make([]float32, 10), 3, make([]float32, 12), 4, 3, 4)
}

// BenchmarkTranspose transposes 512 activation rows of 2304 values into columns, as the Gram
// accumulator does for each chunk (calib), on the assembly and pure-Go paths.
func BenchmarkTranspose(b *testing.B) {
	const rows, cols = 512, 2304
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(i % 1013)
	}
	dst := make([]float32, rows*cols)
	benchImpls(b, func(b *testing.B) {
		b.SetBytes(4 * rows * cols)
		for i := 0; i < b.N; i++ {
			for c0 := 0; c0 < cols; c0 += 64 {
				Transpose(dst[c0*rows:], rows, src[c0:], cols, rows, 64)
			}
		}
	})
}
