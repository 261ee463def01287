package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// q0tSentinel marks outputs MatMulQ0 must not write.
var q0tSentinel = math.Float32frombits(0x7fc0dead)

// q0tQuantQ4_0 quantizes x (len a multiple of 32) to Q4_0 the way ggml's reference
// quantizer does (d = max/−8 with max the signed value of largest magnitude,
// q = min(15, trunc(x/d + 8.5))), as a source of realistic Q4_0 weights.
func q0tQuantQ4_0(x []float32) []byte {
	nb := len(x) / 32
	out := make([]byte, nb*BlockBytesQ4_0)
	for b := 0; b < nb; b++ {
		xb := x[32*b : 32*b+32]
		var amax, maxv float32
		for _, v := range xb {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, maxv = a, v
			}
		}
		d := maxv / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		blk := out[b*BlockBytesQ4_0:]
		binary.LittleEndian.PutUint16(blk, floatToHalf(d))
		for j := 0; j < 16; j++ {
			q0 := min(15, int(xb[j]*id+8.5))
			q1 := min(15, int(xb[j+16]*id+8.5))
			blk[2+j] = byte(q0) | byte(q1)<<4
		}
	}
	return out
}

// q0tWeights returns rows×n weights of type wt drawn as kind: "normal" and "student-t"
// quantize random floats, "randq" has random quant bytes with random finite scales and "raw"
// is random bytes throughout (scales may be subnormal, Inf or NaN).
func q0tWeights(r *rand.Rand, wt Type, kind string, rows, n int) []byte {
	switch kind {
	case "normal", "student-t":
		x := randFloats(r, rows*n, kind == "student-t", 0.05)
		if wt == Q4_0 {
			return q0tQuantQ4_0(x)
		}
		return quantizeActs(Q8_0, x)
	case "randq":
		return randWeights(r, wt, rows*n/32, 0.02, true)
	}
	w := make([]byte, rows*n/32*BlockBytes(wt))
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	return w
}

// q0tActs returns T activation rows of n elements, xRowBytes apart (padding random).
func q0tActs(r *rand.Rand, kind string, T, n, xRowBytes int) []byte {
	xq := make([]byte, T*xRowBytes)
	for i := range xq {
		xq[i] = byte(r.Uint32())
	}
	for k := 0; k < T; k++ {
		var row []byte
		switch kind {
		case "raw":
			row = rawActs(r, Q8_0, n/32)
		default:
			row = quantizeActs(Q8_0, randFloats(r, n, kind == "student-t", 1))
		}
		copy(xq[k*xRowBytes:], row)
	}
	return xq
}

// checkQ0Tile runs MatMulQ0 over [r0, r1) × T and compares every output bit for bit with
// the one-row kernel of the same implementation; outputs outside the range must stay
// untouched.
func checkQ0Tile(t *testing.T, wt Type, w []byte, rows, n int, xq []byte, xRowBytes, T, r0, r1 int, what string) {
	t.Helper()
	rowBytes := n / 32 * BlockBytes(wt)
	ldy := rows + 3
	y := make([]float32, T*ldy)
	for i := range y {
		y[i] = q0tSentinel
	}
	if err := MatMulQ0(wt, y, ldy, w, rowBytes, xq, xRowBytes, T, r0, r1); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	dot := kernelFor(wt)
	for k := 0; k < T; k++ {
		for i := 0; i < ldy; i++ {
			got := y[k*ldy+i]
			if i < r0 || i >= r1 {
				if math.Float32bits(got) != math.Float32bits(q0tSentinel) {
					t.Fatalf("%s: output (token %d, row %d) outside [%d, %d) was written", what, k, i, r0, r1)
				}
				continue
			}
			want := dot(n, w[i*rowBytes:(i+1)*rowBytes], xq[k*xRowBytes:])
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: token %d row %d: MatMulQ0 %g (%#08x), Dot %g (%#08x)", what, k, i, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

func TestMatMulQ0BitIdentical(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		pure := !UsingAsm()
		r := newRNG(41)
		type shape struct{ n, rows int }
		shapes := []shape{{32, 13}, {64, 9}, {96, 17}, {2048, 11}, {16384, 5}}
		Ts := []int{1, 2, 3, 4, 5, 7, 32, 33}
		for _, wt := range []Type{Q8_0, Q4_0} {
			for _, kind := range []string{"normal", "student-t", "randq", "raw"} {
				for _, sh := range shapes {
					w := q0tWeights(r, wt, kind, sh.rows, sh.n)
					for _, T := range Ts {
						if sh.n >= 2048 && T > 7 && (pure || testing.Short()) {
							continue // the pure-Go twin is slow; the tile edges are covered above
						}
						xRowBytes := sh.n/32*BlockBytesQ8_0 + int(r.Uint32()%3)*17
						xq := q0tActs(r, kind, T, sh.n, xRowBytes)
						ranges := [][2]int{{0, sh.rows}, {1, sh.rows - 1}, {sh.rows / 2, sh.rows/2 + 1}, {2, 2}}
						for _, rg := range ranges {
							what := wt.String() + "/" + kind
							checkQ0Tile(t, wt, w, sh.rows, sh.n, xq, xRowBytes, T, rg[0], rg[1], what)
						}
					}
				}
			}
		}
	})
}

// TestMatMulQ0AsmMatchesGo: the assembly and pure-Go paths of MatMulQ0 agree bit for bit on
// finite data, with many rows (all tile shapes and edges).
func TestMatMulQ0AsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build: nothing to compare the pure-Go path with")
	}
	r := newRNG(42)
	const rows, n, T = 23, 256, 11
	for _, wt := range []Type{Q8_0, Q4_0} {
		for _, kind := range []string{"normal", "student-t", "randq"} {
			w := q0tWeights(r, wt, kind, rows, n)
			xq := q0tActs(r, kind, T, n, n/32*BlockBytesQ8_0)
			rowBytes := n / 32 * BlockBytes(wt)
			run := func(pure bool) []float32 {
				return withImpl(pure, func() []float32 {
					y := make([]float32, T*rows)
					if err := MatMulQ0(wt, y, rows, w, rowBytes, xq, n/32*BlockBytesQ8_0, T, 0, rows); err != nil {
						t.Fatal(err)
					}
					return y
				})
			}
			a, g := run(false), run(true)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(g[i]) {
					t.Fatalf("%v/%s: output %d: asm %g, Go %g", wt, kind, i, a[i], g[i])
				}
			}
		}
	}
}

// TestMatMulQ0Accuracy checks MatMulQ0 against a float64 reference of the same quantized
// operands on random and heavy-tailed data (tolerance: refTol(blocks)·Σ|terms|).
func TestMatMulQ0Accuracy(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(43)
		const rows, n, T = 9, 1024, 5
		for _, wt := range []Type{Q8_0, Q4_0} {
			for _, kind := range []string{"normal", "student-t"} {
				w := q0tWeights(r, wt, kind, rows, n)
				xRow := n / 32 * BlockBytesQ8_0
				xq := q0tActs(r, kind, T, n, xRow)
				rowBytes := n / 32 * BlockBytes(wt)
				y := make([]float32, T*rows)
				if err := MatMulQ0(wt, y, rows, w, rowBytes, xq, xRow, T, 0, rows); err != nil {
					t.Fatal(err)
				}
				for k := 0; k < T; k++ {
					for i := 0; i < rows; i++ {
						ref, s := refDot(wt, w[i*rowBytes:], Q8_0, xq[k*xRow:], n)
						if d := math.Abs(float64(y[k*rows+i]) - ref); d > refTol(n/32)*s || s == 0 {
							t.Fatalf("%v/%s token %d row %d: %g, reference %g (|Σ terms| %g)", wt, kind, k, i, y[k*rows+i], ref, s)
						}
					}
				}
			}
		}
	})
}

