package quant

// The per-type view of a ggml block that QuantizeGPTQ works with: once a block's
// scales are fixed, every element is y = s·level (symmetric formats) or
// y = float32(s·level) + o (formats with a min), where s and o belong to the
// element's sub-block and are computed from the stored header exactly as the
// type's decoder computes them, so the value the column loop rounds to is the value
// Dequantize returns, bit for bit.

import (
	"encoding/binary"

	"github.com/tq-project/tq/gguf"
)

type gptqSpec struct {
	t      gguf.GGMLType
	bs, ts int // elements and bytes per block
	sub    int // elements sharing one (s, o)
	lev    []float32
	lab    []uint8 // stored label of lev[k]
	unit   bool    // lev[k] = lev[0] + k
	asym   bool
	params func(blk []byte, s, o []float32) // per sub-block decoder parameters
	pack   func(blk []byte, L []uint8)      // write the labels of one block
	enc    blockEncoder
	// resub re-chooses the integer scale (and min) of sub-block k for its current
	// values xs and weights ws, keeping the block's fp16 super-scales; nil for
	// formats with one scale per block.
	resub func(blk []byte, k int, xs, ws []float32, is *impScratch)
}

// gptqMaxSub is the largest number of sub-blocks in one block (Q2_K, Q3_K, Q6_K).
const gptqMaxSub = 16

// intLevels returns the levels lo..hi and their labels level+off.
func intLevels(lo, hi, off int) ([]float32, []uint8) {
	var lev []float32
	var lab []uint8
	for v := lo; v <= hi; v++ {
		lev = append(lev, float32(v))
		lab = append(lab, uint8(v+off))
	}
	return lev, lab
}

func packNibbles32(qs []byte, L []uint8) {
	for j := 0; j < 16; j++ {
		qs[j] = L[j] | L[j+16]<<4
	}
}

func packQ5Block(qs, qh []byte, L []uint8) {
	var lo, hi [16]uint8
	copy(lo[:], L[:16])
	copy(hi[:], L[16:32])
	packQ5(qs, qh, lo, hi)
}

func oneScale(blk []byte, s, o []float32) { s[0], o[0] = getF16(blk), 0 }

func scaleMin(blk []byte, s, o []float32) { s[0], o[0] = getF16(blk), getF16(blk[2:]) }

