package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

var repackTypes = []Type{Q4_K, Q4_0, IQ4_NL}

// repackDot returns the exported single-row repack kernel for t.
func repackDot(t Type) func(n int, w, x []byte) float32 {
	switch t {
	case Q4_K:
		return DotQ4_KQ8KRepack
	case Q4_0:
		return DotQ4_0Q8_0Repack
	}
	return DotIQ4_NLQ8_0Repack
}

// repackActType returns the activation type of a repack weight type.
func repackActType(t Type) Type {
	if t == Q4_K {
		return Q8_K
	}
	return Q8_0
}

// repackWeights returns nb random blocks of t (random quant and K-scale bytes, random finite
// fp16 scales around scale, Student-t distributed when heavy).
func repackWeights(r *rand.Rand, t Type, nb int, scale float64, heavy bool) []byte {
	if t == IQ4_NL {
		return randWeights(r, Q4_0, nb, scale, heavy) // same block layout
	}
	return randWeights(r, t, nb, scale, heavy)
}

// repackExactRef returns the float64 dot product of a repack weight row and an activation row
// (both decoded exactly) and S = Σ |w_i·x_i| with Q4_K's scale and min parts counted
// separately (the scale of the error bounds).
func repackExactRef(t Type, w, x []byte, n int) (ref, s float64) {
	if t != IQ4_NL {
		return refDot(t, w, repackActType(t), x, n)
	}
	xe := decodeRow(Q8_0, x, n)
	for b := 0; b < n/32; b++ {
		blk := w[b*BlockBytesIQ4_NL:]
		d := float64(h16(blk))
		for j := 0; j < 32; j++ {
			v := blk[2+j%16]
			if j >= 16 {
				v >>= 4
			}
			wv := d * float64(repackLUTIQ4NL[v&15])
			xv := xe[32*b+j].exact()
			ref += wv * xv
			s += math.Abs(wv * xv)
		}
	}
	return ref, s
}

// steps is the length of a row's FMA chain: one per block (Q4_0, IQ4_NL), one per
// super-block (Q4_K gemv) or one per 64-element chunk (Q4_K gemm).
func repackSteps(t Type, n int, gemm bool) int {
	if t != Q4_K {
		return n / 32
	}
	if gemm {
		return n / 64
	}
	return n / 256
}

// TestRepackFMA32 checks the pure-Go single-rounding FMA against exact big.Float arithmetic
// rounded once to float32, on random operands over a wide exponent range, on the
// double-rounding trap (a·b on a float32 midpoint, c tiny), and near subnormals.
func TestRepackFMA32(t *testing.T) {
	exact := func(a, b, c float32) float32 {
		x := new(big.Float).SetPrec(400).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(400).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetPrec(400).SetFloat64(float64(c)))
		f, _ := x.Float32()
		return f
	}
	// a·b = 1.5 + 2⁻²³ + 2⁻²⁴ lies on the midpoint between an odd and an even float32; with
	// c = −2⁻⁶⁰ the exact sum lies just below it. float64 rounding lands on the midpoint and
	// a second rounding would go up; a single rounding goes down.
	a, b, c := float32(1+1.0/(1<<23)), float32(1.5), float32(-math.Ldexp(1, -60))
	if naive := float32(math.FMA(float64(a), float64(b), float64(c))); naive == exact(a, b, c) {
		t.Fatal("the double-rounding trap does not trap the naive formulation")
	}
	if got, want := lanes8FMA(a, b, c), exact(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
		t.Fatalf("trap: lanes8FMA = %g (%#x), exact %g (%#x)", got, math.Float32bits(got), want, math.Float32bits(want))
	}
	r := newRNG(40)
	randF := func(emin, emax int) float32 {
		m := 1 + r.Float64()
		if r.IntN(2) == 0 {
			m = -m
		}
		return float32(math.Ldexp(m, emin+r.IntN(emax-emin+1)))
	}
	var naiveWrong int
	for i := 0; i < 200000; i++ {
		var a, b, c float32
		switch i % 4 {
		case 0: // kernel-like: integer × scale + accumulator
			a, b, c = float32(r.IntN(1<<25)-(1<<24)), randF(-30, -5), randF(-20, 20)
		case 1: // wide exponents, c far from a·b
			a, b, c = randF(-60, 60), randF(-60, 60), randF(-120, 120)
		case 2: // near-cancellation
			a, b = randF(-10, 10), randF(-10, 10)
			c = -float32(float64(a)*float64(b)) * float32(1+(r.Float64()-0.5)*1e-6)
		default: // subnormal results
			a, b, c = randF(-80, -60), randF(-80, -60), randF(-149, -126)
		}
		got, want := lanes8FMA(a, b, c), exact(a, b, c)
		if math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
			t.Fatalf("lanes8FMA(%g, %g, %g) = %g (%#x), exact %g (%#x)", a, b, c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if float32(math.FMA(float64(a), float64(b), float64(c))) != want {
			naiveWrong++
		}
	}
	t.Logf("200000 random cases exact; the naive float64 formulation was wrong in %d", naiveWrong)
}

