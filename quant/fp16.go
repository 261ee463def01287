package quant

import "math"

// FP32ToFP16 converts a float32 to IEEE-754 binary16 bits exactly as ggml does
// (ggml_compute_fp32_to_fp16): round-to-nearest-even, gradual underflow (subnormal
// halves are produced, never flushed), |x| >= 65520 becomes ±Inf, the sign of zero is
// kept, and every NaN becomes 0x7E00 with the input's sign bit (the payload is dropped).
func FP32ToFP16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 31 {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Result is a half subnormal (or zero). f32 subnormals (exp == 0) are far
		// below half precision and round to zero.
		if exp == 0 {
			return sign
		}
		shift := uint(14 - e) // 14..: units of 2^-24
		if shift > 24 {
			return sign
		}
		m := mant | 0x800000
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		return sign | uint16(q)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to 0x7c00 = Inf, which is correct
	}
	return sign | uint16(h)
}

// fp16Table maps every binary16 bit pattern to its exact float32 value.
var fp16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = fp16ToFP32Slow(uint16(i))
	}
	return &t
}()

func fp16ToFP32Slow(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// subnormal half: mant * 2^-24, exactly representable as a normal float32
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// FP16ToFP32 widens binary16 bits to float32 exactly (a table look-up).
func FP16ToFP32(h uint16) float32 { return fp16Table[h] }

// FP32ToBF16 converts a float32 to bfloat16 bits exactly as ggml does
// (ggml_compute_fp32_to_bf16): round-to-nearest-even on the upper half without
// flushing subnormals (so 0x7f7f8000 rounds to +Inf); a NaN becomes (bits>>16)|0x0040.
func FP32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16ToFP32 widens bfloat16 bits to float32 exactly (bits << 16).
func BF16ToFP32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
