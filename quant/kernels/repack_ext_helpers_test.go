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

// Helpers of the external repack tests (package kernels_test, so that they may use the quant
// package for realistic weights without an import cycle).

func extRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d)) }

// extFloats draws n values, normal or Student-t with 3 degrees of freedom (heavy tails).
func extFloats(r *rand.Rand, n int, heavy bool, scale float64) []float32 {
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

// repackGGML maps the kernels' weight types to gguf's.
func repackGGML(t kernels.Type) gguf.GGMLType {
	switch t {
	case kernels.Q4_0:
		return gguf.TypeQ4_0
	case kernels.Q4_K:
		return gguf.TypeQ4_K
	}
	return gguf.TypeIQ4_NL
}

func repackBlock(t kernels.Type) (elems, wBytes, xBytes int) {
	switch t {
	case kernels.Q4_K:
		return 256, kernels.BlockBytesQ4_K, kernels.BlockBytesQ8_K
	case kernels.Q4_0:
		return 32, kernels.BlockBytesQ4_0, kernels.BlockBytesQ8_0
	}
	return 32, kernels.BlockBytesIQ4_NL, kernels.BlockBytesQ8_0
}

// quantWeights quantizes rows×n floats (normal or Student-t, with a per-row scale drawn
// from a wide range) to t with the quant package (ggml's reference algorithms).
func quantWeights(tb testing.TB, r *rand.Rand, t kernels.Type, rows, n int, heavy bool) []byte {
	tb.Helper()
	src := make([]float32, 0, rows*n)
	for i := 0; i < rows; i++ {
		scale := 0.02 * math.Exp(r.NormFloat64())
		src = append(src, extFloats(r, n, heavy, scale)...)
	}
	_, wb, _ := repackBlock(t)
	elems, _, _ := repackBlock(t)
	dst := make([]byte, rows*n/elems*wb)
	if err := quant.Quantize(repackGGML(t), dst, src, rows, n, nil); err != nil {
		tb.Fatalf("quantizing %v weights: %v", t, err)
	}
	return dst
}

// rawWeights returns rows×n weights of type t with random bytes and random finite fp16
// scales (normal-ish magnitudes around scale).
func rawWeights(r *rand.Rand, t kernels.Type, rows, n int, scale float64) []byte {
	elems, wb, _ := repackBlock(t)
	w := make([]byte, rows*n/elems*wb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < len(w)/wb; b++ {
		binary.LittleEndian.PutUint16(w[b*wb:], extHalf(r, scale))
		if t == kernels.Q4_K {
			binary.LittleEndian.PutUint16(w[b*wb+2:], extHalf(r, scale))
		}
	}
	return w
}

// extHalf returns a random finite normal fp16 value of magnitude about scale.
func extHalf(r *rand.Rand, scale float64) uint16 {
	v := r.NormFloat64() * scale
	if math.Abs(v) < 6.2e-5 {
		v = math.Copysign(6.2e-5, v)
	}
	if math.Abs(v) > 60000 {
		v = math.Copysign(60000, v)
	}
	return f32ToHalf(float32(v))
}

// f32ToHalf rounds a normal-range float32 to fp16 (round to nearest even); test inputs only.
func f32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	v := b&0x7fffffff - 112<<23
	v += 0xfff + (v>>13)&1
	return sign | uint16(v>>13)
}

// quantActs quantizes k activation rows of n floats each to the activation type of t.
func quantActs(t kernels.Type, x []float32, k, n int) []byte {
	elems, _, xb := repackBlock(t)
	if t == kernels.Q4_K {
		elems = 256
	}
	rowBytes := n / elems * xb
	out := make([]byte, k*rowBytes)
	for i := 0; i < k; i++ {
		if t == kernels.Q4_K {
			kernels.QuantizeRowQ8K(out[i*rowBytes:], x[i*n:(i+1)*n])
		} else {
			kernels.QuantizeRowQ8_0(out[i*rowBytes:], x[i*n:(i+1)*n])
		}
	}
	return out
}

// withPure runs f with the pure-Go kernels (pure) or the default ones.
func withPure(pure bool, f func()) {
	kernels.SetPureGo(pure)
	defer kernels.SetPureGo(false)
	f()
}

// impls lists the implementations to test: pure Go, and assembly where present.
func impls() []bool {
	if kernels.HasAsm() {
		return []bool{true, false}
	}
	return []bool{true}
}

func implName(pure bool) string {
	if pure {
		return "purego"
	}
	return "asm"
}

// packK12 is the inverse of the Q4_K 12-byte scale packing: 8 six-bit scales and mins.
func packK12(sc, m *[8]uint8) (out [12]byte) {
	for j := 0; j < 4; j++ {
		out[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		out[4+j] = m[j]&63 | (m[j+4]>>4)<<6
		out[8+j] = sc[j+4]&15 | (m[j+4]&15)<<4
	}
	return out
}

// unpackK12 decodes the 12-byte scale packing.
func unpackK12(s []byte) (sc, m [8]uint8) {
	for j := 0; j < 4; j++ {
		sc[j] = s[j] & 63
		m[j] = s[j+4] & 63
		sc[j+4] = s[j+8]&15 | (s[j]>>6)<<4
		m[j+4] = s[j+8]>>4 | (s[j+4]>>6)<<4
	}
	return sc, m
}

func bitsEqual(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }
