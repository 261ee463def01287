package quant

// K-quant formats (super-blocks of 256, facts §2.5): layouts, dequantization and
// ports of ggml's reference (no imatrix) and imatrix quantizers.
//
//	Q2_K  scales[16] | qs[64] | d:f16 | dmin:f16                       84 bytes
//	Q3_K  hmask[32] | qs[64] | scales[12] | d:f16                      110 bytes
//	Q4_K  d:f16 | dmin:f16 | scales[12] | qs[128]                      144 bytes
//	Q5_K  d:f16 | dmin:f16 | scales[12] | qh[32] | qs[128]             176 bytes
//	Q6_K  ql[128] | qh[64] | scales[16] int8 | d:f16                   210 bytes

import (
	"encoding/binary"
	"math"

	"github.com/tq-project/tq/quant/kernels"
)

// ---------------------------------------------------------------- packing helpers

// packQ2Bits packs 256 2-bit labels: qs[32n+l] = L[128n+l] | L[128n+l+32]<<2 | ...
func packQ2Bits(qs []byte, L []uint8) {
	for n := 0; n < 2; n++ {
		Ln := L[128*n : 128*n+128]
		q := qs[32*n : 32*n+32]
		for l := 0; l < 32; l++ {
			q[l] = Ln[l] | Ln[l+32]<<2 | Ln[l+64]<<4 | Ln[l+96]<<6
		}
	}
}

// packQ3Labels writes hmask and qs of a Q3_K block from labels in 0..7.
func packQ3Labels(yb []byte, L []uint8) {
	hmask := yb[0:32]
	for i := range hmask {
		hmask[i] = 0
	}
	var low [QK_K]uint8
	for j := 0; j < QK_K; j++ {
		l := L[j]
		if l > 3 {
			hmask[j%32] |= 1 << (j / 32)
			l -= 4
		}
		low[j] = l
	}
	packQ2Bits(yb[32:96], low[:])
}

// packQ3Scales packs 16 6-bit values (0..63, stored sc+32) into 12 bytes.
func packQ3Scales(sc []byte, u *[16]uint8) {
	for i := 0; i < 12; i++ {
		sc[i] = 0
	}
	for j := 0; j < 16; j++ {
		l := u[j]
		if j < 8 {
			sc[j] = l & 0xf
		} else {
			sc[j-8] |= (l & 0xf) << 4
		}
		sc[j%4+8] |= (l >> 4) << (2 * (j / 4))
	}
}

// q3Scale decodes the signed 6-bit scale j (-32..31) of a Q3_K block.
func q3Scale(sc []byte, j int) int32 {
	var lo uint8
	if j < 8 {
		lo = sc[j] & 0xf
	} else {
		lo = sc[j-8] >> 4
	}
	return int32(int8(lo|((sc[8+j%4]>>(2*(j/4)))&3)<<4)) - 32
}

// packScalesK4 packs 8 6-bit scales and mins into Q4_K/Q5_K's 12 bytes.
func packScalesK4(sc []byte, ls, lm *[8]uint8) {
	for j := 0; j < 8; j++ {
		if j < 4 {
			sc[j] = ls[j]
			sc[j+4] = lm[j]
		} else {
			sc[j+4] = ls[j]&0xf | (lm[j]&0xf)<<4
			sc[j-4] |= (ls[j] >> 4) << 6
			sc[j] |= (lm[j] >> 4) << 6
		}
	}
}

// scaleMinK4 is get_scale_min_k4.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// packQ4KLabels packs 256 labels 0..15: q[32c+l] = L[64c+l] | L[64c+32+l]<<4.
func packQ4KLabels(qs []byte, L []uint8) {
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			qs[32*c+l] = L[64*c+l] | L[64*c+32+l]<<4
		}
	}
}

// packQ5KLabels packs 256 labels 0..31 into qh[32] and qs[128].
func packQ5KLabels(qh, qs []byte, L []uint8) {
	for i := 0; i < 32; i++ {
		qh[i] = 0
	}
	m1, m2 := uint8(1), uint8(2)
	for c := 0; c < 4; c++ {
		for j := 0; j < 32; j++ {
			l1 := L[64*c+j]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			l2 := L[64*c+j+32]
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			qs[32*c+j] = l1 | l2<<4
		}
		m1 <<= 2
		m2 <<= 2
	}
}