func TestMatMulQ0Errors(t *testing.T) {
	r := newRNG(44)
	const rows, n, T = 8, 64, 3
	for _, wt := range []Type{Q8_0, Q4_0} {
		rowBytes := n / 32 * BlockBytes(wt)
		xRow := n / 32 * BlockBytesQ8_0
		w := q0tWeights(r, wt, "randq", rows, n)
		xq := q0tActs(r, "normal", T, n, xRow)
		ldy := rows
		y := make([]float32, T*ldy)
		for i := range y {
			y[i] = q0tSentinel
		}
		bad := []struct {
			name string
			err  error
		}{
			{"unsupported type", MatMulQ0(Q4_K, y, ldy, w, rowBytes, xq, xRow, T, 0, rows)},
			{"row bytes not a block multiple", MatMulQ0(wt, y, ldy, w, rowBytes-1, xq, xRow, T, 0, rows)},
			{"zero row bytes", MatMulQ0(wt, y, ldy, w, 0, xq, xRow, T, 0, rows)},
			{"negative T", MatMulQ0(wt, y, ldy, w, rowBytes, xq, xRow, -1, 0, rows)},
			{"negative start", MatMulQ0(wt, y, ldy, w, rowBytes, xq, xRow, T, -1, rows)},
			{"reversed range", MatMulQ0(wt, y, ldy, w, rowBytes, xq, xRow, T, 5, 4)},
			{"range past weights", MatMulQ0(wt, make([]float32, 3*(rows+1)), rows+1, w, rowBytes, xq, xRow, T, 0, rows+1)},
			{"short activations (T=1)", MatMulQ0(wt, y, ldy, w, rowBytes, xq[:xRow-1], xRow, 1, 0, rows)},
			{"short activations", MatMulQ0(wt, y, ldy, w, rowBytes, xq[:len(xq)-1], xRow, T, 0, rows)},
			{"activation stride below a row", MatMulQ0(wt, y, ldy, w, rowBytes, xq, xRow-1, T, 0, rows)},
			{"output stride below range end", MatMulQ0(wt, y, rows-1, w, rowBytes, xq, xRow, T, 0, rows)},
			{"short y", MatMulQ0(wt, y[:len(y)-1], ldy, w, rowBytes, xq, xRow, T, 0, rows)},
			{"short y (T=1)", MatMulQ0(wt, y[:rows-1], ldy, w, rowBytes, xq, xRow, 1, 0, rows)},
			{"huge stride", MatMulQ0(wt, y, ldy, w, rowBytes, xq, math.MaxInt, T, 0, rows)},
			{"huge ldy", MatMulQ0(wt, y, math.MaxInt, w, rowBytes, xq, xRow, T, 0, rows)},
		}
		for _, b := range bad {
			if b.err == nil {
				t.Errorf("%v: %s: no error", wt, b.name)
			}
		}
		for i, v := range y {
			if math.Float32bits(v) != math.Float32bits(q0tSentinel) {
				t.Fatalf("%v: a failing call wrote y[%d]", wt, i)
			}
		}
		// Empty work is not an error, and T ≤ 1 ignores the strides.
		if err := MatMulQ0(wt, nil, 0, w, rowBytes, nil, 0, 0, 0, rows); err != nil {
			t.Errorf("%v: T = 0: %v", wt, err)
		}
		if err := MatMulQ0(wt, nil, 0, w, rowBytes, nil, 0, T, 3, 3); err != nil {
			t.Errorf("%v: empty row range: %v", wt, err)
		}
		if err := MatMulQ0(wt, y, 0, w, rowBytes, xq, 0, 1, 0, rows); err != nil {
			t.Errorf("%v: T = 1 with zero strides: %v", wt, err)
		}
	}
}

// TestMatMulQ0NoAllocs: decode-sized calls (rows of ≤ 512 blocks) and, after warm-up,
// batched calls do not allocate on the assembly path.
func TestMatMulQ0NoAllocs(t *testing.T) {
	if !UsingAsm() {
		t.Skip("the pure-Go twin allocates its scale table; only the assembly path is allocation-free")
	}
	r := newRNG(45)
	const rows, n, T = 16, 4096, 8
	for _, wt := range []Type{Q8_0, Q4_0} {
		rowBytes := n / 32 * BlockBytes(wt)
		xRow := n / 32 * BlockBytesQ8_0
		w := q0tWeights(r, wt, "randq", rows, n)
		xq := q0tActs(r, "normal", T, n, xRow)
		y := make([]float32, T*rows)
		for _, tt := range []int{1, T} {
			_ = MatMulQ0(wt, y, rows, w, rowBytes, xq, xRow, tt, 0, rows)
			if a := testing.AllocsPerRun(20, func() { _ = MatMulQ0(wt, y, rows, w, rowBytes, xq, xRow, tt, 0, rows) }); a != 0 {
				t.Errorf("%v, T = %d: %.1f allocations per call", wt, tt, a)
			}
		}
	}
}

