package kernels

// Pure-Go twins of the repack-order kernels (see repack.go for the formulas). They are the
// reference the assembly is tested against, bit for bit.

// The FMA of the chains is lanes8FMA (lanes8.go): a single-rounding float32 FMA, exact for
// every finite input.

// repackLUTQ4_0 maps a Q4_0 nibble q to its signed value q−8; repackLUTIQ4NL is ggml's IQ4_NL
// codebook (facts §2.7).
var (
	repackLUTQ4_0  = [16]int8{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}
	repackLUTIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
)

// repackMulGemv is one product of ggml's gemv form |w|·sign(x, w), with the int8 negation of
// VPSIGNB: it equals w·x except for x = −128 and w < 0, where it is +|w|·(−128).
func repackMulGemv(w, x int8) int32 {
	switch {
	case w > 0:
		return int32(w) * int32(x)
	case w < 0:
		return -int32(w) * int32(-x) // -x wraps to −128 for x = −128, as VPSIGNB does
	}
	return 0
}

// repackBlockSumQ4 returns the exact integer sum of one 32-element Q4_0/IQ4_NL block (lut maps
// the nibbles) against a Q8_0 block, in ggml's gemv form (gemm=false: repackMulGemv products) or
// its gemm form (gemm=true: |x|·sign(w, x), which is w·x for every byte).
func repackBlockSumQ4(lut *[16]int8, wq *[16]byte, xq *[32]byte, gemm bool) int32 {
	var s int32
	for j := 0; j < 16; j++ {
		w0, w1 := lut[wq[j]&15], lut[wq[j]>>4]
		x0, x1 := int8(xq[j]), int8(xq[16+j])
		if gemm {
			s += int32(w0)*int32(x0) + int32(w1)*int32(x1)
		} else {
			s += repackMulGemv(w0, x0) + repackMulGemv(w1, x1)
		}
	}
	return s
}

// dotQ4RepackGo is the Q4_0/IQ4_NL · Q8_0 repack-order dot over nb blocks, starting the FMA
// chain at acc.
func dotQ4RepackGo(lut *[16]int8, nb int, w, x []byte, gemm bool, acc float32) float32 {
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ4_0]byte)(w[b*BlockBytesQ4_0:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		isum := repackBlockSumQ4(lut, (*[16]byte)(wb[2:]), (*[32]byte)(xb[2:]), gemm)
		d := float32(halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:])))
		acc = lanes8FMA(float32(isum), d, acc)
	}
	return acc
}

// repackQ8KPairs returns P_j = bsum_2j + bsum_2j+1 of a Q8_K block, wrapped to int16 as ggml's
// repack kernels add them (VPHADDW). For rows from QuantizeRowQ8K |P_j| ≤ 4064, no wrap.
func repackQ8KPairs(xb *[BlockBytesQ8_K]byte) (p [8]int32) {
	for j := 0; j < 8; j++ {
		b0 := int16(le16(xb[4+QK_K+4*j:]))
		b1 := int16(le16(xb[4+QK_K+4*j+2:]))
		p[j] = int32(b0 + b1)
	}
	return p
}

// repackQ4KChunkSums returns, for the four 64-element chunks c of a Q4_K·Q8_K super-block,
// sc_2c·Σ q·x (first 32) + sc_2c+1·Σ q·x (last 32): exact int32 for every byte.
func repackQ4KChunkSums(qs *[128]byte, q8 *[QK_K]byte, sc *[8]int32) (cs [4]int32) {
	for c := 0; c < 4; c++ {
		var s0, s1 int32
		for l := 0; l < 32; l++ {
			q := qs[32*c+l]
			s0 += int32(q&15) * int32(int8(q8[64*c+l]))
			s1 += int32(q>>4) * int32(int8(q8[64*c+32+l]))
		}
		cs[c] = sc[2*c]*s0 + sc[2*c+1]*s1
	}
	return cs
}

// dotQ4KRepackGo is the Q4_K · Q8_K repack-order dot over nb super-blocks. gemm=false is
// ggml's gemv order (one FMA per super-block into each chain); gemm=true is its gemm order
// (one FMA per 64-element chunk). acc/accm continue the two chains; the result is acc − accm.
func dotQ4KRepackGo(nb int, w, x []byte, gemm bool, acc, accm float32) (float32, float32) {
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ4_K]byte)(w[b*BlockBytesQ4_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		sc, m := kScales((*[12]byte)(wb[4:16]))
		cs := repackQ4KChunkSums((*[128]byte)(wb[16:]), (*[QK_K]byte)(xb[4:]), &sc)
		p := repackQ8KPairs(xb)
		dx := q8kScale(xb)
		d := float32(halfToFloat(le16(wb[0:])) * dx)
		dmin := float32(halfToFloat(le16(wb[2:])) * dx)
		if gemm {
			for c := 0; c < 4; c++ {
				acc = lanes8FMA(float32(cs[c]), d, acc)
				accm = lanes8FMA(float32(m[2*c]*p[2*c]+m[2*c+1]*p[2*c+1]), dmin, accm)
			}
			continue
		}
		isum := cs[0] + cs[1] + cs[2] + cs[3]
		var imin int32
		for j := 0; j < 8; j++ {
			imin += m[j] * p[j]
		}
		acc = lanes8FMA(float32(isum), d, acc)
		accm = lanes8FMA(float32(imin), dmin, accm)
	}
	return acc, accm
}