var gptqSpecs = func() map[gguf.GGMLType]*gptqSpec {
	m := map[gguf.GGMLType]*gptqSpec{}
	add := func(sp *gptqSpec, lo, hi, off int) {
		tr, _ := sp.t.Traits()
		sp.bs, sp.ts = tr.BlockSize, tr.TypeSize
		if sp.lev == nil {
			sp.lev, sp.lab = intLevels(lo, hi, off)
			sp.unit = true
		}
		sp.enc = improvedEncoder(sp.t)
		m[sp.t] = sp
	}
	add(&gptqSpec{t: gguf.TypeQ4_0, sub: 32, params: oneScale,
		pack: func(b []byte, L []uint8) { packNibbles32(b[2:18], L) }}, -8, 7, 8)
	add(&gptqSpec{t: gguf.TypeQ5_0, sub: 32, params: oneScale,
		pack: func(b []byte, L []uint8) { packQ5Block(b[6:22], b[2:6], L) }}, -16, 15, 16)
	// -128 stays unused, as in the improved encoder (sign-trick SIMD kernels).
	add(&gptqSpec{t: gguf.TypeQ8_0, sub: 32, params: oneScale,
		pack: func(b []byte, L []uint8) { copy(b[2:34], L[:32]) }}, -127, 127, 0) // label = byte(int8(level))
	add(&gptqSpec{t: gguf.TypeQ4_1, sub: 32, asym: true, params: scaleMin,
		pack: func(b []byte, L []uint8) { packNibbles32(b[4:20], L) }}, 0, 15, 0)
	add(&gptqSpec{t: gguf.TypeQ5_1, sub: 32, asym: true, params: scaleMin,
		pack: func(b []byte, L []uint8) { packQ5Block(b[8:24], b[4:8], L) }}, 0, 31, 0)
	iqLab := make([]uint8, 16)
	for i := range iqLab {
		iqLab[i] = uint8(i)
	}
	add(&gptqSpec{t: gguf.TypeIQ4_NL, sub: 32, lev: kvaluesIQ4NLf[:], lab: iqLab, params: oneScale,
		pack: func(b []byte, L []uint8) { packNibbles32(b[2:18], L) }}, 0, 0, 0)
	add(&gptqSpec{t: gguf.TypeQ2_K, sub: 16, asym: true,
		params: func(b []byte, s, o []float32) {
			d, dmin := getF16(b[80:]), getF16(b[82:])
			for k := 0; k < 16; k++ {
				s[k] = float32(d * float32(b[k]&0xf))
				o[k] = -float32(dmin * float32(b[k]>>4))
			}
		},
		pack:  func(b []byte, L []uint8) { packQ2Bits(b[16:80], L) },
		resub: func(b []byte, k int, xs, ws []float32, is *impScratch) { resubAsymK(b, k, xs, ws, is, &kAsymQ2K) }}, 0, 3, 0)
	add(&gptqSpec{t: gguf.TypeQ3_K, sub: 16,
		params: func(b []byte, s, o []float32) {
			d := getF16(b[108:])
			for k := 0; k < 16; k++ {
				s[k], o[k] = d*float32(q3Scale(b[96:108], k)), 0
			}
		},
		pack:  func(b []byte, L []uint8) { packQ3Labels(b, L) },
		resub: func(b []byte, k int, xs, ws []float32, is *impScratch) { resubSymK(b, k, xs, ws, is, &kSymQ3K) }}, -4, 3, 4)
	k45 := func(b []byte, s, o []float32) {
		d, dmin := getF16(b[0:]), getF16(b[2:])
		for k := 0; k < 8; k++ {
			sc, mn := scaleMinK4(k, b[4:16])
			s[k] = float32(d * float32(sc))
			o[k] = -float32(dmin * float32(mn))
		}
	}
	add(&gptqSpec{t: gguf.TypeQ4_K, sub: 32, asym: true, params: k45,
		pack:  func(b []byte, L []uint8) { packQ4KLabels(b[16:144], L) },
		resub: func(b []byte, k int, xs, ws []float32, is *impScratch) { resubAsymK(b, k, xs, ws, is, &kAsymQ4K) }}, 0, 15, 0)
	add(&gptqSpec{t: gguf.TypeQ5_K, sub: 32, asym: true, params: k45,
		pack:  func(b []byte, L []uint8) { packQ5KLabels(b[16:48], b[48:176], L) },
		resub: func(b []byte, k int, xs, ws []float32, is *impScratch) { resubAsymK(b, k, xs, ws, is, &kAsymQ5K) }}, 0, 31, 0)
	add(&gptqSpec{t: gguf.TypeQ6_K, sub: 16,
		params: func(b []byte, s, o []float32) {
			d := getF16(b[208:])
			for k := 0; k < 16; k++ {
				s[k], o[k] = float32(d*float32(int8(b[192+k]))), 0
			}
		},
		pack:  func(b []byte, L []uint8) { packQ6KLabels(b[0:128], b[128:192], L) },
		resub: func(b []byte, k int, xs, ws []float32, is *impScratch) { resubSymK(b, k, xs, ws, is, &kSymQ6K) }}, -32, 31, 32)
	add(&gptqSpec{t: gguf.TypeIQ4_XS, sub: 32, lev: kvaluesIQ4NLf[:], lab: iqLab,
		params: func(b []byte, s, o []float32) {
			d := getF16(b)
			sh := binary.LittleEndian.Uint16(b[2:])
			for k := 0; k < 8; k++ {
				ls := int32((b[4+k/2]>>(4*(k%2)))&0xf) | int32((sh>>(2*k))&3)<<4
				s[k], o[k] = d*float32(ls-32), 0
			}
		},
		pack:  func(b []byte, L []uint8) { packIQ4Labels(b[8:136], L) },
		resub: func(b []byte, k int, xs, ws []float32, is *impScratch) { resubSymK(b, k, xs, ws, is, &kSymIQ4XS) }}, 0, 0, 0)
	return m
}()

// GPTQTypes lists the types QuantizeGPTQ supports, in ascending id order.
func GPTQTypes() []gguf.GGMLType {
	var out []gguf.GGMLType
	for _, t := range gguf.AllTypes() {
		if gptqSpecs[t] != nil {
			out = append(out, t)
		}
	}
	return out
}

// value is the decoded value of level k in a sub-block with parameters s, o.
func (sp *gptqSpec) value(k int, s, o float32) float32 {
	if sp.asym {
		return float32(s*sp.lev[k]) + o
	}
	return s * sp.lev[k]
}

