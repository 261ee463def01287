package quant

// Search primitives of ModeImproved (see docs/quantization.md, "Improved mode").
// They minimise Σ w·(x − y)² for one group of values with float64 statistics:
//
//   symFit:  y = d·v[q], v a level set (integers qmin..qmax or the IQ4 codebook),
//            signed scale d. Grid of scale candidates, then for the best few
//            alternating refits (d = Σwxv/Σwv², re-round codes) and exact coordinate
//            descent on the codes with the scale floating (move one code to a
//            neighbouring level when that raises (Σwxv)²/Σwv²).
//   asymFit: y = d·q + m, q in 0..nmax, d >= 0 and optionally m <= 0 (the K-quant
//            sign convention). Grid of candidates, then alternating 2-variable
//            least squares / re-rounding and coordinate descent on the codes.

import (
	"github.com/tq-project/tq/quant/kernels"
	"math"
	"slices"
)

// levelSet describes the representable code values of a symmetric format.
type levelSet struct {
	cb         bool         // codebook (IQ4) instead of integers
	qmin, qmax int32        // integer levels (cb == false)
	vals       *[16]float32 // codebook values, ascending (cb == true)
	tc         []float32    // scale candidates: the signed max element maps to level position t
}

func (ls *levelSet) value(q int32) float64 {
	if ls.cb {
		return float64(ls.vals[q])
	}
	return float64(q)
}

// nearest returns the code whose value is nearest to v.
func (ls *levelSet) nearest(v float32) int32 {
	if ls.cb {
		return int32(nearestIQ4(v))
	}
	return clampI(nearestInt(v), ls.qmin, ls.qmax)
}

// iq4Mid[k] is the midpoint between codebook entries k and k+1; iq4Bucket[i] is the
// number of midpoints <= i-127 (the codebook index of the unit interval [i-127, i-126)
// up to at most one midpoint inside it, since midpoints are >= 11 apart).
var iq4Mid, iq4Bucket = func() (mid [15]float32, bucket [242]uint8) {
	for k := range mid {
		mid[k] = (kvaluesIQ4NLf[k] + kvaluesIQ4NLf[k+1]) / 2
	}
	for i := range bucket {
		lo := float32(i - 127)
		n := uint8(0)
		for _, m := range mid {
			if m <= lo {
				n++
			}
		}
		bucket[i] = n
	}
	return
}()

// nearestIQ4 is the nearest codebook index (ties to the larger entry, like
// bestIndexIQ4) through a bucket table: one comparison instead of a binary search.
func nearestIQ4(v float32) uint8 {
	if v != v {
		return 15 // what best_index_int8's comparisons give for NaN
	}
	if v <= -127 {
		return 0
	}
	if v >= 113 {
		return 15
	}
	idx := iq4Bucket[int(float32(v)+127)] // (conversion: no FMA with the caller's product)
	// v+127 may round across an integer midpoint, so check both neighbours.
	if idx > 0 && v < iq4Mid[idx-1] {
		idx--
	} else if idx < 15 && v >= iq4Mid[idx] {
		idx++
	}
	return idx
}

func (ls *levelSet) lo() int32 {
	if ls.cb {
		return 0
	}
	return ls.qmin
}

func (ls *levelSet) hi() int32 {
	if ls.cb {
		return 15
	}
	return ls.qmax
}

// gridT returns the level positions t used as scale candidates d = max/t: points
// spaced by step from the most negative level minus 0.5 upward over span, and
// from the most positive level plus 0.5 downward over span (when that side has
// more than one level).
func gridT(neg, pos, span, step float64) []float32 {
	var t []float32
	for v := neg - 0.5; v <= neg+span+1e-9; v += step {
		if v < 0 {
			t = append(t, float32(v))
		}
	}
	if pos >= 1 {
		for v := pos + 0.5; v >= pos-span-1e-9; v -= step {
			if v > 0 {
				t = append(t, float32(v))
			}
		}
	}
	return t
}

