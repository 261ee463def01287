package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// exactFMA32 is the reference single-rounding float32 FMA: a·b + c computed exactly with
// math/big and rounded once to the nearest float32 (ties to even, subnormals included;
// big.Float follows IEEE for the sign of zero sums and of underflow). Finite inputs only.
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(400).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// refLanes8 is the order as the brief and tinyBLAS state it, written independently of the
// kernels: per-lane exact single-rounding FMA, then w = v[l+4] + v[l], (w0+w2) + (w1+w3).
func refLanes8(a, b []float32) float32 {
	var v [8]float32
	for s := 0; s < len(a); s += 8 {
		for l := range 8 {
			v[l] = exactFMA32(a[s+l], b[s+l], v[l])
		}
	}
	var w [4]float32
	for l := range 4 {
		w[l] = v[l+4] + v[l]
	}
	x0 := w[0] + w[2]
	x1 := w[1] + w[3]
	return x0 + x1
}

// fmaCase returns a (16-element) pair whose DotLanes8 is exactly fma(x, y, c): lane 0 takes
// c·1 (exact) and then fma(x, y, c); every other lane stays +0 and adds exactly.
func fmaCase(x, y, c float32) (a, b []float32) {
	a, b = make([]float32, 16), make([]float32, 16)
	a[0], b[0] = c, 1
	a[8], b[8] = x, y
	return a, b
}

// randF32 draws float32 values over many binades (including subnormals, zeros and the
// largest finite values) to stress lanes8FMA's rounding logic.
func randF32(r *rand.Rand) float32 {
	switch r.IntN(8) {
	case 0:
		return math.Float32frombits(r.Uint32() & 0x7f7fffff) // any finite magnitude
	case 1:
		return float32(r.NormFloat64()) * 1e-40 // subnormal range
	case 2:
		return 0
	case 3:
		return float32(math.Ldexp(1+float64(r.IntN(4))/float64(1<<23), r.IntN(60)-30)) // few-bit values
	}
	return float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
}

