package quant

// Activation-side formats: what llama.cpp's CPU backend applies to the right-hand
// operand of a dot product (Q8_0 for Q4_0/Q5_x/Q8_0/IQ4_NL weights, Q8_1 for the _1
// types, Q8_K for the K-quants and IQ4_XS).
//
//	Q8_1  d:f16 | s:f16 | qs[32] int8     s = fp16(d·Σqs)

import (
	"encoding/binary"
	"math"
)

// absMaxSSE is the max of |x| as the x86 AVX code computes it (max_ps ordering does
// not matter for finite input).
func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if a := fabs(v); a > m {
			m = a
		}
	}
	return m
}

// rneSat converts like _mm256_round_ps(NEAREST) + cvtps_epi32 + saturating packs:
// round half to even, then saturate to int8 (NaN and out-of-range give -128).
func rneSat(v float32) (int8, int32) {
	r := math.RoundToEven(float64(v))
	if !(r >= -2147483648 && r < 2147483648) {
		return -128, math.MinInt32
	}
	i := int32(r)
	switch {
	case i > 127:
		return 127, i
	case i < -128:
		return -128, i
	}
	return int8(i), i
}

// QuantizeRowQ8_0 quantizes activations to Q8_0 exactly like llama.cpp's x86 CPU
// backend (quantize_row_q8_0, AVX2 path): d = amax/127 stored as fp16,
// q = round-half-even(x·(127/amax)). This differs from the weight quantizer
// (Quantize with TypeQ8_0, ggml's reference: round-half-away of x·(1/d)) only on
// exact ties. It panics if len(src) is not a multiple of 32 or len(dst) is not
// len(src)/32·34.
func QuantizeRowQ8_0(dst []byte, src []float32) {
	nb := len(src) / 32
	if len(src)%32 != 0 || len(dst) != nb*sizeQ8_0 {
		panic("quant: QuantizeRowQ8_0: bad lengths")
	}
	for ib := 0; ib < nb; ib++ {
		xb := src[32*ib : 32*ib+32]
		yb := dst[sizeQ8_0*ib : sizeQ8_0*ib+sizeQ8_0]
		amax := absMax(xb)
		d := amax / 127
		putF16(yb, d)
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for j, v := range xb {
			q, _ := rneSat(v * id)
			yb[2+j] = byte(q)
		}
	}
}

// QuantizeRowQ8_1 quantizes activations to Q8_1 exactly like llama.cpp's x86 CPU
// backend (AVX2 path): as QuantizeRowQ8_0 plus s = fp16(d·Σq). Same length rules
// with 36-byte blocks.
func QuantizeRowQ8_1(dst []byte, src []float32) {
	nb := len(src) / 32
	if len(src)%32 != 0 || len(dst) != nb*sizeQ8_1 {
		panic("quant: QuantizeRowQ8_1: bad lengths")
	}
	for ib := 0; ib < nb; ib++ {
		xb := src[32*ib : 32*ib+32]
		yb := dst[sizeQ8_1*ib : sizeQ8_1*ib+sizeQ8_1]
		amax := absMax(xb)
		d := amax / 127
		putF16(yb, d)
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		var sum int32
		for j, v := range xb {
			q, wide := rneSat(v * id)
			yb[4+j] = byte(q)
			sum += wide
		}
		putF16(yb[2:], d*float32(sum))
	}
}

// QuantizeRowQ8_1Ref is ggml's quantize_row_q8_1_ref (from_float_ref): d = amax/127,
// q = round-half-away(x·(1/d)), s = fp16(Σq·d). Same length rules as QuantizeRowQ8_1.
func QuantizeRowQ8_1Ref(dst []byte, src []float32) {
	nb := len(src) / 32
	if len(src)%32 != 0 || len(dst) != nb*sizeQ8_1 {
		panic("quant: QuantizeRowQ8_1Ref: bad lengths")
	}
	for ib := 0; ib < nb; ib++ {
		xb := src[32*ib : 32*ib+32]
		yb := dst[sizeQ8_1*ib : sizeQ8_1*ib+sizeQ8_1]
		var amax float32
		for _, v := range xb {
			if av := fabs(v); !(amax > av) {
				amax = av
			}
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, d)
		var sum int32
		for j := 0; j < 16; j++ {
			q0 := int8(truncI32(roundHalfAway(xb[j] * id)))
			q1 := int8(truncI32(roundHalfAway(xb[j+16] * id)))
			yb[4+j] = byte(q0)
			yb[4+16+j] = byte(q1)
			sum += int32(q0) + int32(q1)
		}
		putF16(yb[2:], float32(sum)*d)
	}
}

// dequantQ8_1 decodes Q8_1 as d·q (ggml has no Q8_1 dequantizer; s is ignored).
func dequantQ8_1(y []float32, b []byte) {
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeQ8_1*ib : sizeQ8_1*ib+sizeQ8_1]
		d := fp16Table[binary.LittleEndian.Uint16(bb)]
		for j := range yb {
			yb[j] = float32(int8(bb[4+j])) * d
		}
	}
}
