package kernels

// Dot products of the remaining 32-element "legacy" weight types with 8-bit activations,
// reproducing ggml's AVX2 vec_dot kernels (ggml-cpu/arch/x86/quants.c) bit for bit:
//
//	Q5_0·Q8_0, IQ4_NL·Q8_0: activations from QuantizeRowQ8_0;
//	Q4_1·Q8_1, Q5_1·Q8_1:   activations in Q8_1 (fp16 d, fp16 s = d·Σq, 32 int8 quants), as
//	                        ggml's x86 quantize_row_q8_1 writes them (quant.QuantizeRowQ8_1).
//
// Per block the integer sums are kept in 8 int32 lanes (lane k: elements 4k..4k+3), exact for
// every weight and activation byte, converted to float32 and accumulated with one fused
// multiply-add against the float32 product of the two block scales:
//
//	Q5_0:   acc = fma(d_w·d_x, lanes, acc);                  result hsum8(acc)
//	Q4_1/Q5_1: same, plus summs += m_w·s_x                   result hsum8(acc) + summs
//	          (a product of two fp16 values is exact in float32, so whether GCC fuses it
//	          does not matter; we fuse, like the compiled ggml)
//	IQ4_NL: blocks 2i into acc1, 2i+1 into acc2 (pairs only); r = hsum8(acc1 + acc2);
//	        an odd last block is added as r = fma(d_w·d_x, float32(Σ q·x), r) (GCC fuses
//	        ggml's scalar `sumf += d*(sumi1 + sumi2)`; an unfused version fails the oracle).
//
// d_w·d_x is exact too (fp16·fp16), so only the FMAs and the final sums round.
//
// llamafile's tinyBLAS_Q0_AVX (ggml's path for prompt batches, n_tokens ≥ 2) computes each
// element with ONE accumulator for all blocks; for Q5_0 that is exactly the vec_dot order, for
// IQ4_NL it is not: DotIQ4_NLQ8_0Tiny reproduces it.

// Block sizes in bytes of the types handled here (all hold 32 elements).
const (
	q0xBytesQ5_0  = 22 // fp16 d, uint32 qh, 16 bytes of nibbles
	q0xBytesQ5_1  = 24 // fp16 d, fp16 m, uint32 qh, 16 bytes of nibbles
	q0xBytesQ4_1  = 20 // fp16 d, fp16 m, 16 bytes of nibbles
	q0xBytesIQ4NL = 18 // fp16 d, 16 bytes of nibbles (indices into q0xIQ4NLValues)
	q0xBytesQ8_1  = 36 // fp16 d, fp16 s, 32 int8 quants
)

// q0xIQ4NLValues is ggml's IQ4_NL codebook.
var q0xIQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// DotQ5_0Q8_0 returns the dot product of n elements (a multiple of 32) of a Q5_0 weight row w
// and a Q8_0 activation row x, bit-identical to ggml_vec_dot_q5_0_q8_0 (AVX2) and to
// llamafile's tinyBLAS_Q0_AVX element for Q5_0. Any weight and activation bytes are accepted
// (the integer sums are exact). It panics with a *LengthError on a length violation.
func DotQ5_0Q8_0(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ5_0Q8_0", n, 32, q0xBytesQ5_0, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		var acc [8]float32
		q0xDotQ5_0AVX2(&w[0], &x[0], nb, &acc)
		return hsum8(&acc)
	}
	return q0xDotQ5_0Go(nb, w, x)
}