// TestFMA32: lanes8FMA against the math/big reference on random and crafted operands, the
// double-rounding cases that the naive float32(math.FMA(...)) gets wrong included, and the
// assembly's VFMADD231PS (through DotLanes8) against both.
func TestFMA32(t *testing.T) {
	type tc struct{ a, b, c float32 }
	crafted := []tc{
		{1 + 0x1p-23, 2 - 0x1p-22, 0x1p25 + 4},       // naive: 2^25+8, exact: 2^25+4
		{-(1 + 0x1p-23), 2 - 0x1p-22, -(0x1p25 + 4)}, // the same, negative
		{1 + 0x1p-23, -(2 - 0x1p-22), 0x1p25 + 8},    // just above a midpoint after negation
		{1 + 0x1p-23, 1 + 0x1p-23, 0},                // product rounding alone
		{0x1p-149, 0x1p-149, 0},                      // underflow to zero
		{0x1p-75, 0x1p-75, 0x1p-149},                 // subnormal accumulator
		{math.MaxFloat32, 2, -math.MaxFloat32},       // intermediate beyond float32 range
		{math.MaxFloat32, 1 + 0x1p-23, 0},            // overflow to +Inf
		{3, 0x1p-150 * 3, 0},                         // subnormal tie region
		{-0.0, 5, 0}, {-0.0, 5, float32(math.Copysign(0, -1))}, {1, 1, -1},
	}
	// More double-rounding cases: (2^23+x)(2^24−2x) = 2^47 − 2x², just below a half-ulp of c.
	for x := 1; x <= 300; x += 7 {
		pa := float32(math.Ldexp(float64(1<<23+x), -23))
		pb := float32(math.Ldexp(float64(1<<24-2*x), -23))
		for _, c := range []float32{0x1p25 + 4, 0x1p25 + 12, -(0x1p25 + 4)} {
			crafted = append(crafted, tc{pa, pb, c}, tc{-pa, pb, c})
		}
	}
	impls := []bool{true}
	if HasAsm() {
		impls = append(impls, false)
	}
	naiveWrong := 0
	r := newRNG(81)
	cases := append([]tc(nil), crafted...)
	for range 20000 {
		cases = append(cases, tc{randF32(r), randF32(r), randF32(r)})
	}
	for i, cs := range cases {
		want := exactFMA32(cs.a, cs.b, cs.c)
		got := lanes8FMA(cs.a, cs.b, cs.c)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("lanes8FMA(%g, %g, %g) = %g (%#08x), exact %g (%#08x)", cs.a, cs.b, cs.c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if i < len(crafted) && float32(math.FMA(float64(cs.a), float64(cs.b), float64(cs.c))) != want {
			naiveWrong++
		}
		// Both paths of DotLanes8 (the Go one takes the fast path unless the float64 sum may
		// be a float32 midpoint). The hsum adds +0 lanes to lane 0: x + (+0) = x, except
		// that −0 becomes +0.
		a, b := fmaCase(cs.a, cs.b, cs.c)
		wantDot := want + 0
		for _, pure := range impls {
			if g := withImpl(pure, func() float32 { return DotLanes8(a, b) }); math.Float32bits(g) != math.Float32bits(wantDot) {
				t.Fatalf("pure=%v: fma(%g, %g, %g) through DotLanes8 = %g (%#08x), exact %g", pure, cs.a, cs.b, cs.c, g, math.Float32bits(g), wantDot)
			}
		}
	}
	if naiveWrong == 0 {
		t.Fatal("no crafted case separates the naive double rounding from a true FMA")
	}
	t.Logf("%d cases exact; the naive float32(math.FMA) is wrong on %d crafted ones", len(cases), naiveWrong)
}

// lanes8Data returns n Gaussian or Student-t (3 degrees of freedom) values.
func lanes8Data(r *rand.Rand, n int, heavy bool) []float32 { return randFloats(r, n, heavy, 1) }

// lanes8Tol is the documented bound |DotLanes8 − exact| ≤ (k/8 + 3)·u·Σ|a_i·b_i| (k/8 FMAs
// per lane, then three additions), with one extra u·S of slack for the bound's O(u²) terms.
func lanes8Tol(k int) float64 { return float64(k/8+4) * u32 }

// TestDotLanes8: both paths bit-identical to the independent reference order for lengths
// 0..1024 (every multiple of 8 up to 256, then a sample), Gaussian and Student-t data; and
// within lanes8Tol of a float64 reference.
func TestDotLanes8(t *testing.T) {
	lengths := []int{}
	for n := 0; n <= 256; n += 8 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 512, 1000, 1024, 4096)
	forEachImpl(t, func(t *testing.T) {
		var worst float64
		for _, n := range lengths {
			for _, heavy := range []bool{false, true} {
				r := newRNG(uint64(1000 + n))
				a, b := lanes8Data(r, n, heavy), lanes8Data(r, n+3, heavy)
				got := DotLanes8(a, b)
				if want := refLanes8(a, b[:n]); math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("n=%d heavy=%v: DotLanes8 = %g (%#08x), reference order %g (%#08x)", n, heavy, got, math.Float32bits(got), want, math.Float32bits(want))
				}
				var ref, s float64
				for i := range n {
					p := float64(a[i]) * float64(b[i])
					ref += p
					s += math.Abs(p)
				}
				if e := math.Abs(float64(got) - ref); e > lanes8Tol(n)*s {
					t.Fatalf("n=%d heavy=%v: |%g − %g| = %g > %g", n, heavy, got, ref, e, lanes8Tol(n)*s)
				} else if s > 0 {
					worst = max(worst, e/s)
				}
			}
		}
		t.Logf("worst |err|/S = %.3g (bound (k/8+4)·2⁻²⁴)", worst)
	})
}

// TestDotLanes8DiffersFromDotF32 guards against testing a vacuous order: the tinyBLAS
// order must not coincide with DotF32's on generic data.
func TestDotLanes8DiffersFromDotF32(t *testing.T) {
	r := newRNG(3)
	differ := 0
	for range 50 {
		a, b := lanes8Data(r, 256, true), lanes8Data(r, 256, true)
		if DotLanes8(a, b) != DotF32(a, b) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("DotLanes8 equals DotF32 on 50 random rows: the order is not being exercised")
	}
}

