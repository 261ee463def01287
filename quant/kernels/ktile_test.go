package kernels_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// Tests of MatMulK: every output bit-identical to the one-row Dot kernel of the same
// implementation (assembly and pure Go), outputs outside the range untouched, the argument
// errors, allocation-free steady state, and a fuzz test. (ktile_ref_test.go checks the
// outputs against a float64 reference.)

var ktTypes = []kernels.Type{kernels.Q4_K, kernels.Q5_K, kernels.Q6_K, kernels.Q2_K, kernels.Q3_K, kernels.IQ4_XS}

// ktBlockBytes returns the super-block bytes of a MatMulK weight type (kernels.BlockBytes
// does not know Q2_K, Q3_K and IQ4_XS).
func ktBlockBytes(t kernels.Type) int {
	switch t {
	case kernels.Q2_K:
		return kernels.BlockBytesQ2_K
	case kernels.Q3_K:
		return kernels.BlockBytesQ3_K
	case kernels.IQ4_XS:
		return kernels.BlockBytesIQ4_XS
	}
	return kernels.BlockBytes(t)
}

// ktName names a MatMulK weight type.
func ktName(t kernels.Type) string { return ktGGML(t).String() }

// ktSentinel marks outputs MatMulK must not write.
var ktSentinel = math.Float32frombits(0x7fc0beef)

func ktRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d)) }

func ktDot(t kernels.Type) func(n int, w, x []byte) float32 {
	switch t {
	case kernels.Q4_K:
		return kernels.DotQ4_KQ8K
	case kernels.Q5_K:
		return kernels.DotQ5_KQ8K
	case kernels.Q2_K:
		return kernels.DotQ2_KQ8K
	case kernels.Q3_K:
		return kernels.DotQ3_KQ8K
	case kernels.IQ4_XS:
		return kernels.DotIQ4_XSQ8K
	}
	return kernels.DotQ6_KQ8K
}

func ktGGML(t kernels.Type) gguf.GGMLType {
	switch t {
	case kernels.Q4_K:
		return gguf.TypeQ4_K
	case kernels.Q5_K:
		return gguf.TypeQ5_K
	case kernels.Q2_K:
		return gguf.TypeQ2_K
	case kernels.Q3_K:
		return gguf.TypeQ3_K
	case kernels.IQ4_XS:
		return gguf.TypeIQ4_XS
	}
	return gguf.TypeQ6_K
}

// ktFloats draws n values, normal or Student-t with 3 degrees of freedom, times scale.
func ktFloats(r *rand.Rand, n int, heavy bool, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		v := r.NormFloat64()
		if heavy {
			var chi2 float64
			for k := 0; k < 3; k++ {
				z := r.NormFloat64()
				chi2 += z * z
			}
			v /= math.Sqrt(chi2 / 3)
		}
		x[i] = float32(v * scale)
	}
	return x
}

// ktHalf returns a random finite normal fp16 value of magnitude around scale.
func ktHalf(r *rand.Rand, scale float64) uint16 {
	v := math.Abs(r.NormFloat64()*scale) + 6.2e-5
	v = min(v, 60000)
	if r.Uint32()&1 == 1 {
		v = -v
	}
	return quant.FP32ToFP16(float32(v))
}

// ktWeights returns rows×n weights of type wt: "normal" and "student-t" quantize random
// floats (per-row scale drawn from a wide log-normal range) with quant.Quantize; "raw" is
// random bytes with random finite fp16 scales.
func ktWeights(tb testing.TB, r *rand.Rand, wt kernels.Type, kind string, rows, n int) []byte {
	tb.Helper()
	bs := ktBlockBytes(wt)
	w := make([]byte, rows*n/kernels.QK_K*bs)
	if kind == "raw" {
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		offs := []int{0, 2}
		switch wt {
		case kernels.Q6_K:
			offs = []int{208}
		case kernels.Q2_K:
			offs = []int{80, 82}
		case kernels.Q3_K:
			offs = []int{108}
		case kernels.IQ4_XS:
			offs = []int{0}
		}
		for b := 0; b < len(w)/bs; b++ {
			for _, o := range offs {
				binary.LittleEndian.PutUint16(w[b*bs+o:], ktHalf(r, 0.01*math.Exp(2*r.NormFloat64())))
			}
		}
		return w
	}
	src := make([]float32, 0, rows*n)
	for i := 0; i < rows; i++ {
		src = append(src, ktFloats(r, n, kind == "student-t", 0.02*math.Exp(1.5*r.NormFloat64()))...)
	}
	if err := quant.Quantize(ktGGML(wt), w, src, rows, n, nil); err != nil {
		tb.Fatalf("quantizing %v: %v", wt, err)
	}
	return w
}

