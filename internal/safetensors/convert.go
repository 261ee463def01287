package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// BF16ToFloat32 widens a bfloat16 bit pattern to float32 (exact).
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 narrows f to bfloat16 with round-to-nearest-even. NaNs stay (quiet) NaNs.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 widens an IEEE binary16 bit pattern to float32 (exact).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		// Zero or subnormal: mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float32ToF16 narrows f to IEEE binary16 with round-to-nearest-even; values beyond the
// binary16 range become infinities, NaNs stay (quiet) NaNs.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 || exp == 0 {
			return sign // below half the smallest subnormal (or a float32 subnormal)
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // a carry into the exponent is correct, up to infinity
	}
	return sign | uint16(q)
}

// F8E4M3MaxFinite is the largest finite float8 e4m3fn value.
const F8E4M3MaxFinite = 448

var f8e4m3Table = func() (t [256]float32) {
	for i := range t {
		sign := 1.0
		if i&0x80 != 0 {
			sign = -1
		}
		e := (i >> 3) & 0xf
		m := i & 7
		switch {
		case e == 0xf && m == 7:
			t[i] = float32(math.NaN())
		case e == 0:
			t[i] = float32(sign * math.Ldexp(float64(m), -9))
		default:
			t[i] = float32(sign * math.Ldexp(1+float64(m)/8, e-7))
		}
	}
	return t
}()

// F8E4M3ToFloat32 decodes a float8 e4m3fn byte (exact).
func F8E4M3ToFloat32(b uint8) float32 { return f8e4m3Table[b] }

// Float32ToF8E4M3 encodes f as float8 e4m3fn with round-to-nearest-even, saturating
// magnitudes above 448 to ±448 (the behaviour quantizers want; NaN stays NaN).
func Float32ToF8E4M3(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := math.Float32frombits(b & 0x7fffffff)
	if a != a {
		return sign | 0x7f
	}
	if a >= F8E4M3MaxFinite {
		return sign | 0x7e
	}
	exp := int32(b>>23)&0xff - 127
	if exp < -6 {
		// Subnormal range: quantum 2^-9; q == 8 is the smallest normal's code.
		q := uint8(math.RoundToEven(float64(a) * 512))
		return sign | q
	}
	mant := b & 0x7fffff
	q := uint32(exp+7)<<3 | mant>>20
	rem := mant & 0xfffff
	if rem > 0x80000 || (rem == 0x80000 && q&1 == 1) {
		q++
	}
	if q > 0x7e {
		q = 0x7e
	}
	return sign | uint8(q)
}

// F8E5M2ToFloat32 decodes a float8 e5m2 byte (exact).
func F8E5M2ToFloat32(b uint8) float32 { return F16ToFloat32(uint16(b) << 8) }

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// asUint16 views little-endian bytes as uint16 values when the host is little-endian and
// the data is 2-byte aligned (safetensors offsets need not be).
func asUint16(b []byte) ([]uint16, bool) {
	if !littleEndian || len(b) < 2 || uintptr(unsafe.Pointer(&b[0]))%2 != 0 {
		return nil, false
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), true
}

// f16Table returns the 64 Ki-entry binary16 -> float32 table, built on first use.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToFloat32(uint16(i))
	}
	return &t
})

// decodeFloat32 converts len(dst) elements of dtype d from src (little-endian) to float32.
// src must hold exactly len(dst)*d.Size() bytes.
func decodeFloat32(d DType, src []byte, dst []float32) error {
	le := binary.LittleEndian
	if len(dst) == 0 {
		return nil
	}
	src = src[:len(dst)*int(d.Size())]
	switch d {
	case F32:
		if littleEndian {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src)
			return nil
		}
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case F16:
		tab := f16Table()
		if u, ok := asUint16(src); ok {
			for i, h := range u[:len(dst)] {
				dst[i] = tab[h]
			}
			return nil
		}
		for i := range dst {
			dst[i] = tab[le.Uint16(src[2*i:])]
		}
	case BF16:
		if u, ok := asUint16(src); ok {
			for i, h := range u[:len(dst)] {
				dst[i] = math.Float32frombits(uint32(h) << 16)
			}
			return nil
		}
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(le.Uint16(src[2*i:])) << 16)
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(le.Uint64(src[8*i:])))
		}
	case F8E4M3:
		for i := range dst {
			dst[i] = f8e4m3Table[src[i]]
		}
	case F8E5M2:
		for i := range dst {
			dst[i] = F16ToFloat32(uint16(src[i]) << 8)
		}
	case BOOL:
		for i := range dst {
			if src[i] != 0 {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	case U8:
		for i := range dst {
			dst[i] = float32(src[i])
		}
	case I8:
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	case I16:
		for i := range dst {
			dst[i] = float32(int16(le.Uint16(src[2*i:])))
		}
	case U16:
		for i := range dst {
			dst[i] = float32(le.Uint16(src[2*i:]))
		}
	case I32:
		for i := range dst {
			dst[i] = float32(int32(le.Uint32(src[4*i:])))
		}
	case U32:
		for i := range dst {
			dst[i] = float32(le.Uint32(src[4*i:]))
		}
	case I64:
		for i := range dst {
			dst[i] = float32(int64(le.Uint64(src[8*i:])))
		}
	case U64:
		for i := range dst {
			dst[i] = float32(le.Uint64(src[8*i:]))
		}
	default:
		return fmt.Errorf("dtype %v cannot be converted to float32", d)
	}
	return nil
}
