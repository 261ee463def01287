package kernels

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// q0xKernel describes one exported kernel of dot_q0x.go for the tests below.
type q0xKernel struct {
	name   string
	dot    func(n int, w, x []byte) float32
	wb, xb int
	// elem decodes weight element e (0..31) of block wb as (integer quant, has min).
	elem func(wb []byte, e int) int32
}

func q0xNib(wb []byte, off, e int) int32 {
	if e < 16 {
		return int32(wb[off+e] & 15)
	}
	return int32(wb[off+e-16] >> 4)
}

func q0xHbit(wb []byte, off, e int) int32 {
	return int32(binary.LittleEndian.Uint32(wb[off:]) >> e & 1)
}

// q0xKernels decode their weights straight from the block layouts of llamacpp-facts §2.4.
var q0xKernels = []q0xKernel{
	{"DotQ5_0Q8_0", DotQ5_0Q8_0, 22, 34, func(wb []byte, e int) int32 { return q0xNib(wb, 6, e) + 16*q0xHbit(wb, 2, e) - 16 }},
	{"DotIQ4_NLQ8_0", DotIQ4_NLQ8_0, 18, 34, func(wb []byte, e int) int32 {
		return int32([16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}[q0xNib(wb, 2, e)])
	}},
	{"DotIQ4_NLQ8_0Tiny", DotIQ4_NLQ8_0Tiny, 18, 34, func(wb []byte, e int) int32 {
		return int32([16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}[q0xNib(wb, 2, e)])
	}},
	{"DotQ4_1Q8_1", DotQ4_1Q8_1, 20, 36, func(wb []byte, e int) int32 { return q0xNib(wb, 4, e) }},
	{"DotQ5_1Q8_1", DotQ5_1Q8_1, 24, 36, func(wb []byte, e int) int32 { return q0xNib(wb, 8, e) + 16*q0xHbit(wb, 4, e) }},
}

func (k q0xKernel) hasMin() bool { return k.xb == 36 }

// q0xHalf returns a random finite fp16 of magnitude about scale (normal range).
func q0xHalf(r *rand.Rand, scale float64) uint16 {
	v := r.NormFloat64() * scale
	v = math.Copysign(min(max(math.Abs(v), 6.2e-5), 60000), v)
	return q0xFloatToHalf(float32(v))
}

// q0xFloatToHalf rounds a normal-range float32 to fp16 (round to nearest even).
func q0xFloatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// q0xData returns nb random weight and activation blocks for k: random bytes (every
// activation byte, −128 included, unless q8Range) with random finite fp16 scales; heavy
// draws the scales from a Student-t-like wide range.
func q0xData(r *rand.Rand, k q0xKernel, nb int, heavy, q8Range bool) (w, x []byte) {
	w = make([]byte, nb*k.wb)
	x = make([]byte, nb*k.xb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for i := range x {
		x[i] = byte(r.Uint32())
		if q8Range && x[i] == 0x80 {
			x[i] = 0x81
		}
	}
	sc := func() float64 {
		if heavy {
			return math.Exp(2 * r.NormFloat64())
		}
		return 1
	}
	for b := 0; b < nb; b++ {
		binary.LittleEndian.PutUint16(w[b*k.wb:], q0xHalf(r, 0.02*sc()))
		binary.LittleEndian.PutUint16(x[b*k.xb:], q0xHalf(r, 0.01*sc()))
		if k.hasMin() {
			binary.LittleEndian.PutUint16(w[b*k.wb+2:], q0xHalf(r, 0.1*sc()))
			binary.LittleEndian.PutUint16(x[b*k.xb+2:], q0xHalf(r, 2*sc()))
		}
	}
	return w, x
}

// q0xRef returns the float64 dot product of nb blocks by the format definitions (weight
// d·q (+ m), activation d_x·q_x, the min term through the stored s) and Σ|terms| for the
// error bound.
func q0xRef(k q0xKernel, nb int, w, x []byte) (sum, mag float64) {
	for b := 0; b < nb; b++ {
		wb, xb := w[b*k.wb:], x[b*k.xb:]
		d := float64(halfToFloat(binary.LittleEndian.Uint16(wb))) * float64(halfToFloat(binary.LittleEndian.Uint16(xb)))
		off := 2
		if k.hasMin() {
			off = 4
			t := float64(halfToFloat(binary.LittleEndian.Uint16(wb[2:]))) * float64(halfToFloat(binary.LittleEndian.Uint16(xb[2:])))
			sum += t
			mag += math.Abs(t)
		}
		var s int64
		for e := 0; e < 32; e++ {
			s += int64(k.elem(wb, e)) * int64(int8(xb[off+e]))
		}
		sum += d * float64(s)
		mag += math.Abs(d * float64(s))
	}
	return sum, mag
}

// TestQ0xReference: both implementations against the float64 definition on random blocks
// (every activation byte, normal and wide scales). Tolerance: one float32 rounding per block
// term and per accumulation step, (nb+8)·4·2⁻²⁴·Σ|terms|.
func TestQ0xReference(t *testing.T) {
	for _, k := range q0xKernels {
		forEachImpl(t, func(t *testing.T) {
			for _, nb := range []int{1, 2, 3, 5, 8, 33, 128} {
				for _, heavy := range []bool{false, true} {
					r := newRNG(uint64(nb*10) + uint64(len(k.name)))
					w, x := q0xData(r, k, nb, heavy, false)
					got := k.dot(32*nb, w, x)
					ref, mag := q0xRef(k, nb, w, x)
					if tol := float64(nb+8) * 4 * u32 * mag; math.Abs(float64(got)-ref) > tol {
						t.Errorf("%s nb=%d heavy=%v: got %v, float64 reference %v (|Δ| %g > %g)", k.name, nb, heavy, got, ref, math.Abs(float64(got)-ref), tol)
					}
				}
			}
		})
	}
}

// TestQ0xAsmMatchesGo requires identical bits from the assembly and the pure-Go twins (no
// llama.cpp needed), on random bytes including activation −128, for many block counts (odd
// counts exercise IQ4_NL's tail).
func TestQ0xAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	sizes := []int{1, 2, 3, 4, 7, 8, 9, 31, 32, 33, 100, 255, 512}
	if !testing.Short() {
		sizes = append(sizes, 2049)
	}
	for _, k := range q0xKernels {
		for _, nb := range sizes {
			for _, heavy := range []bool{false, true} {
				r := newRNG(uint64(nb*31) + uint64(len(k.name)*7) + 1)
				for rep := 0; rep < 4; rep++ {
					w, x := q0xData(r, k, nb, heavy, false)
					asm := withImpl(false, func() float32 { return k.dot(32*nb, w, x) })
					pure := withImpl(true, func() float32 { return k.dot(32*nb, w, x) })
					if math.Float32bits(asm) != math.Float32bits(pure) {
						t.Errorf("%s nb=%d heavy=%v rep %d: asm %v (%08x), pure Go %v (%08x)", k.name, nb, heavy, rep, asm, math.Float32bits(asm), pure, math.Float32bits(pure))
					}
				}
			}
		}
	}
}

// TestQ0xExtremeQuants: blocks whose integer sums reach the largest magnitudes (all weights at
// the format's extreme, all activations ±127 or −128) must be exact in both paths: with d = 1
// every term is an integer far below 2^24, so the result is the exact integer sum.
func TestQ0xExtremeQuants(t *testing.T) {
	one := q0xFloatToHalf(1)
	for _, k := range q0xKernels {
		for _, wbyte := range []byte{0x00, 0xff, 0x88, 0x77} {
			for _, xq := range []int8{127, -127, -128} {
				const nb = 5
				w := make([]byte, nb*k.wb)
				x := make([]byte, nb*k.xb)
				for i := range w {
					w[i] = wbyte
				}
				for i := range x {
					x[i] = byte(xq)
				}
				for b := 0; b < nb; b++ {
					binary.LittleEndian.PutUint16(w[b*k.wb:], one)
					binary.LittleEndian.PutUint16(x[b*k.xb:], one)
					if k.hasMin() {
						binary.LittleEndian.PutUint16(w[b*k.wb+2:], one)
						binary.LittleEndian.PutUint16(x[b*k.xb+2:], one)
					}
				}
				want, _ := q0xRef(k, nb, w, x)
				forEachImpl(t, func(t *testing.T) {
					if got := k.dot(32*nb, w, x); float64(got) != want {
						t.Errorf("%s w=%#x x=%d: got %v, want %v", k.name, wbyte, xq, got, want)
					}
				})
			}
		}
	}
}

// TestQ0xDecoding pins each format's element decoding on a hand-built block: weight element
// e set to its largest code for e even and its smallest for e odd, activations 1.
func TestQ0xDecoding(t *testing.T) {
	one := q0xFloatToHalf(1)
	type tc struct {
		name string
		dot  func(n int, w, x []byte) float32
		w    []byte
		xb   int
		want float32
	}
	q8 := func(xb int) []byte {
		x := make([]byte, xb)
		binary.LittleEndian.PutUint16(x, one)
		for i := xb - 32; i < xb; i++ {
			x[i] = 1
		}
		return x
	}
	// Nibble bytes 0x0f: elements 0..15 (low nibbles) = 15, elements 16..31 (high) = 0.
	nibs := make([]byte, 16)
	for i := range nibs {
		nibs[i] = 0x0f
	}
	le := func(v uint16) []byte { return []byte{byte(v), byte(v >> 8)} }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	// qh = 0x0000ffff: high bit set on elements 0..15.
	qh := []byte{0xff, 0xff, 0, 0}
	two := q0xFloatToHalf(2)
	cases := []tc{
		// Q5_0: 16·(15|16 − 16) + 16·(0 − 16) = 16·15 − 256 = −16.
		{"Q5_0", DotQ5_0Q8_0, cat(le(one), qh, nibs), 34, -16},
		// IQ4_NL: 16·kv[15] + 16·kv[0] = 16·113 − 16·127 = −224.
		{"IQ4_NL", DotIQ4_NLQ8_0, cat(le(one), nibs), 34, -224},
		{"IQ4_NLTiny", DotIQ4_NLQ8_0Tiny, cat(le(one), nibs), 34, -224},
		// Q4_1 (m = 2, s = 1): 16·15 + 0 + 2·1 = 242.
		{"Q4_1", DotQ4_1Q8_1, cat(le(one), le(two), nibs), 36, 242},
		// Q5_1 (m = 2, s = 1): 16·31 + 16·0 + 2 = 498.
		{"Q5_1", DotQ5_1Q8_1, cat(le(one), le(two), qh, nibs), 36, 498},
	}
	for _, c := range cases {
		x := q8(c.xb)
		if c.xb == 36 {
			binary.LittleEndian.PutUint16(x[2:], one)
		}
		forEachImpl(t, func(t *testing.T) {
			if got := c.dot(32, c.w, x); got != c.want {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		})
	}
}

// TestQ0xLengths: n = 0 gives 0 without touching the buffers; a bad n or short buffer panics
// with a *LengthError naming the kernel.
func TestQ0xLengths(t *testing.T) {
	for _, k := range q0xKernels {
		forEachImpl(t, func(t *testing.T) {
			if got := k.dot(0, nil, nil); got != 0 {
				t.Errorf("%s(0) = %v", k.name, got)
			}
			w, x := make([]byte, 2*k.wb), make([]byte, 2*k.xb)
			for _, c := range []struct {
				n    int
				w, x []byte
			}{{31, w, x}, {-32, w, x}, {64, w[:2*k.wb-1], x}, {64, w, x[:2*k.xb-1]}, {96, w, x}, {math.MaxInt &^ 31, w, x}} {
				func() {
					defer func() {
						var le *LengthError
						p := recover()
						if err, ok := p.(error); !ok || !errors.As(err, &le) || le.Kernel != k.name {
							t.Errorf("%s n=%d len(w)=%d len(x)=%d: panic %v, want *LengthError", k.name, c.n, len(c.w), len(c.x), p)
						}
					}()
					k.dot(c.n, c.w, c.x)
				}()
			}
		})
	}
}

// FuzzQ0xDots feeds the kernels arbitrary bytes: a call panics with *LengthError exactly on a
// length violation, and otherwise the assembly and pure-Go results have identical bits (both
// NaN counts as equal: NaN payloads are not specified).
func FuzzQ0xDots(f *testing.F) {
	r := newRNG(5)
	for i, k := range q0xKernels {
		w, x := q0xData(r, k, 3, i%2 == 0, false)
		f.Add(uint8(i), uint16(96), uint16(len(w)), append(w, x...))
	}
	f.Add(uint8(1), uint16(33), uint16(1), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, sel uint8, n16 uint16, cut16 uint16, data []byte) {
		k := q0xKernels[int(sel)%len(q0xKernels)]
		cut := int(cut16) % (len(data) + 1)
		w, x := data[:cut], data[cut:]
		n := int(n16)
		valid := n%32 == 0 && len(w) >= n/32*k.wb && len(x) >= n/32*k.xb
		impls := []bool{true}
		if HasAsm() {
			impls = append(impls, false)
		}
		var res []float32
		for _, pure := range impls {
			v, p := callDot(pure, k.dot, n, w, x)
			if p != nil {
				if _, ok := p.(*LengthError); !ok || valid {
					t.Fatalf("%s n=%d pure=%v: unexpected panic %v", k.name, n, pure, p)
				}
				continue
			}
			if !valid {
				t.Fatalf("%s n=%d len(w)=%d len(x)=%d: no panic on a length violation", k.name, n, len(w), len(x))
			}
			res = append(res, v)
		}
		if len(res) == 2 {
			a, b := res[0], res[1]
			if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
				t.Fatalf("%s n=%d: pure Go %v (%08x), asm %v (%08x)", k.name, n, a, math.Float32bits(a), b, math.Float32bits(b))
			}
		}
	})
}
