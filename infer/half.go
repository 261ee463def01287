package infer

import (
	"math"
	"unsafe"
)

// f16Table maps every binary16 bit pattern to its float32 value (exact).
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = halfToFloatSlow(uint16(i))
	}
	return &t
}()

func halfToFloatSlow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		v := float32(mant) * (1.0 / (1 << 24)) // subnormal: mant * 2^-24
		if sign != 0 {
			v = -v
		}
		return v
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}

// h2f converts binary16 bits to float32 exactly.
func h2f(h uint16) float32 { return f16Table[h] }

// f2h converts float32 to binary16 with round-to-nearest-even, gradual underflow and overflow to
// infinity, as ggml's ggml_compute_fp32_to_fp16 does (NaN -> 0x7e00 with the sign kept).
func f2h(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	if abs > 0x7f800000 {
		return sign | 0x7e00
	}
	if abs >= 0x477ff000 { // >= 65520: rounds to infinity
		return sign | 0x7c00
	}
	if abs < 0x38800000 { // below the smallest normal half (2^-14): subnormal or zero
		// value = abs as float; half subnormal units are 2^-24.
		v := math.Float32frombits(abs)
		q := float64(v) * (1 << 24)
		return sign | uint16(math.RoundToEven(q))
	}
	// normal: rebias exponent, round mantissa from 23 to 10 bits (RNE)
	e := (abs >> 23) - 112
	m := abs & 0x7fffff
	h := e<<10 | m>>13
	rem := m & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the correct result
	}
	return sign | uint16(h)
}

// f2bf converts float32 to bfloat16 bits as ggml_compute_fp32_to_bf16 does.
func f2bf(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + ((b >> 16) & 1)) >> 16)
}

func bf2f(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// bytesF32 views b as float32s (b must be 4-byte aligned; ggml data always is).
func bytesF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// bytesU16 views b as uint16s.
func bytesU16(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// f32Bytes views f as bytes.
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}

func aligned(b []byte, n uintptr) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%n == 0
}