// ktActs returns T Q8_K activation rows of n elements, xRowBytes apart (padding random):
// QuantizeRowQ8K of normal or Student-t floats, or for "raw" random bytes throughout
// (quants include −128, bsums arbitrary) with random finite scales.
func ktActs(r *rand.Rand, kind string, T, n, xRowBytes int) []byte {
	xq := make([]byte, max(T, 1)*xRowBytes)
	for i := range xq {
		xq[i] = byte(r.Uint32())
	}
	nb := n / kernels.QK_K
	for k := 0; k < max(T, 1); k++ {
		row := xq[k*xRowBytes : k*xRowBytes+nb*kernels.BlockBytesQ8_K]
		if kind == "raw" {
			for b := 0; b < nb; b++ {
				binary.LittleEndian.PutUint32(row[b*kernels.BlockBytesQ8_K:], math.Float32bits(float32(r.NormFloat64()*0.05)))
			}
			continue
		}
		kernels.QuantizeRowQ8K(row, ktFloats(r, n, kind == "student-t", 1))
	}
	return xq
}

// ktCheck runs MatMulK over [r0, r1) × T and compares every output bit for bit with the
// one-row kernel of the same implementation; outputs outside the range must stay untouched.
func ktCheck(t *testing.T, wt kernels.Type, w []byte, rows, n int, xq []byte, xRowBytes, T, r0, r1 int, what string) {
	t.Helper()
	rowBytes := n / kernels.QK_K * ktBlockBytes(wt)
	ldy := rows + 3
	y := make([]float32, max(T, 1)*ldy)
	for i := range y {
		y[i] = ktSentinel
	}
	if err := kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, xRowBytes, T, r0, r1); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	dot := ktDot(wt)
	for k := 0; k < max(T, 1); k++ {
		for i := 0; i < ldy; i++ {
			got := y[k*ldy+i]
			if i < r0 || i >= r1 || k >= T {
				if math.Float32bits(got) != math.Float32bits(ktSentinel) {
					t.Fatalf("%s: output (token %d, row %d) outside [%d, %d) × %d was written", what, k, i, r0, r1, T)
				}
				continue
			}
			want := dot(n, w[i*rowBytes:(i+1)*rowBytes], xq[k*xRowBytes:])
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: token %d row %d (of T = %d, rows [%d, %d)): MatMulK %g (%#08x), Dot %g (%#08x)",
					what, k, i, T, r0, r1, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

// ktImpls runs f with the pure-Go kernels and, where available, with assembly.
func ktImpls(t *testing.T, f func(t *testing.T, pure bool)) {
	t.Helper()
	t.Run("purego", func(t *testing.T) {
		kernels.SetPureGo(true)
		defer kernels.SetPureGo(false)
		f(t, true)
	})
	if kernels.HasAsm() {
		t.Run("asm", func(t *testing.T) { f(t, false) })
	} else {
		t.Log("no assembly kernels on this machine/build; only the pure-Go path was tested")
	}
}

func TestMatMulKBitIdentical(t *testing.T) {
	ktImpls(t, func(t *testing.T, pure bool) {
		r := ktRNG(51)
		type shape struct{ n, rows int }
		shapes := []shape{{256, 9}, {2048, 5}, {16384, 3}}
		Ts := []int{1, 2, 3, 4, 5, 7, 32, 33}
		for _, wt := range ktTypes {
			for _, kind := range []string{"normal", "student-t", "raw"} {
				for _, sh := range shapes {
					w := ktWeights(t, r, wt, kind, sh.rows, sh.n)
					for _, T := range Ts {
						if sh.n == 16384 && T > 7 && (pure || testing.Short()) {
							continue // the pure-Go twin is slow; the tile edges are covered above
						}
						xRowBytes := sh.n/kernels.QK_K*kernels.BlockBytesQ8_K + int(r.Uint32()%3)*13
						xq := ktActs(r, kind, T, sh.n, xRowBytes)
						ranges := [][2]int{{0, sh.rows}, {1, sh.rows}, {sh.rows / 2, sh.rows/2 + 1}, {2, 2}}
						if sh.rows > 4 {
							ranges = append(ranges, [2]int{1, sh.rows - 1}, [2]int{2, sh.rows - 2})
						}
						for _, rg := range ranges {
							ktCheck(t, wt, w, sh.rows, sh.n, xq, xRowBytes, T, rg[0], rg[1], ktName(wt)+"/"+kind)
						}
					}
				}
			}
		}
	})
}

// TestMatMulKManyTokens covers token counts that span several chunks and every tile width
// (T up to 150 with rows of 2048 elements: one chunk holds 112 tokens) on the current
// implementation.
func TestMatMulKManyTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	ktImpls(t, func(t *testing.T, pure bool) {
		r := ktRNG(52)
		const n, rows = 2048, 3
		Ts := []int{13, 24, 25, 150}
		if pure {
			Ts = []int{13, 25}
		}
		for _, wt := range ktTypes {
			w := ktWeights(t, r, wt, "student-t", rows, n)
			for _, T := range Ts {
				xRow := n / kernels.QK_K * kernels.BlockBytesQ8_K
				xq := ktActs(r, "normal", T, n, xRow)
				ktCheck(t, wt, w, rows, n, xq, xRow, T, 0, rows, ktName(wt)+"/many")
			}
		}
	})
}

// TestMatMulKAsmMatchesGo: the assembly and pure-Go paths of MatMulK agree bit for bit.
func TestMatMulKAsmMatchesGo(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build: nothing to compare the pure-Go path with")
	}
	r := ktRNG(53)
	const rows, n, T = 11, 512, 19
	for _, wt := range ktTypes {
		for _, kind := range []string{"normal", "student-t", "raw"} {
			w := ktWeights(t, r, wt, kind, rows, n)
			xRow := n / kernels.QK_K * kernels.BlockBytesQ8_K
			xq := ktActs(r, kind, T, n, xRow)
			rowBytes := n / kernels.QK_K * ktBlockBytes(wt)
			run := func(pure bool) []float32 {
				kernels.SetPureGo(pure)
				defer kernels.SetPureGo(false)
				y := make([]float32, T*rows)
				if err := kernels.MatMulK(wt, y, rows, w, rowBytes, xq, xRow, T, 0, rows); err != nil {
					t.Fatal(err)
				}
				return y
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

func TestMatMulKErrors(t *testing.T) {
	r := ktRNG(54)
	const rows, n, T = 6, 512, 3
	for _, wt := range ktTypes {
		rowBytes := n / kernels.QK_K * ktBlockBytes(wt)
		xRow := n / kernels.QK_K * kernels.BlockBytesQ8_K
		w := ktWeights(t, r, wt, "raw", rows, n)
		xq := ktActs(r, "normal", T, n, xRow)
		ldy := rows
		y := make([]float32, T*ldy)
		for i := range y {
			y[i] = ktSentinel
		}
		bad := []struct {
			name string
			err  error
		}{
			{"unsupported type", kernels.MatMulK(kernels.Q8_0, y, ldy, w, rowBytes, xq, xRow, T, 0, rows)},
			{"row bytes not a block multiple", kernels.MatMulK(wt, y, ldy, w, rowBytes-1, xq, xRow, T, 0, rows)},
			{"zero row bytes", kernels.MatMulK(wt, y, ldy, w, 0, xq, xRow, T, 0, rows)},
			{"negative row bytes", kernels.MatMulK(wt, y, ldy, w, -rowBytes, xq, xRow, T, 0, rows)},
			{"negative T", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, xRow, -1, 0, rows)},
			{"negative start", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, xRow, T, -1, rows)},
			{"reversed range", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, xRow, T, 4, 3)},
			{"range past weights", kernels.MatMulK(wt, make([]float32, T*(rows+1)), rows+1, w, rowBytes, xq, xRow, T, 0, rows+1)},
			{"short activations (T=1)", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq[:xRow-1], xRow, 1, 0, rows)},
			{"short activations", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq[:len(xq)-1], xRow, T, 0, rows)},
			{"activation stride below a row", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, xRow-1, T, 0, rows)},
			{"output stride below range end", kernels.MatMulK(wt, y, rows-1, w, rowBytes, xq, xRow, T, 0, rows)},
			{"short y", kernels.MatMulK(wt, y[:len(y)-1], ldy, w, rowBytes, xq, xRow, T, 0, rows)},
			{"short y (T=1)", kernels.MatMulK(wt, y[:rows-1], ldy, w, rowBytes, xq, xRow, 1, 0, rows)},
			{"huge stride", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, math.MaxInt, T, 0, rows)},
			{"huge ldy", kernels.MatMulK(wt, y, math.MaxInt, w, rowBytes, xq, xRow, T, 0, rows)},
			{"huge row bytes", kernels.MatMulK(wt, y, ldy, w, math.MaxInt/ktBlockBytes(wt)*ktBlockBytes(wt), xq, xRow, T, 0, rows)},
			{"huge range end", kernels.MatMulK(wt, y, ldy, w, rowBytes, xq, xRow, T, 0, math.MaxInt)},
		}
		for _, b := range bad {
			if b.err == nil {
				t.Errorf("%v: %s: no error", wt, b.name)
			}
		}
		for i, v := range y {
			if math.Float32bits(v) != math.Float32bits(ktSentinel) {
				t.Fatalf("%v: a failing call wrote y[%d]", wt, i)
			}
		}
		// Empty work is not an error, and T ≤ 1 ignores the strides.
		if err := kernels.MatMulK(wt, nil, 0, w, rowBytes, nil, 0, 0, 0, rows); err != nil {
			t.Errorf("%v: T = 0: %v", wt, err)
		}
		if err := kernels.MatMulK(wt, nil, 0, w, rowBytes, nil, 0, T, 3, 3); err != nil {
			t.Errorf("%v: empty row range: %v", wt, err)
		}
		if err := kernels.MatMulK(wt, y, 0, w, rowBytes, xq, 0, 1, 0, rows); err != nil {
			t.Errorf("%v: T = 1 with zero strides: %v", wt, err)
		}
	}
}