// TestDotLanes8Specials: non-finite values propagate identically on both paths, and the
// crafted double-rounding case is exact inside a longer dot.
func TestDotLanes8Specials(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name string
		a, b []float32
		want float32
	}{
		{"inf", []float32{inf, 1, 2, 3, 4, 5, 6, 7}, []float32{1, 1, 1, 1, 1, 1, 1, 1}, inf},
		{"inf−inf", []float32{inf, 0, 0, 0, -inf, 0, 0, 0}, []float32{1, 0, 0, 0, 1, 0, 0, 0}, nan},
		{"nan", []float32{1, nan, 0, 0, 0, 0, 0, 0}, []float32{1, 1, 1, 1, 1, 1, 1, 1}, nan},
		{"0·inf", []float32{0, 0, 0, 0, 0, 0, 0, 0}, []float32{inf, 0, 0, 0, 0, 0, 0, 0}, nan},
		{"overflow", []float32{3e38, 3e38, 0, 0, 0, 0, 0, 0}, []float32{3e38, -3e38, 0, 0, 0, 0, 0, 0}, nan},
		{"overflow+", []float32{3e38, 0, 0, 0, 0, 0, 0, 0}, []float32{3e38, 0, 0, 0, 0, 0, 0, 0}, inf},
	} {
		g := withImpl(true, func() float32 { return DotLanes8(tc.a, tc.b) })
		if !sameFloat(g, tc.want) {
			t.Errorf("%s: Go %g, want %g", tc.name, g, tc.want)
		}
		if HasAsm() {
			if a := withImpl(false, func() float32 { return DotLanes8(tc.a, tc.b) }); !sameFloat(a, tc.want) {
				t.Errorf("%s: asm %g, want %g", tc.name, a, tc.want)
			}
		}
	}
	// The double-rounding case as the 2nd step of lane 3 in a 64-element dot.
	r := newRNG(4)
	a, b := lanes8Data(r, 64, false), lanes8Data(r, 64, false)
	a[3], b[3] = 0x1p25+4, 1
	a[11], b[11] = 1+0x1p-23, 2-0x1p-22
	want := refLanes8(a, b)
	forEachImpl(t, func(t *testing.T) {
		if g := DotLanes8(a, b); math.Float32bits(g) != math.Float32bits(want) {
			t.Fatalf("crafted dot = %g, reference %g", g, want)
		}
	})
}

// sameFloat: equal bits, or both NaN.
func sameFloat(x, y float32) bool {
	return math.Float32bits(x) == math.Float32bits(y) || (x != x && y != y)
}

func TestDotLanes8Panics(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		expectLengthPanic(t, "DotLanes8 len 12", func() { DotLanes8(make([]float32, 12), make([]float32, 16)) })
		expectLengthPanic(t, "DotLanes8 len 7", func() { DotLanes8(make([]float32, 7), make([]float32, 7)) })
		expectLengthPanic(t, "DotLanes8 short b", func() { DotLanes8(make([]float32, 16), make([]float32, 15)) })
		if g := DotLanes8(nil, nil); math.Float32bits(g) != 0 {
			t.Fatalf("empty dot = %g", g)
		}
	})
}

type lanes8Shape struct{ m, n, k, lda, ldb, ldc int }

func (s lanes8Shape) String() string {
	return fmt.Sprintf("m=%d n=%d k=%d lda=%d ldb=%d ldc=%d", s.m, s.n, s.k, s.lda, s.ldb, s.ldc)
}

// lanes8B holds a B matrix for one of the three entry points: the float32 values the
// kernels compute with (f32, exactly the widened 16-bit values for F16/BF16) and the 16-bit
// encoding (raw).
type lanes8B struct {
	kind int
	f32  []float32
	raw  []byte
}

// newLanes8B encodes vals as kind (rounding to fp16/bf16 for the 16-bit kinds).
func newLanes8B(kind int, vals []float32) lanes8B {
	b := lanes8B{kind: kind, f32: vals}
	if kind == l8F32 {
		return b
	}
	b.raw = make([]byte, 2*len(vals))
	b.f32 = make([]float32, len(vals))
	for i, v := range vals {
		var h uint16
		if kind == l8F16 {
			h = floatToHalf(v)
			b.f32[i] = halfToFloat(h)
		} else {
			h = uint16(math.Float32bits(v) >> 16) // truncation: any bf16 will do
			b.f32[i] = bf16ToFloat(h)
		}
		binary.LittleEndian.PutUint16(b.raw[2*i:], h)
	}
	return b
}

