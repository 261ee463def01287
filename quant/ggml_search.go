package quant

// Ports of ggml's scale-search helpers (ggml-quants.c: make_qx_quants, make_q3_quants,
// make_qkx2_quants, make_qkx3_quants, make_qp_quants), written from the
// descriptions in the facts document §2.6. Every intermediate is float32 and rounded
// where C rounds it; products that feed an addition are wrapped in an explicit
// float32 conversion so the compiler cannot fuse them into an FMA. Loops run in
// index order like the C code. These are used by ModeReference (bit-exact output)
// and as the baseline candidate of ModeImproved.

import (
	"encoding/binary"
	"math"

	"github.com/tq-project/tq/quant/kernels"
)

const groupMaxEps = float32(1e-15)

// nearestInt is ggml's nearest_int: round half to even through the 1.5·2^23 trick.
// Exact for |f| <= 4194303; outside that range it returns the same (meaningless)
// value as ggml, so callers clamp.
func nearestInt(f float32) int32 {
	v := float32(f) + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

func fabs(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ 0x80000000) }

func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }

func clampI(v, lo, hi int32) int32 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, FP32ToFP16(f)) }

func getF16(b []byte) float32 { return fp16Table[binary.LittleEndian.Uint16(b)] }

// roundF16 returns f rounded to the nearest binary16 value, as float32.
func roundF16(f float32) float32 { return fp16Table[FP32ToFP16(f)] }

// signedMax returns the first element with the largest |x| (strictly-greater
// replacement) and that magnitude.
func signedMax(x []float32) (max, amax float32) {
	for _, v := range x {
		if ax := fabs(v); ax > amax {
			amax = ax
			max = v
		}
	}
	return max, amax
}

