package kernels

// Q2_K, Q3_K and IQ4_XS weights · Q8_K activations in ggml's AVX2 vec_dot order
// (ggml_vec_dot_q2_K_q8_K, ggml_vec_dot_q3_K_q8_K, ggml_vec_dot_iq4_xs_q8_K of
// ggml-cpu/arch/x86/quants.c), bit for bit. All three keep one super-block's integer sums in
// 8 int32 lanes (lane k: elements 4k..4k+3 of every 32-element group, times that group's
// sub-block scale), convert them to float and FMA them into an 8-lane float accumulator with
// d·dx; hsum8 sums the lanes at the end. Q2_K also FMAs its minimum term into the same lanes,
// before the block's main FMA: lane k gets (−dmin·dx)·(m_2k·bsum_2k + m_2k+1·bsum_2k+1).

// Type ids (ggml's enum ggml_type) of the weight types whose vec_dot-order kernels live here.
// Type.String, BlockSize and BlockBytes do not know them yet; use the BlockBytes constants.
const (
	Q2_K   Type = 10
	Q3_K   Type = 11
	IQ4_XS Type = 23
)

// Byte sizes of one 256-element super-block.
const (
	BlockBytesQ2_K   = 84  // scales[16] (4-bit scale | 4-bit min), qs[64], fp16 d, fp16 dmin
	BlockBytesQ3_K   = 110 // hmask[32], qs[64], scales[12] (16 six-bit), fp16 d
	BlockBytesIQ4_XS = 136 // fp16 d, uint16 scales_h, scales_l[4], qs[128]
)

// kxIQ4Values is ggml's kvalues_iq4nl: the 16 signed values an IQ4_NL/IQ4_XS nibble selects.
var kxIQ4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// DotQ2_KQ8K returns the dot product of n elements (a multiple of 256) of a Q2_K weight row w
// and a Q8_K activation row x, bit-identical to llama.cpp's AVX2 ggml_vec_dot_q2_K_q8_K. Any
// weight and activation bytes are accepted. It panics with a *LengthError on a length
// violation.
func DotQ2_KQ8K(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ2_KQ8K", n, QK_K, BlockBytesQ2_K, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ2KQ8KAVX2(&w[0], &x[0], nb)
	}
	return dotQ2KQ8KGo(nb, w, x)
}

// DotQ3_KQ8K returns the dot product of n elements (a multiple of 256) of a Q3_K weight row w
// and a Q8_K activation row x, bit-identical to llama.cpp's AVX2 ggml_vec_dot_q3_K_q8_K. Any
// weight and activation bytes are accepted. It panics with a *LengthError on a length
// violation.
func DotQ3_KQ8K(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ3_KQ8K", n, QK_K, BlockBytesQ3_K, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ3KQ8KAVX2(&w[0], &x[0], nb)
	}
	return dotQ3KQ8KGo(nb, w, x)
}

// DotIQ4_XSQ8K returns the dot product of n elements (a multiple of 256) of an IQ4_XS weight
// row w and a Q8_K activation row x, bit-identical to llama.cpp's AVX2
// ggml_vec_dot_iq4_xs_q8_K. Any weight and activation bytes are accepted; like ggml (which
// multiplies |v|·sign(x, v) with a wrapping byte negation), an activation quant of −128 facing
// a negative weight value contributes −128·|v| rather than +128·|v|. QuantizeRowQ8K never
// produces −128. It panics with a *LengthError on a length violation.
func DotIQ4_XSQ8K(n int, w, x []byte) float32 {
	nb := checkBlocks("DotIQ4_XSQ8K", n, QK_K, BlockBytesIQ4_XS, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotIQ4XSQ8KAVX2(&w[0], &x[0], nb)
	}
	return dotIQ4XSQ8KGo(nb, w, x)
}

// q8kBsum returns bsum i (the sum of quants 16i..16i+15) of a Q8_K block.
func q8kBsum(xb *[BlockBytesQ8_K]byte, i int) int32 {
	return int32(int16(le16(xb[4+QK_K+2*i:])))
}

// dotQ2KQ8KGo is the pure-Go Q2_K·Q8_K dot over nb super-blocks. Element 128j+32p+l has the
// 2-bit value (qs[32j+l] >> 2p) & 3 and sub-block (of 16) 8j+2p+l/16.
func dotQ2KQ8KGo(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ2_K]byte)(w[b*BlockBytesQ2_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		dx := q8kScale(xb)
		d := float32(dx * halfToFloat(le16(wb[80:])))
		dmin := float32(-dx * halfToFloat(le16(wb[82:])))
		for k := 0; k < 8; k++ {
			m := int32(wb[2*k]>>4)*q8kBsum(xb, 2*k) + int32(wb[2*k+1]>>4)*q8kBsum(xb, 2*k+1)
			acc[k] = lanes8FMA(dmin, float32(m), acc[k])
		}
		q8 := (*[QK_K]byte)(xb[4:])
		var sumi [8]int32
		for j := 0; j < 2; j++ {
			qs := (*[32]byte)(wb[16+32*j:])
			for p := 0; p < 4; p++ {
				xs := (*[32]byte)(q8[128*j+32*p:])
				sh := uint(2 * p)
				var t [8]int32
				for k := range t {
					q, x := qs[4*k:4*k+4:4*k+4], xs[4*k:4*k+4:4*k+4]
					t[k] = int32(q[0]>>sh&3)*int32(int8(x[0])) + int32(q[1]>>sh&3)*int32(int8(x[1])) +
						int32(q[2]>>sh&3)*int32(int8(x[2])) + int32(q[3]>>sh&3)*int32(int8(x[3]))
				}
				kxScaleLanes(&sumi, &t, int32(wb[8*j+2*p]&15), int32(wb[8*j+2*p+1]&15))
			}
		}
		for k := 0; k < 8; k++ {
			acc[k] = lanes8FMA(d, float32(sumi[k]), acc[k])
		}
	}
	return hsum8(&acc)
}