var (
	levelsQ4_0 = &levelSet{qmin: -8, qmax: 7, tc: gridT(-8, 7, 2.5, 0.25)}
	levelsQ5_0 = &levelSet{qmin: -16, qmax: 15, tc: gridT(-16, 15, 3, 0.3)}
	levelsQ8_0 = &levelSet{qmin: -127, qmax: 127, tc: gridT(-127, 0, 4, 0.5)}
	levelsQ3_K = &levelSet{qmin: -4, qmax: 3, tc: gridT(-4, 3, 2, 0.2)}
	levelsQ6_K = &levelSet{qmin: -32, qmax: 31, tc: gridT(-32, 31, 4, 0.5)}
	levelsIQ4  = &levelSet{cb: true, vals: &kvaluesIQ4NLf, tc: gridT(-127, 113, 24, 3)}
	// symmetric int4 groups stored as Q4_0 / int8 groups stored as Q8_0
	levelsSym8 = levelsQ8_0
)

// Search effort. Measured on N(0,1) 16×4096 with importance (q2_K, q4_K, q4_1,
// q6_K, iq4_nl): going from (2, 2, 4, 2) to these values lowered the weighted error
// by 0.05–0.5 %; going further to (4, 8, 16, 8) by another 0.02–0.27 %.
const (
	fitTop        = 3 // scale candidates refined per group
	refineRounds  = 4 // (re-fit/re-round, coordinate descent) rounds
	lloydIters    = 8 // re-fit/re-round iterations per round
	descentSweeps = 4 // coordinate-descent sweeps per round
)

// symFit finds a signed scale d and codes q (written to codes) that minimise
// Σ w·(x − d·v[q])². It returns d and the curvature B = Σ w·v[q]² (the error
// grows by B·(d'−d)² when the scale is moved to d' with the codes fixed).
func symFit(x, w []float32, ls *levelSet, codes, tmp []int32) (d, B float64) {
	n := len(x)
	codes = codes[:n]
	tmp = tmp[:n]
	max, amax := signedMax(x)
	if amax < groupMaxEps {
		z := ls.nearest(0)
		for i := range codes {
			codes[i] = z
		}
		return 0, 0
	}
	var topT [fitTop]float32
	var topS [fitTop]float64
	for i := range topS {
		topS[i] = -1
	}
	for _, t := range ls.tc {
		A, B := symScore(x, w, ls, t/max)
		if B <= 0 {
			continue
		}
		s := float64(A) * float64(A) / float64(B)
		// insert into the top list
		for k := 0; k < fitTop; k++ {
			if s > topS[k] {
				copy(topS[k+1:fitTop], topS[k:fitTop-1])
				copy(topT[k+1:fitTop], topT[k:fitTop-1])
				topS[k], topT[k] = s, t
				break
			}
		}
	}
	best := -1.0
	var memo refineMemo
	for k := 0; k < fitTop && topS[k] >= 0; k++ {
		id := topT[k] / max
		for i, v := range x {
			tmp[i] = ls.nearest(v * id)
		}
		s, dd, bb := symRefine(x, w, ls, tmp, &memo)
		if s > best {
			best, d, B = s, dd, bb
			copy(codes, tmp)
		}
	}
	if best < 0 { // every weight zero: plain absmax scale
		d = float64(max) / float64(ls.tc[0])
		for i, v := range x {
			codes[i] = ls.nearest(v / float32(d))
		}
		return d, 0
	}
	return d, B
}

// symScore returns A = Σ w·x·v and B = Σ w·v² (float32) for codes rounded at
// inverse scale id; used to rank scale candidates.
func symScore(x, w []float32, ls *levelSet, id float32) (A, B float32) {
	if ls.cb {
		vals := ls.vals
		for i, v := range x {
			q := vals[nearestIQ4(v*id)]
			wq := w[i] * q
			A += wq * v
			B += wq * q
		}
		return
	}
	lo, hi := float32(ls.qmin), float32(ls.qmax)
	for i, v := range x {
		q := float32(nearestInt(v * id))
		if q < lo {
			q = lo
		} else if q > hi {
			q = hi
		}
		wq := w[i] * q
		A += wq * v
		B += wq * q
	}
	return
}