// packQ6KLabels packs 256 labels 0..63 into ql[128] and qh[64].
func packQ6KLabels(ql, qh []byte, L []uint8) {
	for n := 0; n < 2; n++ {
		Ln := L[128*n:]
		qln := ql[64*n:]
		qhn := qh[32*n:]
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := Ln[l], Ln[l+32], Ln[l+64], Ln[l+96]
			qln[l] = q1&0xf | (q3&0xf)<<4
			qln[l+32] = q2&0xf | (q4&0xf)<<4
			qhn[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
	}
}

// ---------------------------------------------------------------- requantization

// requantAsym re-derives labels of n elements from an effective scale ds and
// offset dm (x ≈ ds·l − dm): l = clamp(rne((x+dm)/ds), 0, nmax). Skipped when ds == 0.
func requantAsym(L []uint8, x []float32, ds, dm float32, nmax int32) {
	if ds == 0 {
		return
	}
	kernels.RequantAsym(L, x, ds, dm, nmax)
}

// requantSym: l = clamp(rne(x/ds), -nmax, nmax-1) + nmax. Skipped when ds == 0.
func requantSym(L []uint8, x []float32, ds float32, nmax int32) {
	if ds == 0 {
		return
	}
	for i, v := range x {
		L[i] = uint8(clampI(nearestInt(v/ds), -nmax, nmax-1) + nmax)
	}
}

// ---------------------------------------------------------------- Q2_K

func quantRowQ2KRef(dst []byte, x []float32, s *scratch) {
	var scales, mins [16]float32
	L := s.Lu[:QK_K]
	w := s.w[:16]
	for ib := 0; ib < len(x)/QK_K; ib++ {
		xb := x[QK_K*ib : QK_K*ib+QK_K]
		yb := dst[sizeQ2_K*ib : sizeQ2_K*ib+sizeQ2_K]
		var maxScale, maxMin float32
		for j := 0; j < 16; j++ {
			xs := xb[16*j : 16*j+16]
			for l, v := range xs {
				w[l] = fabs(v)
			}
			scales[j] = ggmlQkxQuants(xs, w, L[16*j:16*j+16], s.Laux[:16], &mins[j], 3, -0.5, 0.1, 15, true, false)
			if scales[j] > maxScale {
				maxScale = scales[j]
			}
			if mins[j] > maxMin {
				maxMin = mins[j]
			}
		}
		sc := yb[0:16]
		if maxScale > 0 {
			iscale := 15 / maxScale
			for j := range sc {
				sc[j] = uint8(nearestInt(iscale * scales[j]))
			}
			putF16(yb[80:], maxScale/15)
		} else {
			for j := range sc {
				sc[j] = 0
			}
			putF16(yb[80:], 0)
		}
		if maxMin > 0 {
			iscale := 15 / maxMin
			for j := range sc {
				sc[j] |= uint8(nearestInt(iscale*mins[j]) << 4)
			}
			putF16(yb[82:], maxMin/15)
		} else {
			putF16(yb[82:], 0)
		}
		finishQ2K(yb, xb, L)
	}
}

// finishQ2K requantizes with the stored scales and packs the labels.
func finishQ2K(yb []byte, xb []float32, L []uint8) {
	d, dmin := getF16(yb[80:]), getF16(yb[82:])
	for j := 0; j < 16; j++ {
		ds := float32(d * float32(yb[j]&0xf))
		dm := float32(dmin * float32(yb[j]>>4))
		requantAsym(L[16*j:16*j+16], xb[16*j:16*j+16], ds, dm, 3)
	}
	packQ2Bits(yb[16:80], L)
}

func quantRowQ2KImp(dst []byte, x, qw []float32, s *scratch) {
	var scales, mins, sw [16]float32
	var Ls, Lm [16]uint8
	L := s.Lu[:QK_K]
	w := s.w[:QK_K]
	for ib := 0; ib < len(x)/QK_K; ib++ {
		xb := x[QK_K*ib : QK_K*ib+QK_K]
		yb := dst[sizeQ2_K*ib : sizeQ2_K*ib+sizeQ2_K]
		var sumx2 float32
		for _, v := range xb {
			sumx2 += float32(v * v)
		}
		sigma2 := float32(sumx2 / QK_K) // the conversion keeps the compiler from fusing x/256 = x·2⁻⁸ into an FMA
		for j := 0; j < 16; j++ {
			wj := w[16*j : 16*j+16]
			imatrixWeights(wj, xb[16*j:16*j+16], qw[QK_K*ib+16*j:], sigma2)
			sw[j] = 0
			for _, v := range wj {
				sw[j] += v
			}
		}
		qkxRun(s, 16, xb, w, L, &scales, &mins, 16, 3, -0.9, 0.05, 36, true)
		dm := ggmlQpQuants(scales[:], Ls[:], 15, sw[:])
		mm := ggmlQpQuants(mins[:], Lm[:], 15, sw[:])
		putF16(yb[80:], dm)
		putF16(yb[82:], mm)
		for j := 0; j < 16; j++ {
			yb[j] = Ls[j] | Lm[j]<<4
		}
		finishQ2K(yb, xb, L)
	}
}

func dequantQ2K(y []float32, b []byte) {
	for ib := 0; ib < len(y)/QK_K; ib++ {
		yb := y[QK_K*ib : QK_K*ib+QK_K]
		bb := b[sizeQ2_K*ib : sizeQ2_K*ib+sizeQ2_K]
		d, dmin := getF16(bb[80:]), getF16(bb[82:])
		for n := 0; n < 2; n++ {
			q := bb[16+32*n : 16+32*n+32]
			for j := 0; j < 4; j++ {
				shift := uint(2 * j)
				for h := 0; h < 2; h++ {
					sc := bb[8*n+2*j+h]
					dl := float32(d * float32(sc&0xf))
					ml := float32(dmin * float32(sc>>4))
					o := yb[128*n+32*j+16*h : 128*n+32*j+16*h+16]
					qq := q[16*h : 16*h+16]
					for l := range o {
						o[l] = float32(dl*float32((qq[l]>>shift)&3)) - ml
					}
				}
			}
		}
	}
}

// ---------------------------------------------------------------- Q3_K

func quantRowQ3KRef(dst []byte, x []float32, s *scratch) {
	var scales [16]float32
	Li := s.L[:QK_K]
	L := s.Lu[:QK_K]
	for ib := 0; ib < len(x)/QK_K; ib++ {
		xb := x[QK_K*ib : QK_K*ib+QK_K]
		yb := dst[sizeQ3_K*ib : sizeQ3_K*ib+sizeQ3_K]
		var maxScale, amax float32
		for j := 0; j < 16; j++ {
			scales[j] = ggmlQ3Quants(xb[16*j:16*j+16], Li[16*j:16*j+16], 4)
			if a := fabs(scales[j]); a > amax {
				amax = a
				maxScale = scales[j]
			}
		}
		for i := range L {
			L[i] = uint8(Li[i])
		}
		var u [16]uint8
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := 0; j < 16; j++ {
				l := int32(int8(nearestInt(iscale * scales[j])))
				u[j] = uint8(clampI(l, -32, 31) + 32)
			}
			packQ3Scales(yb[96:108], &u)
			putF16(yb[108:], 1/iscale)
		} else {
			packQ3Scales(yb[96:108], &u) // all zero bytes
			putF16(yb[108:], 0)
		}
		finishQ3K(yb, xb, L)
	}
}

