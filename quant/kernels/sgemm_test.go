package kernels

import (
	"math"
	"testing"
)

type sgemmShape struct{ m, n, k, lda, ldb, ldc int }

// TestSgemm: both paths against a float64 reference for shapes that exercise every edge
// (partial 6×16 tiles, k beyond one 256 block, n beyond one 512 block, padded strides),
// with and without accumulation; tolerance (k + 4)·2⁻²⁴·Σ_p |a_ip·b_jp| per element.
func TestSgemm(t *testing.T) {
	shapes := []sgemmShape{
		{1, 1, 1, 1, 1, 1}, {6, 16, 8, 8, 8, 16}, {5, 15, 3, 3, 3, 15}, {7, 17, 33, 40, 35, 20},
		{13, 530, 300, 300, 301, 533}, {150, 40, 257, 260, 257, 41}, {2, 3, 600, 600, 600, 3},
		{64, 64, 64, 64, 64, 64}, {19, 1, 513, 513, 513, 1},
	}
	if testing.Short() {
		shapes = shapes[:4]
	}
	forEachImpl(t, func(t *testing.T) {
		var worst float64
		for si, sh := range shapes {
			r := newRNG(uint64(si))
			a := randFloats(r, (sh.m-1)*sh.lda+sh.k, si%2 == 1, 1)
			b := randFloats(r, (sh.n-1)*sh.ldb+sh.k, true, 1)
			c0 := randFloats(r, (sh.m-1)*sh.ldc+sh.n, false, 1)
			for _, acc := range []bool{false, true} {
				c := append([]float32(nil), c0...)
				if err := Sgemm(sh.m, sh.n, sh.k, a, sh.lda, b, sh.ldb, c, sh.ldc, acc); err != nil {
					t.Fatalf("%+v: %v", sh, err)
				}
				worst = max(worst, checkSgemmResult(t, sh, a, b, c0, c, acc, 0, sh.m, 0, sh.n))
			}
			// A sub-block via SgemmRange leaves everything else untouched.
			i0, i1, j0, j1 := sh.m/3, sh.m-sh.m/4, sh.n/5, sh.n-sh.n/3
			c := append([]float32(nil), c0...)
			if err := SgemmRange(sh.m, sh.n, sh.k, a, sh.lda, b, sh.ldb, c, sh.ldc, true, i0, i1, j0, j1); err != nil {
				t.Fatal(err)
			}
			worst = max(worst, checkSgemmResult(t, sh, a, b, c0, c, true, i0, i1, j0, j1))
		}
		t.Logf("worst |err|/S = %.3g", worst)
	})
}

func checkSgemmResult(t *testing.T, sh sgemmShape, a, b, c0, c []float32, acc bool, i0, i1, j0, j1 int) float64 {
	t.Helper()
	var worst float64
	for i := 0; i < sh.m; i++ {
		for j := 0; j < sh.ldc && i*sh.ldc+j < len(c); j++ {
			idx := i*sh.ldc + j
			if j >= sh.n || i < i0 || i >= i1 || j < j0 || j >= j1 {
				if math.Float32bits(c[idx]) != math.Float32bits(c0[idx]) {
					t.Fatalf("%+v range [%d,%d)×[%d,%d): C[%d][%d] outside the range changed", sh, i0, i1, j0, j1, i, j)
				}
				continue
			}
			var ref, s float64
			if acc {
				ref, s = float64(c0[idx]), math.Abs(float64(c0[idx]))
			}
			for p := 0; p < sh.k; p++ {
				v := float64(a[i*sh.lda+p]) * float64(b[j*sh.ldb+p])
				ref += v
				s += math.Abs(v)
			}
			err := math.Abs(float64(c[idx]) - ref)
			if err > float64(sh.k+4)*u32*s {
				t.Fatalf("%+v acc=%v C[%d][%d] = %.9g, reference %.9g", sh, acc, i, j, c[idx], ref)
			}
			if s > 0 {
				worst = max(worst, err/s)
			}
		}
	}
	return worst
}

func TestSgemmErrors(t *testing.T) {
	a := make([]float32, 12)
	c := make([]float32, 9)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"negative m", Sgemm(-1, 3, 4, a, 4, a, 4, c, 3, false)},
		{"short lda", Sgemm(3, 3, 4, a, 3, a, 4, c, 3, false)},
		{"short ldc", Sgemm(3, 3, 4, a, 4, a, 4, c, 2, false)},
		{"short A", Sgemm(4, 3, 4, a, 4, a, 4, make([]float32, 12), 3, false)},
		{"short B", Sgemm(3, 4, 4, a, 4, a, 4, make([]float32, 12), 4, false)},
		{"short C", Sgemm(3, 3, 4, a, 4, a, 4, c[:8], 3, false)},
		{"range", SgemmRange(3, 3, 4, a, 4, a, 4, c, 3, false, 0, 4, 0, 3)},
		{"reversed range", SgemmRange(3, 3, 4, a, 4, a, 4, c, 3, false, 0, 3, 2, 1)},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	// k = 0: C = 0 (or unchanged when accumulating).
	for i := range c {
		c[i] = 7
	}
	if err := Sgemm(3, 3, 0, nil, 1, nil, 1, c, 3, true); err != nil || c[4] != 7 {
		t.Fatalf("k=0 accumulate: %v, %g", err, c[4])
	}
	if err := Sgemm(3, 3, 0, nil, 1, nil, 1, c, 3, false); err != nil || c[4] != 0 {
		t.Fatalf("k=0: %v, %g", err, c[4])
	}
}