// symStats returns A = Σ w·x·v and B = Σ w·v².
func symStats(x, w []float32, ls *levelSet, q []int32) (A, B float64) {
	for i, v := range x {
		val := ls.value(q[i])
		wv := float64(w[i]) * val
		A += wv * float64(v)
		B += wv * val
	}
	return
}

// symRefine improves codes q in place by alternating refits and coordinate descent
// and returns the score A²/B, the scale A/B and B. memo, when not nil, is shared by the
// refinements of one group (see refineMemo).
func symRefine(x, w []float32, ls *levelSet, q []int32, memo *refineMemo) (score, d, B float64) {
	memo = memo.usable(len(q))
	A, B := symStats(x, w, ls, q)
	if B <= 0 {
		return -1, 0, 0
	}
	slot := -1
	defer func() {
		if slot >= 0 {
			copy(memo.out[slot][:], q)
			memo.res[slot] = [3]float64{score, d, B}
		}
	}()
	lo, hi := ls.lo(), ls.hi()
	for round := 0; round < refineRounds; round++ {
		// Lloyd: refit d, re-round codes.
		for it := 0; it < lloydIters; it++ {
			d := A / B
			if d == 0 {
				break
			}
			id := float32(1 / d)
			changed := false
			for i, v := range x {
				nq := ls.nearest(v * id)
				if nq != q[i] {
					q[i] = nq
					changed = true
				}
			}
			if !changed {
				break
			}
			// Re-rounding is optimal for the current scale, so the best-scale score
			// cannot decrease (up to rounding noise).
			A, B = symStats(x, w, ls, q)
			if B <= 0 {
				return -1, 0, 0
			}
		}
		A, B = symStats(x, w, ls, q)
		if B <= 0 {
			return -1, 0, 0
		}
		if round == 0 && memo != nil {
			// A and B are those of q, so the rest depends on q alone
			k, hit := memo.lookup(q)
			if hit {
				return memo.res[k][0], memo.res[k][1], memo.res[k][2]
			}
			slot = k
		}
		// Exact coordinate descent: move single codes to a neighbouring level when the
		// best-scale score A²/B improves.
		moved := false
		for sweep := 0; sweep < descentSweeps; sweep++ {
			n := 0
			for i, v := range x {
				wi := float64(w[i])
				if wi == 0 {
					continue
				}
				xv := float64(v)
				cur := ls.value(q[i])
				bestS := A * A / B
				bestQ := q[i]
				var bA, bB float64
				for _, nq := range [2]int32{q[i] - 1, q[i] + 1} {
					if nq < lo || nq > hi {
						continue
					}
					nv := ls.value(nq)
					nA := A + wi*xv*(nv-cur)
					nB := B + wi*(nv*nv-cur*cur)
					if nB > 0 {
						if s := nA * nA / nB; s > bestS*(1+1e-12) {
							bestS, bestQ, bA, bB = s, nq, nA, nB
						}
					}
				}
				if bestQ != q[i] {
					q[i] = bestQ
					A, B = bA, bB
					n++
				}
			}
			if n == 0 {
				break
			}
			moved = true
		}
		if !moved {
			break
		}
		A, B = symStats(x, w, ls, q)
	}
	return A * A / B, A / B, B
}

// asymStats holds the weighted sums of a code assignment.
type asymStats struct{ sw, sq, sqq, sx, sqx, sxx float64 }

func asymStatsOf(x, w []float32, q []int32) (s asymStats) {
	for i, v := range x {
		wi, xv, qv := float64(w[i]), float64(v), float64(q[i])
		s.sw += wi
		s.sq += wi * qv
		s.sqq += wi * qv * qv
		s.sx += wi * xv
		s.sqx += wi * qv * xv
		s.sxx += wi * xv * xv
	}
	return
}

