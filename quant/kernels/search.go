package kernels

import "sync/atomic"

// Lane-parallel K-quant scale searches. ggml's make_qkx2_quants / make_qkx3_quants (the
// asymmetric scale-and-min search of Q4_K, Q5_K, Q2_K, Q4_1 and Q5_1) and make_qx_quants (the
// symmetric search of Q6_K, Q3_K and the imatrix Q4_0/Q5_0) run one sub-block at a time, each
// a chain of float32 sums whose order fixes the result, so vectorising one search would
// change the bytes. The kernels here run eight independent searches side by side, one per
// SIMD lane: lane j performs exactly the scalar operations of sub-block j, in the same order
// and with one rounding each, so every lane's result is bit-identical to the scalar search.
// quant's ggmlQkxQuants / ggmlQxQuants are the pure-Go twins; quant's tests compare the two
// paths on every type that uses them.

// QkxLanes is the state of QkxSearch8: inputs X and W transposed (element i of sub-block j
// at [i·8+j]), scratch, and the outputs Scale, Min (the negated minimum, as ggml returns
// it) and L (the labels 0..nmax, transposed like X).
type QkxLanes struct {
	X, W  [256]float32
	fl    [256]float32 // labels of the current step, as float
	sumW  [8]float32
	sumX  [8]float32
	best  [8]float32 // best weighted error so far
	scale [8]float32
	bIs   [8]float32 // iscale of the best labels
	bMin  [8]float32 // minimum the best labels were rounded against
	max   [8]float32
	min0  [8]float32 // minimum of a degenerate lane (max == min)
	deg   [8]float32 // all ones where max == min
	Scale [8]float32
	Min   [8]float32
	L     [256]int32
}

// HasLaneSearch reports whether QkxSearch8 and QxSearch8 run (the AVX2 assembly is in use).
func HasLaneSearch() bool { return useAsm() }

// QkxSearch8 runs make_qkx2_quants (weights given, squared error, no MAD) on the eight
// n-element sub-blocks (n ≤ 32) in s.X with weights s.W: labels 0..nmax, and the search's
// iscale numerators num[k] = (rmin + rdelta·k) + nmax for k = 0..nstep, which the caller
// computes in float32 as ggml does. make_qkx3_quants differs only in its degenerate-case
// test, which gives the same result. It reports false, doing nothing, when the assembly is
// not in use.
func QkxSearch8(s *QkxLanes, n int, nmax int32, num []float32) bool {
	if !useAsm() || len(num) == 0 || n < 1 || n > 32 {
		return false
	}
	qkxSearch8AVX2(s, nmax, &num[0], len(num), n)
	return true
}

// QkxNumerators returns the iscale numerators of QkxSearch8/16, (rmin + rdelta·k) + nmax for
// k = 0..nstep (nstep < 64), computed in float32 as ggml's make_qkx2/3_quants does.
func QkxNumerators(nmax int32, rmin, rdelta float32, nstep int) *[64]float32 {
	var num [64]float32
	fnmax := float32(nmax)
	for is := 0; is <= nstep; is++ {
		num[is] = float32(rmin+float32(rdelta*float32(is))) + fnmax
	}
	return &num
}

// QxNumerators returns the iscale numerators of QxSearch8/16, −(nmax + 0.1·is) for
// is = −9..9, is ≠ 0, computed in float32 as ggml's make_qx_quants does.
func QxNumerators(nmax int32) *[18]float32 {
	var num [18]float32
	k := 0
	for is := int32(-9); is <= 9; is++ {
		if is != 0 {
			num[k] = -(float32(nmax) + float32(float32(0.1)*float32(is)))
			k++
		}
	}
	return &num
}

// QkxLanes16 is QkxLanes for QkxSearch16: sixteen lanes, element i of sub-block j at [i·16+j].
type QkxLanes16 struct {
	X, W  [512]float32
	fl    [512]float32
	sumW  [16]float32
	sumX  [16]float32
	best  [16]float32
	scale [16]float32
	bIs   [16]float32
	bMin  [16]float32
	max   [16]float32
	min0  [16]float32
	Scale [16]float32
	Min   [16]float32
	L     [512]int32
}

