package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

const u32 = 1.0 / (1 << 24) // float32 unit roundoff

// forEachImpl runs f once with the pure-Go kernels and, where available, once with assembly.
func forEachImpl(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Run("purego", func(t *testing.T) {
		SetPureGo(true)
		defer SetPureGo(false)
		f(t)
	})
	if HasAsm() {
		t.Run("asm", func(t *testing.T) {
			SetPureGo(false)
			f(t)
		})
	} else {
		t.Log("no assembly kernels on this machine/build; only the pure-Go path was tested")
	}
}

// withImpl runs f with the pure-Go (pure=true) or assembly kernels and restores the default.
func withImpl[T any](pure bool, f func() T) T {
	SetPureGo(pure)
	defer SetPureGo(false)
	return f()
}

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// studentT3 draws from Student's t with 3 degrees of freedom (heavy tails).
func studentT3(r *rand.Rand) float64 {
	z := r.NormFloat64()
	var chi2 float64
	for i := 0; i < 3; i++ {
		v := r.NormFloat64()
		chi2 += v * v
	}
	return z / math.Sqrt(chi2/3)
}

func randFloats(r *rand.Rand, n int, heavy bool, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		if heavy {
			x[i] = float32(studentT3(r) * scale)
		} else {
			x[i] = float32(r.NormFloat64() * scale)
		}
	}
	return x
}

// randHalf returns a random finite, normal fp16 value with magnitude around scale.
func randHalf(r *rand.Rand, scale float64, heavy bool) uint16 {
	v := r.NormFloat64()
	if heavy {
		v = studentT3(r)
	}
	v *= scale
	if math.Abs(v) < 6.2e-5 {
		v = math.Copysign(6.2e-5, v)
	}
	if math.Abs(v) > 60000 {
		v = math.Copysign(60000, v)
	}
	return floatToHalf(float32(v))
}

// randWeights returns nb random blocks of type t: random quant bytes with random finite
// fp16 scales of magnitude ~scale (Student-t distributed when heavy).
func randWeights(r *rand.Rand, t Type, nb int, scale float64, heavy bool) []byte {
	bs := BlockBytes(t)
	w := make([]byte, nb*bs)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		blk := w[b*bs:]
		switch t {
		case Q8_0, Q4_0:
			binary.LittleEndian.PutUint16(blk, randHalf(r, scale, heavy))
		case Q4_K, Q5_K:
			binary.LittleEndian.PutUint16(blk, randHalf(r, scale, heavy))
			binary.LittleEndian.PutUint16(blk[2:], randHalf(r, scale, heavy))
		case Q6_K:
			binary.LittleEndian.PutUint16(blk[208:], randHalf(r, scale, heavy))
		}
	}
	return w
}

// quantizeActs quantizes x to at (Q8_0 or Q8_K) with the pure-Go quantizer.
func quantizeActs(at Type, x []float32) []byte {
	nb := len(x) / BlockSize(at)
	dst := make([]byte, nb*BlockBytes(at))
	if at == Q8_0 {
		quantizeQ8_0Go(dst, x, nb)
	} else {
		quantizeQ8KGo(dst, x, nb)
	}
	return dst
}

// rawActs returns nb activation blocks of type at with random quant bytes, random bsums
// (Q8_K) and random finite scales. Q8_K quants include −128; Q8_0 quants stay in
// [−127, 127], the documented activation range of the Q8_0 kernels.
func rawActs(r *rand.Rand, at Type, nb int) []byte {
	bs := BlockBytes(at)
	x := make([]byte, nb*bs)
	for i := range x {
		x[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		blk := x[b*bs:]
		if at == Q8_0 {
			binary.LittleEndian.PutUint16(blk, randHalf(r, 0.05, false))
			for j := 2; j < BlockBytesQ8_0; j++ {
				if blk[j] == 0x80 {
					blk[j] = 0x81
				}
			}
		} else {
			binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(r.NormFloat64()*0.05)))
		}
	}
	return x
}

// kernelFor returns the exported dot kernel for weight type t.
func kernelFor(t Type) func(n int, w, x []byte) float32 {
	switch t {
	case Q8_0:
		return DotQ8_0Q8_0
	case Q4_0:
		return DotQ4_0Q8_0
	case Q4_K:
		return DotQ4_KQ8K
	case Q5_K:
		return DotQ5_KQ8K
	case Q6_K:
		return DotQ6_KQ8K
	}
	panic("kernelFor: unsupported type")
}

var quantTypes = []Type{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K}

// termScale bounds the magnitude of every float term the kernels add, following their
// formula exactly (integer parts taken in absolute value, bsums as given). The float error of
// either implementation is a small multiple of u·(blocks)·termScale.
func termScale(t Type, w, x []byte, n int) float64 {
	at, _ := ActivationType(t)
	bs, abs := BlockSize(t), BlockBytes(at)
	we := decodeRow(t, w, n)
	xe := decodeRow(at, x, n)
	var s float64
	switch t {
	case Q8_0, Q4_0:
		for i := range we {
			s += math.Abs(float64(we[i].d) * float64(xe[i].d) * float64(we[i].q) * float64(xe[i].q))
		}
	case Q4_K, Q5_K:
		for i := range we {
			s += math.Abs(float64(we[i].d)*float64(xe[i].d)) * float64(we[i].sc) * math.Abs(float64(we[i].q)*float64(xe[i].q))
		}
		for b := 0; b < n/bs; b++ {
			xb := x[b*abs:]
			dx := math.Abs(float64(xe[b*bs].d))
			for j := 0; j < 8; j++ {
				e := we[b*bs+32*j]
				b0 := int16(binary.LittleEndian.Uint16(xb[260+4*j:]))
				b1 := int16(binary.LittleEndian.Uint16(xb[262+4*j:]))
				s += math.Abs(float64(e.dmin)) * dx * float64(e.m) * math.Abs(float64(b0)+float64(b1))
			}
		}
	case Q6_K:
		for i := range we {
			s += math.Abs(float64(we[i].d)*float64(xe[i].d)*float64(we[i].sc)) * math.Abs(float64(we[i].q+32)*float64(xe[i].q))
		}
		for b := 0; b < n/bs; b++ {
			xb := x[b*abs:]
			dx := math.Abs(float64(xe[b*bs].d))
			for sb := 0; sb < 16; sb++ {
				e := we[b*bs+16*sb]
				bsum := int16(binary.LittleEndian.Uint16(xb[260+2*sb:]))
				s += 32 * math.Abs(float64(e.d)*float64(e.sc)*float64(bsum)) * dx
			}
		}
	}
	return s
}

// q8ActsInRange reports whether every quant of the Q8_0 activation blocks is in [−127, 127].
func q8ActsInRange(x []byte, nb int) bool {
	for b := 0; b < nb; b++ {
		for _, q := range x[b*BlockBytesQ8_0+2 : (b+1)*BlockBytesQ8_0] {
			if q == 0x80 {
				return false
			}
		}
	}
	return true
}
