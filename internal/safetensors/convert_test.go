package safetensors

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refF16 decodes binary16 from its definition in float64.
func refF16(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(m, -24)
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

// refE4M3 decodes float8 e4m3fn from its definition.
func refE4M3(b uint8) float64 {
	s := 1.0
	if b&0x80 != 0 {
		s = -1
	}
	e := int(b>>3) & 0xf
	m := float64(b & 7)
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		return s * m / 8 * math.Ldexp(1, -6)
	}
	return s * (1 + m/8) * math.Ldexp(1, e-7)
}

// refE5M2 decodes float8 e5m2 from its definition (bias 15, IEEE-style inf/NaN).
func refE5M2(b uint8) float64 {
	s := 1.0
	if b&0x80 != 0 {
		s = -1
	}
	e := int(b>>2) & 0x1f
	m := float64(b & 3)
	switch e {
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * m / 4 * math.Ldexp(1, -14)
	}
	return s * (1 + m/4) * math.Ldexp(1, e-15)
}

func sameFloat(a float32, b float64) bool {
	if math.IsNaN(b) {
		return a != a
	}
	if a == 0 && b == 0 {
		return math.Signbit(float64(a)) == math.Signbit(b)
	}
	return float64(a) == b
}

func TestDecodeExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if got, want := F16ToFloat32(uint16(h)), refF16(uint16(h)); !sameFloat(got, want) {
			t.Fatalf("F16ToFloat32(%#04x) = %g, want %g", h, got, want)
		}
		// bf16 is the top half of a float32: check against the definition via float64.
		bf := BF16ToFloat32(uint16(h))
		e := (h >> 7) & 0xff
		m := float64(h & 0x7f)
		sg := 1.0
		if h&0x8000 != 0 {
			sg = -1
		}
		var want float64
		switch e {
		case 0xff:
			want = math.Inf(int(sg))
			if m != 0 {
				want = math.NaN()
			}
		case 0:
			want = sg * math.Ldexp(m, -133)
		default:
			want = sg * math.Ldexp(1+m/128, e-127)
		}
		if !sameFloat(bf, want) {
			t.Fatalf("BF16ToFloat32(%#04x) = %g, want %g", h, bf, want)
		}
	}
	for b := 0; b < 256; b++ {
		if got, want := F8E4M3ToFloat32(uint8(b)), refE4M3(uint8(b)); !sameFloat(got, want) {
			t.Fatalf("F8E4M3ToFloat32(%#02x) = %g, want %g", b, got, want)
		}
		if got, want := F8E5M2ToFloat32(uint8(b)), refE5M2(uint8(b)); !sameFloat(got, want) {
			t.Fatalf("F8E5M2ToFloat32(%#02x) = %g, want %g", b, got, want)
		}
	}
	if F8E4M3ToFloat32(0x7e) != 448 || F8E4M3ToFloat32(0x01) != float32(math.Ldexp(1, -9)) {
		t.Fatal("e4m3fn extreme values wrong")
	}
}

// testValues returns random float32 values covering normal, heavy-tailed, tiny and huge
// magnitudes plus exact ties between neighbours.
func testValues(r *rand.Rand, n int) []float32 {
	out := make([]float32, 0, n+16)
	for i := 0; i < n; i++ {
		var v float64
		switch i % 4 {
		case 0:
			v = r.NormFloat64()
		case 1: // Student-t, 3 degrees of freedom
			z := r.NormFloat64()
			c := r.NormFloat64()*r.NormFloat64() + r.NormFloat64()*r.NormFloat64() + r.NormFloat64()*r.NormFloat64()
			v = z / math.Sqrt(math.Abs(c)/3+1e-30)
		case 2: // log-uniform magnitudes over the whole float32 range
			v = math.Ldexp(1+r.Float64(), r.IntN(300)-150)
			if r.IntN(2) == 0 {
				v = -v
			}
		case 3: // random bit patterns
			v = float64(math.Float32frombits(r.Uint32()))
		}
		out = append(out, float32(v))
	}
	out = append(out, 0, float32(math.Copysign(0, -1)), 65504, 65519.99, 65520, 448, 449, 463.9, 464, 500,
		float32(math.Ldexp(1, -25)), float32(math.Ldexp(1, -10)), float32(math.Ldexp(1.5, -9)), float32(math.Inf(1)))
	return out
}

type codeVal struct {
	v    float64
	code int
}

// codeTable lists the finite values of a format sorted by value.
func codeTable(codes int, decode func(int) float64) []codeVal {
	var tab []codeVal
	for c := 0; c < codes; c++ {
		if v := decode(c); !math.IsNaN(v) && !math.IsInf(v, 0) {
			tab = append(tab, codeVal{v, c})
		}
	}
	sort.Slice(tab, func(i, j int) bool { return tab[i].v < tab[j].v })
	return tab
}

