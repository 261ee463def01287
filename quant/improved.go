package quant

// ModeImproved: per-type encoders built on symFit/asymFit (improved_fit.go) plus a
// per-block competition against ggml's own result (see docs/quantization.md).

import (
	"encoding/binary"
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

type impScratch struct {
	wt, wf     [QK_K]float32 // true objective weights / weights used for fitting
	codes, tmp [QK_K]int32
	ctry       [QK_K]int32
	L          [QK_K]uint8
	blk        [sizeQ6_K]byte
	y1, y2     [QK_K]float32
	fd, fm, fB [16]float64
	fst        [16]asymStats
	a, b       [16]int32
	subErr     [16]float64
	lq         [8 * 32]int32  // codes of up to 8 candidates scored side by side, [i·8+lane]
	le         [8]float64     // their errors
	pe         [16][8]float64 // per sub-block, the errors of up to 8 super-scale pairs
	proxy      kernels.ProxyLanes
}

// blockEncoder writes one improved block of type t for values x with true weights
// wt and fitting weights wf.
type blockEncoder func(blk []byte, x, wt, wf []float32, s *impScratch)

func improvedEncoder(t gguf.GGMLType) blockEncoder {
	switch t {
	case gguf.TypeQ4_0:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSym32(b, x, wt, wf, s, levelsQ4_0, t) }
	case gguf.TypeQ5_0:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSym32(b, x, wt, wf, s, levelsQ5_0, t) }
	case gguf.TypeQ8_0:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSym32(b, x, wt, wf, s, levelsQ8_0, t) }
	case gguf.TypeIQ4_NL:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSym32(b, x, wt, wf, s, levelsIQ4, t) }
	case gguf.TypeQ4_1:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encAsym32(b, x, wt, wf, s, 15) }
	case gguf.TypeQ5_1:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encAsym32(b, x, wt, wf, s, 31) }
	case gguf.TypeQ2_K:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encAsymK(b, x, wt, wf, s, &kAsymQ2K) }
	case gguf.TypeQ4_K:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encAsymK(b, x, wt, wf, s, &kAsymQ4K) }
	case gguf.TypeQ5_K:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encAsymK(b, x, wt, wf, s, &kAsymQ5K) }
	case gguf.TypeQ3_K:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSymK(b, x, wt, wf, s, &kSymQ3K) }
	case gguf.TypeQ6_K:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSymK(b, x, wt, wf, s, &kSymQ6K) }
	case gguf.TypeIQ4_XS:
		return func(b []byte, x, wt, wf []float32, s *impScratch) { encSymK(b, x, wt, wf, s, &kSymIQ4XS) }
	}
	return nil
}

// improvedRowFunc returns the ModeImproved row routine for t, or nil when t has no
// improved search (float types and activation formats).
func improvedRowFunc(t gguf.GGMLType, impScale float64) rowFunc {
	enc := improvedEncoder(t)
	if enc == nil {
		return nil
	}
	tr, _ := t.Traits()
	bs, ts := tr.BlockSize, tr.TypeSize
	deq := dequantFunc(t)
	refPlain := rowQuantizer(t, ModeReference, false, 1)
	refQW := rowQuantizer(t, ModeReference, true, 1)
	return func(dst []byte, x, qw []float32, s *scratch) {
		if qw != nil {
			refQW(dst, x, qw, s)
		} else {
			refPlain(dst, x, nil, s)
		}
		is := &s.imp
		for b := 0; b < len(x)/bs; b++ {
			xb := x[b*bs : (b+1)*bs]
			wt, wf := is.wt[:bs], is.wf[:bs]
			if qw != nil {
				for i, v := range qw[b*bs : (b+1)*bs] {
					wt[i] = float32(float64(v) * impScale)
				}
			} else {
				for i := range wt {
					wt[i] = 1
				}
			}
			fitWeights(wf, wt)
			cand := is.blk[:ts]
			enc(cand, xb, wt, wf, is)
			gg := dst[b*ts : (b+1)*ts]
			deq(is.y1[:bs], cand)
			deq(is.y2[:bs], gg)
			eo, eg := weightedSSE(xb, is.y1[:bs], wt), weightedSSE(xb, is.y2[:bs], wt)
			// Ours must be finite; it wins ties and beats a non-finite ggml block (NaN
			// scales from float32 overflow in ggml's sums).
			if finite := !math.IsNaN(eo) && !math.IsInf(eo, 0); finite && (eo <= eg || math.IsNaN(eg) || math.IsInf(eg, 0)) {
				copy(gg, cand)
			}
		}
	}
}