// DotIQ4_NLQ8_0 returns the dot product of n elements (a multiple of 32) of an IQ4_NL weight
// row w and a Q8_0 activation row x, bit-identical to ggml_vec_dot_iq4_nl_q8_0 (AVX2: two
// accumulators over block pairs, an odd last block added separately). Any weight and
// activation bytes are accepted. It panics with a *LengthError on a length violation.
//
// On AVX2 llama.cpp repacks IQ4_NL weight matrices with a row count divisible by 8
// (CPU_REPACK, ggml_gemv/gemm_iq4_nl_8x8_q8_0) and then uses neither this order nor
// DotIQ4_NLQ8_0Tiny's; these two apply to the matrices it does not repack.
func DotIQ4_NLQ8_0(n int, w, x []byte) float32 {
	nb := checkBlocks("DotIQ4_NLQ8_0", n, 32, q0xBytesIQ4NL, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if !useAsm() {
		return q0xDotIQ4NLGo(nb, w, x)
	}
	var acc [16]float32
	np := nb &^ 1
	if np > 0 {
		q0xDotIQ4NLPairsAVX2(&w[0], &x[0], np/2, &acc)
	}
	return q0xIQ4NLFinish(&acc, nb, w, x)
}

// DotIQ4_NLQ8_0Tiny returns the dot product of n elements (a multiple of 32) of an IQ4_NL
// weight row w and a Q8_0 activation row x in the order of llamafile's tinyBLAS_Q0_AVX (ggml's
// matrix product for n_tokens ≥ 2 on weights that are not repacked): one 8-lane accumulator
// over all blocks, then hsum8. It panics with a *LengthError on a length violation.
func DotIQ4_NLQ8_0Tiny(n int, w, x []byte) float32 {
	nb := checkBlocks("DotIQ4_NLQ8_0Tiny", n, 32, q0xBytesIQ4NL, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		var acc [8]float32
		q0xDotIQ4NLAVX2(&w[0], &x[0], nb, &acc)
		return hsum8(&acc)
	}
	var acc [8]float32
	q0xIQ4NLLanes(&acc, 0, nb, 1, w, x)
	return hsum8(&acc)
}

// DotQ4_1Q8_1 returns the dot product of n elements (a multiple of 32) of a Q4_1 weight row w
// and a Q8_1 activation row x, bit-identical to ggml_vec_dot_q4_1_q8_1 (AVX2). The offsets
// enter through the activation sums s (d_x·Σq rounded to fp16, as ggml stores them). Any
// bytes are accepted. It panics with a *LengthError on a length violation.
func DotQ4_1Q8_1(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ4_1Q8_1", n, 32, q0xBytesQ4_1, q0xBytesQ8_1, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		var acc [8]float32
		summs := q0xDotQ4_1AVX2(&w[0], &x[0], nb, &acc)
		return hsum8(&acc) + summs
	}
	return q0xDotQ4_1Go(nb, w, x)
}

// DotQ5_1Q8_1 returns the dot product of n elements (a multiple of 32) of a Q5_1 weight row w
// and a Q8_1 activation row x, bit-identical to ggml_vec_dot_q5_1_q8_1 (AVX2). Any bytes are
// accepted. It panics with a *LengthError on a length violation.
func DotQ5_1Q8_1(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ5_1Q8_1", n, 32, q0xBytesQ5_1, q0xBytesQ8_1, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		var acc [8]float32
		summs := q0xDotQ5_1AVX2(&w[0], &x[0], nb, &acc)
		return hsum8(&acc) + summs
	}
	return q0xDotQ5_1Go(nb, w, x)
}

// q0xLanes returns the 8 int32 lanes Σ q(e)·x_e over e in 4k..4k+3 of one 32-element block
// whose activation quants are the 32 bytes xq.
func q0xLanes(xq *[32]byte, q func(e int) int32) (s [8]int32) {
	for k := 0; k < 8; k++ {
		for e := 4 * k; e < 4*k+4; e++ {
			s[k] += q(e) * int32(int8(xq[e]))
		}
	}
	return s
}

// nib returns the 4-bit field of element e (0..31) of the 16 nibble bytes qs: elements 0..15
// are the low nibbles, 16..31 the high ones.
func q0xNibble(qs *[16]byte, e int) int32 {
	return int32(qs[e&15]>>(4*(e>>4))) & 15
}

// q0xDotQ5_0Go is the pure-Go Q5_0·Q8_0 dot over nb blocks (value (nibble | hbit·16) − 16).
func q0xDotQ5_0Go(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[q0xBytesQ5_0]byte)(w[b*q0xBytesQ5_0:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		qh := uint32(wb[2]) | uint32(wb[3])<<8 | uint32(wb[4])<<16 | uint32(wb[5])<<24
		qs := (*[16]byte)(wb[6:])
		d := float32(halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:])))
		s := q0xLanes((*[32]byte)(xb[2:]), func(e int) int32 {
			return q0xNibble(qs, e) | int32(qh>>e&1)<<4 - 16
		})
		for k := range acc {
			acc[k] = lanes8FMA(d, float32(s[k]), acc[k])
		}
	}
	return hsum8(&acc)
}