// HasLaneSearch16 reports whether QkxSearch16 and QxSearch16 run (the AVX-512F assembly is in use and not
// turned off with SetLaneSearch16).
func HasLaneSearch16() bool { return have512 && useAsm() && !lane16Off.Load() }

var lane16Off atomic.Bool

// SetLaneSearch16 turns the 16-lane search on (the default where AVX-512F is present) or off
// (callers then take QkxSearch8; tests use it to run both paths on one machine).
func SetLaneSearch16(on bool) { lane16Off.Store(!on) }

// QkxSearch16 is QkxSearch8 for sixteen sub-blocks (two K-quant super-blocks) at once, in
// AVX-512 lanes; each lane's result is bit-identical to QkxSearch8's and the scalar search's.
// It reports false, doing nothing, when HasLaneSearch16 is false.
func QkxSearch16(s *QkxLanes16, n int, nmax int32, num []float32) bool {
	if !HasLaneSearch16() || len(num) == 0 || n < 1 || n > 32 {
		return false
	}
	qkxSearch16AVX512(s, nmax, &num[0], len(num), n)
	return true
}

// QxLanes16 is QxLanes for QxSearch16: sixteen lanes, element i of sub-block j at [i·16+j].
type QxLanes16 struct {
	X, W  [512]float32
	max   [16]float32
	bIs   [16]float32
	Scale [16]float32
	L     [512]int32
}

// QxSearch16 is QxSearch8 for sixteen sub-blocks (the sixteen 16-element sub-blocks of a Q6_K
// or Q3_K super-block) at once, in AVX-512 lanes; each lane's result is bit-identical to
// QxSearch8's. It reports false, doing nothing, when HasLaneSearch16 is false.
func QxSearch16(s *QxLanes16, n int, nmax int32, num []float32) bool {
	if !HasLaneSearch16() || len(num) == 0 || n < 1 || n > 32 {
		return false
	}
	qxSearch16AVX512(s, nmax, &num[0], len(num), n)
	return true
}

// QxLanes is the state of QxSearch8 (make_qx_quants, rmse_type 1): inputs X and W
// transposed like QkxLanes, outputs Scale and L (labels l + nmax in 0..2·nmax−1, transposed).
type QxLanes struct {
	X, W  [256]float32
	max   [8]float32 // signed value of the first largest |x|
	bIs   [8]float32 // iscale of the best labels
	best  [8]float32
	deg   [8]float32 // all ones where max|x| < 1e-15
	Scale [8]float32
	L     [256]int32
}

// QxSearch8 runs make_qx_quants(n, nmax, x, L, rmse_type = 1, weights) on the eight
// n-element sub-blocks (n ≤ 32) in s.X with weights s.W (the caller writes x² for ggml's
// unweighted case), with the iscale numerators num[k] = −(nmax + 0.1·is) for is = −9..9,
// is ≠ 0, computed in float32 as ggml does. It reports false, doing nothing, when the
// assembly is not in use.
func QxSearch8(s *QxLanes, n int, nmax int32, num []float32) bool {
	if !useAsm() || len(num) == 0 || n < 1 || n > 32 {
		return false
	}
	qxSearch8AVX2(s, nmax, &num[0], len(num), n)
	return true
}

// QuantizeRowQ8_0Ref runs ggml's quantize_row_q8_0_ref on finite x (len(x) a multiple of 32)
// into dst with the AVX2 assembly: d = amax/127 as fp16, id = 1/d from the float32 d, and
// q = roundf(x·id), half away from zero (the activation quantizer QuantizeRowQ8_0 differs:
// id = 127/amax and ties to even). It reports false, doing nothing, when the assembly is not
// in use; quant's quantRowQ8_0Ref is the pure-Go twin. It panics with a *LengthError if
// len(x)%32 != 0 or dst is too short.
func QuantizeRowQ8_0Ref(dst []byte, x []float32) bool {
	if len(x)%QK8_0 != 0 {
		lengthPanic("QuantizeRowQ8_0Ref", "len(x) = %d is not a multiple of %d", len(x), QK8_0)
	}
	nb := len(x) / QK8_0
	if len(dst) < nb*BlockBytesQ8_0 {
		lengthPanic("QuantizeRowQ8_0Ref", "dst has %d bytes, %d elements need %d", len(dst), len(x), nb*BlockBytesQ8_0)
	}
	if !useAsm() {
		return false
	}
	if nb > 0 {
		quantizeQ8_0RefAVX2(&dst[0], &x[0], nb)
	}
	return true
}