// gemm runs the entry point of b's kind.
func (b lanes8B) gemm(m, n, k int, a []float32, lda, ldb int, c []float32, ldc int) error {
	switch b.kind {
	case l8F16:
		return SgemmLanes8F16(m, n, k, a, lda, b.raw, ldb, c, ldc)
	case l8BF16:
		return SgemmLanes8BF16(m, n, k, a, lda, b.raw, ldb, c, ldc)
	}
	return SgemmLanes8(m, n, k, a, lda, b.f32, ldb, c, ldc)
}

var lanes8Kinds = []struct {
	name string
	kind int
}{{"f32", l8F32}, {"f16", l8F16}, {"bf16", l8BF16}}

// runLanes8 fills A, B (Gaussian or Student-t; B encoded as kind) and C (a sentinel), runs
// the kind's entry point and checks every element bit for bit against DotLanes8 of A_i and
// the (widened) B_j in the same implementation, the padding of C untouched; returns the
// worst |err|/S against a float64 reference (checked against lanes8Tol when ref is set).
func runLanes8(t *testing.T, kind int, sh lanes8Shape, seed uint64, heavy, ref bool) float64 {
	t.Helper()
	r := newRNG(seed)
	a := lanes8Data(r, (sh.m-1)*sh.lda+sh.k, heavy)
	b := newLanes8B(kind, lanes8Data(r, (sh.n-1)*sh.ldb+sh.k, heavy))
	c := make([]float32, (sh.m-1)*sh.ldc+sh.n+5)
	for i := range c {
		c[i] = -7
	}
	if err := b.gemm(sh.m, sh.n, sh.k, a, sh.lda, sh.ldb, c, sh.ldc); err != nil {
		t.Fatalf("%v kind %d: %v", sh, kind, err)
	}
	var worst float64
	for idx := range c {
		i, j := idx/sh.ldc, idx%sh.ldc
		if i >= sh.m || j >= sh.n {
			if c[idx] != -7 {
				t.Fatalf("%v kind %d: C[%d] outside the matrix changed to %g", sh, kind, idx, c[idx])
			}
			continue
		}
		ai, bj := a[i*sh.lda:][:sh.k], b.f32[j*sh.ldb:][:sh.k]
		if want := DotLanes8(ai, bj); math.Float32bits(c[idx]) != math.Float32bits(want) {
			t.Fatalf("%v kind %d heavy=%v: C[%d][%d] = %g (%#08x), DotLanes8 %g (%#08x)", sh, kind, heavy, i, j, c[idx], math.Float32bits(c[idx]), want, math.Float32bits(want))
		}
		if ref {
			var rv, s float64
			for p := range sh.k {
				v := float64(ai[p]) * float64(bj[p])
				rv += v
				s += math.Abs(v)
			}
			e := math.Abs(float64(c[idx]) - rv)
			if e > lanes8Tol(sh.k)*s {
				t.Fatalf("%v kind %d: C[%d][%d] = %g, float64 reference %g (|err| %g > %g)", sh, kind, i, j, c[idx], rv, e, lanes8Tol(sh.k)*s)
			}
			if s > 0 {
				worst = max(worst, e/s)
			}
		}
	}
	return worst
}