// solve returns the least-squares scale d >= 0 and offset m (m <= 0 when nonPos)
// for fixed codes, and the resulting weighted squared error.
func (s *asymStats) solve(nonPos bool) (d, m, err float64) {
	D := s.sw*s.sqq - s.sq*s.sq
	if D > 0 {
		d = (s.sw*s.sqx - s.sx*s.sq) / D
		m = (s.sqq*s.sx - s.sq*s.sqx) / D
	} else if s.sw > 0 {
		m = s.sx / s.sw
	}
	if nonPos && m > 0 {
		m = 0
		d = 0
		if s.sqq > 0 {
			d = s.sqx / s.sqq
		}
	}
	if d < 0 {
		d = 0
		m = 0
		if s.sw > 0 {
			m = s.sx / s.sw
		}
		if nonPos && m > 0 {
			m = 0
		}
	}
	err = s.sxx - 2*d*s.sqx - 2*m*s.sx + d*d*s.sqq + 2*d*m*s.sq + m*m*s.sw
	return
}

// cannotBeat reports whether every error solve can return for s is certainly at least
// bestE, so the coordinate descent can skip solving s. The test is exact in intent and
// division-free: solve's error is at least the unconstrained least-squares minimum
// E = sxx − P/Det (P = sw·sqx² − 2·sq·sqx·sx + sqq·sx², Det = sw·sqq − sq²; the constraints
// d >= 0 and m <= 0 can only raise it), and E >= bestE ⇔ (sxx − bestE)·Det − P >= 0. It
// answers true only when that margin exceeds 1e-9·sxx·sw·sqq, about a million times the
// rounding error of both this test and solve's expanded error formula, and only for
// well-conditioned sums (Det > 1e-6·sw·sqq); otherwise false, and the caller solves. So
// skipping never changes which code the descent picks (TestCannotBeatAgreesWithSolve).
func (s *asymStats) cannotBeat(bestE float64) bool {
	scale := s.sw * s.sqq
	det := scale - s.sq*s.sq
	if !(det > 1e-6*scale) {
		return false
	}
	p := s.sw*s.sqx*s.sqx - 2*s.sq*s.sqx*s.sx + s.sqq*s.sx*s.sx
	return (s.sxx-bestE)*det-p > 1e-9*s.sxx*scale
}

// solveAll makes the descent solve every neighbour (tests compare it with the skipping).
var solveAll bool

