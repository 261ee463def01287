package quant

// IQ4_NL (block 32) and IQ4_XS (super-block 256) non-linear 4-bit formats (facts §2.7).
//
//	IQ4_NL  d:f16 | qs[16]                                      x = d·K[q]
//	IQ4_XS  d:f16 | scales_h:u16 | scales_l[4] | qs[128]        x = d·(ls-32)·K[q]
//
// Nibble order inside each 32-element block is that of Q4_0.

import "encoding/binary"

// kvaluesIQ4NL is ggml's kvalues_iq4nl codebook.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

var kvaluesIQ4NLf = func() (t [16]float32) {
	for i, v := range kvaluesIQ4NL {
		t[i] = float32(v)
	}
	return
}()

// bestIndexIQ4 is best_index_int8 over the IQ4 codebook: nearest entry, ties to the
// larger entry. nearestIQ4 computes the same index faster (see TestNearestIQ4) and
// is what the quantizers call; this is the literal port kept as its reference.
func bestIndexIQ4(x float32) uint8 {
	k := &kvaluesIQ4NLf
	if x <= k[0] {
		return 0
	}
	if x >= k[15] {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < k[mav] {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-k[mu-1] < k[mu]-x {
		return uint8(mu - 1)
	}
	return uint8(mu)
}

// iq4BlockScale is the per-32-block scale search of quantize_row_iq4_nl_impl with
// ntry = 7. L receives codebook indices; ok is false for an all-zero block.
func iq4BlockScale(xb, w []float32, L []uint8) (d float32, ok bool) {
	max, amax := signedMax(xb)
	if amax < groupMaxEps {
		return 0, false
	}
	const ntry = 7
	k := &kvaluesIQ4NLf
	d = -max / k[0]
	id := 1 / d
	var sumqx, sumq2 float32
	for j, v := range xb {
		l := nearestIQ4(id * v)
		L[j] = l
		q := k[l]
		sumqx += float32(float32(w[j]*q) * v)
		sumq2 += float32(float32(w[j]*q) * q)
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := int32(-ntry); itry <= ntry; itry++ {
		id = float32(itry+int32(kvaluesIQ4NL[0])) / max
		sumqx, sumq2 = 0, 0
		for j, v := range xb {
			q := k[nearestIQ4(id*v)]
			sumqx += float32(float32(w[j]*q) * v)
			sumq2 += float32(float32(w[j]*q) * q)
		}
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d, true
}

// iq4Weights fills ggml's IQ4 weights: imatrix·sqrt(σ²+x²) or x² without imatrix.
func iq4Weights(w, xb, qw []float32, sigma2 float32) {
	if qw == nil {
		for j, v := range xb {
			w[j] = v * v
		}
		return
	}
	imatrixWeights(w, xb, qw, sigma2)
}

func iq4Sigma2(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return float32(s * (2 / float32(len(x)))) // explicit rounding: no FMA with the later add
}

func packIQ4Labels(qs []byte, L []uint8) {
	for i := 0; i < len(L)/32; i++ {
		for j := 0; j < 16; j++ {
			qs[16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}

// quantRowIQ4NL ports quantize_iq4_nl (what llama-quantize runs; qw may be nil).
func quantRowIQ4NL(dst []byte, x, qw []float32, s *scratch) {
	w := s.w[:32]
	L := s.Lu[:32]
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeIQ4_NL*ib : sizeIQ4_NL*ib+sizeIQ4_NL]
		var q []float32
		if qw != nil {
			q = qw[32*ib : 32*ib+32]
		}
		iq4Weights(w, xb, q, iq4Sigma2(xb))
		d, _ := iq4BlockScale(xb, w, L)
		putF16(yb, d)
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for j, v := range xb {
			L[j] = nearestIQ4(id * v)
		}
		packIQ4Labels(yb[2:18], L)
	}
}

// quantRowIQ4XS ports quantize_iq4_xs (qw may be nil).
func quantRowIQ4XS(dst []byte, x, qw []float32, s *scratch) {
	w := s.w[:32]
	L := s.Lu[:QK_K]
	var scales [8]float32
	for ibl := 0; ibl < len(x)/QK_K; ibl++ {
		xs := x[QK_K*ibl : QK_K*ibl+QK_K]
		yb := dst[sizeIQ4_XS*ibl : sizeIQ4_XS*ibl+sizeIQ4_XS]
		sigma2 := iq4Sigma2(xs)
		var maxScale, amaxScale float32
		for ib := 0; ib < 8; ib++ {
			xb := xs[32*ib : 32*ib+32]
			var q []float32
			if qw != nil {
				q = qw[QK_K*ibl+32*ib : QK_K*ibl+32*ib+32]
			}
			iq4Weights(w, xb, q, sigma2)
			d, ok := iq4BlockScale(xb, w, L[32*ib:32*ib+32])
			if !ok {
				scales[ib] = 0
				continue
			}
			scales[ib] = d
			if a := fabs(d); a > amaxScale {
				amaxScale = a
				maxScale = d
			}
		}
		D := -maxScale / 32
		finishIQ4XS(yb, xs, L, D, func(ib int) int32 {
			var id float32
			if D != 0 {
				id = 1 / D
			}
			return clampI(nearestInt(id*scales[ib]), -32, 31)
		})
	}
}

// finishIQ4XS stores the super-scale D (rounded to fp16, but labels use the
// unrounded D as ggml does), the 6-bit sub-scales l (from lfn) and the labels.
func finishIQ4XS(yb []byte, xs []float32, L []uint8, D float32, lfn func(ib int) int32) {
	putF16(yb, D)
	var sh uint16
	sl := yb[4:8]
	for ib := 0; ib < 8; ib++ {
		l := lfn(ib)
		dl := D * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		for j, v := range xs[32*ib : 32*ib+32] {
			L[32*ib+j] = nearestIQ4(idl * v)
		}
		u := uint8(l + 32)
		if ib%2 == 0 {
			sl[ib/2] = u & 0xf
		} else {
			sl[ib/2] |= (u & 0xf) << 4
		}
		sh |= uint16(u>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(yb[2:], sh)
	packIQ4Labels(yb[8:136], L)
}

func dequantIQ4NL(y []float32, b []byte) {
	k := &kvaluesIQ4NLf
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeIQ4_NL*ib : sizeIQ4_NL*ib+sizeIQ4_NL]
		d := getF16(bb)
		qs := bb[2:18]
		for j := 0; j < 16; j++ {
			yb[j] = d * k[qs[j]&0xf]
			yb[j+16] = d * k[qs[j]>>4]
		}
	}
}

func dequantIQ4XS(y []float32, b []byte) {
	k := &kvaluesIQ4NLf
	for ibl := 0; ibl < len(y)/QK_K; ibl++ {
		yb := y[QK_K*ibl : QK_K*ibl+QK_K]
		bb := b[sizeIQ4_XS*ibl : sizeIQ4_XS*ibl+sizeIQ4_XS]
		d := getF16(bb)
		sh := binary.LittleEndian.Uint16(bb[2:])
		for ib := 0; ib < 8; ib++ {
			ls := int32((bb[4+ib/2]>>(4*(ib%2)))&0xf) | int32((sh>>(2*ib))&3)<<4
			dl := d * float32(ls-32)
			qs := bb[8+16*ib : 8+16*ib+16]
			o := yb[32*ib : 32*ib+32]
			for j := 0; j < 16; j++ {
				o[j] = dl * k[qs[j]&0xf]
				o[j+16] = dl * k[qs[j]>>4]
			}
		}
	}
}
