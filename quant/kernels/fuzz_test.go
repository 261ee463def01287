package kernels

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// callDot calls an exported dot kernel and reports its result or its panic.
func callDot(pure bool, dot func(int, []byte, []byte) float32, n int, w, x []byte) (v float32, panicked any) {
	defer func() { panicked = recover() }()
	return withImpl(pure, func() float32 { return dot(n, w, x) }), nil
}

// FuzzDotKernels feeds every quantized dot kernel arbitrary bytes and lengths. A call must
// panic with *LengthError exactly when the documented length precondition fails; otherwise
// it must return, and the assembly and pure-Go results must agree within the float
// tolerance whenever the inputs keep every term finite (and, for Q8_0 activations, the
// quants are in the documented range [−127, 127]).
func FuzzDotKernels(f *testing.F) {
	r := newRNG(11)
	for i, wt := range quantTypes {
		at, _ := ActivationType(wt)
		w := randWeights(r, wt, 2, 0.5, i%2 == 0)
		x := quantizeActs(at, randFloats(r, 2*BlockSize(wt), true, 1))
		f.Add(uint8(i), uint16(2*BlockSize(wt)), uint16(len(w)), append(w, x...))
		f.Add(uint8(i), uint16(BlockSize(wt)), uint16(3), bytes.Repeat([]byte{0x80}, 700))
	}
	f.Add(uint8(0), uint16(31), uint16(0), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, sel uint8, n16 uint16, cut16 uint16, data []byte) {
		wt := quantTypes[int(sel)%len(quantTypes)]
		at, _ := ActivationType(wt)
		dot := kernelFor(wt)
		cut := int(cut16) % (len(data) + 1)
		w, x := data[:cut], data[cut:]
		n := int(n16)
		bs := BlockSize(wt)
		nb := n / bs
		valid := n%bs == 0 && len(w) >= nb*BlockBytes(wt) && len(x) >= nb*BlockBytes(at)

		impls := []bool{true}
		if HasAsm() {
			impls = append(impls, false)
		}
		var results []float32
		for _, pure := range impls {
			v, p := callDot(pure, dot, n, w, x)
			if p != nil {
				if _, ok := p.(*LengthError); !ok || valid {
					t.Fatalf("%v n=%d len(w)=%d len(x)=%d pure=%v: unexpected panic %v", wt, n, len(w), len(x), pure, p)
				}
				continue
			}
			if !valid {
				t.Fatalf("%v n=%d len(w)=%d len(x)=%d: no panic on a length violation", wt, n, len(w), len(x))
			}
			results = append(results, v)
		}
		if len(results) == 2 && (at != Q8_0 || q8ActsInRange(x, nb)) {
			s := termScale(wt, w, x, n)
			g, a := float64(results[0]), float64(results[1])
			if math.IsInf(s, 0) || math.IsNaN(s) || s > 1e30 || math.IsNaN(g) || math.IsNaN(a) || math.IsInf(g, 0) || math.IsInf(a, 0) {
				return
			}
			slack := float64(64*nb+64) * math.Ldexp(1, -149) // underflow in subnormal products
			if d := math.Abs(a - g); d > asmTol(nb)*s+slack {
				t.Fatalf("%v nb=%d: asm %.9g, purego %.9g, |diff| %.3g > %.3g", wt, nb, a, g, d, asmTol(nb)*s+slack)
			}
		}

		// MatVec over the same bytes: an error or a result, never a panic.
		out := make([]float32, 4)
		rowBytes := max(1, n/bs) * BlockBytes(wt)
		err := MatVec(wt, out, w, rowBytes, x, 0, int(sel)%5)
		if err == nil && len(x) < rowBytes/BlockBytes(wt)*BlockBytes(at) {
			t.Fatalf("MatVec accepted a short activation row")
		}
	})
}

// FuzzQuantize: the activation quantizers never panic on valid lengths, and for finite
// inputs whose magnitudes are 0 or within [1e-30, 1e30] the assembly output equals the
// pure-Go output byte for byte.
func FuzzQuantize(f *testing.F) {
	r := newRNG(12)
	seed := make([]byte, 1024)
	for i, v := range randFloats(r, 256, true, 3) {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(v))
	}
	f.Add(seed)
	f.Add([]byte{0, 0, 0x80, 0x7f}) // +Inf
	f.Add([]byte{1, 0, 0, 0})       // subnormal
	f.Add([]byte{0, 0, 0xc0, 0x7f}) // NaN
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		x := make([]float32, 256)
		comparable := true
		for i := range x {
			j := (4 * i) % (len(data) &^ 3)
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[j:]))
			a := math.Abs(float64(x[i]))
			if math.IsNaN(a) || (a != 0 && (a < 1e-30 || a > 1e30)) {
				comparable = false
			}
		}
		for _, at := range []Type{Q8_0, Q8_K} {
			fn := QuantizeRowQ8_0
			if at == Q8_K {
				fn = QuantizeRowQ8K
			}
			size := 256 / BlockSize(at) * BlockBytes(at)
			g := make([]byte, size)
			withImpl(true, func() int { fn(g, x); return 0 })
			if !HasAsm() {
				continue
			}
			a := make([]byte, size)
			withImpl(false, func() int { fn(a, x); return 0 })
			if comparable && !bytes.Equal(a, g) {
				i := firstDiff(a, g)
				t.Fatalf("%v: asm and pure Go differ at byte %d: %#02x vs %#02x", at, i, a[i], g[i])
			}
		}
		var le *LengthError
		func() {
			defer func() {
				if p := recover(); p != nil {
					err, _ := p.(error)
					if !errors.As(err, &le) {
						t.Fatalf("unexpected panic %v", p)
					}
				}
			}()
			QuantizeRowQ8K(make([]byte, 10), x[:len(data)%256])
		}()
	})
}