// q0xIQ4NLLanes accumulates blocks b0, b0+step, ... < b1 of an IQ4_NL·Q8_0 product into acc.
func q0xIQ4NLLanes(acc *[8]float32, b0, b1, step int, w, x []byte) {
	for b := b0; b < b1; b += step {
		wb := (*[q0xBytesIQ4NL]byte)(w[b*q0xBytesIQ4NL:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		qs := (*[16]byte)(wb[2:])
		d := float32(halfToFloat(le16(xb[0:])) * halfToFloat(le16(wb[0:])))
		s := q0xLanes((*[32]byte)(xb[2:]), func(e int) int32 { return int32(q0xIQ4NLValues[q0xNibble(qs, e)]) })
		for k := range acc {
			acc[k] = lanes8FMA(d, float32(s[k]), acc[k])
		}
	}
}

// q0xIQ4NLFinish sums ggml's two IQ4_NL accumulators (acc[0:8] even blocks, acc[8:16] odd
// blocks) lane by lane, reduces them with hsum8 and adds an odd last block of the nb blocks
// with one FMA, as ggml's scalar tail `sumf += d*(sumi1 + sumi2)` compiles.
func q0xIQ4NLFinish(acc *[16]float32, nb int, w, x []byte) float32 {
	var a [8]float32
	for k := range a {
		a[k] = acc[k] + acc[8+k]
	}
	r := hsum8(&a)
	if nb&1 != 0 {
		b := nb - 1
		wb := (*[q0xBytesIQ4NL]byte)(w[b*q0xBytesIQ4NL:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		qs := (*[16]byte)(wb[2:])
		d := float32(halfToFloat(le16(xb[0:])) * halfToFloat(le16(wb[0:])))
		var s int32
		for e := 0; e < 32; e++ {
			s += int32(q0xIQ4NLValues[q0xNibble(qs, e)]) * int32(int8(xb[2+e]))
		}
		r = lanes8FMA(d, float32(s), r)
	}
	return r
}

// q0xDotIQ4NLGo is the pure-Go IQ4_NL·Q8_0 dot over nb blocks in ggml's vec_dot order.
func q0xDotIQ4NLGo(nb int, w, x []byte) float32 {
	var acc [16]float32
	np := nb &^ 1
	q0xIQ4NLLanes((*[8]float32)(acc[0:8]), 0, np, 2, w, x)
	q0xIQ4NLLanes((*[8]float32)(acc[8:16]), 1, np, 2, w, x)
	return q0xIQ4NLFinish(&acc, nb, w, x)
}

// q0xDotQ4_1Go is the pure-Go Q4_1·Q8_1 dot over nb blocks.
func q0xDotQ4_1Go(nb int, w, x []byte) float32 {
	var acc [8]float32
	var summs float32
	for b := 0; b < nb; b++ {
		wb := (*[q0xBytesQ4_1]byte)(w[b*q0xBytesQ4_1:])
		xb := (*[q0xBytesQ8_1]byte)(x[b*q0xBytesQ8_1:])
		summs = lanes8FMA(halfToFloat(le16(wb[2:])), halfToFloat(le16(xb[2:])), summs)
		qs := (*[16]byte)(wb[4:])
		d := float32(halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:])))
		s := q0xLanes((*[32]byte)(xb[4:]), func(e int) int32 { return q0xNibble(qs, e) })
		for k := range acc {
			acc[k] = lanes8FMA(d, float32(s[k]), acc[k])
		}
	}
	return hsum8(&acc) + summs
}

// q0xDotQ5_1Go is the pure-Go Q5_1·Q8_1 dot over nb blocks (value nibble | hbit·16).
func q0xDotQ5_1Go(nb int, w, x []byte) float32 {
	var acc [8]float32
	var summs float32
	for b := 0; b < nb; b++ {
		wb := (*[q0xBytesQ5_1]byte)(w[b*q0xBytesQ5_1:])
		xb := (*[q0xBytesQ8_1]byte)(x[b*q0xBytesQ8_1:])
		summs = lanes8FMA(halfToFloat(le16(wb[2:])), halfToFloat(le16(xb[2:])), summs)
		qh := uint32(wb[4]) | uint32(wb[5])<<8 | uint32(wb[6])<<16 | uint32(wb[7])<<24
		qs := (*[16]byte)(wb[8:])
		d := float32(halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:])))
		s := q0xLanes((*[32]byte)(xb[4:]), func(e int) int32 {
			return q0xNibble(qs, e) | int32(qh>>e&1)<<4
		})
		for k := range acc {
			acc[k] = lanes8FMA(d, float32(s[k]), acc[k])
		}
	}
	return hsum8(&acc) + summs
}