// asymFit finds d >= 0, m (<= 0 when nonPos) and codes in 0..nmax minimising
// Σ w·(x − (d·q + m))². tc lists level positions t for the first guesses
// d = (max − min)/t. It returns d, m, the error and the final statistics.
func asymFit(x, w []float32, nmax int32, nonPos bool, tc []float32, codes, tmp []int32) (d, m, err float64, st asymStats) {
	n := len(x)
	codes = codes[:n]
	tmp = tmp[:n]
	mn, mx := x[0], x[0]
	for _, v := range x[1:] {
		mn = min(mn, v)
		mx = max(mx, v)
	}
	if nonPos && mn > 0 {
		mn = 0
	}
	if !(mx-mn > 0) || mx-mn < groupMaxEps {
		for i := range codes {
			codes[i] = 0
		}
		st = asymStatsOf(x, w, codes)
		d, m, err = st.solve(nonPos)
		return 0, m, err, st
	}
	var topT [fitTop]float32
	var topE [fitTop]float64
	for i := range topE {
		topE[i] = math.Inf(1)
	}
	rng := mx - mn
	var base asymStats // the code-independent sums
	for i, v := range x {
		wi, xv := float64(w[i]), float64(v)
		base.sw += wi
		base.sx += wi * xv
		base.sxx += wi * xv * xv
	}
	fmax := float32(nmax)
	// rank solves candidate t for its float32 sums and keeps it if it is among the best.
	rank := func(t, sq, sqq, sqx float32) {
		s := base
		s.sq, s.sqq, s.sqx = float64(sq), float64(sqq), float64(sqx)
		_, _, e := s.solve(nonPos)
		for k := 0; k < fitTop; k++ {
			if e < topE[k] {
				copy(topE[k+1:fitTop], topE[k:fitTop-1])
				copy(topT[k+1:fitTop], topT[k:fitTop-1])
				topE[k], topT[k] = e, t
				break
			}
		}
	}
	// With the lane kernel, eight candidates per pass over x (kernels.AsymScore8, the scalar
	// operations per lane); without it two per pass: each candidate's sums take the same
	// operations in the same order as a pass of its own (so the same bits), but the two
	// dependency chains overlap. They are ranked in tc's order.
	c := 0
	if kernels.HasLaneSearch() {
		var id [8]float32
		var sums [24]float32
		for ; c < len(tc); c += 8 {
			nl := min(8, len(tc)-c)
			for l := range id {
				id[l] = tc[c+min(l, nl-1)] / rng
			}
			kernels.AsymScore8(x, w, mn, &id, nmax, &sums)
			for l := 0; l < nl; l++ {
				rank(tc[c+l], sums[l], sums[8+l], sums[16+l])
			}
		}
	}
	for ; c+2 <= len(tc); c += 2 {
		id0, id1 := tc[c]/rng, tc[c+1]/rng
		var sq0, sqq0, sqx0, sq1, sqq1, sqx1 float32
		for i, v := range x {
			wi, d := w[i], v-mn
			q0 := float32(nearestInt(d * id0))
			if q0 < 0 {
				q0 = 0
			} else if q0 > fmax {
				q0 = fmax
			}
			q1 := float32(nearestInt(d * id1))
			if q1 < 0 {
				q1 = 0
			} else if q1 > fmax {
				q1 = fmax
			}
			wq0, wq1 := wi*q0, wi*q1
			sq0 += wq0
			sqq0 += wq0 * q0
			sqx0 += wq0 * v
			sq1 += wq1
			sqq1 += wq1 * q1
			sqx1 += wq1 * v
		}
		rank(tc[c], sq0, sqq0, sqx0)
		rank(tc[c+1], sq1, sqq1, sqx1)
	}
	if c < len(tc) {
		sq, sqq, sqx := asymScore1(x, w, mn, tc[c]/rng, fmax)
		rank(tc[c], sq, sqq, sqx)
	}
	err = math.Inf(1)
	var memo refineMemo
	for k := 0; k < fitTop && !math.IsInf(topE[k], 1); k++ {
		id := topT[k] / rng
		for i, v := range x {
			tmp[i] = clampI(nearestInt((v-mn)*id), 0, nmax)
		}
		s, dd, mm, e := asymRefine(x, w, nmax, nonPos, tmp, &memo)
		if e < err {
			err, d, m, st = e, dd, mm, s
			copy(codes, tmp)
		}
	}
	if math.IsInf(err, 1) { // all weights zero
		for i := range codes {
			codes[i] = 0
		}
		st = asymStatsOf(x, w, codes)
		return 0, 0, 0, st
	}
	return d, m, err, st
}

// asymScore1 returns asymFit's float32 sums Σw·q, Σ(w·q)·q and Σ(w·q)·x of one first guess
// (q = clamp(nearest_int((x − mn)·id), 0, fmax)), in index order.
func asymScore1(x, w []float32, mn, id, fmax float32) (sq, sqq, sqx float32) {
	for i, v := range x {
		q := float32(nearestInt((v - mn) * id))
		if q < 0 {
			q = 0
		} else if q > fmax {
			q = fmax
		}
		wq := w[i] * q
		sq += wq
		sqq += wq * q
		sqx += wq * v
	}
	return
}

// refineMemo remembers, for the candidates of one asymFit or symFit call, the codes each
// refinement had after its first re-rounding loop and where it ended. From that point
// asymRefine and symRefine are functions of the codes alone (they recompute their sums from
// them), so a later candidate whose re-rounding reaches the same codes ends in the same
// place: its result is copied instead of recomputed, which changes no output bit. Nearby
// scale candidates often converge to the same codes.
type refineMemo struct {
	n   int
	key [fitTop][memoMaxLen]int32
	out [fitTop][memoMaxLen]int32
	st  [fitTop]asymStats  // asymRefine's statistics
	res [fitTop][3]float64 // asymRefine: d, m, err; symRefine: score, d, B
}

