package kernels

import "math"

// halfToFloat widens an IEEE binary16 value exactly to float32.
func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: man · 2^-24, exact in float32.
	f := float32(man) * (1.0 / (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(f))
}

// floatToHalf rounds a float32 to binary16 the way ggml does: round to nearest even,
// subnormals kept, overflow to ±inf, any NaN to 0x7e00 with the input sign.
func floatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7fffffff
	switch {
	case abs > 0x7f800000:
		return sign | 0x7e00
	case abs >= 0x477ff000: // ≥ 65520: rounds to infinity
		return sign | 0x7c00
	case abs >= 0x38800000: // normal binary16 range (≥ 2^-14)
		// Rebias the exponent and round the 13 dropped mantissa bits to nearest even. A carry
		// out of the mantissa correctly bumps the exponent.
		v := abs - (112 << 23)
		v += 0xfff + (v>>13)&1
		return sign | uint16(v>>13)
	case abs < 0x33000000: // < 2^-25: rounds to zero (2^-25 itself is a tie to even zero)
		return sign
	}
	// Subnormal result: value = abs · 2^24 half-ulps; round to nearest even integer.
	e := abs >> 23               // 102..112
	m := abs&0x7fffff | 0x800000 // 24-bit significand
	shift := 126 - e             // so that result = m >> shift, with rounding
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// bf16ToFloat widens a bfloat16 value exactly to float32.
func bf16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func f32le(b []byte) float32 {
	_ = b[3]
	return math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}