// FuzzMatMulQ0 runs random shapes and bytes through MatMulQ0 and compares each output with
// the one-row kernel bit for bit.
func FuzzMatMulQ0(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint8(3), uint8(0), uint8(5), false)
	f.Add(uint64(2), uint8(4), uint8(9), uint8(2), uint8(9), true)
	f.Add(uint64(3), uint8(2), uint8(33), uint8(1), uint8(4), false)
	f.Fuzz(func(t *testing.T, seed uint64, nbU, tU, r0U, r1U uint8, q4 bool) {
		r := newRNG(seed)
		wt := Q8_0
		if q4 {
			wt = Q4_0
		}
		nb := 1 + int(nbU%40)
		T := int(tU % 40)
		rows := 12
		r0, r1 := int(r0U)%rows, int(r1U)%(rows+1)
		if r1 < r0 {
			r0, r1 = r1, r0
		}
		n := 32 * nb
		xRow := nb*BlockBytesQ8_0 + int(seed%5)
		w := q0tWeights(r, wt, "raw", rows, n)
		xq := q0tActs(r, "raw", max(T, 1), n, xRow)
		checkQ0Tile(t, wt, w, rows, n, xq, xRow, T, r0, r1, "fuzz")
	})
}

// q0tExtTypes are the weight types MatMulQ0 handles beyond Q8_0 and Q4_0.
var q0tExtTypes = []Type{q0tQ5_0, q0tIQ4_NL, q0tQ4_1, q0tQ5_1}