// TestSgemmLanes8Shapes: every m in 1..70 × n in 1..13 (all edge tiles of the 3×4 kernel)
// for several k, then larger k on a sample, padded strides, both data kinds; each element
// bit-identical to DotLanes8 and within lanes8Tol of float64.
func TestSgemmLanes8Shapes(t *testing.T) {
	ks := []int{8, 24, 136}
	bigK := []int{256, 512, 1000, 1024}
	if testing.Short() {
		ks, bigK = []int{8, 24}, []int{1024}
	}
	forEachImpl(t, func(t *testing.T) {
		var worst float64
		seed := uint64(0)
		for _, k := range ks {
			for m := 1; m <= 70; m++ {
				for n := 1; n <= 13; n++ {
					seed++
					pad := int(seed % 3)
					sh := lanes8Shape{m, n, k, k + 8*pad, k + pad, n + pad}
					kind := lanes8Kinds[seed%3].kind
					worst = max(worst, runLanes8(t, kind, sh, seed, seed%2 == 0, m <= 7 || n == 13))
				}
			}
		}
		for _, k := range bigK {
			for _, mn := range [][2]int{{1, 1}, {3, 4}, {7, 13}, {70, 13}, {64, 9}, {5, 70}} {
				seed++
				sh := lanes8Shape{mn[0], mn[1], k, k + 3, k, mn[1] + 1}
				for _, kd := range lanes8Kinds {
					worst = max(worst, runLanes8(t, kd.kind, sh, seed, seed%2 == 0, true))
				}
			}
		}
		t.Logf("worst |err|/S = %.3g (bound (k/8+4)·2⁻²⁴)", worst)
	})
}

// TestSgemmLanes8Orders: shapes that take the assembly path's column order (A blocked),
// with partial row triples and column quads at block ends, and row-order shapes with several
// B blocks; every element bit-identical to DotLanes8.
func TestSgemmLanes8Orders(t *testing.T) {
	for _, tc := range []struct {
		sh     lanes8Shape
		column bool
	}{
		{lanes8Shape{70, 13, 8192, 8192, 8192, 13}, true},
		{lanes8Shape{50, 21, 4096, 4100, 4096, 23}, true},
		{lanes8Shape{100, 66, 1024, 1024, 1032, 66}, true},
		{lanes8Shape{10, 70, 4096, 4096, 4104, 71}, false},
		{lanes8Shape{20, 19, 8192, 8192, 8192, 19}, true},
		{lanes8Shape{19, 20, 8192, 8192, 8192, 20}, false},
	} {
		if _, _, col := lanes8Blocking(tc.sh.m, tc.sh.n, tc.sh.k); col != tc.column {
			t.Fatalf("%v: column order %v, the test expects %v", tc.sh, col, tc.column)
		}
	}
	forEachImpl(t, func(t *testing.T) {
		for i, tc := range []lanes8Shape{
			{70, 13, 8192, 8192, 8192, 13}, {50, 21, 4096, 4100, 4096, 23}, {100, 66, 1024, 1024, 1032, 66},
			{10, 70, 4096, 4096, 4104, 71}, {20, 19, 8192, 8192, 8192, 19}, {19, 20, 8192, 8192, 8192, 20},
		} {
			for _, kd := range lanes8Kinds {
				runLanes8(t, kd.kind, tc, uint64(700+i), i%2 == 0, false)
			}
		}
	})
}

// TestSgemmLanes8AsmMatchesGo: the two implementations give identical C for the same inputs
// (shapes with every tile edge, k up to 1024, Gaussian and Student-t, all three B types).
func TestSgemmLanes8AsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build; nothing to compare")
	}
	shapes := []lanes8Shape{
		{1, 1, 8, 8, 8, 1}, {2, 3, 16, 16, 16, 3}, {3, 4, 1024, 1024, 1024, 4}, {4, 5, 40, 41, 40, 5},
		{70, 13, 520, 520, 523, 14}, {65, 64, 128, 128, 128, 64}, {33, 31, 264, 270, 264, 40},
	}
	for si, sh := range shapes {
		for _, kd := range lanes8Kinds {
			heavy := si%2 == 0
			r := newRNG(uint64(500 + si))
			a := lanes8Data(r, (sh.m-1)*sh.lda+sh.k, heavy)
			b := newLanes8B(kd.kind, lanes8Data(r, (sh.n-1)*sh.ldb+sh.k, heavy))
			lanes8Both(t, b, sh, a)
		}
	}
}