// repackCase is one random weight matrix and activation rows for the repack tests.
type repackCase struct {
	t        Type
	n, rows  int
	rowBytes int
	w        []byte
	xq       []byte // nx activation rows, xRow bytes apart
	xRow, nx int
}

func newRepackCase(r *rand.Rand, t Type, n, rows, nx int, heavy, raw bool) repackCase {
	bs := 32
	if t == Q4_K {
		bs = 256
	}
	at := repackActType(t)
	c := repackCase{t: t, n: n, rows: rows, nx: nx}
	c.rowBytes = n / bs * BlockBytes(Q4_0)
	if t == Q4_K {
		c.rowBytes = n / bs * BlockBytesQ4_K
	}
	c.w = repackWeights(r, t, rows*n/bs, 0.02, heavy)
	c.xRow = n / BlockSize(at) * BlockBytes(at)
	for k := 0; k < nx; k++ {
		if raw {
			c.xq = append(c.xq, repackRawActs(r, at, n/BlockSize(at))...)
		} else {
			c.xq = append(c.xq, quantizeActs(at, randFloats(r, n, heavy, 1))...)
		}
	}
	return c
}

// repackRawActs is rawActs without the Q8_0 range restriction: every quant byte (−128 too) and,
// for Q8_K, bsums over the whole int16 range (so the pair sums wrap).
func repackRawActs(r *rand.Rand, at Type, nb int) []byte {
	bs := BlockBytes(at)
	x := make([]byte, nb*bs)
	for i := range x {
		x[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		blk := x[b*bs:]
		if at == Q8_0 {
			binary.LittleEndian.PutUint16(blk, randHalf(r, 0.05, false))
		} else {
			binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(r.NormFloat64()*0.05)))
		}
	}
	return x
}

func (c repackCase) row(r int) []byte { return c.w[r*c.rowBytes : (r+1)*c.rowBytes] }
func (c repackCase) act(k int) []byte { return c.xq[k*c.xRow : (k+1)*c.xRow] }

// goGemm is the pure-Go gemm-order value of weight row r and activation row k.
func (c repackCase) goGemm(r, k int) float32 {
	nb := c.n / 32
	switch c.t {
	case Q4_K:
		acc, accm := dotQ4KRepackGo(c.n/256, c.row(r), c.act(k), true, 0, 0)
		return acc - accm
	case Q4_0:
		return dotQ4RepackGo(&repackLUTQ4_0, nb, c.row(r), c.act(k), true, 0)
	}
	return dotQ4RepackGo(&repackLUTIQ4NL, nb, c.row(r), c.act(k), true, 0)
}

func repackSame(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// runRepackAll computes every output of a case with the current implementation: the
// single-row dots, MatVecRepack over [0, rows) for every activation row, and MatMulRepack.
func runRepackAll(t *testing.T, c repackCase) (dots, mv, mm []float32) {
	t.Helper()
	dot := repackDot(c.t)
	dots = make([]float32, c.nx*c.rows)
	mv = make([]float32, c.nx*c.rows)
	for k := 0; k < c.nx; k++ {
		for r := 0; r < c.rows; r++ {
			dots[k*c.rows+r] = dot(c.n, c.row(r), c.act(k))
		}
		if err := MatVecRepack(c.t, mv[k*c.rows:(k+1)*c.rows], c.w, c.rowBytes, c.act(k), 0, c.rows); err != nil {
			t.Fatal(err)
		}
	}
	mm = make([]float32, c.nx*c.rows)
	if err := MatMulRepack(c.t, mm, c.rows, c.w, c.rowBytes, c.xq, c.xRow, c.nx, 0, c.rows); err != nil {
		t.Fatal(err)
	}
	return dots, mv, mm
}

// checkRepackConsistent: MatVecRepack equals the single-row dots bit for bit; MatMulRepack
// equals the gemm-order Go reference for activation rows in full groups of 4 and the dots
// for the rest.
func checkRepackConsistent(t *testing.T, c repackCase, dots, mv, mm []float32) {
	t.Helper()
	g := c.nx - c.nx%4
	for k := 0; k < c.nx; k++ {
		for r := 0; r < c.rows; r++ {
			i := k*c.rows + r
			if !repackSame(mv[i], dots[i]) {
				t.Fatalf("%s n=%d act %d row %d: MatVecRepack %g, dot %g", repackTypeName(c.t), c.n, k, r, mv[i], dots[i])
			}
			want := dots[i]
			if k < g {
				want = c.goGemm(r, k)
			}
			if !repackSame(mm[i], want) {
				t.Fatalf("%s n=%d act %d row %d: MatMulRepack %g, want %g", repackTypeName(c.t), c.n, k, r, mm[i], want)
			}
		}
	}
}

// TestRepackAsmMatchesGo: assembly and pure Go bit-identical on arbitrary weight bytes and
// arbitrary activation bytes (−128 and wrapping bsum pairs included), on activations
// quantized from normal and Student-t data, for row lengths 256…16384 (plus short and odd
// block counts for Q4_0/IQ4_NL) and row counts that leave remainders after the 4-row kernel.
func TestRepackAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	r := newRNG(41)
	for _, wt := range repackTypes {
		lengths := []int{256, 512, 768, 1024, 2048, 4096, 5120, 16384}
		if wt != Q4_K {
			lengths = append(lengths, 32, 64, 96, 128, 160, 224, 288, 4128)
		}
		for _, n := range lengths {
			for variant := 0; variant < 3; variant++ {
				rows, nx := 13, 6 // 8-row + 4-row kernels + a single row; 4 gemm + 2 gemv
				if n >= 4096 {
					rows, nx = 9, 5
				}
				c := newRepackCase(r, wt, n, rows, nx, variant == 1, variant == 2)
				run := func(pure bool) [3][]float32 {
					return withImpl(pure, func() [3][]float32 {
						d, v, m := runRepackAll(t, c)
						return [3][]float32{d, v, m}
					})
				}
				res := run(true)
				checkRepackConsistent(t, c, res[0], res[1], res[2])
				ares := run(false)
				for part, name := range []string{"dot", "MatVecRepack", "MatMulRepack"} {
					for i := range ares[part] {
						if !repackSame(ares[part][i], res[part][i]) {
							t.Fatalf("%s n=%d variant %d: %s output %d: asm %g (%#x), purego %g (%#x)", repackTypeName(wt), n, variant,
								name, i, ares[part][i], math.Float32bits(ares[part][i]), res[part][i], math.Float32bits(res[part][i]))
						}
					}
				}
			}
		}
	}
}