// q0tExtWeights returns rows×n weights of the extension type wt: random quant bytes with
// random finite fp16 scales (normal, or Student-t for "student-t"; Q4_1/Q5_1 minimums
// likewise), or random bytes throughout for "raw" (scales may be subnormal, Inf or NaN).
func q0tExtWeights(r *rand.Rand, wt Type, kind string, rows, n int) []byte {
	wb, _, _ := q0tFormat(wt)
	nb := rows * n / 32
	w := make([]byte, nb*wb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	if kind == "raw" {
		return w
	}
	heavy := kind == "student-t"
	for b := 0; b < nb; b++ {
		binary.LittleEndian.PutUint16(w[b*wb:], randHalf(r, 0.02, heavy))
		if wt == q0tQ4_1 || wt == q0tQ5_1 {
			binary.LittleEndian.PutUint16(w[b*wb+2:], randHalf(r, 0.2, heavy))
		}
	}
	return w
}

// q0tExtActs returns T activation rows of n elements for wt (Q8_0, or Q8_1 for Q4_1/Q5_1),
// xRowBytes apart with random padding. "normal"/"student-t" quantize random floats (Q8_1's
// s = fp16(d·Σq)); "raw" has random quants (−128 included) and random finite scales.
func q0tExtActs(r *rand.Rand, wt Type, kind string, T, n, xRowBytes int) []byte {
	_, xb, _ := q0tFormat(wt)
	nb := n / 32
	xq := make([]byte, T*xRowBytes)
	for i := range xq {
		xq[i] = byte(r.Uint32())
	}
	for k := 0; k < T; k++ {
		row := xq[k*xRowBytes:]
		if kind == "raw" {
			for b := 0; b < nb; b++ {
				binary.LittleEndian.PutUint16(row[b*xb:], randHalf(r, 0.05, false))
				if xb == q0xBytesQ8_1 {
					binary.LittleEndian.PutUint16(row[b*xb+2:], randHalf(r, 2, false))
				}
			}
			continue
		}
		q8 := quantizeActs(Q8_0, randFloats(r, n, kind == "student-t", 1))
		for b := 0; b < nb; b++ {
			src := q8[b*BlockBytesQ8_0 : (b+1)*BlockBytesQ8_0]
			if xb == BlockBytesQ8_0 {
				copy(row[b*xb:], src)
				continue
			}
			dst := row[b*xb:]
			copy(dst[0:2], src[0:2])
			copy(dst[4:36], src[2:])
			var sum int32
			for _, q := range src[2:] {
				sum += int32(int8(q))
			}
			binary.LittleEndian.PutUint16(dst[2:], floatToHalf(halfToFloat(le16(src))*float32(sum)))
		}
	}
	return xq
}

// q0tExtDot is the one-row kernel each MatMulQ0 output of wt must equal for T tokens.
func q0tExtDot(wt Type, T int) func(n int, w, x []byte) float32 {
	switch wt {
	case q0tQ5_0:
		return DotQ5_0Q8_0
	case q0tIQ4_NL:
		if T == 1 {
			return DotIQ4_NLQ8_0
		}
		return DotIQ4_NLQ8_0Tiny
	case q0tQ4_1:
		return DotQ4_1Q8_1
	case q0tQ5_1:
		return DotQ5_1Q8_1
	}
	return kernelFor(wt)
}

// checkQ0TileExt is checkQ0Tile for any MatMulQ0 type, against q0tExtDot.
func checkQ0TileExt(t *testing.T, wt Type, w []byte, rows, n int, xq []byte, xRowBytes, T, r0, r1 int, what string) {
	t.Helper()
	wb, xb, _ := q0tFormat(wt)
	rowBytes := n / 32 * wb
	ldy := rows + 3
	y := make([]float32, max(T, 1)*ldy)
	for i := range y {
		y[i] = q0tSentinel
	}
	if err := MatMulQ0(wt, y, ldy, w, rowBytes, xq, xRowBytes, T, r0, r1); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	dot := q0tExtDot(wt, T)
	for k := 0; k < max(T, 1); k++ {
		for i := 0; i < ldy; i++ {
			got := y[k*ldy+i]
			if T == 0 || i < r0 || i >= r1 {
				if math.Float32bits(got) != math.Float32bits(q0tSentinel) {
					t.Fatalf("%s: output (token %d, row %d) outside [%d, %d) × %d was written", what, k, i, r0, r1, T)
				}
				continue
			}
			want := dot(n, w[i*rowBytes:(i+1)*rowBytes], xq[k*xRowBytes:k*xRowBytes+n/32*xb])
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: T=%d token %d row %d: MatMulQ0 %g (%#08x), Dot %g (%#08x)", what, T, k, i, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

// TestMatMulQ0ExtBitIdentical: Q5_0, IQ4_NL, Q4_1 and Q5_1 outputs equal their one-row
// kernels bit for bit (IQ4_NL: the tinyBLAS order for T ≥ 2, vec_dot's for T = 1) for every
// tile shape and edge, row range and stride, on both paths.
func TestMatMulQ0ExtBitIdentical(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(46)
		type shape struct{ n, rows int }
		shapes := []shape{{32, 13}, {64, 9}, {96, 17}, {2048, 11}}
		Ts := []int{1, 2, 3, 4, 5, 7, 32, 33}
		for _, wt := range q0tExtTypes {
			_, xb, _ := q0tFormat(wt)
			for _, kind := range []string{"normal", "student-t", "raw"} {
				for _, sh := range shapes {
					w := q0tExtWeights(r, wt, kind, sh.rows, sh.n)
					for _, T := range Ts {
						if sh.n >= 2048 && T > 7 && testing.Short() {
							continue
						}
						xRowBytes := sh.n/32*xb + int(r.Uint32()%3)*17
						xq := q0tExtActs(r, wt, kind, T, sh.n, xRowBytes)
						for _, rg := range [][2]int{{0, sh.rows}, {1, sh.rows - 1}, {sh.rows / 2, sh.rows/2 + 1}, {2, 2}} {
							checkQ0TileExt(t, wt, w, sh.rows, sh.n, xq, xRowBytes, T, rg[0], rg[1], q0tName(wt)+"/"+kind)
						}
					}
				}
			}
		}
	})
}

// TestMatMulQ0ExtAsmMatchesGo: for the extension types the assembly tiles and the pure-Go
// path agree bit for bit on many rows and tokens (finite data).
func TestMatMulQ0ExtAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build: nothing to compare the pure-Go path with")
	}
	r := newRNG(47)
	const rows, n, T = 23, 256, 11
	for _, wt := range q0tExtTypes {
		wb, xb, _ := q0tFormat(wt)
		for _, kind := range []string{"normal", "student-t"} { // finite scales: NaN payloads may differ
			w := q0tExtWeights(r, wt, kind, rows, n)
			xq := q0tExtActs(r, wt, kind, T, n, n/32*xb)
			run := func(pure bool) []float32 {
				return withImpl(pure, func() []float32 {
					y := make([]float32, T*rows)
					if err := MatMulQ0(wt, y, rows, w, n/32*wb, xq, n/32*xb, T, 0, rows); err != nil {
						t.Fatal(err)
					}
					return y
				})
			}
			a, g := run(false), run(true)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(g[i]) {
					t.Fatalf("%s/%s: output %d: asm %g, Go %g", q0tName(wt), kind, i, a[i], g[i])
				}
			}
		}
	}
}