// lanes8Both runs b's entry point on both paths and fails unless they agree (equal bits, or
// both NaN); it returns the Go result.
func lanes8Both(t *testing.T, b lanes8B, sh lanes8Shape, a []float32) []float32 {
	t.Helper()
	run := func(pure bool) []float32 {
		c := make([]float32, (sh.m-1)*sh.ldc+sh.n)
		if err := withImpl(pure, func() error { return b.gemm(sh.m, sh.n, sh.k, a, sh.lda, sh.ldb, c, sh.ldc) }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cg := run(true)
	if HasAsm() {
		ca := run(false)
		for i := range cg {
			if !sameFloat(cg[i], ca[i]) {
				t.Fatalf("%v kind %d: element %d: Go %g, asm %g", sh, b.kind, i, cg[i], ca[i])
			}
		}
	}
	return cg
}

// TestSgemmLanes8HalfSpecials: fp16 and bf16 B rows made of arbitrary bit patterns (Inf,
// NaN, subnormals, ±0 included) give on both paths what SgemmLanes8 gives on the widened
// values.
func TestSgemmLanes8HalfSpecials(t *testing.T) {
	sh := lanes8Shape{7, 9, 64, 64, 72, 9}
	r := newRNG(77)
	a := lanes8Data(r, (sh.m-1)*sh.lda+sh.k, true)
	for _, kd := range lanes8Kinds[1:] {
		nb := (sh.n-1)*sh.ldb + sh.k
		b := lanes8B{kind: kd.kind, raw: make([]byte, 2*nb), f32: make([]float32, nb)}
		for i := range nb {
			h := uint16(r.Uint32())
			if i%5 != 0 { // mostly moderate values, so that not every sum is Inf/NaN
				h = h&0x83ff | 0x3800
				if kd.kind == l8BF16 {
					h = h&0x807f | 0x3f00
				}
			}
			binary.LittleEndian.PutUint16(b.raw[2*i:], h)
			if kd.kind == l8F16 {
				b.f32[i] = halfToFloat(h)
			} else {
				b.f32[i] = bf16ToFloat(h)
			}
		}
		got := lanes8Both(t, b, sh, a)
		want := lanes8Both(t, lanes8B{kind: l8F32, f32: b.f32}, sh, a)
		finite := 0
		for i := range got {
			if !sameFloat(got[i], want[i]) {
				t.Fatalf("%s: element %d: %g, float32 path %g", kd.name, i, got[i], want[i])
			}
			if !math.IsNaN(float64(got[i])) && !math.IsInf(float64(got[i]), 0) {
				finite++
			}
		}
		t.Logf("%s: %d of %d results finite", kd.name, finite, len(got))
	}
}

// TestSgemmLanes8Blocks: the caller's way to parallelise — disjoint sub-blocks via offset
// slices, computed concurrently — reproduces the whole product bit for bit, and A/B roles
// swapped give exactly the transpose. Also: the large-k path (B blocking) at k = 4096.
func TestSgemmLanes8Blocks(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, sh := range []struct{ m, n, k int }{{64, 40, 264}, {10, 70, 4096}} {
			m, n, k := sh.m, sh.n, sh.k
			r := newRNG(uint64(m*n + k))
			a, b := lanes8Data(r, m*k, true), lanes8Data(r, n*k, false)
			whole := make([]float32, m*n)
			if err := SgemmLanes8(m, n, k, a, k, b, k, whole, n); err != nil {
				t.Fatal(err)
			}
			parts := make([]float32, m*n)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for _, ir := range [][2]int{{0, m / 3}, {m / 3, m - 5}, {m - 5, m}} {
				for _, jr := range [][2]int{{0, 7}, {7, n}} {
					wg.Go(func() {
						i0, j0 := ir[0], jr[0]
						errs <- SgemmLanes8(ir[1]-i0, jr[1]-j0, k, a[i0*k:], k, b[j0*k:], k, parts[i0*n+j0:], n)
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			tr := make([]float32, n*m)
			if err := SgemmLanes8(n, m, k, b, k, a, k, tr, m); err != nil {
				t.Fatal(err)
			}
			for i := range m {
				for j := range n {
					w := math.Float32bits(whole[i*n+j])
					if math.Float32bits(parts[i*n+j]) != w || math.Float32bits(tr[j*m+i]) != w {
						t.Fatalf("%v: C[%d][%d]: whole %g, blocks %g, transposed %g", sh, i, j, whole[i*n+j], parts[i*n+j], tr[j*m+i])
					}
					if i%9 == 0 && j%5 == 0 {
						if d := DotLanes8(a[i*k:][:k], b[j*k:][:k]); math.Float32bits(d) != w {
							t.Fatalf("%v: C[%d][%d] = %g, DotLanes8 %g", sh, i, j, whole[i*n+j], d)
						}
					}
				}
			}
		}
	})
}

func TestSgemmLanes8Errors(t *testing.T) {
	a := make([]float32, 64)
	c := make([]float32, 16)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"negative m", SgemmLanes8(-1, 2, 8, a, 8, a, 8, c, 2)},
		{"negative k", SgemmLanes8(1, 2, -8, a, 8, a, 8, c, 2)},
		{"k not a multiple of 8", SgemmLanes8(2, 2, 12, a, 12, a, 12, c, 2)},
		{"short lda", SgemmLanes8(2, 2, 16, a, 15, a, 16, c, 2)},
		{"short ldb", SgemmLanes8(2, 2, 16, a, 16, a, 8, c, 2)},
		{"short ldc", SgemmLanes8(2, 3, 8, a, 8, a, 8, c, 2)},
		{"short A", SgemmLanes8(5, 2, 16, a, 16, a, 16, c, 2)},
		{"short B", SgemmLanes8(2, 5, 16, a, 16, a, 16, c, 5)},
		{"short C", SgemmLanes8(4, 4, 8, a, 8, a, 8, c[:15], 4)},
		{"overflowing extent", SgemmLanes8(1<<40, 2, 1<<30, a, 1<<40, a, 1<<30, c, 2)},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	h := make([]byte, 2*64)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"F16 short B", SgemmLanes8F16(2, 2, 32, a, 32, h[:127], 32, c, 2)},
		{"BF16 short B", SgemmLanes8BF16(2, 3, 32, a, 32, h, 32, c, 3)},
		{"F16 k not a multiple of 8", SgemmLanes8F16(1, 1, 4, a, 4, h, 4, c, 1)},
		{"BF16 short ldb", SgemmLanes8BF16(1, 2, 16, a, 16, h, 8, c, 2)},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		} else if !strings.Contains(tc.err.Error(), "SgemmLanes8") {
			t.Errorf("%s: error %q does not name the kernel", tc.name, tc.err)
		}
	}
	if err := SgemmLanes8F16(2, 2, 32, a, 32, h, 32, c, 2); err != nil {
		t.Errorf("F16 exact-size B: %v", err)
	}
	for i := range c {
		c[i] = 7
	}
	if err := SgemmLanes8(3, 4, 0, nil, 1, nil, 1, c, 5); err != nil || c[0] != 0 || c[3] != 0 || c[4] != 7 || c[13] != 0 || c[14] != 7 {
		t.Fatalf("k=0: %v, C = %v", err, c)
	}
	if err := SgemmLanes8(0, 4, 8, nil, 8, a, 8, nil, 4); err != nil {
		t.Fatalf("m=0: %v", err)
	}
}

// TestSgemmLanes8NoAllocs: the entry points do not allocate (after warm-up), on both paths.
func TestSgemmLanes8NoAllocs(t *testing.T) {
	const m, n, k = 10, 9, 64
	r := newRNG(6)
	a := lanes8Data(r, m*k, false)
	bf := newLanes8B(l8F32, lanes8Data(r, n*k, false))
	bh := newLanes8B(l8F16, lanes8Data(r, n*k, false))
	bb := newLanes8B(l8BF16, lanes8Data(r, n*k, false))
	c := make([]float32, m*n)
	forEachImpl(t, func(t *testing.T) {
		if allocs := testing.AllocsPerRun(20, func() {
			_ = bf.gemm(m, n, k, a, k, k, c, n)
			_ = bh.gemm(m, n, k, a, k, k, c, n)
			_ = bb.gemm(m, n, k, a, k, k, c, n)
			benchSink += DotLanes8(a[:k], bf.f32[:k])
		}); allocs != 0 {
			t.Errorf("%.1f allocations per call", allocs)
		}
	})
}