// finishQ3K requantizes with the stored scales and writes hmask/qs.
func finishQ3K(yb []byte, xb []float32, L []uint8) {
	d := getF16(yb[108:])
	for j := 0; j < 16; j++ {
		ds := d * float32(q3Scale(yb[96:108], j))
		requantSym(L[16*j:16*j+16], xb[16*j:16*j+16], ds, 4)
	}
	packQ3Labels(yb, L)
}

func quantRowQ3KImp(dst []byte, x, qw []float32, s *scratch) {
	var scales, sw [16]float32
	var Ls [16]int8
	Li := s.L[:QK_K]
	L := s.Lu[:QK_K]
	w := s.w[:QK_K]
	for ib := 0; ib < len(x)/QK_K; ib++ {
		xb := x[QK_K*ib : QK_K*ib+QK_K]
		yb := dst[sizeQ3_K*ib : sizeQ3_K*ib+sizeQ3_K]
		sigma2 := superBlockSigma2(xb)
		for j := 0; j < 16; j++ {
			wj := w[16*j : 16*j+16]
			imatrixWeights(wj, xb[16*j:16*j+16], qw[QK_K*ib+16*j:], sigma2)
			var sumw float32
			for _, v := range wj {
				sumw += v
			}
			sw[j] = sumw
		}
		qxQuants16(s, xb, Li, scales[:], 16, 4, w[:QK_K], false)
		dBlock := ggmlQxQuants(scales[:], Ls[:], 32, sw[:])
		var u [16]uint8
		for j := range u {
			u[j] = uint8(Ls[j])
		}
		packQ3Scales(yb[96:108], &u)
		putF16(yb[108:], dBlock)
		for i := range L {
			L[i] = uint8(Li[i])
		}
		finishQ3K(yb, xb, L)
	}
}