// TestSgemmConcurrentRanges: disjoint SgemmRange blocks computed by concurrent goroutines
// reproduce a single Sgemm call bit for bit.
func TestSgemmConcurrentRanges(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		const m, n, k = 50, 70, 300
		r := newRNG(9)
		a := randFloats(r, m*k, true, 1)
		b := randFloats(r, n*k, false, 1)
		want := make([]float32, m*n)
		if err := Sgemm(m, n, k, a, k, b, k, want, n, false); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, m*n)
		errs := make(chan error, 6)
		for _, ir := range [][2]int{{0, 17}, {17, 36}, {36, 50}} {
			for _, jr := range [][2]int{{0, 33}, {33, 70}} {
				go func() {
					errs <- SgemmRange(m, n, k, a, k, b, k, got, n, false, ir[0], ir[1], jr[0], jr[1])
				}()
			}
		}
		for i := 0; i < 6; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("element %d: ranges %g, whole %g", i, got[i], want[i])
			}
		}
	})
}

// TestSgemmAVX512MatchesAVX2: the AVX-512 12×32 and 6×32 kernels give the AVX2 6×16 kernel's bits
// (same FMA chain per element) for shapes that exercise full and partial row panels, column
// counts that leave 0 or 1 16-wide panel after the 32-wide ones, k blocks with and without a
// remainder of 4, both accumulate modes, sub-ranges, and normal and heavy-tailed data.
func TestSgemmAVX512MatchesAVX2(t *testing.T) {
	if !have512 || !useAsm() {
		t.Skip("no AVX-512F on this machine (or assembly off): only the AVX2 kernel runs")
	}
	defer avx512Off.Store(false)
	r := newRNG(77)
	shapes := [][3]int{{6, 32, 8}, {7, 48, 5}, {13, 64, 300}, {144, 512, 256}, {150, 530, 517}, {1, 33, 1}, {12, 96, 1031}, {30, 1000, 64}}
	for si, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		a := randFloats(r, m*k, si%2 == 1, 1)
		b := randFloats(r, n*k, si%2 == 0, 1)
		c0 := randFloats(r, m*n, false, 1)
		for _, acc := range []bool{false, true} {
			for _, rg := range [][4]int{{0, m, 0, n}, {m / 3, m, n / 5, n}} {
				var got [2][]float32
				for i, off := range []bool{true, false} {
					avx512Off.Store(off)
					c := append([]float32(nil), c0...)
					if err := SgemmRange(m, n, k, a, k, b, k, c, n, acc, rg[0], rg[1], rg[2], rg[3]); err != nil {
						t.Fatal(err)
					}
					got[i] = c
				}
				for i := range got[0] {
					if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
						t.Fatalf("%dx%dx%d acc=%v range %v: element %d: AVX2 %v, AVX-512 %v", m, n, k, acc, rg, i, got[0][i], got[1][i])
					}
				}
			}
		}
	}
}