// TestRepackReference: both paths against a float64 reference, random weights with normal
// and heavy-tailed scales against activations quantized from normal and Student-t data. The
// error of an FMA chain of L steps is at most about (L + 2)·2u·S (one rounding per product
// of scales, per int→float conversion of large sums, per step); the bound used is refTol(L)
// = (L + 8)·4u·S.
func TestRepackReference(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(42)
		for _, wt := range repackTypes {
			var worst, worstGemm float64
			for _, n := range []int{256, 1024, 4096, 16384} {
				for _, heavy := range []bool{false, true} {
					c := newRepackCase(r, wt, n, 5, 4, heavy, false)
					dots, _, mm := runRepackAll(t, c)
					for k := 0; k < c.nx; k++ {
						for row := 0; row < c.rows; row++ {
							ref, s := repackExactRef(wt, c.row(row), c.act(k), n)
							for _, gemm := range []bool{false, true} {
								got := dots[k*c.rows+row]
								if gemm {
									got = mm[k*c.rows+row]
								}
								tol := refTol(repackSteps(wt, n, gemm)) * s
								e := math.Abs(float64(got) - ref)
								if e > tol {
									t.Errorf("%s n=%d heavy=%v gemm=%v: got %.9g, reference %.9g, |err|/S = %.3g > %.3g",
										repackTypeName(wt), n, heavy, gemm, got, ref, e/s, tol/s)
								}
								if s > 0 && gemm {
									worstGemm = max(worstGemm, e/s)
								} else if s > 0 {
									worst = max(worst, e/s)
								}
							}
						}
					}
				}
			}
			t.Logf("%s: worst |err|/S gemv order %.3g, gemm order %.3g (bound at n=16384: %.3g)", repackTypeName(wt),
				worst, worstGemm, refTol(repackSteps(wt, 16384, true)))
		}
	})
}