func dequantQ3K(y []float32, b []byte) {
	for ib := 0; ib < len(y)/QK_K; ib++ {
		yb := y[QK_K*ib : QK_K*ib+QK_K]
		bb := b[sizeQ3_K*ib : sizeQ3_K*ib+sizeQ3_K]
		d := getF16(bb[108:])
		hm := bb[0:32]
		for n := 0; n < 2; n++ {
			q := bb[32+32*n : 32+32*n+32]
			for j := 0; j < 4; j++ {
				shift := uint(2 * j)
				bit := uint(4*n + j)
				for h := 0; h < 2; h++ {
					dl := d * float32(q3Scale(bb[96:108], 8*n+2*j+h))
					o := yb[128*n+32*j+16*h : 128*n+32*j+16*h+16]
					qq := q[16*h : 16*h+16]
					hh := hm[16*h : 16*h+16]
					for l := range o {
						v := int32((qq[l]>>shift)&3) - 4 + 4*int32((hh[l]>>bit)&1)
						o[l] = dl * float32(v)
					}
				}
			}
		}
	}
}

// ---------------------------------------------------------------- Q4_K / Q5_K

// quantRowQ45KRef ports quantize_row_q4_K_ref (nmax 15) and _q5_K_ref (nmax 31). Where the
// 16-lane search runs (kernels.HasLaneSearch16), super-blocks go through the scale search two
// at a time; the bytes are the same.
func quantRowQ45KRef(dst []byte, x []float32, s *scratch, nmax int32) {
	bs := sizeQ4_K
	rmin, nstep := float32(-1), 20
	if nmax == 31 {
		bs = sizeQ5_K
		rmin, nstep = -0.5, 15
	}
	superBlockRuns(len(x)/QK_K, func(ib, k int) {
		xb := x[QK_K*ib : QK_K*(ib+k)]
		w := s.w2[:QK_K*k]
		L := s.Lu2[:QK_K*k]
		for j := 0; j < 8*k; j++ {
			xs := xb[32*j : 32*j+32]
			var sumx2 float32
			for _, v := range xs {
				sumx2 += float32(v * v)
			}
			avx := sqrtf(sumx2 / 32)
			for l, v := range xs {
				w[32*j+l] = avx + fabs(v)
			}
		}
		var scales, mins [16]float32
		qkxRun(s, 8*k, xb, w, L, &scales, &mins, 32, nmax, rmin, 0.1, nstep, false)
		for h := 0; h < k; h++ {
			var maxScale, maxMin float32
			for j := 8 * h; j < 8*h+8; j++ {
				if scales[j] > maxScale {
					maxScale = scales[j]
				}
				if mins[j] > maxMin {
					maxMin = mins[j]
				}
			}
			var invScale, invMin float32
			if maxScale > 0 {
				invScale = 63 / maxScale
			}
			if maxMin > 0 {
				invMin = 63 / maxMin
			}
			var ls, lm [8]uint8
			for j := 0; j < 8; j++ {
				ls[j] = min(63, uint8(nearestInt(invScale*scales[8*h+j])))
				lm[j] = min(63, uint8(nearestInt(invMin*mins[8*h+j])))
			}
			yb := dst[bs*(ib+h) : bs*(ib+h)+bs]
			packScalesK4(yb[4:16], &ls, &lm)
			putF16(yb[0:], maxScale/63)
			putF16(yb[2:], maxMin/63)
			finishQ45K(yb, xb[QK_K*h:QK_K*h+QK_K], L[QK_K*h:QK_K*h+QK_K], nmax)
		}
	})
}

// finishQ45K requantizes with the stored scales/mins and packs the labels.
func finishQ45K(yb []byte, xb []float32, L []uint8, nmax int32) {
	d, dmin := getF16(yb[0:]), getF16(yb[2:])
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, yb[4:16])
		ds := float32(d * float32(sc))
		dm := float32(dmin * float32(m))
		requantAsym(L[32*j:32*j+32], xb[32*j:32*j+32], ds, dm, nmax)
	}
	if nmax == 15 {
		packQ4KLabels(yb[16:144], L)
	} else {
		packQ5KLabels(yb[16:48], yb[48:176], L)
	}
}