// q3kScales decodes the 16 six-bit Q3_K scales (12 bytes) minus 32.
func q3kScales(s *[12]byte) (sc [16]int32) {
	for i := 0; i < 16; i++ {
		lo := s[i%8] >> (4 * (i / 8)) & 15
		hi := s[8+i%4] >> (2 * (i / 4)) & 3
		sc[i] = int32(lo|hi<<4) - 32
	}
	return sc
}

// q3v is the Q3_K weight value of low-bits byte q and hmask byte h: ((q >> sh) & 3) − 4,
// plus 4 when bit bit of h is set.
func q3v(q, h byte, sh, bit uint) int32 { return int32(q>>sh&3) | int32(h>>bit&1)<<2 - 4 }

// dotQ3KQ8KGo is the pure-Go Q3_K·Q8_K dot over nb super-blocks. Element 128j+32p+l has the
// value ((qs[32j+l] >> 2p) & 3) − 4·(1 − hmask[l] bit 4j+p) and sub-block 8j+2p+l/16.
func dotQ3KQ8KGo(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ3_K]byte)(w[b*BlockBytesQ3_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		hm := (*[32]byte)(wb[0:])
		sc := q3kScales((*[12]byte)(wb[96:]))
		q8 := (*[QK_K]byte)(xb[4:])
		var sumi [8]int32
		for j := 0; j < 2; j++ {
			qs := (*[32]byte)(wb[32+32*j:])
			for p := 0; p < 4; p++ {
				xs := (*[32]byte)(q8[128*j+32*p:])
				sh, bit := uint(2*p), uint(4*j+p)
				var t [8]int32
				for k := range t {
					q, h, x := qs[4*k:4*k+4:4*k+4], hm[4*k:4*k+4:4*k+4], xs[4*k:4*k+4:4*k+4]
					t[k] = q3v(q[0], h[0], sh, bit)*int32(int8(x[0])) + q3v(q[1], h[1], sh, bit)*int32(int8(x[1])) +
						q3v(q[2], h[2], sh, bit)*int32(int8(x[2])) + q3v(q[3], h[3], sh, bit)*int32(int8(x[3]))
				}
				kxScaleLanes(&sumi, &t, sc[8*j+2*p], sc[8*j+2*p+1])
			}
		}
		d := float32(q8kScale(xb) * halfToFloat(le16(wb[108:])))
		for k := 0; k < 8; k++ {
			acc[k] = lanes8FMA(d, float32(sumi[k]), acc[k])
		}
	}
	return hsum8(&acc)
}

// iq4Mul is ggml's mul_add_epi8 product of one IQ4 value v and one activation quant q:
// |v|·sign(q, v), the byte negation wrapping (−(−128) = −128).
func iq4Mul(v, q int8) int32 {
	p := int32(v) * int32(q)
	if q == -128 && v < 0 {
		p = -p // VPSIGNB's negation of −128 wraps to −128
	}
	return p
}

// kxScaleLanes adds lane sums t of one 32-element group to sumi, lanes 0..3 (its first 16
// elements) times s0 and lanes 4..7 times s1.
func kxScaleLanes(sumi, t *[8]int32, s0, s1 int32) {
	for k := 0; k < 4; k++ {
		sumi[k] += s0 * t[k]
		sumi[4+k] += s1 * t[4+k]
	}
}

// dotIQ4XSQ8KGo is the pure-Go IQ4_XS·Q8_K dot over nb super-blocks. Sub-block ib (32
// elements) has the scale (low nibble ib%2 of scales_l[ib/2] | bits 2ib..2ib+1 of scales_h
// << 4) − 32; its element l < 16 is the low nibble of qs[16ib+l], element 16+l the high one.
func dotIQ4XSQ8KGo(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesIQ4_XS]byte)(w[b*BlockBytesIQ4_XS:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		sh := le16(wb[2:])
		var sumi [8]int32
		for ib := 0; ib < 8; ib++ {
			ls := int32(wb[4+ib/2]>>(4*(ib&1))&15|byte(sh>>(2*ib)&3)<<4) - 32
			qs := (*[16]byte)(wb[8+16*ib:])
			xs := (*[32]byte)(xb[4+32*ib:])
			var t [8]int32
			for k := 0; k < 4; k++ {
				q, lo, hi := qs[4*k:4*k+4:4*k+4], xs[4*k:4*k+4:4*k+4], xs[16+4*k:20+4*k:20+4*k]
				t[k] = iq4Mul(kxIQ4Values[q[0]&15], int8(lo[0])) + iq4Mul(kxIQ4Values[q[1]&15], int8(lo[1])) +
					iq4Mul(kxIQ4Values[q[2]&15], int8(lo[2])) + iq4Mul(kxIQ4Values[q[3]&15], int8(lo[3]))
				t[4+k] = iq4Mul(kxIQ4Values[q[0]>>4], int8(hi[0])) + iq4Mul(kxIQ4Values[q[1]>>4], int8(hi[1])) +
					iq4Mul(kxIQ4Values[q[2]>>4], int8(hi[2])) + iq4Mul(kxIQ4Values[q[3]>>4], int8(hi[3]))
			}
			kxScaleLanes(&sumi, &t, ls, ls)
		}
		d := float32(halfToFloat(le16(wb[0:])) * q8kScale(xb))
		for k := 0; k < 8; k++ {
			acc[k] = lanes8FMA(d, float32(sumi[k]), acc[k])
		}
	}
	return hsum8(&acc)
}