// TestRepackExtremeQuants pins the integer paths at their extremes: all nibbles 0 or 15
// (Q4_0 −8/7, IQ4_NL −127/113), mixed nibbles, activation quants 127, −127 and −128, K-scales
// and mins up to 63 (bsums consistent with the quants). Scales are 1, so the float steps
// only round where the int32 sums exceed 2²⁴. Both paths must agree bit for bit and match
// the exact result within the chain bound, except the documented gemv quirk: Q4_0/IQ4_NL
// with an activation quant of −128 against a negative weight value, which contributes
// |v|·(−128); with all nibbles 0 (v = −8 or −127) that is exactly the negated result.
func TestRepackExtremeQuants(t *testing.T) {
	for _, wt := range repackTypes {
		at := repackActType(wt)
		for _, wb := range []byte{0x00, 0xff, 0x0f, 0xf0} {
			for _, xb := range []byte{0x7f, 0x81, 0x80} {
				nb := 5
				bs, wBlock := 32, BlockBytesQ4_0
				if wt == Q4_K {
					bs, wBlock = 256, BlockBytesQ4_K
				}
				n := nb * bs
				w := make([]byte, nb*wBlock)
				for i := range w {
					w[i] = wb
				}
				x := make([]byte, nb*BlockBytes(at))
				for i := range x {
					x[i] = xb
				}
				for b := 0; b < nb; b++ {
					if wt == Q4_K {
						copy(w[b*wBlock:], []byte{0x00, 0x3c, 0x00, 0x3c})
						copy(x[b*292:], []byte{0, 0, 0x80, 0x3f})
						for g := 0; g < 16; g++ {
							binary.LittleEndian.PutUint16(x[b*292+260+2*g:], uint16(16*int16(int8(xb))))
						}
					} else {
						w[b*wBlock], w[b*wBlock+1] = 0x00, 0x3c
						x[b*34], x[b*34+1] = 0x00, 0x3c
					}
				}
				xq := append(append(append(append([]byte{}, x...), x...), x...), x...)
				c := repackCase{t: wt, n: n, rows: 1, rowBytes: len(w), w: w, xq: xq, xRow: len(x), nx: 4}
				var gemv, gemm []float32
				forEachImpl(t, func(t *testing.T) {
					gemv = append(gemv, repackDot(wt)(n, w, x))
					_, _, mm := runRepackAll(t, c)
					gemm = append(gemm, mm...)
				})
				for i := range gemv {
					if !repackSame(gemv[i], gemv[0]) {
						t.Fatalf("%s w=%#02x x=%#02x: gemv outputs differ between paths: %v", repackTypeName(wt), wb, xb, gemv)
					}
				}
				for i := range gemm {
					if !repackSame(gemm[i], gemm[0]) {
						t.Fatalf("%s w=%#02x x=%#02x: gemm outputs differ between paths or rows: %v", repackTypeName(wt), wb, xb, gemm)
					}
				}
				ref, s := repackExactRef(wt, w, x, n)
				if e := math.Abs(float64(gemm[0]) - ref); e > refTol(repackSteps(wt, n, true))*s {
					t.Errorf("%s w=%#02x x=%#02x: gemm order %.10g, exact %.10g", repackTypeName(wt), wb, xb, gemm[0], ref)
				}
				quirk := wt != Q4_K && xb == 0x80
				if e := math.Abs(float64(gemv[0]) - ref); !quirk && e > refTol(repackSteps(wt, n, false))*s {
					t.Errorf("%s w=%#02x x=%#02x: gemv order %.10g, exact %.10g", repackTypeName(wt), wb, xb, gemv[0], ref)
				}
				if quirk && wb == 0x00 && gemv[0] != -gemm[0] {
					t.Errorf("%s x=−128, all v negative: gemv %g, want −gemm = %g", repackTypeName(wt), gemv[0], -gemm[0])
				}
			}
		}
	}
}

func TestRepackLengthPanics(t *testing.T) {
	for _, wt := range repackTypes {
		dot := repackDot(wt)
		bs, wb := 32, BlockBytesQ4_0
		if wt == Q4_K {
			bs, wb = 256, BlockBytesQ4_K
		}
		at := repackActType(wt)
		w := make([]byte, 2*wb)
		x := make([]byte, 2*BlockBytes(at))
		name := "Dot " + repackTypeName(wt) + " repack"
		expectLengthPanic(t, name+" odd n", func() { dot(bs+1, w, x) })
		expectLengthPanic(t, name+" negative n", func() { dot(-bs, w, x) })
		expectLengthPanic(t, name+" short w", func() { dot(2*bs, w[:len(w)-1], x) })
		expectLengthPanic(t, name+" short x", func() { dot(2*bs, w, x[:len(x)-1]) })
		expectLengthPanic(t, name+" n too big", func() { dot(3*bs, w, x) })
		expectLengthPanic(t, name+" huge n", func() { dot(math.MaxInt&^255, w, x) })
		if got := dot(0, nil, nil); got != 0 {
			t.Fatalf("%s: n=0 gave %g", name, got)
		}
	}
}