// quantRowQ45KImp ports quantize_row_q4_K_impl / quantize_row_q5_K_impl. Where the 16-lane
// search runs (kernels.HasLaneSearch16), super-blocks go through the scale search two at a
// time; the bytes are the same.
func quantRowQ45KImp(dst []byte, x, qw []float32, s *scratch, nmax int32) {
	bs := sizeQ4_K
	if nmax == 31 {
		bs = sizeQ5_K
	}
	superBlockRuns(len(x)/QK_K, func(ib, k int) {
		xb := x[QK_K*ib : QK_K*(ib+k)]
		w := s.w2[:QK_K*k]
		L := s.Lu2[:QK_K*k]
		var sw, scales, mins [16]float32
		for h := 0; h < k; h++ {
			xh := xb[QK_K*h : QK_K*h+QK_K]
			imatrixWeights(w[QK_K*h:QK_K*h+QK_K], xh, qw[QK_K*(ib+h):], superBlockSigma2(xh))
			for j := 0; j < 8; j++ {
				wj := w[QK_K*h+32*j : QK_K*h+32*j+32]
				var sumw float32
				for _, v := range wj {
					sumw += v
				}
				sw[8*h+j] = sumw
			}
		}
		qkxRun(s, 8*k, xb, w, L, &scales, &mins, 32, nmax, -0.9, 0.05, 36, true)
		for h := 0; h < k; h++ {
			var Ls, Lm [8]uint8
			dBlock := ggmlQpQuants(scales[8*h:8*h+8], Ls[:], 63, sw[8*h:8*h+8])
			mBlock := ggmlQpQuants(mins[8*h:8*h+8], Lm[:], 63, sw[8*h:8*h+8])
			if nmax == 31 { // only the Q5_K impl clamps here
				for j := range Ls {
					Ls[j] = min(63, Ls[j])
					Lm[j] = min(63, Lm[j])
				}
			}
			yb := dst[bs*(ib+h) : bs*(ib+h)+bs]
			packScalesK4(yb[4:16], &Ls, &Lm)
			putF16(yb[0:], dBlock)
			putF16(yb[2:], mBlock)
			finishQ45K(yb, xb[QK_K*h:QK_K*h+QK_K], L[QK_K*h:QK_K*h+QK_K], nmax)
		}
	})
}

func dequantQ4K(y []float32, b []byte) {
	for ib := 0; ib < len(y)/QK_K; ib++ {
		yb := y[QK_K*ib : QK_K*ib+QK_K]
		bb := b[sizeQ4_K*ib : sizeQ4_K*ib+sizeQ4_K]
		d, dmin := getF16(bb[0:]), getF16(bb[2:])
		q := bb[16:144]
		for c := 0; c < 4; c++ {
			sc1, m1 := scaleMinK4(2*c, bb[4:16])
			sc2, m2 := scaleMinK4(2*c+1, bb[4:16])
			d1, mm1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
			d2, mm2 := float32(d*float32(sc2)), float32(dmin*float32(m2))
			kernels.DequantNibbles(yb[64*c:64*c+64], q[32*c:32*c+32], d1, mm1, d2, mm2)
		}
	}
}

func dequantQ5K(y []float32, b []byte) {
	for ib := 0; ib < len(y)/QK_K; ib++ {
		yb := y[QK_K*ib : QK_K*ib+QK_K]
		bb := b[sizeQ5_K*ib : sizeQ5_K*ib+sizeQ5_K]
		d, dmin := getF16(bb[0:]), getF16(bb[2:])
		qh := bb[16:48]
		ql := bb[48:176]
		for c := 0; c < 4; c++ {
			sc1, m1 := scaleMinK4(2*c, bb[4:16])
			sc2, m2 := scaleMinK4(2*c+1, bb[4:16])
			d1, mm1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
			d2, mm2 := float32(d*float32(sc2)), float32(dmin*float32(m2))
			qc := ql[32*c : 32*c+32]
			o := yb[64*c : 64*c+64]
			s1, s2 := uint(2*c), uint(2*c+1)
			for l := 0; l < 32; l++ {
				h1 := (qh[l] >> s1 & 1) << 4
				h2 := (qh[l] >> s2 & 1) << 4
				o[l] = float32(d1*float32(qc[l]&0xf|h1)) - mm1
				o[l+32] = float32(d2*float32(qc[l]>>4|h2)) - mm2
			}
		}
	}
}

// ---------------------------------------------------------------- Q6_K