// TestMatMulKNoAllocs: after warm-up, calls on the assembly path do not allocate.
func TestMatMulKNoAllocs(t *testing.T) {
	if !kernels.UsingAsm() {
		t.Skip("only the assembly path is allocation-free")
	}
	r := ktRNG(55)
	const rows, n, T = 5, 2048, 13
	for _, wt := range ktTypes {
		rowBytes := n / kernels.QK_K * ktBlockBytes(wt)
		xRow := n / kernels.QK_K * kernels.BlockBytesQ8_K
		w := ktWeights(t, r, wt, "raw", rows, n)
		xq := ktActs(r, "normal", T, n, xRow)
		y := make([]float32, T*rows)
		for _, tt := range []int{1, T} {
			_ = kernels.MatMulK(wt, y, rows, w, rowBytes, xq, xRow, tt, 0, rows)
			if a := testing.AllocsPerRun(10, func() { _ = kernels.MatMulK(wt, y, rows, w, rowBytes, xq, xRow, tt, 0, rows) }); a != 0 {
				t.Errorf("%v, T = %d: %.1f allocations per call", wt, tt, a)
			}
		}
	}
}

// FuzzMatMulK runs random shapes and bytes through MatMulK and compares each output with the
// one-row kernel bit for bit.
func FuzzMatMulK(f *testing.F) {
	f.Add(uint64(1), uint8(1), uint8(3), uint8(0), uint8(5), uint8(0))
	f.Add(uint64(2), uint8(2), uint8(13), uint8(2), uint8(9), uint8(1))
	f.Add(uint64(3), uint8(3), uint8(33), uint8(1), uint8(4), uint8(2))
	f.Add(uint64(4), uint8(2), uint8(13), uint8(0), uint8(7), uint8(3))
	f.Add(uint64(5), uint8(4), uint8(9), uint8(2), uint8(6), uint8(4))
	f.Add(uint64(6), uint8(1), uint8(26), uint8(1), uint8(7), uint8(5))
	f.Fuzz(func(t *testing.T, seed uint64, nbU, tU, r0U, r1U, typU uint8) {
		r := ktRNG(seed)
		wt := ktTypes[int(typU)%len(ktTypes)]
		nb := 1 + int(nbU%6)
		T := int(tU % 40)
		rows := 7
		r0, r1 := int(r0U)%rows, int(r1U)%(rows+1)
		if r1 < r0 {
			r0, r1 = r1, r0
		}
		n := kernels.QK_K * nb
		xRow := nb*kernels.BlockBytesQ8_K + int(seed%5)
		w := ktWeights(t, r, wt, "raw", rows, n)
		xq := ktActs(r, "raw", T, n, xRow)
		ktCheck(t, wt, w, rows, n, xq, xRow, T, r0, r1, "fuzz")
	})
}