// TestRepackArgErrors: MatVecRepack and MatMulRepack reject bad arguments with an error
// (never a panic) and write nothing outside the requested outputs.
func TestRepackArgErrors(t *testing.T) {
	r := newRNG(43)
	c := newRepackCase(r, Q4_K, 512, 9, 6, false, false)
	out := make([]float32, 6*9)
	bad := []struct {
		name string
		err  error
	}{
		{"MatVec unsupported type", MatVecRepack(Q6_K, out, c.w, c.rowBytes, c.act(0), 0, 1)},
		{"MatVec row size", MatVecRepack(Q4_K, out, c.w, c.rowBytes-1, c.act(0), 0, 1)},
		{"MatVec zero row size", MatVecRepack(Q4_K, out, c.w, 0, c.act(0), 0, 1)},
		{"MatVec short activations", MatVecRepack(Q4_K, out, c.w, c.rowBytes, c.act(0)[:c.xRow-1], 0, 1)},
		{"MatVec range past weights", MatVecRepack(Q4_K, out, c.w, c.rowBytes, c.act(0), 0, 10)},
		{"MatVec range past out", MatVecRepack(Q4_K, out[:3], c.w, c.rowBytes, c.act(0), 0, 4)},
		{"MatVec reversed range", MatVecRepack(Q4_K, out, c.w, c.rowBytes, c.act(0), 3, 2)},
		{"MatMul unsupported type", MatMulRepack(Q8_0, out, 9, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 9)},
		{"MatMul negative nx", MatMulRepack(Q4_K, out, 9, c.w, c.rowBytes, c.xq, c.xRow, -1, 0, 9)},
		{"MatMul stride below row", MatMulRepack(Q4_K, out, 9, c.w, c.rowBytes, c.xq, c.xRow-1, 6, 0, 9)},
		{"MatMul too few activation rows", MatMulRepack(Q4_K, out, 9, c.w, c.rowBytes, c.xq[:len(c.xq)-1], c.xRow, 6, 0, 9)},
		{"MatMul ldOut below r1", MatMulRepack(Q4_K, out, 8, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 9)},
		{"MatMul out too short", MatMulRepack(Q4_K, out[:len(out)-1], 9, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 9)},
		{"MatMul range past weights", MatMulRepack(Q4_K, make([]float32, 60), 10, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 10)},
		{"MatMul reversed range", MatMulRepack(Q4_K, out, 9, c.w, c.rowBytes, c.xq, c.xRow, 6, 5, 4)},
		{"MatMul huge stride", MatMulRepack(Q4_K, out, 9, c.w, c.rowBytes, c.xq, math.MaxInt, 6, 0, 9)},
		{"MatMul huge ldOut", MatMulRepack(Q4_K, out, math.MaxInt, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 9)},
		{"MatVec huge row size", MatVecRepack(Q4_K, out, c.w, math.MaxInt/BlockBytesQ4_K*BlockBytesQ4_K, c.act(0), 0, 1)},
	}
	for _, b := range bad {
		if b.err == nil {
			t.Errorf("%s: no error", b.name)
		}
	}
	for i, v := range out {
		if v != 0 {
			t.Fatalf("output %d written by a rejected call", i)
		}
	}
	// Sub-ranges write only their outputs.
	for i := range out {
		out[i] = float32(math.NaN())
	}
	if err := MatMulRepack(Q4_K, out, 9, c.w, c.rowBytes, c.xq, c.xRow, 6, 2, 7); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 6; k++ {
		for r := 0; r < 9; r++ {
			if in := r >= 2 && r < 7; in == math.IsNaN(float64(out[k*9+r])) {
				t.Fatalf("act %d row %d: written=%v, in range=%v", k, r, !math.IsNaN(float64(out[k*9+r])), in)
			}
		}
	}
	if err := MatMulRepack(Q4_K, nil, 0, c.w, c.rowBytes, c.xq, c.xRow, 0, 0, 9); err != nil {
		t.Errorf("nx = 0: %v", err)
	}
}

// TestRepackNoAllocs: the repack kernels do not allocate for rows of up to 32768 elements.
func TestRepackNoAllocs(t *testing.T) {
	r := newRNG(44)
	for _, wt := range repackTypes {
		for _, n := range []int{4096, 32768} {
			c := newRepackCase(r, wt, n, 8, 4, false, false)
			out := make([]float32, 4*8)
			dot := repackDot(wt)
			allocs := testing.AllocsPerRun(5, func() {
				_ = MatVecRepack(wt, out, c.w, c.rowBytes, c.act(0), 0, 8)
				_ = MatMulRepack(wt, out, 8, c.w, c.rowBytes, c.xq, c.xRow, 4, 0, 8)
				benchSink += dot(c.n, c.row(0), c.act(0))
			})
			if allocs != 0 {
				t.Errorf("%s n=%d: %.1f allocations per MatVecRepack+MatMulRepack+Dot", repackTypeName(wt), n, allocs)
			}
		}
	}
}