// fitWeights copies wt into wf, replacing every 16-element chunk whose weights are
// all zero by ones (its error does not count, but the search needs a scale).
func fitWeights(wf, wt []float32) {
	copy(wf, wt)
	for c := 0; c < len(wf); c += 16 {
		zero := true
		for _, v := range wf[c : c+16] {
			if v != 0 {
				zero = false
				break
			}
		}
		if zero {
			for i := c; i < c+16; i++ {
				wf[i] = 1
			}
		}
	}
}

// weightedSSE is Σ w·(x−y)² in float64.
func weightedSSE(x, y, w []float32) float64 {
	var e float64
	for i, v := range x {
		d := float64(v) - float64(y[i])
		e += float64(w[i]) * d * d
	}
	return e
}

// f16Neighbours returns h and its two adjacent finite binary16 values (in value
// order it may include values of the other sign only through zero).
// When h itself is Inf or NaN all three entries are h, so a search never clips an
// overflowing scale to the largest finite half (Quantize reports the overflow).
func f16Neighbours(h uint16) [3]uint16 {
	if !f16Finite(h) {
		return [3]uint16{h, h, h}
	}
	lo, hi := h-1, h+1
	if h&0x7fff == 0 { // ±0: neighbours are the smallest subnormals
		lo, hi = 0x8001, 0x0001
	}
	return [3]uint16{h, lo, hi}
}

func f16Finite(h uint16) bool { return h&0x7c00 != 0x7c00 }

// symCodes rounds x/ds to the nearest level (all codes = level of 0 when ds == 0).
func symCodes(x []float32, ds float32, ls *levelSet, out []int32) {
	var id float32
	if ds != 0 {
		id = 1 / ds
	}
	for i, v := range x {
		out[i] = ls.nearest(v * id)
	}
}

// symErr is Σ w·(x − float32(ds·v[q]))², the error after dequantization.
func symErr(x, w []float32, ds float32, ls *levelSet, q []int32) float64 {
	var e float64
	for i, v := range x {
		var lv float32
		if ls.cb {
			lv = ls.vals[q[i]]
		} else {
			lv = float32(q[i])
		}
		d := float64(v) - float64(ds*lv)
		e += float64(w[i]) * d * d
	}
	return e
}

// ---------------------------------------------------------------- single-scale 32-blocks

// encSym32 encodes Q4_0, Q5_0, Q8_0 or IQ4_NL: fitted scale, then the best of the
// fp16 rounding and its neighbours with codes re-rounded for the stored scale.
func encSym32(blk []byte, x, wt, wf []float32, s *impScratch, ls *levelSet, t gguf.GGMLType) {
	d, _ := symFit(x, wf, ls, s.codes[:32], s.tmp[:32])
	bestH := FP32ToFP16(float32(d)) // stays non-finite when the scale overflows
	bestE := math.Inf(1)
	for _, h := range f16Neighbours(bestH) {
		if !f16Finite(h) {
			continue
		}
		ds := fp16Table[h]
		symCodes(x, ds, ls, s.tmp[:32])
		if e := symErr(x, wt, ds, ls, s.tmp[:32]); e < bestE {
			bestE, bestH = e, h
		}
	}
	ds := fp16Table[bestH]
	q := s.codes[:32]
	symCodes(x, ds, ls, q)
	binary.LittleEndian.PutUint16(blk, bestH)
	switch t {
	case gguf.TypeQ4_0, gguf.TypeIQ4_NL:
		off := int32(8)
		if t == gguf.TypeIQ4_NL {
			off = 0
		}
		for j := 0; j < 16; j++ {
			blk[2+j] = uint8(q[j]+off) | uint8(q[j+16]+off)<<4
		}
	case gguf.TypeQ5_0:
		var lo, hi [16]uint8
		for j := 0; j < 16; j++ {
			lo[j], hi[j] = uint8(q[j]+16), uint8(q[j+16]+16)
		}
		packQ5(blk[6:22], blk[2:6], lo, hi)
	case gguf.TypeQ8_0:
		for j := 0; j < 32; j++ {
			blk[2+j] = byte(int8(q[j]))
		}
	}
}

