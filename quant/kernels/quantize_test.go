package kernels

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

func TestHalfConversionGolden(t *testing.T) {
	g := loadGolden(t, "F16", 2)
	var n, bad int
	for _, c := range g.Cases {
		for i, x := range c.X {
			want := binary.LittleEndian.Uint16(c.Q[2*i:])
			if got := floatToHalf(x); got != want {
				if bad < 10 {
					t.Errorf("%s[%d]: floatToHalf(%g = %#08x) = %#04x, ggml %#04x", c.Name, i, x, math.Float32bits(x), got, want)
				}
				bad++
			}
			if got := halfToFloat(want); math.Float32bits(got) != math.Float32bits(c.Y[i]) {
				if bad < 10 {
					t.Errorf("%s[%d]: halfToFloat(%#04x) = %#08x, ggml %#08x", c.Name, i, want, math.Float32bits(got), math.Float32bits(c.Y[i]))
				}
				bad++
			}
			n++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d fp16 conversions differ from ggml", bad, n)
	}
	t.Logf("%d fp16 conversions bit-exact with ggml", n)

	// Every finite binary16 value survives a round trip.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue // NaN
		}
		if got := floatToHalf(halfToFloat(uint16(h))); got != uint16(h) {
			t.Fatalf("round trip of %#04x gave %#04x", h, got)
		}
	}
}

func TestBF16WidenGolden(t *testing.T) {
	g := loadGolden(t, "BF16", 2)
	for _, c := range g.Cases {
		for i := range c.Y {
			h := binary.LittleEndian.Uint16(c.Q[2*i:])
			if got := bf16ToFloat(h); math.Float32bits(got) != math.Float32bits(c.Y[i]) {
				t.Fatalf("%s[%d]: bf16ToFloat(%#04x) = %#08x, ggml %#08x", c.Name, i, h, math.Float32bits(got), math.Float32bits(c.Y[i]))
			}
		}
	}
}