// ggmlQxQuants is make_qx_quants with rmse_type = 1: weights qw, or x² when qw is
// nil. L receives values in 0..2·nmax-1.
func ggmlQxQuants(x []float32, L []int8, nmax int32, qw []float32) float32 {
	n := len(x)
	L = L[:n]
	max, amax := signedMax(x)
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	iscale := float32(-nmax) / max
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampI(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l + nmax)
		w := v * v
		if qw != nil {
			w = qw[i]
		}
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	scale := float32(0)
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := int32(-9); is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(float32(0.1)*float32(is))) / max
		sumlx, suml2 = 0, 0
		for i, v := range x {
			l := clampI(nearestInt(iscale*v), -nmax, nmax-1)
			w := v * v
			if qw != nil {
				w = qw[i]
			}
			fl := float32(l)
			sumlx += float32(float32(w*v) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i, v := range x {
				l := clampI(nearestInt(iscale*v), -nmax, nmax-1)
				L[i] = int8(l + nmax)
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// ggmlQ3Quants is make_q3_quants(n, nmax, x, L, do_rmse=true). L receives 0..2·nmax-1.
func ggmlQ3Quants(x []float32, L []int8, nmax int32) float32 {
	n := len(x)
	L = L[:n]
	max, amax := signedMax(x)
	if amax < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	iscale := float32(-nmax) / max
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampI(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l)
		w := v * v
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			if slx > 0 {
				sl2 := suml2 - float32(float32(w*li)*li)
				nl := clampI(nearestInt(float32(v*sl2)/slx), -nmax, nmax-1)
				if nl != int32(L[i]) {
					fn := float32(nl)
					slx += float32(float32(w*v) * fn)
					sl2 += float32(float32(w*fn) * fn)
					if sl2 > 0 && float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i] = int8(nl)
						sumlx = slx
						suml2 = sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// ggmlQkxQuants is make_qkx2_quants (v3 == false) or make_qkx3_quants (v3 == true).
// weights must not be nil (every ggml call site passes weights). It returns the scale
// and stores the negated minimum (>= 0) in *theMin. Laux is scratch of len(x).
func ggmlQkxQuants(x, weights []float32, L, Laux []uint8, theMin *float32, nmax int32,
	rmin, rdelta float32, nstep int, useMad, v3 bool) float32 {
	n := len(x)
	L = L[:n]
	Laux = Laux[:n]
	weights = weights[:n]
	min, max := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		v := x[i]
		if v < min {
			min = v
		}
		if v > max {
			max = v
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * v)
	}
	if min > 0 {
		min = 0
	}
	if max == min || (v3 && max <= min) {
		for i := range L {
			L[i] = 0
		}
		*theMin = -min
		return 0
	}
	fnmax := float32(nmax)
	iscale := fnmax / (max - min)
	scale := 1 / iscale
	var bestErr float32
	for i, v := range x {
		l := clampI(nearestInt(iscale*(v-min)), 0, nmax)
		L[i] = uint8(l)
		diff := float32(float32(scale*float32(L[i]))+min) - v
		if useMad {
			diff = fabs(diff)
		} else {
			diff = diff * diff
		}
		bestErr += float32(weights[i] * diff)
	}
	if nstep < 1 {
		*theMin = -min
		return scale
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + fnmax) / (max - min)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := clampI(nearestInt(iscale*(v-min)), 0, nmax)
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * v)
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i, v := range x {
				diff := float32(float32(thisScale*float32(Laux[i]))+thisMin) - v
				if useMad {
					diff = fabs(diff)
				} else {
					diff = diff * diff
				}
				cur += float32(weights[i] * diff)
			}
			if cur < bestErr {
				copy(L, Laux)
				bestErr = cur
				scale = thisScale
				min = thisMin
			}
		}
	}
	*theMin = -min
	return scale
}

// ggmlQpQuants is make_qp_quants: quantizes non-negative values (sub-block scales or
// mins) to 0..nmax with weights qw. L uses uint8 storage like ggml.
func ggmlQpQuants(x []float32, L []uint8, nmax int32, qw []float32) float32 {
	n := len(x)
	L = L[:n]
	var max float32
	for _, v := range x {
		if max > v {
			// keep
		} else {
			max = v
		}
	}
	if max < groupMaxEps {
		for i := range L {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	iscale := fnmax / max
	for i, v := range x {
		L[i] = uint8(nearestInt(iscale * v))
	}
	scale := 1 / iscale
	var bestMse float32
	for i, v := range x {
		diff := v - float32(scale*float32(L[i]))
		bestMse += float32(float32(qw[i]*diff) * diff)
	}
	for is := int32(-4); is <= 4; is++ {
		if is == 0 {
			continue
		}
		iscaleIs := (float32(float32(0.1)*float32(is)) + fnmax) / max
		scaleIs := 1 / iscaleIs
		var mse float32
		for i, v := range x {
			l := nearestInt(iscaleIs * v)
			if l > nmax {
				l = nmax
			}
			diff := v - float32(scaleIs*float32(l))
			mse += float32(float32(qw[i]*diff) * diff)
		}
		if mse < bestMse {
			bestMse = mse
			iscale = iscaleIs
		}
	}
	var sumlx, suml2 float32
	for i, v := range x {
		l := nearestInt(iscale * v)
		if l > nmax {
			l = nmax
		}
		L[i] = uint8(l)
		w := qw[i]
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i, v := range x {
			w := qw[i]
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			sl2 := suml2 - float32(float32(w*li)*li)
			if slx > 0 && sl2 > 0 {
				nl := nearestInt(float32(v*sl2) / slx)
				if nl > nmax {
					nl = nmax
				}
				if nl != int32(L[i]) {
					fn := float32(nl)
					slx += float32(float32(w*v) * fn)
					sl2 += float32(float32(w*fn) * fn)
					if float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i] = uint8(nl)
						sumlx = slx
						suml2 = sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// qkxQuants8 runs ggmlQkxQuants (squared error, no MAD) on the eight n-element sub-blocks
// x[n·j : n·j+n] with weights w[n·j : n·j+n], j = 0..7: scales[j], mins[j] (negated minimum)
// and labels L[n·j : n·j+n]. With the assembly kernels it runs the eight searches in SIMD
// lanes (kernels.QkxSearch8), bit-identical to the scalar loop it replaces.
func qkxQuants8(s *scratch, x, w []float32, L []uint8, scales, mins *[8]float32, n int, nmax int32,
	rmin, rdelta float32, nstep int, v3 bool) {
	if kernels.HasLaneSearch() && nstep >= 1 && nstep < 64 {
		num := kernels.QkxNumerators(nmax, rmin, rdelta, nstep)
		ln := &s.kx
		kernels.ToLanes8(ln.X[:], ln.W[:], x, w, n)
		if kernels.QkxSearch8(ln, n, nmax, num[:nstep+1]) {
			*scales = ln.Scale
			*mins = ln.Min
			kernels.FromLanes8(L, ln.L[:], n)
			return
		}
	}
	for j := 0; j < 8; j++ {
		scales[j] = ggmlQkxQuants(x[n*j:n*j+n], w[n*j:n*j+n], L[n*j:n*j+n], s.Laux[:n], &mins[j], nmax, rmin, rdelta, nstep, false, v3)
	}
}

// qkxRun runs the scale search of nsub (8 or 16) n-element sub-blocks: one qkxQuants16 where
// the 16-lane search runs, else qkxQuants8 on each eight.
func qkxRun(s *scratch, nsub int, x, w []float32, L []uint8, scales, mins *[16]float32, n int, nmax int32,
	rmin, rdelta float32, nstep int, v3 bool) {
	if nsub == 16 && kernels.HasLaneSearch16() {
		qkxQuants16(s, x, w, L, scales, mins, n, nmax, rmin, rdelta, nstep)
		return
	}
	for h := 0; h < nsub/8; h++ {
		o := 8 * n * h
		qkxQuants8(s, x[o:o+8*n], w[o:o+8*n], L[o:o+8*n], (*[8]float32)(scales[8*h:8*h+8]), (*[8]float32)(mins[8*h:8*h+8]),
			n, nmax, rmin, rdelta, nstep, v3)
	}
}

// superBlockRuns calls fn for consecutive runs of k of the nb super-blocks of a row, from ib:
// two at a time where the 16-lane search runs (the last one alone when nb is odd), else one.
func superBlockRuns(nb int, fn func(ib, k int)) {
	pair := kernels.HasLaneSearch16()
	for ib := 0; ib < nb; {
		k := 1
		if pair && ib+1 < nb {
			k = 2
		}
		fn(ib, k)
		ib += k
	}
}

// qkxQuants16 is qkxQuants8 (make_qkx2/3_quants) for the sixteen n-element sub-blocks of two
// super-blocks, x[n·j : n·j+n] with weights w, j = 0..15, in the AVX-512 lanes of
// kernels.QkxSearch16; the caller checked kernels.HasLaneSearch16. Each sub-block's result is
// the bits qkxQuants8 gives.
func qkxQuants16(s *scratch, x, w []float32, L []uint8, scales, mins *[16]float32, n int, nmax int32,
	rmin, rdelta float32, nstep int) {
	num := kernels.QkxNumerators(nmax, rmin, rdelta, nstep)
	ln := &s.kx16
	kernels.ToLanes16(ln.X[:], ln.W[:], x, w, n)
	if !kernels.QkxSearch16(ln, n, nmax, num[:nstep+1]) {
		panic("quant: qkxQuants16 without the 16-lane search")
	}
	*scales = ln.Scale
	*mins = ln.Min
	kernels.FromLanes16(L, ln.L[:], n)
}

// qxQuants16 is qxQuants8 for the sixteen n-element sub-blocks x[n·j : n·j+n], j = 0..15 (a
// Q6_K or Q3_K super-block), with weights qw (nil: x²): one 16-lane search
// (kernels.QxSearch16) where it runs and lanes16 is set, else two qxQuants8 calls; the same
// bits either way. (Q3_K passes false: on the AVX-512 Xeon of docs/kernels.md its quantizer
// ran about 1.1× slower with the 16-lane search, which is a small part of its work.)
func qxQuants16(s *scratch, x []float32, L []int8, scales []float32, n int, nmax int32, qw []float32, lanes16 bool) {
	if !lanes16 || !kernels.HasLaneSearch16() {
		for h := 0; h < 2; h++ {
			var w []float32
			if qw != nil {
				w = qw[8*n*h : 8*n*h+8*n]
			}
			qxQuants8(s, x[8*n*h:8*n*h+8*n], L[8*n*h:8*n*h+8*n], scales[8*h:8*h+8], n, nmax, w)
		}
		return
	}
	num := kernels.QxNumerators(nmax)
	ln := &s.qx16
	kernels.ToLanes16(ln.X[:], ln.W[:], x, qw, n)
	if !kernels.QxSearch16(ln, n, nmax, num[:]) {
		panic("quant: qxQuants16 without the 16-lane search")
	}
	copy(scales[:16], ln.Scale[:])
	kernels.FromLanes(L, ln.L[:], 16, n)
}

// qxQuants8 runs ggmlQxQuants on the eight n-element sub-blocks x[n·j : n·j+n] with weights
// qw (nil: x²), j = 0..7, into scales[j] and L[n·j : n·j+n]; in SIMD lanes
// (kernels.QxSearch8) where the assembly kernels run, bit-identical to the scalar loop.
func qxQuants8(s *scratch, x []float32, L []int8, scales []float32, n int, nmax int32, qw []float32) {
	if kernels.HasLaneSearch() {
		num := kernels.QxNumerators(nmax)
		ln := &s.qx
		kernels.ToLanes8(ln.X[:], ln.W[:], x, qw, n)
		if kernels.QxSearch8(ln, n, nmax, num[:]) {
			copy(scales[:8], ln.Scale[:])
			kernels.FromLanes(L, ln.L[:], 8, n)
			return
		}
	}
	for j := 0; j < 8; j++ {
		var w []float32
		if qw != nil {
			w = qw[n*j : n*j+n]
		}
		scales[j] = ggmlQxQuants(x[n*j:n*j+n], L[n*j:n*j+n], nmax, w)
	}
}
