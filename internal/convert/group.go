package convert

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
)

// quantizeGrouped stores symmetric int4 / int8 groups of `group` weights (64 or 128) that share
// one scale in standard Q4_0 / Q8_0 blocks: every 32-element block of a group stores the group's
// scale, so llama.cpp decodes the values exactly as the grouped quantizer meant them. The scale
// of each group is searched to minimise Σ w·(x − d·q)² with w the column importance (1 without
// importance), over candidates from max|x|/qmax down to a clipped scale (8x with importance), refined by weighted
// least squares; the
// error is measured with the fp16-rounded scale that is stored.
func quantizeGrouped(t gguf.GGMLType, dst []byte, src []float32, nrows, ncols, group int, imp []float32) error {
	if group <= 32 || group%32 != 0 || ncols%group != 0 {
		return fmt.Errorf("group size %d does not divide the row length %d into whole 32-blocks", group, ncols)
	}
	if imp != nil && len(imp) != ncols {
		return fmt.Errorf("importance has %d values for rows of %d", len(imp), ncols)
	}
	var bs int
	var qmin, qmax int
	switch t {
	case gguf.TypeQ4_0:
		bs, qmin, qmax = 18, -8, 7
	case gguf.TypeQ8_0:
		bs, qmin, qmax = 34, -127, 127
	default:
		return fmt.Errorf("grouped quantization stores Q4_0 or Q8_0, not %s", t)
	}
	rowBytes := ncols / 32 * bs
	if len(dst) != nrows*rowBytes || len(src) != nrows*ncols {
		return fmt.Errorf("grouped quantization: buffer sizes %d/%d do not match %dx%d", len(dst), len(src), nrows, ncols)
	}
	q := make([]int, group)
	best := make([]int, group)
	for r := 0; r < nrows; r++ {
		x := src[r*ncols : (r+1)*ncols]
		out := dst[r*rowBytes : (r+1)*rowBytes]
		for g0 := 0; g0 < ncols; g0 += group {
			xs := x[g0 : g0+group]
			var w []float32
			if imp != nil {
				w = imp[g0 : g0+group]
			}
			d, err := searchScale(xs, w, q, best, qmin, qmax, t == gguf.TypeQ4_0)
			if err != nil {
				return fmt.Errorf("row %d column %d: %w", r, g0, err)
			}
			dh := quant.FP32ToFP16(d)
			for b := 0; b < group/32; b++ {
				blk := out[(g0/32+b)*bs : (g0/32+b+1)*bs]
				binary.LittleEndian.PutUint16(blk, dh)
				l := best[b*32 : (b+1)*32]
				if t == gguf.TypeQ4_0 {
					for j := 0; j < 16; j++ {
						blk[2+j] = uint8(l[j]+8) | uint8(l[j+16]+8)<<4
					}
				} else {
					for j := 0; j < 32; j++ {
						blk[2+j] = uint8(int8(l[j]))
					}
				}
			}
		}
	}
	return nil
}

// searchScale returns the scale for one group and leaves the codes in best.
func searchScale(x, w []float32, q, best []int, qmin, qmax int, asym bool) (float32, error) {
	var amax, maxv float32
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return 0, fmt.Errorf("non-finite weight %v", v)
		}
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, maxv = a, v
		}
	}
	if amax == 0 {
		for i := range best {
			best[i] = 0
		}
		return 0, nil
	}
	weight := func(i int) float64 {
		if w == nil {
			return 1
		}
		return float64(w[i]) + 1e-12
	}
	round := func(d float32) float32 { return quant.FP16ToFP32(quant.FP32ToFP16(d)) }
	quantize := func(d float32, dst []int) float64 {
		if d == 0 {
			for i := range dst {
				dst[i] = 0
			}
			return math.Inf(1)
		}
		id := 1 / float64(d)
		var e float64
		for i, v := range x {
			l := int(math.Round(float64(v) * id))
			l = min(max(l, qmin), qmax)
			dst[i] = l
			diff := float64(v) - float64(d)*float64(l)
			e += weight(i) * diff * diff
		}
		return e
	}
	// reference-style scale: Q4_0 maps the signed extreme onto -8, Q8_0 maps amax onto 127
	var base float32
	if asym {
		base = maxv / float32(qmin)
	} else {
		base = amax / float32(qmax)
	}
	bestD := round(base)
	if math.IsInf(float64(bestD), 0) {
		return 0, fmt.Errorf("scale %g overflows fp16", base)
	}
	bestE := quantize(bestD, best)
	try := func(d float32) {
		d = round(d)
		if d == 0 || math.IsInf(float64(d), 0) {
			return
		}
		if e := quantize(d, q); e < bestE {
			bestE, bestD = e, d
			copy(best, q)
		}
	}
	den := float64(qmax)
	if asym {
		den = float64(-qmin)
	}
	// candidates from slightly above max|x|/qmax down to a clipped scale (geometric steps);
	// with importance the search reaches 8x clipping, since importance decides how much the
	// large values may be clipped. Q4_0's range [-8, 7] is lopsided, so both signs are tried.
	kmin, kmax, step := -2, 6, 1.03
	if w != nil {
		kmin, kmax, step = -1, 18, 1.12
	}
	for k := kmin; k <= kmax; k++ {
		s := float32(float64(amax) / (den * math.Pow(step, float64(k))))
		try(s)
		if asym {
			try(-s)
		}
	}
	// least-squares refinement of the scale for the best codes
	for it := 0; it < 3; it++ {
		var sxl, sll float64
		for i, v := range x {
			wi := weight(i)
			sxl += wi * float64(v) * float64(best[i])
			sll += wi * float64(best[i]) * float64(best[i])
		}
		if sll > 0 {
			try(float32(sxl / sll))
		}
	}
	return bestD, nil
}