// checkNearest verifies that code q is a correctly rounded (nearest, ties to even)
// encoding of f, in float64, among the finite values tab of a format.
func checkNearest(t *testing.T, name string, f float32, q int, tab []codeVal, decode func(int) float64, saturate float64) {
	t.Helper()
	x := float64(f)
	if saturate > 0 {
		x = math.Max(-saturate, math.Min(saturate, x))
	}
	got := decode(q)
	if math.IsNaN(x) {
		if !math.IsNaN(got) {
			t.Fatalf("%s(NaN) = %#x, not NaN", name, q)
		}
		return
	}
	i := sort.Search(len(tab), func(i int) bool { return tab[i].v >= x })
	best := math.Inf(1)
	var cands []codeVal
	for _, j := range []int{i - 1, i} {
		if j < 0 || j >= len(tab) {
			continue
		}
		d := math.Abs(tab[j].v - x)
		if d < best {
			best, cands = d, []codeVal{tab[j]}
		} else if d == best && tab[j].v != cands[0].v {
			cands = append(cands, tab[j])
		}
	}
	if math.Abs(got-x) != best {
		t.Fatalf("%s(%g) = %#x (%g), but %g is nearer", name, f, q, got, cands[0].v)
	}
	if len(cands) == 2 && q&1 == 1 {
		t.Fatalf("%s(%g) = %#x (%g): a tie must round to the even code", name, f, q, got)
	}
}

func TestEncodeNearestEven(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := testValues(r, 20000)
	f16 := func(c int) float64 { return refF16(uint16(c)) }
	e4 := func(c int) float64 { return refE4M3(uint8(c)) }
	f16Tab, e4Tab := codeTable(1<<16, f16), codeTable(256, e4)
	// Exact midpoints between neighbouring codes exercise ties-to-even.
	for _, tab := range [][]codeVal{f16Tab, e4Tab} {
		for i := 1; i < len(tab); i += 7 {
			vals = append(vals, float32((tab[i-1].v+tab[i].v)/2))
		}
	}
	for _, f := range vals {
		if math.IsInf(float64(f), 0) || math.Abs(float64(f)) >= 65520 {
			if q := Float32ToF16(f); q&0x7fff != 0x7c00 {
				t.Fatalf("Float32ToF16(%g) = %#x, want infinity", f, q)
			}
		} else {
			checkNearest(t, "Float32ToF16", f, int(Float32ToF16(f)), f16Tab, f16, 0)
		}
		checkNearest(t, "Float32ToF8E4M3", f, int(Float32ToF8E4M3(f)), e4Tab, e4, 448)
		// BF16: compare against the two float32 neighbours that have zero low halves.
		b := math.Float32bits(f)
		if f == f && !math.IsInf(float64(f), 0) {
			lo := math.Float32frombits(b &^ 0xffff)
			hi := math.Float32frombits((b &^ 0xffff) + 0x10000)
			got := BF16ToFloat32(Float32ToBF16(f))
			dl, dh := math.Abs(float64(f)-float64(lo)), math.Abs(float64(f)-float64(hi))
			want := lo
			if dh < dl || (dh == dl && (b>>16)&1 == 1) {
				want = hi
			}
			if got != want && !(math.IsInf(float64(got), 0) && math.IsInf(float64(want), 0)) {
				t.Fatalf("Float32ToBF16(%g) -> %g, want %g", f, got, want)
			}
		}
	}
	// Round trip of every representable value.
	for c := 0; c < 1<<16; c++ {
		v := F16ToFloat32(uint16(c))
		if v == v && Float32ToF16(v) != uint16(c) {
			t.Fatalf("F16 round trip %#x -> %g -> %#x", c, v, Float32ToF16(v))
		}
		if bv := BF16ToFloat32(uint16(c)); bv == bv && Float32ToBF16(bv) != uint16(c) {
			t.Fatalf("BF16 round trip %#x", c)
		}
	}
	for c := 0; c < 256; c++ {
		v := F8E4M3ToFloat32(uint8(c))
		if v == v && Float32ToF8E4M3(v) != uint8(c) {
			t.Fatalf("E4M3 round trip %#x -> %g -> %#x", c, v, Float32ToF8E4M3(v))
		}
	}
	if Float32ToF8E4M3(float32(math.NaN()))&0x7f != 0x7f || Float32ToF16(float32(math.NaN()))&0x7c00 != 0x7c00 {
		t.Fatal("NaN not preserved")
	}
}