// TestQuantizeGolden: both quantizers, both paths, bit-exact against ggml's CPU from_float
// on every row of every case (row by row and whole matrices at once).
func TestQuantizeGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		typ  Type
		fn   func([]byte, []float32)
	}{
		{"Q8_0.cpu_from_float", Q8_0, QuantizeRowQ8_0},
		{"Q8_K.cpu_from_float", Q8_K, QuantizeRowQ8K},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			g := loadGolden(t, tc.file, BlockBytes(tc.typ))
			forEachImpl(t, func(t *testing.T) {
				for _, c := range g.Cases {
					for r := 0; r < c.Rows; r++ {
						x := c.X[r*c.Cols : (r+1)*c.Cols]
						want := c.Q[r*c.RowBytes : (r+1)*c.RowBytes]
						got := bytes.Repeat([]byte{0xa5}, c.RowBytes+7)
						tc.fn(got, x)
						if !bytes.Equal(got[:c.RowBytes], want) {
							i := firstDiff(got, want)
							t.Fatalf("%s row %d: first difference at byte %d (block %d): got %#02x, ggml %#02x",
								c.Name, r, i, i/BlockBytes(tc.typ), got[i], want[i])
						}
						if !bytes.Equal(got[c.RowBytes:], bytes.Repeat([]byte{0xa5}, 7)) {
							t.Fatalf("%s row %d: wrote past the row", c.Name, r)
						}
					}
					all := make([]byte, len(c.Q))
					tc.fn(all, c.X)
					if !bytes.Equal(all, c.Q) {
						t.Fatalf("%s: whole-matrix quantization differs from ggml", c.Name)
					}
				}
			})
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range b {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// quantizeInputs returns test rows of n floats: normal, Student-t, rounding ties, constant,
// zero blocks, tiny and huge magnitudes, and equal-magnitude maxima of opposite signs.
func quantizeInputs(n int, seed uint64) map[string][]float32 {
	r := newRNG(seed)
	in := map[string][]float32{
		"normal":    randFloats(r, n, false, 1),
		"student_t": randFloats(r, n, true, 1),
		"tiny":      randFloats(r, n, false, 1e-30),
		"huge":      randFloats(r, n, true, 1e30),
	}
	ties := make([]float32, n)
	for i := range ties {
		ties[i] = float32(r.IntN(253)-126) + 0.5
		if i%32 == 0 {
			ties[i] = 127
		}
	}
	in["ties"] = ties
	zeroBlocks := randFloats(r, n, false, 3)
	for i := 0; i < n; i += 64 {
		clear(zeroBlocks[i:min(i+32, n)])
	}
	if n >= 512 {
		clear(zeroBlocks[256:512])
	}
	in["zero_blocks"] = zeroBlocks
	signs := randFloats(r, n, false, 1)
	for i := 0; i+256 <= n; i += 256 {
		signs[i+17], signs[i+200] = -9, 9 // first max is negative
		if i/256%2 == 1 {
			signs[i+17], signs[i+200] = 9, -9
		}
	}
	in["opposite_maxima"] = signs
	constant := make([]float32, n)
	for i := range constant {
		constant[i] = -2.75
	}
	in["constant"] = constant
	return in
}

func TestQuantizeAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	for _, n := range []int{256, 512, 768, 1280, 4096} {
		for name, x := range quantizeInputs(n, uint64(n)) {
			for _, at := range []Type{Q8_0, Q8_K} {
				fn := QuantizeRowQ8_0
				if at == Q8_K {
					fn = QuantizeRowQ8K
				}
				want := make([]byte, n/BlockSize(at)*BlockBytes(at))
				got := make([]byte, len(want))
				withImpl(true, func() int { fn(want, x); return 0 })
				withImpl(false, func() int { fn(got, x); return 0 })
				if !bytes.Equal(got, want) {
					i := firstDiff(got, want)
					t.Fatalf("%v n=%d %s: asm differs from pure Go at byte %d: %#02x vs %#02x", at, n, name, i, got[i], want[i])
				}
			}
		}
	}
	// Q8_0 on block counts that are not multiples of 8.
	r := newRNG(7)
	for nb := 1; nb <= 19; nb++ {
		x := randFloats(r, 32*nb, true, 2)
		want := make([]byte, 34*nb)
		got := make([]byte, 34*nb)
		withImpl(true, func() int { QuantizeRowQ8_0(want, x); return 0 })
		withImpl(false, func() int { QuantizeRowQ8_0(got, x); return 0 })
		if !bytes.Equal(got, want) {
			t.Fatalf("Q8_0 nb=%d: asm differs from pure Go", nb)
		}
	}
}

// TestQuantizeQ8KProperties checks the Q8_K invariants independently of ggml: bsums equal
// the sums of the quants, the first max maps to −127, and d·q reconstructs x.
func TestQuantizeQ8KProperties(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for name, x := range quantizeInputs(1024, 99) {
			q := make([]byte, 4*BlockBytesQ8_K)
			QuantizeRowQ8K(q, x)
			for b := 0; b < 4; b++ {
				blk := q[b*BlockBytesQ8_K:]
				xb := x[b*256 : b*256+256]
				d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
				var amax float32
				first := -1
				for j, v := range xb {
					if a := float32(math.Abs(float64(v))); a > amax {
						amax, first = a, j
					}
				}
				for g := 0; g < 16; g++ {
					var s int
					for j := 0; j < 16; j++ {
						s += int(int8(blk[4+16*g+j]))
					}
					if got := int(int16(binary.LittleEndian.Uint16(blk[260+2*g:]))); got != s {
						t.Fatalf("%s block %d: bsum[%d] = %d, quants sum to %d", name, b, g, got, s)
					}
				}
				if first < 0 {
					if d != 0 {
						t.Fatalf("%s block %d: zero block has d = %g", name, b, d)
					}
					continue
				}
				if q := int8(blk[4+first]); q != -127 {
					t.Fatalf("%s block %d: first max x[%d] = %g quantized to %d, want -127", name, b, first, xb[first], q)
				}
				for j, v := range xb {
					rec := float64(d) * float64(int8(blk[4+j]))
					if math.Abs(rec-float64(v)) > 0.5001*math.Abs(float64(d))+1e-6*math.Abs(float64(v)) {
						t.Fatalf("%s block %d: x[%d] = %g reconstructs to %g (d = %g)", name, b, j, v, rec, d)
					}
				}
			}
		}
	})
}

func TestQuantizeLengthPanics(t *testing.T) {
	expectLengthPanic(t, "QuantizeRowQ8_0 odd n", func() { QuantizeRowQ8_0(make([]byte, 100), make([]float32, 33)) })
	expectLengthPanic(t, "QuantizeRowQ8_0 short dst", func() { QuantizeRowQ8_0(make([]byte, 67), make([]float32, 64)) })
	expectLengthPanic(t, "QuantizeRowQ8K odd n", func() { QuantizeRowQ8K(make([]byte, 600), make([]float32, 300)) })
	expectLengthPanic(t, "QuantizeRowQ8K short dst", func() { QuantizeRowQ8K(make([]byte, 291), make([]float32, 256)) })
	QuantizeRowQ8_0(nil, nil) // empty input is fine
	QuantizeRowQ8K(nil, nil)
}

func expectLengthPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("%s: no panic", what)
		}
		if _, ok := r.(*LengthError); !ok {
			t.Fatalf("%s: panic %v (%T), want *LengthError", what, r, r)
		}
	}()
	f()
}