// TestSgemmHalf: SgemmHalf with BF16 and F16 weights equals, bit for bit, Sgemm on the same
// weights widened to float32 (widening is exact), in both paths, with and without
// accumulation, for the edge shapes of TestSgemm; with AVX-512 the 6×32 kernel and the
// AVX2 one both run. Bad types and short buffers are refused.
func TestSgemmHalf(t *testing.T) {
	shapes := []sgemmShape{
		{1, 1, 1, 1, 1, 1}, {6, 16, 8, 8, 8, 16}, {5, 15, 3, 3, 3, 15}, {7, 17, 33, 40, 35, 20},
		{13, 530, 300, 300, 301, 533}, {150, 40, 257, 260, 257, 41}, {12, 64, 520, 520, 530, 64},
	}
	SetAMX(false) // the FMA path, bit for bit; TestSgemmHalfAMX covers AMX
	defer SetAMX(true)
	forEachImpl(t, func(t *testing.T) {
		for _, typ := range []Type{BF16, F16} {
			for si, sh := range shapes {
				r := newRNG(uint64(si) + 100)
				a := randFloats(r, (sh.m-1)*sh.lda+sh.k, si%2 == 0, 1)
				bf := randFloats(r, (sh.n-1)*sh.ldb+sh.k, true, 0.5)
				bh := make([]byte, 2*len(bf))
				for i, v := range bf {
					var h uint16
					if typ == F16 {
						h = floatToHalf(v)
					} else {
						h = uint16(math.Float32bits(v) >> 16)
					}
					bh[2*i], bh[2*i+1] = byte(h), byte(h>>8)
				}
				wide := make([]float32, len(bf))
				widenHalf(typ, wide, bh)
				c0 := randFloats(r, (sh.m-1)*sh.ldc+sh.n, false, 1)
				pb, err := PackHalf(typ, sh.n, sh.k, bh, sh.ldb)
				if err != nil {
					t.Fatal(err)
				}
				for _, acc := range []bool{false, true} {
					want := append([]float32(nil), c0...)
					if err := Sgemm(sh.m, sh.n, sh.k, a, sh.lda, wide, sh.ldb, want, sh.ldc, acc); err != nil {
						t.Fatal(err)
					}
					got := append([]float32(nil), c0...)
					if err := SgemmHalf(typ, sh.m, sh.n, sh.k, a, sh.lda, bh, sh.ldb, got, sh.ldc, acc); err != nil {
						t.Fatal(err)
					}
					// the same product from B packed once (twice, as a cached matrix is used)
					pk := append([]float32(nil), c0...)
					for range 2 {
						copy(pk, c0)
						if err := SgemmPackedHalf(sh.m, a, sh.lda, pb, pk, sh.ldc, acc); err != nil {
							t.Fatal(err)
						}
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %+v acc=%v: C[%d] = %g, Sgemm on widened B %g", typ, sh, acc, i, got[i], want[i])
						}
						if math.Float32bits(pk[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %+v acc=%v: C[%d] = %g with B packed once, Sgemm on widened B %g", typ, sh, acc, i, pk[i], want[i])
						}
					}
				}
			}
		}
	})
	c := make([]float32, 4)
	if err := SgemmHalf(F32, 2, 2, 2, make([]float32, 4), 2, make([]byte, 8), 2, c, 2, false); err == nil {
		t.Error("SgemmHalf accepted F32")
	}
	if err := SgemmHalf(BF16, 2, 2, 2, make([]float32, 4), 2, make([]byte, 7), 2, c, 2, false); err == nil {
		t.Error("SgemmHalf accepted a short B")
	}
	if err := SgemmHalf(BF16, 2, 2, 2, make([]float32, 3), 2, make([]byte, 8), 2, c, 2, false); err == nil {
		t.Error("SgemmHalf accepted a short A")
	}
	if _, err := PackHalf(BF16, 2, 2, make([]byte, 7), 2); err == nil {
		t.Error("PackHalf accepted a short B")
	}
	if _, err := PackHalf(F32, 2, 2, make([]byte, 8), 2); err == nil {
		t.Error("PackHalf accepted F32")
	}
	pb, err := PackHalf(BF16, 2, 2, make([]byte, 8), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := SgemmPackedHalf(2, make([]float32, 3), 2, pb, c, 2, false); err == nil {
		t.Error("SgemmPackedHalf accepted a short A")
	}
	if HasAsm() {
		pb, err := PackHalf(BF16, 16, 8, make([]byte, 256), 8)
		if err != nil {
			t.Fatal(err)
		}
		SetPureGo(true)
		err = SgemmPackedHalf(2, make([]float32, 16), 8, pb, make([]float32, 32), 16, false)
		SetPureGo(false)
		if err == nil {
			t.Error("SgemmPackedHalf used assembly panels with the assembly off")
		}
	}
}

// TestSgemmPackedF32 checks that a float32 B packed once (PackedHalf.SetF32, reused across
// shapes so its memory is recycled) multiplies to Sgemm's bits, on both paths.
func TestSgemmPackedF32(t *testing.T) {
	shapes := []sgemmShape{{1, 1, 1, 1, 1, 1}, {7, 17, 33, 40, 35, 20}, {13, 530, 300, 300, 301, 533}, {150, 40, 257, 260, 257, 41}, {12, 256, 512, 512, 512, 256}}
	forEachImpl(t, func(t *testing.T) {
		var p PackedHalf
		for si, sh := range shapes {
			r := newRNG(uint64(si) + 300)
			a := randFloats(r, (sh.m-1)*sh.lda+sh.k, true, 1)
			b := randFloats(r, (sh.n-1)*sh.ldb+sh.k, si%2 == 0, 0.5)
			c0 := randFloats(r, (sh.m-1)*sh.ldc+sh.n, false, 1)
			if err := p.SetF32(sh.n, sh.k, b, sh.ldb); err != nil {
				t.Fatal(err)
			}
			for _, acc := range []bool{false, true} {
				want := append([]float32(nil), c0...)
				if err := Sgemm(sh.m, sh.n, sh.k, a, sh.lda, b, sh.ldb, want, sh.ldc, acc); err != nil {
					t.Fatal(err)
				}
				got := append([]float32(nil), c0...)
				if err := SgemmPackedHalf(sh.m, a, sh.lda, &p, got, sh.ldc, acc); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%+v acc=%v: C[%d] = %g, Sgemm %g", sh, acc, i, got[i], want[i])
					}
				}
			}
		}
	})
	var p PackedHalf
	if err := p.SetF32(2, 2, make([]float32, 3), 2); err == nil {
		t.Error("SetF32 accepted a short B")
	}
}