// AsymSubEval8 scores up to eight (scale, min) candidates of one asymmetric sub-block side
// by side, one per lane: lane l re-rounds every value x[i] as q = clamp(rne((x[i]+dm[l])/ds[l]),
// 0, nmax) (q = 0 where ds[l] == 0), writes q to q[i·8+l] and sets e[l] to
// Σ_i float64(w[i])·r·r in index order, with r = float64(x[i]) − float64(ds[l]·q − dm[l]) and
// the products and the difference rounded to float32 as written. These are exactly the
// operations of quant's scalar asymSubEval for that candidate, one rounding each and the sum
// in the same order, so every lane's bits equal the scalar result; quant's tests compare the
// two. It reports false, doing nothing, when the assembly is not in use or the lengths do not
// fit (len(w) < len(x), len(q) < 8·len(x), len(x) == 0).
func AsymSubEval8(x, w []float32, ds, dm *[8]float32, nmax int32, e *[8]float64, q []int32) bool {
	n := len(x)
	if !useAsm() || n == 0 || len(w) < n || len(q) < 8*n {
		return false
	}
	asymSubEval8AVX2(&x[0], &w[0], n, ds, dm, nmax, e, &q[0])
	return true
}

// ProxyLanes is the state of AsymProxy8: per sub-block j (up to 16) the fitted scale Fd[j]
// and offset Fm[j], the code statistics Sqq, Sq, Sw, and the integer candidates of the
// super-scale that stays fixed (Fixed0/Fixed1: the mins' when the scale varies, the scales'
// otherwise); the kernel writes each sub-block's cost to Cost.
type ProxyLanes struct {
	Fd, Fm, Sqq, Sq, Sw [16]float64
	Fixed0, Fixed1      [16]float64
	Cost                [16]float64
}

// AsymProxy8 evaluates quant's asymProxy for sub-blocks 0..n-1 (n a multiple of 4, at most
// 16) under super-scales D, Dm, four sub-blocks per AVX2 step with the scalar operations per
// lane: the varying scale's integers around Fd[j]/D (varyD) or −Fm[j]/Dm (otherwise), 0 and
// 0 when that scale is not positive, clamped to 0..smax as floorCeil does; the fixed
// scale's from Fixed0/Fixed1; Cost[j] the least of the four costs
// sqq·ds² + 2·sq·ds·do + sw·do² in asymProxy's order (ds = D·a − fd, do = −Dm·b − fm), the
// same bits as the scalar loop. It reports false, doing nothing, when the assembly is not
// in use or n is not a multiple of 4 in 4..16.
func AsymProxy8(p *ProxyLanes, n int, D, Dm float64, smax int32, varyD bool) bool {
	if !useAsm() || n < 4 || n > 16 || n%4 != 0 {
		return false
	}
	vd, pos, S := 0, 0, Dm
	if varyD {
		vd, S = 1, D
	}
	if S > 0 {
		pos = 1
	}
	asymProxyAVX2(p, n, D, Dm, float64(smax), vd, pos)
	return true
}

// AsymScore8 computes the float32 code sums of up to eight first guesses of quant's asymFit
// side by side, one per lane: lane l rounds every value as
// q = clamp(nearest_int((x[i] − mn)·id[l]), 0, nmax) and accumulates, in index order,
// sq += w·q, sqq += (w·q)·q and sqx += (w·q)·x[i] (one rounding each, no FMA), written to
// out[l], out[8+l] and out[16+l]: the scalar loop's operations, so the same bits. It reports
// false, doing nothing, when the assembly is not in use or len(w) < len(x) or len(x) == 0.
func AsymScore8(x, w []float32, mn float32, id *[8]float32, nmax int32, out *[24]float32) bool {
	if !useAsm() || len(x) == 0 || len(w) < len(x) {
		return false
	}
	asymScore8AVX2(&x[0], &w[0], len(x), mn, id, nmax, out)
	return true
}