// FuzzRepackKernels feeds the repack kernels arbitrary bytes and lengths: a dot panics with
// *LengthError exactly when the length precondition fails, MatVecRepack/MatMulRepack return
// an error or a result and never panic, and the assembly and pure-Go results are
// bit-identical (NaN matching NaN) for every input.
func FuzzRepackKernels(f *testing.F) {
	r := newRNG(45)
	for i, wt := range repackTypes {
		bs := 32
		if wt == Q4_K {
			bs = 256
		}
		c := newRepackCase(r, wt, 2*bs, 1, 1, i%2 == 0, false)
		f.Add(uint8(i), uint16(2*bs), uint16(len(c.w)), append(append([]byte{}, c.w...), c.xq...))
		f.Add(uint8(i), uint16(bs), uint16(3), make([]byte, 600))
	}
	f.Add(uint8(1), uint16(31), uint16(0), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, sel uint8, n16, cut16 uint16, data []byte) {
		wt := repackTypes[int(sel)%len(repackTypes)]
		dot := repackDot(wt)
		cut := int(cut16) % (len(data) + 1)
		w, x := data[:cut], data[cut:]
		n := int(n16)
		bs, wb := 32, BlockBytesQ4_0
		if wt == Q4_K {
			bs, wb = 256, BlockBytesQ4_K
		}
		at := repackActType(wt)
		nb := n / bs
		valid := n%bs == 0 && len(w) >= nb*wb && len(x) >= nb*BlockBytes(at)
		var results []float32
		for _, pure := range []bool{true, false} {
			if !pure && !HasAsm() {
				continue
			}
			v, p := callDot(pure, dot, n, w, x)
			if p != nil {
				if _, ok := p.(*LengthError); !ok || valid {
					t.Fatalf("%s n=%d len(w)=%d len(x)=%d: unexpected panic %v", repackTypeName(wt), n, len(w), len(x), p)
				}
				continue
			}
			if !valid {
				t.Fatalf("%s n=%d len(w)=%d len(x)=%d: no panic on a length violation", repackTypeName(wt), n, len(w), len(x))
			}
			results = append(results, v)
		}
		if len(results) == 2 && !repackSame(results[0], results[1]) {
			t.Fatalf("%s nb=%d: asm %g (%#x), purego %g (%#x)", repackTypeName(wt), nb, results[1], math.Float32bits(results[1]), results[0], math.Float32bits(results[0]))
		}
		// Mat-vec and mat-mul over the same bytes: errors or results, equal on both paths.
		rows := int(sel) % 6
		rowBytes := max(1, nb) * wb
		nx := int(sel/8) % 6
		var outs [2][]float32
		for i, pure := range []bool{true, false} {
			if !pure && !HasAsm() {
				continue
			}
			out := make([]float32, 6*6)
			err1 := withImpl(pure, func() error { return MatVecRepack(wt, out, w, rowBytes, x, 0, rows) })
			err2 := withImpl(pure, func() error {
				return MatMulRepack(wt, out[6:], 5, w, rowBytes, x, rowBytes/wb*BlockBytes(at), nx, 0, min(rows, 5))
			})
			_, _ = err1, err2
			outs[i] = out
		}
		if outs[1] != nil {
			for i := range outs[0] {
				if !repackSame(outs[0][i], outs[1][i]) {
					t.Fatalf("%s: mat-vec/mat-mul output %d: purego %g, asm %g", repackTypeName(wt), i, outs[0][i], outs[1][i])
				}
			}
		}
	})
}

// Example-style check of the exported formula on a hand-made block, independent of both
// implementations: one Q4_0 block of nibbles 9 (value +1) with d = 0.5 against activation
// quants 2 with d_x = 0.25 gives fma(64, 0.125, 0) = 8.
func TestRepackHandBlock(t *testing.T) {
	w := make([]byte, BlockBytesQ4_0)
	binary.LittleEndian.PutUint16(w, floatToHalf(0.5))
	for i := 2; i < len(w); i++ {
		w[i] = 0x99
	}
	x := make([]byte, BlockBytesQ8_0)
	binary.LittleEndian.PutUint16(x, floatToHalf(0.25))
	for i := 2; i < len(x); i++ {
		x[i] = 2
	}
	forEachImpl(t, func(t *testing.T) {
		if got := DotQ4_0Q8_0Repack(32, w, x); got != 8 {
			t.Fatalf("got %g, want 8", got)
		}
		// IQ4_NL nibble 9 is +13: 32·13·2·0.125 = 104.
		if got := DotIQ4_NLQ8_0Repack(32, w, x); got != 104 {
			t.Fatalf("IQ4_NL: got %g, want 104", got)
		}
	})
	_ = fmt.Sprint()
}

// TestRepackVNNITiles: MatMulRepack with the VNNI tiles (16 rows in ZMM lanes, AVX2 kernels
// for the rest) equals the AVX2 path bit for bit over row
// ranges that use every tile combination and start off a tile boundary, for Q4_0, IQ4_NL and
// Q4_K, random, heavy-tailed and raw bytes (activation quants of −128, wrapping pair sums).
func TestRepackVNNITiles(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX-512 VNNI on this machine (or assembly off): only the AVX2 gemm kernels run")
	}
	defer vnniOff.Store(false)
	r := newRNG(43)
	for _, wt := range []Type{Q4_0, IQ4_NL, Q4_K} {
		lengths := []int{32, 256, 4128}
		if wt == Q4_K {
			lengths = []int{256, 1024, 4352}
		}
		for _, n := range lengths {
			for _, shape := range [][3]int{{8, 4, 0}, {16, 8, 0}, {24, 13, 0}, {29, 4, 3}, {40, 12, 5}} {
				rows, nx, r0 := shape[0], shape[1], shape[2]
				for variant := 0; variant < 3; variant++ {
					c := newRepackCase(r, wt, n, rows, nx, variant == 1, variant == 2)
					var res [2][]float32
					for i, off := range []bool{true, false} {
						vnniOff.Store(off)
						mm := make([]float32, nx*rows)
						if err := MatMulRepack(wt, mm, rows, c.w, c.rowBytes, c.xq, c.xRow, nx, r0, rows); err != nil {
							t.Fatal(err)
						}
						res[i] = mm
					}
					for i := range res[0] {
						if !repackSame(res[0][i], res[1][i]) {
							t.Fatalf("%s n=%d rows=%d nx=%d r0=%d variant %d: output %d: AVX2 %g (%#x), VNNI %g (%#x)", repackTypeName(wt), n, rows, nx, r0, variant,
								i, res[0][i], math.Float32bits(res[0][i]), res[1][i], math.Float32bits(res[1][i]))
						}
					}
				}
			}
		}
	}
}

