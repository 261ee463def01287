package kernels

import "math"

// WidenF16 writes the little-endian fp16 values in src[0:2n] as float32 into dst[0:n],
// n = len(dst) (exact: every fp16 value is a float32; F16C's VCVTPH2PS on amd64, the
// table of quant's FP16ToFP32 otherwise, which agree on every non-NaN value). It panics
// with a *LengthError if src is shorter than 2·len(dst).
func WidenF16(dst []float32, src []byte) {
	n := len(dst)
	if len(src) < 2*n {
		lengthPanic("WidenF16", "source has %d bytes, %d elements need %d", len(src), n, 2*n)
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		widenF16AVX2(&dst[0], &src[0], i)
	}
	for ; i < n; i++ {
		dst[i] = halfToFloat(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
	}
}

// NarrowF16 writes src[0:n] as little-endian fp16 into dst[0:2n], n = len(src), rounded as
// ggml's fp32→fp16 conversion does (to nearest even, gradual underflow, overflow to ±Inf,
// any NaN to 0x7e00 with its sign; F16C's VCVTPS2PH on amd64). It panics with a
// *LengthError if dst is shorter than 2·len(src).
func NarrowF16(dst []byte, src []float32) {
	n := len(src)
	if len(dst) < 2*n {
		lengthPanic("NarrowF16", "destination has %d bytes, %d elements need %d", len(dst), n, 2*n)
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		narrowF16AVX2(&dst[0], &src[0], i)
	}
	for ; i < n; i++ {
		h := floatToHalf(src[i])
		dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
	}
}

// RoundF16 replaces every x[i] by the float32 value of its fp16 rounding (NarrowF16, then
// exact widening; a NaN becomes the quiet NaN with its sign).
func RoundF16(x []float32) {
	n := len(x)
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		roundF16AVX2(&x[0], i)
	}
	for ; i < n; i++ {
		x[i] = halfToFloat(floatToHalf(x[i]))
	}
}

// WidenBF16 writes the little-endian bfloat16 values in src[0:2n] as float32 into dst[0:n],
// n = len(dst) (bits << 16). It panics with a *LengthError if src is shorter than 2·len(dst).
func WidenBF16(dst []float32, src []byte) {
	n := len(dst)
	if len(src) < 2*n {
		lengthPanic("WidenBF16", "source has %d bytes, %d elements need %d", len(src), n, 2*n)
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		widenBF16AVX2(&dst[0], &src[0], i)
	}
	for ; i < n; i++ {
		dst[i] = math.Float32frombits((uint32(src[2*i]) | uint32(src[2*i+1])<<8) << 16)
	}
}

// FirstNonFinite returns the index of the first NaN or ±Inf in x, or -1 if every value is
// finite (an exponent test on the bits, much cheaper than math.IsNaN/IsInf per element; with
// the assembly, 32 values per step until the block that holds the first one).
func FirstNonFinite(x []float32) int {
	i := 0
	if useAsm() && len(x) >= 32 {
		i = finiteRunAVX2(&x[0], len(x)&^31)
	}
	for ; i+4 <= len(x); i += 4 {
		a, b := math.Float32bits(x[i]), math.Float32bits(x[i+1])
		c, d := math.Float32bits(x[i+2]), math.Float32bits(x[i+3])
		if ^a&0x7f800000 == 0 || ^b&0x7f800000 == 0 || ^c&0x7f800000 == 0 || ^d&0x7f800000 == 0 {
			break
		}
	}
	for ; i < len(x); i++ {
		if ^math.Float32bits(x[i])&0x7f800000 == 0 {
			return i
		}
	}
	return -1
}