// quantRowQ6K ports quantize_row_q6_K_ref (qw == nil) and quantize_row_q6_K_impl.
func quantRowQ6K(dst []byte, x, qw []float32, s *scratch) {
	var scales [16]float32
	Li := s.L[:QK_K]
	L := s.Lu[:QK_K]
	for ib := 0; ib < len(x)/QK_K; ib++ {
		xb := x[QK_K*ib : QK_K*ib+QK_K]
		yb := dst[sizeQ6_K*ib : sizeQ6_K*ib+sizeQ6_K]
		var maxScale, maxAbs float32
		var w []float32
		if qw != nil {
			w = qw[QK_K*ib : QK_K*ib+QK_K]
		}
		qxQuants16(s, xb, Li, scales[:], 16, 32, w, true)
		for j := 0; j < 16; j++ {
			if a := fabs(scales[j]); a > maxAbs {
				maxAbs = a
				maxScale = scales[j]
			}
		}
		if maxAbs < groupMaxEps {
			for i := range yb {
				yb[i] = 0
			}
			continue
		}
		iscale := -128 / maxScale
		putF16(yb[208:], 1/iscale)
		for j := 0; j < 16; j++ {
			yb[192+j] = byte(int8(min(127, nearestInt(iscale*scales[j]))))
		}
		for i := range L {
			L[i] = uint8(Li[i])
		}
		finishQ6K(yb, xb, L)
	}
}

// finishQ6K requantizes with the stored scales and packs the labels.
func finishQ6K(yb []byte, xb []float32, L []uint8) {
	d := getF16(yb[208:])
	for j := 0; j < 16; j++ {
		ds := d * float32(int8(yb[192+j]))
		requantSym(L[16*j:16*j+16], xb[16*j:16*j+16], ds, 32)
	}
	packQ6KLabels(yb[0:128], yb[128:192], L)
}

func dequantQ6K(y []float32, b []byte) {
	for ib := 0; ib < len(y)/QK_K; ib++ {
		yb := y[QK_K*ib : QK_K*ib+QK_K]
		bb := b[sizeQ6_K*ib : sizeQ6_K*ib+sizeQ6_K]
		d := getF16(bb[208:])
		for n := 0; n < 2; n++ {
			ql := bb[64*n : 64*n+64]
			qh := bb[128+32*n : 128+32*n+32]
			sc := bb[192+8*n : 192+8*n+8]
			o := yb[128*n : 128*n+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xf|(qh[l]&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|((qh[l]>>2)&3)<<4) - 32
				q3 := int32(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
				o[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				o[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				o[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				o[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
		}
	}
}

// ---------------------------------------------------------------- Q8_K

// QuantizeRowQ8K quantizes src (a multiple of 256 elements) to Q8_K exactly like
// ggml's quantize_row_q8_K (the CPU backend calls the reference routine): per block
// iscale = -127/max with max the first largest-|x| element, q = min(127, rne(iscale·x)),
// d = 1/iscale stored as float32, bsums = sums of 16 consecutive q. All-zero blocks
// get d = 0 and zero quants and sums. It panics if len(dst) != len(src)/256·292.
func QuantizeRowQ8K(dst []byte, src []float32) {
	nb := len(src) / QK_K
	if len(src)%QK_K != 0 || len(dst) != nb*sizeQ8_K {
		panic("quant: QuantizeRowQ8K: bad lengths")
	}
	for ib := 0; ib < nb; ib++ {
		xb := src[QK_K*ib : QK_K*ib+QK_K]
		yb := dst[sizeQ8_K*ib : sizeQ8_K*ib+sizeQ8_K]
		max, amax := signedMax(xb)
		if amax == 0 {
			for i := range yb {
				yb[i] = 0
			}
			continue
		}
		iscale := -127 / max
		qs := yb[4:260]
		for j, v := range xb {
			qs[j] = byte(int8(min(127, nearestInt(iscale*v))))
		}
		for j := 0; j < 16; j++ {
			var sum int32
			for _, q := range qs[16*j : 16*j+16] {
				sum += int32(int8(q))
			}
			binary.LittleEndian.PutUint16(yb[260+2*j:], uint16(int16(sum)))
		}
		binary.LittleEndian.PutUint32(yb, math.Float32bits(1/iscale))
	}
}

func dequantQ8K(y []float32, b []byte) {
	for ib := 0; ib < len(y)/QK_K; ib++ {
		yb := y[QK_K*ib : QK_K*ib+QK_K]
		bb := b[sizeQ8_K*ib : sizeQ8_K*ib+sizeQ8_K]
		d := math.Float32frombits(binary.LittleEndian.Uint32(bb))
		for j := range yb {
			yb[j] = d * float32(int8(bb[4+j]))
		}
	}
}