// nearest returns the level whose decoded value is nearest to v (ties: the lower
// level index) and that value.
func (sp *gptqSpec) nearest(v, s, o float32) (int, float32) {
	n := len(sp.lev)
	k := 0
	switch {
	case s == 0:
		// every level decodes to o (up to the sign of zero): any is nearest.
	case sp.unit:
		g := float64(v-o)/float64(s) - float64(sp.lev[0])
		if g > 0 { // also false for NaN
			if g >= float64(n-1) {
				k = n - 1
			} else {
				k = int(g + 0.5)
			}
		}
	default:
		k = int(nearestIQ4(v / s))
	}
	y := sp.value(k, s, o)
	best := abs32(v - y)
	for _, c := range [2]int{k - 1, k + 1} {
		if c < 0 || c >= n {
			continue
		}
		yc := sp.value(c, s, o)
		if d := abs32(v - yc); d < best || (d == best && c < k) {
			// (a tie can only be with c = k-1 here; prefer the lower index for determinism)
			best, y, k = d, yc, c
		}
	}
	return k, y
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// kAsymInts returns sub-block k's integer scale and min of a Q2_K/Q4_K/Q5_K block
// and the fp16 super-scales.
func kAsymInts(blk []byte, k int, t gguf.GGMLType) (a, b int32, D, Dm float32) {
	if t == gguf.TypeQ2_K {
		return int32(blk[k] & 0xf), int32(blk[k] >> 4), getF16(blk[80:]), getF16(blk[82:])
	}
	sc, mn := scaleMinK4(k, blk[4:16])
	return int32(sc), int32(mn), getF16(blk), getF16(blk[2:])
}

func setKAsymInts(blk []byte, k int, t gguf.GGMLType, a, b int32) {
	if t == gguf.TypeQ2_K {
		blk[k] = uint8(a) | uint8(b)<<4
		return
	}
	var ls, lm [8]uint8
	for j := 0; j < 8; j++ {
		ls[j], lm[j] = scaleMinK4(j, blk[4:16])
	}
	ls[k], lm[k] = uint8(a), uint8(b)
	for i := 4; i < 16; i++ {
		blk[i] = 0
	}
	packScalesK4(blk[4:16], &ls, &lm)
}

// resubAsymK tries the integers around the least-squares scale and min of
// sub-block k's current codes and keeps the pair with the lowest weighted error.
func resubAsymK(blk []byte, k int, xs, ws []float32, is *impScratch, sp *kAsymSpec) {
	a, b, D, Dm := kAsymInts(blk, k, sp.t)
	n := len(xs)
	best := asymSubEval(xs, ws, D, Dm, a, b, sp.nmax, is.codes[:n])
	st := asymStatsOf(xs, ws, is.codes[:n])
	if st.sw == 0 {
		return
	}
	so, mo, _ := st.solve(true)
	ac := [3]int32{a, a, a}
	bc := [3]int32{b, b, b}
	if D > 0 {
		ac[1], ac[2] = floorCeil(so/float64(D), 0, sp.smax)
	}
	if Dm > 0 {
		bc[1], bc[2] = floorCeil(-mo/float64(Dm), 0, sp.smax)
	}
	ba, bb := a, b
	for _, ca := range ac {
		for _, cb := range bc {
			if ca == ba && cb == bb {
				continue
			}
			if e := asymSubEval(xs, ws, D, Dm, ca, cb, sp.nmax, is.ctry[:n]); e < best {
				best, ba, bb = e, ca, cb
			}
		}
	}
	if ba != a || bb != b {
		setKAsymInts(blk, k, sp.t, ba, bb)
	}
}

// kSymInt returns sub-block k's signed integer scale and the fp16 super-scale of a
// Q3_K, Q6_K or IQ4_XS block.
func kSymInt(blk []byte, k int, t gguf.GGMLType) (l int32, D float32) {
	switch t {
	case gguf.TypeQ3_K:
		return q3Scale(blk[96:108], k), getF16(blk[108:])
	case gguf.TypeQ6_K:
		return int32(int8(blk[192+k])), getF16(blk[208:])
	}
	sh := binary.LittleEndian.Uint16(blk[2:])
	ls := int32((blk[4+k/2]>>(4*(k%2)))&0xf) | int32((sh>>(2*k))&3)<<4
	return ls - 32, getF16(blk)
}

func setKSymInt(blk []byte, k int, t gguf.GGMLType, l int32) {
	switch t {
	case gguf.TypeQ3_K:
		var u [16]uint8
		for j := range u {
			u[j] = uint8(q3Scale(blk[96:108], j) + 32)
		}
		u[k] = uint8(l + 32)
		packQ3Scales(blk[96:108], &u)
	case gguf.TypeQ6_K:
		blk[192+k] = byte(int8(l))
	default:
		u := uint8(l + 32)
		if k%2 == 0 {
			blk[4+k/2] = blk[4+k/2]&0xf0 | u&0xf
		} else {
			blk[4+k/2] = blk[4+k/2]&0x0f | (u&0xf)<<4
		}
		sh := binary.LittleEndian.Uint16(blk[2:])
		sh = sh&^(3<<(2*k)) | uint16(u>>4)<<(2*k)
		binary.LittleEndian.PutUint16(blk[2:], sh)
	}
}

// resubSymK is resubAsymK for the signed sub-scales of symmetric super-blocks.
func resubSymK(blk []byte, k int, xs, ws []float32, is *impScratch, sp *kSymSpec) {
	l, D := kSymInt(blk, k, sp.t)
	if D == 0 {
		return
	}
	n := len(xs)
	best := symSubEval(xs, ws, D, l, sp.ls, is.codes[:n])
	A, B := symStats(xs, ws, sp.ls, is.codes[:n])
	if B <= 0 {
		return
	}
	l0, l1 := floorCeil(A/B/float64(D), sp.lmin, sp.lmax)
	bl := l
	for _, c := range [2]int32{l0, l1} {
		if c == bl {
			continue
		}
		if e := symSubEval(xs, ws, D, c, sp.ls, is.ctry[:n]); e < best {
			best, bl = e, c
		}
	}
	if bl != l {
		setKSymInt(blk, k, sp.t, bl)
	}
}