// TestMatMulRepackGemv: MatMulRepackGemv equals MatVecRepack token by token, bit for bit:
// Q4_K for any activation bytes (raw ones too) over row ranges that use the 16-row VNNI tiles
// and the MatVecRepack tail, Q4_0/IQ4_NL for quantized activations; and it rejects what
// MatMulRepack rejects.
func TestMatMulRepackGemv(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(53)
		for _, wt := range []Type{Q4_K, Q4_0, IQ4_NL} {
			n := 1024
			for _, shape := range [][3]int{{16, 4, 0}, {24, 9, 0}, {29, 13, 3}, {40, 6, 5}} {
				rows, nx, r0 := shape[0], shape[1], shape[2]
				for variant := 0; variant < 3; variant++ {
					if variant == 2 && wt != Q4_K {
						continue
					}
					c := newRepackCase(r, wt, n, rows, nx, variant == 1, variant == 2)
					mg := make([]float32, nx*rows)
					if err := MatMulRepackGemv(wt, mg, rows, c.w, c.rowBytes, c.xq, c.xRow, nx, r0, rows); err != nil {
						t.Fatal(err)
					}
					mv := make([]float32, rows)
					for k := 0; k < nx; k++ {
						if err := MatVecRepack(wt, mv, c.w, c.rowBytes, c.act(k), r0, rows); err != nil {
							t.Fatal(err)
						}
						for i := r0; i < rows; i++ {
							if !repackSame(mg[k*rows+i], mv[i]) {
								t.Fatalf("%s rows=%d nx=%d r0=%d variant %d: act %d row %d: MatMulRepackGemv %g (%#x), MatVecRepack %g (%#x)",
									repackTypeName(wt), rows, nx, r0, variant, k, i, mg[k*rows+i], math.Float32bits(mg[k*rows+i]), mv[i], math.Float32bits(mv[i]))
							}
						}
					}
				}
			}
		}
		c := newRepackCase(r, Q4_K, 256, 9, 6, false, false)
		out := make([]float32, 6*9)
		if err := MatMulRepackGemv(Q4_K, out, 8, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 9); err == nil {
			t.Error("MatMulRepackGemv accepted an output stride below the row range end")
		}
		if err := MatMulRepackGemv(Q8_0, out, 9, c.w, c.rowBytes, c.xq, c.xRow, 6, 0, 9); err == nil {
			t.Error("MatMulRepackGemv accepted an unsupported type")
		}
	})
}