// memoMaxLen is the longest group the refinements memoise (K-quant sub-blocks and 32-weight
// blocks are at most 32).
const memoMaxLen = 32

// usable returns memo, or nil when it cannot take a refinement of n codes.
func (r *refineMemo) usable(n int) *refineMemo {
	if r == nil || n > memoMaxLen || r.n == fitTop {
		return nil
	}
	return r
}

// find returns the index of the entry whose key equals q, or -1.
func (r *refineMemo) find(q []int32) int {
	for k := 0; k < r.n; k++ {
		if slices.Equal(r.key[k][:len(q)], q) {
			return k
		}
	}
	return -1
}

// lookup answers a refinement at its memo point: true with q set to the remembered final
// codes and k the entry; otherwise false with a new entry k keyed by q.
func (r *refineMemo) lookup(q []int32) (k int, hit bool) {
	if k = r.find(q); k >= 0 {
		copy(q, r.out[k][:len(q)])
		return k, true
	}
	k = r.n
	r.n++
	copy(r.key[k][:], q)
	return k, false
}

// asymRefine improves codes in place (alternating least squares / re-rounding, then
// coordinate descent on single codes with d and m re-solved exactly). memo, when not nil,
// is shared by the refinements of one group (see refineMemo).
func asymRefine(x, w []float32, nmax int32, nonPos bool, q []int32, memo *refineMemo) (st asymStats, d, m, err float64) {
	memo = memo.usable(len(q))
	st = asymStatsOf(x, w, q)
	d, m, err = st.solve(nonPos)
	slot := -1
	for round := 0; round < refineRounds; round++ {
		for it := 0; it < lloydIters && d > 0; it++ {
			id := float32(1 / d)
			fm := float32(m)
			changed := false
			for i, v := range x {
				nq := clampI(nearestInt((v-fm)*id), 0, nmax)
				if nq != q[i] {
					q[i] = nq
					changed = true
				}
			}
			if !changed {
				break
			}
			st = asymStatsOf(x, w, q)
			d, m, err = st.solve(nonPos)
		}
		if round == 0 && memo != nil {
			// here st, d, m and err are those of q, so the rest depends on q alone
			k, hit := memo.lookup(q)
			if hit {
				return memo.st[k], memo.res[k][0], memo.res[k][1], memo.res[k][2]
			}
			slot = k
		}
		moved := false
		for sweep := 0; sweep < descentSweeps; sweep++ {
			n := 0
			for i, v := range x {
				wi := float64(w[i])
				if wi == 0 {
					continue
				}
				xv := float64(v)
				cur := float64(q[i])
				bestE, bestQ := err*(1-1e-12), q[i]
				var bS asymStats
				for _, nq := range [2]int32{q[i] - 1, q[i] + 1} {
					if nq < 0 || nq > nmax {
						continue
					}
					nv := float64(nq)
					s := st
					s.sq += wi * (nv - cur)
					s.sqq += wi * (nv*nv - cur*cur)
					s.sqx += wi * xv * (nv - cur)
					if !solveAll && s.cannotBeat(bestE) {
						continue // solve's error would not be below bestE
					}
					if _, _, e := s.solve(nonPos); e < bestE {
						bestE, bestQ, bS = e, nq, s
					}
				}
				if bestQ != q[i] {
					q[i] = bestQ
					st = bS
					d, m, err = st.solve(nonPos)
					n++
				}
			}
			if n == 0 {
				break
			}
			moved = true
		}
		if !moved {
			break
		}
		st = asymStatsOf(x, w, q)
		d, m, err = st.solve(nonPos)
	}
	if slot >= 0 {
		copy(memo.out[slot][:], q)
		memo.st[slot], memo.res[slot] = st, [3]float64{d, m, err}
	}
	return
}