// tcAsym returns level positions for the first asymmetric guesses d = range/t.
func tcAsym(nmax int32) []float32 {
	lo := float64(nmax) - min(2, 0.5*float64(nmax))
	step := 0.25
	if nmax < 7 {
		step = 0.1 // 2-bit codes: the first guess matters more, and groups are small
	}
	var t []float32
	for v := float64(nmax) + 1.5; v >= lo-1e-9; v -= step {
		t = append(t, float32(v))
	}
	return t
}

var (
	tcAsym3  = tcAsym(3)
	tcAsym15 = tcAsym(15)
	tcAsym31 = tcAsym(31)
)

func tcFor(nmax int32) []float32 {
	switch nmax {
	case 3:
		return tcAsym3
	case 15:
		return tcAsym15
	}
	return tcAsym31
}

// asymCodes: q = clamp(rne((x − m)/d), 0, nmax); 0 when d == 0.
func asymCodes(x []float32, d, m float32, nmax int32, out []int32) {
	if d == 0 {
		for i := range out[:len(x)] {
			out[i] = 0
		}
		return
	}
	for i, v := range x {
		out[i] = clampI(nearestInt((v-m)/d), 0, nmax)
	}
}

// encAsym32 encodes Q4_1 (nmax 15) or Q5_1 (nmax 31).
func encAsym32(blk []byte, x, wt, wf []float32, s *impScratch, nmax int32) {
	d, m, _, _ := asymFit(x, wf, nmax, false, tcFor(nmax), s.codes[:32], s.tmp[:32])
	q := s.tmp[:32]
	bestE := math.Inf(1)
	bestD, bestM := FP32ToFP16(float32(d)), FP32ToFP16(float32(m))
	for _, hd := range f16Neighbours(bestD) {
		if !f16Finite(hd) || hd&0x8000 != 0 && hd&0x7fff != 0 {
			continue // keep d >= 0
		}
		for _, hm := range f16Neighbours(bestM) {
			if !f16Finite(hm) {
				continue
			}
			df, mf := fp16Table[hd], fp16Table[hm]
			asymCodes(x, df, mf, nmax, q)
			var e float64
			for i, v := range x {
				diff := float64(v) - float64(float32(float32(q[i])*df)+mf)
				e += float64(wt[i]) * diff * diff
			}
			if e < bestE {
				bestE, bestD, bestM = e, hd, hm
			}
		}
	}
	df, mf := fp16Table[bestD], fp16Table[bestM]
	asymCodes(x, df, mf, nmax, q)
	binary.LittleEndian.PutUint16(blk, bestD)
	binary.LittleEndian.PutUint16(blk[2:], bestM)
	if nmax == 15 {
		for j := 0; j < 16; j++ {
			blk[4+j] = uint8(q[j]) | uint8(q[j+16])<<4
		}
		return
	}
	var lo, hi [16]uint8
	for j := 0; j < 16; j++ {
		lo[j], hi[j] = uint8(q[j]), uint8(q[j+16])
	}
	packQ5(blk[8:24], blk[4:8], lo, hi)
}