// TestRepackGemmIsGemvForQ8_0Acts: for Q4_0 and IQ4_NL the gemm and gemv orders differ only
// for an activation quant of −128 against a negative weight value, which QuantizeRowQ8_0 never
// writes; so with its activations MatMulRepack (gemm order, VNNI or AVX2) equals
// MatVecRepack (gemv order) token by token, bit for bit. infer relies on this to batch the
// tokens of a MoE expert, whose llama.cpp kernel is the per-token gemv.
func TestRepackGemmIsGemvForQ8_0Acts(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(47)
		for _, wt := range []Type{Q4_0, IQ4_NL} {
			for _, n := range []int{32, 256, 4128} {
				for _, rows := range []int{8, 16, 40} {
					for _, heavy := range []bool{false, true} {
						c := newRepackCase(r, wt, n, rows, 9, heavy, false)
						mm := make([]float32, c.nx*rows)
						if err := MatMulRepack(wt, mm, rows, c.w, c.rowBytes, c.xq, c.xRow, c.nx, 0, rows); err != nil {
							t.Fatal(err)
						}
						mv := make([]float32, rows)
						for k := 0; k < c.nx; k++ {
							if err := MatVecRepack(wt, mv, c.w, c.rowBytes, c.act(k), 0, rows); err != nil {
								t.Fatal(err)
							}
							for i := range mv {
								if !repackSame(mm[k*rows+i], mv[i]) {
									t.Fatalf("%s n=%d rows=%d act %d row %d: MatMulRepack %g (%#x), MatVecRepack %g (%#x)", repackTypeName(wt), n, rows,
										k, i, mm[k*rows+i], math.Float32bits(mm[k*rows+i]), mv[i], math.Float32bits(mv[i]))
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestMatVecRepackVNNI: MatVecRepack's VNNI gemv equals the AVX2 gemv bit for bit over row
// ranges with 8-row (4 for Q4_K) groups and tails. Q4_0 and IQ4_NL (one VPDPBUSD per row
// and block): quantized normal and heavy-tailed activations, raw bytes over the whole range
// except −128 (every nibble, |x| = 127, the largest pair sums), and raw bytes with a single
// −128 in the last block, where the VNNI form would differ and the AVX2 kernel must run
// instead. Q4_K (512-bit chunks, VPDPWSSD): quantized, heavy-tailed and raw activations
// (bsums over the whole int16 range), and rows of extreme nibbles and scales.
func TestMatVecRepackVNNI(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX-512 VNNI on this machine (or assembly off): only the AVX2 gemv runs")
	}
	defer vnniOff.Store(false)
	defer scaleLoads.Store(slowGather)
	r := newRNG(61)
	for _, wt := range []Type{Q4_0, IQ4_NL, Q4_K} {
		lengths := []int{32, 256, 4128}
		if wt == Q4_K {
			lengths = []int{256, 1024, 4352}
		}
		for _, n := range lengths {
			nb := n / 32
			for _, shape := range [][2]int{{8, 0}, {16, 0}, {29, 3}, {40, 5}} {
				rows, r0 := shape[0], shape[1]
				for variant := 0; variant < 5; variant++ {
					c := newRepackCase(r, wt, n, rows, 1, variant == 1, variant >= 2)
					x := c.xq[:c.xRow]
					if wt == Q4_K {
						if variant == 3 { // extremes: nibbles 0 or 15, scale bytes 0xff
							for i := range c.w {
								if i%BlockBytesQ4_K >= 4 {
									c.w[i] = byte(0xff * ((i / c.rowBytes) % 2))
								}
							}
						}
						if variant > 3 {
							continue
						}
					} else if variant >= 2 {
						for b := 0; b < nb; b++ {
							for i := 2; i < 34; i++ {
								if x[b*34+i] == 0x80 {
									x[b*34+i] = 0x81
								}
							}
						}
					}
					switch variant {
					case 3: // extremes: every weight byte 0xff/0x00 per row, |x| = 127
						for i := range c.w {
							if i%18 >= 2 {
								c.w[i] = byte(0xff * ((i / c.rowBytes) % 2))
							}
						}
						for b := 0; b < nb; b++ {
							for i := 2; i < 34; i++ {
								x[b*34+i] = byte(0x7f + 2*(i%2)) // 127, −127
							}
						}
					case 4:
						x[(nb-1)*34+2+r.IntN(32)] = 0x80
					}
					if wt == Q4_K {
						// any activation bytes: the Q4_K kernels have no −128 exception
					} else if got := q8HasMin(&x[0], nb); got != (variant == 4) {
						t.Fatalf("q8HasMin = %v for variant %d", got, variant)
					}
					// the AVX2 gemv, then VNNI with the scales gathered and loaded
					var res [3][]float32
					for i, off := range []bool{true, false, false} {
						vnniOff.Store(off)
						scaleLoads.Store(i == 2)
						res[i] = make([]float32, rows)
						if err := MatVecRepack(wt, res[i], c.w, c.rowBytes, x, r0, rows); err != nil {
							t.Fatal(err)
						}
					}
					for k, form := range []string{"gathered scales", "loaded scales"} {
						for i := r0; i < rows; i++ {
							if !repackSame(res[0][i], res[k+1][i]) {
								t.Fatalf("%s n=%d rows=%d r0=%d variant %d: row %d: AVX2 %g (%#x), VNNI with %s %g (%#x)", repackTypeName(wt), n, rows, r0, variant,
									i, res[0][i], math.Float32bits(res[0][i]), form, res[k+1][i], math.Float32bits(res[k+1][i]))
							}
						}
					}
				}
			}
		}
	}
}

// TestQ4KScaleTable: q4KScales8AVX2 (the Q4_K tiles' table, 8 rows per gather) writes what
// the Go table q4KScaleTable writes (its fallback for row strides beyond int32), on random
// blocks, so that either gives the tiles the same scales, mins, d and dmin.
func TestQ4KScaleTable(t *testing.T) {
	if !useVNNI() {
		t.Skip("no AVX-512 VNNI on this machine (or assembly off): the table is built in Go")
	}
	r := newRNG(79)
	const nb = 5
	rowBytes := nb*BlockBytesQ4_K + 16 // a stride that is not a whole number of blocks
	w := make([]byte, 16*rowBytes)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	var offs [8]int32
	for k := range offs {
		offs[k] = int32(k * rowBytes)
	}
	smA, ddA := make([]int32, 256*nb), make([]float32, 32*nb)
	q4KScales8AVX2(&w[0], &offs[0], nb, &smA[0], &ddA[0])
	q4KScales8AVX2(&w[8*rowBytes], &offs[0], nb, &smA[8], &ddA[8])
	smG, ddG := make([]int32, 256*nb), make([]float32, 32*nb)
	q4KScaleTable(smG, ddG, w, rowBytes, nb, 0)
	for i := range smG {
		if smA[i] != smG[i] {
			t.Fatalf("scale/min table entry %d: gather %d, Go %d", i, smA[i], smG[i])
		}
	}
	for i := range ddG {
		if math.Float32bits(ddA[i]) != math.Float32bits(ddG[i]) && !(ddA[i] != ddA[i] && ddG[i] != ddG[i]) {
			t.Fatalf("d/dmin entry %d: gather %g, Go %g", i, ddA[i], ddG[i])
		}
	}
}