// TestMatMulQ0ExtErrors: argument errors of the extension types (activation sizes follow
// Q8_0 or Q8_1 blocks) are reported without writing.
func TestMatMulQ0ExtErrors(t *testing.T) {
	r := newRNG(48)
	const rows, n, T = 8, 64, 3
	for _, wt := range q0tExtTypes {
		wb, xb, _ := q0tFormat(wt)
		rowBytes, xRow := n/32*wb, n/32*xb
		w := q0tExtWeights(r, wt, "normal", rows, n)
		xq := q0tExtActs(r, wt, "normal", T, n, xRow)
		y := make([]float32, T*rows)
		for i := range y {
			y[i] = q0tSentinel
		}
		bad := map[string]error{
			"row bytes not a block multiple": MatMulQ0(wt, y, rows, w, rowBytes+1, xq, xRow, T, 0, rows),
			"short activations (T=1)":        MatMulQ0(wt, y, rows, w, rowBytes, xq[:xRow-1], xRow, 1, 0, rows),
			"short activations":              MatMulQ0(wt, y, rows, w, rowBytes, xq[:len(xq)-1], xRow, T, 0, rows),
			"activation stride below a row":  MatMulQ0(wt, y, rows, w, rowBytes, xq, xRow-1, T, 0, rows),
			"range past weights":             MatMulQ0(wt, y, rows, w, rowBytes, xq, xRow, 1, 0, rows+1),
			"short y":                        MatMulQ0(wt, y[:len(y)-1], rows, w, rowBytes, xq, xRow, T, 0, rows),
		}
		for name, err := range bad {
			if err == nil {
				t.Errorf("%s: %s: no error", q0tName(wt), name)
			}
		}
		for i, v := range y {
			if math.Float32bits(v) != math.Float32bits(q0tSentinel) {
				t.Fatalf("%s: a failing call wrote y[%d]", q0tName(wt), i)
			}
		}
	}
	for _, bt := range []Type{Q4_K, Type(9), Type(21)} {
		if err := MatMulQ0(bt, make([]float32, 8), 8, make([]byte, 1024), 128, make([]byte, 1024), 128, 1, 0, 1); err == nil {
			t.Errorf("type %d: no error", uint32(bt))
		}
	}
}

// TestMatMulQ0ExtNoAllocs: batched extension-type calls do not allocate after warm-up.
func TestMatMulQ0ExtNoAllocs(t *testing.T) {
	if !UsingAsm() {
		t.Skip("only the assembly path is checked for allocations")
	}
	r := newRNG(49)
	const rows, n, T = 16, 4096, 8
	for _, wt := range q0tExtTypes {
		wb, xb, _ := q0tFormat(wt)
		w := q0tExtWeights(r, wt, "normal", rows, n)
		xq := q0tExtActs(r, wt, "normal", T, n, n/32*xb)
		y := make([]float32, T*rows)
		for _, tt := range []int{1, T} {
			_ = MatMulQ0(wt, y, rows, w, n/32*wb, xq, n/32*xb, tt, 0, rows)
			if a := testing.AllocsPerRun(20, func() { _ = MatMulQ0(wt, y, rows, w, n/32*wb, xq, n/32*xb, tt, 0, rows) }); a != 0 {
				t.Errorf("%s, T = %d: %.1f allocations per call", q0tName(wt), tt, a)
			}
		}
	}
}

// FuzzMatMulQ0Ext runs random shapes and bytes of the extension types through MatMulQ0 and
// compares each output with its one-row kernel bit for bit.
func FuzzMatMulQ0Ext(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint8(3), uint8(0), uint8(5), uint8(0))
	f.Add(uint64(2), uint8(4), uint8(9), uint8(2), uint8(9), uint8(1))
	f.Add(uint64(3), uint8(2), uint8(33), uint8(1), uint8(4), uint8(2))
	f.Add(uint64(4), uint8(7), uint8(1), uint8(0), uint8(12), uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, nbU, tU, r0U, r1U, typU uint8) {
		r := newRNG(seed)
		wt := q0tExtTypes[int(typU)%len(q0tExtTypes)]
		_, xb, _ := q0tFormat(wt)
		nb := 1 + int(nbU%40)
		T := int(tU % 40)
		rows := 12
		r0, r1 := int(r0U)%rows, int(r1U)%(rows+1)
		if r1 < r0 {
			r0, r1 = r1, r0
		}
		n := 32 * nb
		xRow := nb*xb + int(seed%5)
		w := q0tExtWeights(r, wt, "raw", rows, n)
		xq := q0tExtActs(r, wt, "raw", max(T, 1), n, xRow)
		checkQ0TileExt(t, wt, w, rows, n, xq, xRow, T, r0, r1, "fuzz")
	})
}
