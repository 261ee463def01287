package quant

// Symmetric per-group int4/int8 quantization mapped onto standard ggml containers.
//
// A symmetric int4 group of G = 32·k weights with one scale d is stored exactly as k
// consecutive Q4_0 blocks that all carry the same fp16 d (Q4_0 decodes d·(q−8),
// q in 0..15, i.e. signed codes −8..7). An int8 group is stored as Q8_0 blocks
// sharing d (codes −127..127). llama.cpp reads the result as an ordinary Q4_0 /
// Q8_0 tensor. The storage cost is that of the container (4.5 / 8.5 bits per
// weight): the repeated scale is what buys compatibility.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
)

// QuantizeSymmetricGroups quantizes nrows×ncols values with one symmetric scale per
// group of groupSize consecutive values of a row (32, 64, 128 or 256; it must
// divide ncols), bits = 4 (stored as Q4_0) or 8 (stored as Q8_0), and returns the
// container type. dst must be nrows·RowSize(container, ncols) bytes.
//
// ModeReference uses ggml's own rule stretched over the group (int4: d = m/−8 with m
// the first largest-|x| element, q = min(15, trunc(x/d + 8.5)); int8: d = amax/127,
// q = round-half-away(x/d)); with groupSize 32 the bytes equal ggml's Q4_0 / Q8_0
// reference quantization. ModeImproved searches the group scale (opts.Importance
// weighted) and keeps whichever of the two results has the lower error per group.
func QuantizeSymmetricGroups(bits, groupSize int, dst []byte, src []float32, nrows, ncols int, opts *Options) (gguf.GGMLType, error) {
	name := opts.name()
	var t gguf.GGMLType
	switch bits {
	case 4:
		t = gguf.TypeQ4_0
	case 8:
		t = gguf.TypeQ8_0
	default:
		return 0, fmt.Errorf("quant: tensor %q: symmetric groups support 4 or 8 bits, not %d", name, bits)
	}
	switch groupSize {
	case 32, 64, 128, 256:
	default:
		return 0, fmt.Errorf("quant: tensor %q: group size must be 32, 64, 128 or 256, not %d", name, groupSize)
	}
	if ncols <= 0 || ncols%groupSize != 0 {
		return 0, fmt.Errorf("quant: tensor %q: row length %d is not a multiple of the group size %d", name, ncols, groupSize)
	}
	rs, _ := RowSize(t, ncols)
	if nrows < 0 || (nrows > 0 && ncols > math.MaxInt/nrows) || len(src) != nrows*ncols {
		return 0, fmt.Errorf("quant: tensor %q: have %d values, want %d rows × %d columns", name, len(src), nrows, ncols)
	}
	if len(dst) != nrows*rs {
		return 0, fmt.Errorf("quant: tensor %q: destination has %d bytes, want %d", name, len(dst), nrows*rs)
	}
	var qw []float32
	mode, threads := ModeReference, 0
	if opts != nil {
		qw, mode, threads = opts.Importance, opts.Mode, opts.Threads
	}
	impScale, err := checkImportance(qw, ncols, name)
	if err != nil {
		return 0, err
	}
	err = parallelRows(nrows, ncols, threads, func(r0, r1 int, s *scratch) error {
		for r := r0; r < r1; r++ {
			x := src[r*ncols : (r+1)*ncols]
			for c, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return fmt.Errorf("quant: tensor %q: row %d, column %d: value %v is not finite", name, r, c, v)
				}
			}
			row := dst[r*rs : (r+1)*rs]
			bbytes := rs / (ncols / 32) // bytes per 32-element block
			for g := 0; g < ncols/groupSize; g++ {
				c0 := g * groupSize
				var w []float32
				if qw != nil {
					w = qw[c0 : c0+groupSize]
				}
				symGroup(row[c0/32*bbytes:], x[c0:c0+groupSize], w, impScale, bits, mode, s)
			}
			if err := checkRow(t, row); err != nil {
				return fmt.Errorf("quant: tensor %q (%v): row %d: %v", name, t, r, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return t, nil
}

// symGroupRef returns ggml's scale and codes (signed) for a whole group.
func symGroupRef(x []float32, bits int, q []int32) float32 {
	if bits == 4 {
		max, _ := signedMax(x)
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for i, v := range x {
			q[i] = min(15, int32(int8(truncI32(float32(v*id)+8.5)))) - 8
		}
		return d
	}
	var amax float32
	for _, v := range x {
		if av := fabs(v); !(amax > av) {
			amax = av
		}
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for i, v := range x {
		q[i] = int32(int8(truncI32(roundHalfAway(v * id))))
	}
	return d
}

// symGroup quantizes one group into its Q4_0/Q8_0 blocks at dst.
func symGroup(dst []byte, x, qw []float32, impScale float64, bits int, mode Mode, s *scratch) {
	is := &s.imp
	n := len(x)
	q := is.codes[:n]
	d16 := FP32ToFP16(symGroupRef(x, bits, q))
	ls := levelsQ4_0
	if bits == 8 {
		ls = levelsSym8
	}
	if mode == ModeImproved {
		wt, wf := is.wt[:n], is.wf[:n]
		if qw != nil {
			for i, v := range qw {
				wt[i] = float32(float64(v) * impScale)
			}
		} else {
			for i := range wt {
				wt[i] = 1
			}
		}
		fitWeights(wf, wt)
		// error of the reference result as stored (fp16 d, its codes)
		refErr := symErr(x, wt, fp16Table[d16], ls, q)
		if math.IsNaN(refErr) {
			refErr = math.Inf(1)
		}
		d, _ := symFit(x, wf, ls, is.tmp[:n], is.ctry[:n])
		for _, h := range f16Neighbours(FP32ToFP16(float32(d))) {
			if !f16Finite(h) {
				continue
			}
			ds := fp16Table[h]
			symCodes(x, ds, ls, is.tmp[:n])
			if e := symErr(x, wt, ds, ls, is.tmp[:n]); e < refErr {
				refErr, d16 = e, h
				copy(q, is.tmp[:n])
			}
		}
	}
	bs := sizeQ4_0
	if bits == 8 {
		bs = sizeQ8_0
	}
	for b := 0; b < n/32; b++ {
		yb := dst[b*bs : (b+1)*bs]
		binary.LittleEndian.PutUint16(yb, d16)
		qb := q[32*b : 32*b+32]
		if bits == 4 {
			for j := 0; j < 16; j++ {
				yb[2+j] = uint8(qb[j]+8) | uint8(qb[j+16]+8)<<4
			}
		} else {
			for j := 0; j < 32; j++ {
				yb[2+j] = byte(int8(qb[j]))
			}
		}
	}
}
