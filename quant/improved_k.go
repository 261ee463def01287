package quant

// ModeImproved for super-block formats: Q2_K, Q4_K, Q5_K (asymmetric sub-blocks with
// integer scales and mins) and Q3_K, Q6_K, IQ4_XS (symmetric sub-blocks with signed
// integer scales). Three stages per 256-element super-block:
//
//  1. fit every sub-block independently (asymFit / symFit);
//  2. choose the fp16 super-scale(s) and integer sub-scales with a quadratic model
//     of the error increase (exact for fixed codes: Σw(Δs·q + Δo)²);
//  3. exact refinement: alternately re-choose each sub-block's integers among the
//     neighbours of its least-squares optimum, and re-fit the super-scale(s) by
//     least squares over the whole super-block (trying the fp16 neighbours), each
//     time re-rounding codes for the stored values and accepting only a lower
//     exact (post-dequantization) error.

import (
	"math"
	"slices"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

type kAsymSpec struct {
	t         gguf.GGMLType
	nsub, sub int
	nmax      int32 // largest code
	smax      int32 // largest integer sub-scale / sub-min
}

var (
	kAsymQ2K = kAsymSpec{gguf.TypeQ2_K, 16, 16, 3, 15}
	kAsymQ4K = kAsymSpec{gguf.TypeQ4_K, 8, 32, 15, 63}
	kAsymQ5K = kAsymSpec{gguf.TypeQ5_K, 8, 32, 31, 63}
)

func floorCeil(v float64, lo, hi int32) (int32, int32) {
	if !(v > float64(lo)) {
		return lo, lo
	}
	if !(v < float64(hi)) {
		return hi, hi
	}
	f := int32(math.Floor(v))
	return clampI(f, lo, hi), clampI(f+1, lo, hi)
}

// asymProxy picks the integer scale a and min b (0..smax) for a sub-block fitted at
// scale fd, offset fm (<= 0) with statistics st, minimising the exact error increase
// for fixed codes; D, Dm are the super-scales.
func asymProxy(st *asymStats, fd, fm, D, Dm float64, smax int32) (a, b int32, cost float64) {
	a0, a1 := proxyInts(fd, D, smax)
	b0, b1 := proxyInts(-fm, Dm, smax)
	return asymProxyPick(st, fd, fm, D, Dm, [2]int32{a0, a1}, [2]int32{b0, b1})
}

// proxyInts returns the integers (0..smax) around v/S, or 0, 0 when S <= 0.
func proxyInts(v, S float64, smax int32) (int32, int32) {
	if S > 0 {
		return floorCeil(v/S, 0, smax)
	}
	return 0, 0
}

// asymProxyPick is asymProxy for given candidate integers ac (of D) and bc (of Dm).
func asymProxyPick(st *asymStats, fd, fm, D, Dm float64, ac, bc [2]int32) (a, b int32, cost float64) {
	cost = math.Inf(1)
	for _, ca := range ac {
		for _, cb := range bc {
			ds := D*float64(ca) - fd
			do := -Dm*float64(cb) - fm
			c := st.sqq*ds*ds + 2*st.sq*ds*do + st.sw*do*do
			if c < cost {
				a, b, cost = ca, cb, c
			}
		}
	}
	return
}

func f16Grid(vmax float64, smax int32, k int) float32 {
	if vmax <= 0 {
		return 0
	}
	return roundF16(float32(vmax / (float64(smax) - 0.25*float64(k))))
}

// asymSubEval re-rounds the codes of sub-block values xs for integer scale a and min
// b under super-scales D, Dm exactly as the block will be decoded, and returns the
// weighted error.
func asymSubEval(xs, w []float32, D, Dm float32, a, b, nmax int32, q []int32) float64 {
	return asymSubEvalDs(xs, w, D*float32(a), Dm*float32(b), nmax, q)
}

// asymSubEvalDs is asymSubEval for the decoded scale ds = D·a and min dm = Dm·b.
func asymSubEvalDs(xs, w []float32, ds, dm float32, nmax int32, q []int32) float64 {
	var e float64
	for i, v := range xs {
		var c int32
		if ds != 0 {
			c = clampI(nearestInt((v+dm)/ds), 0, nmax)
		}
		q[i] = c
		diff := float64(v) - float64(float32(ds*float32(c))-dm)
		e += float64(w[i]) * diff * diff
	}
	return e
}

// asymSubEvalLanes runs asymSubEvalDs for the nl <= 8 candidates (ds[l], dm[l]) of one
// sub-block: e[l] gets candidate l's error and q[i·8+l] its code i. kernels.AsymSubEval8
// computes all eight lanes at once with the same operations (so the same bits); without the
// assembly the scalar loop runs per candidate.
func asymSubEvalLanes(xs, w []float32, ds, dm *[8]float32, nl int, nmax int32, e *[8]float64, q []int32) {
	if kernels.AsymSubEval8(xs, w, ds, dm, nmax, e, q) {
		return
	}
	var c [QK_K]int32
	for l := 0; l < nl; l++ {
		e[l] = asymSubEvalDs(xs, w, ds[l], dm[l], nmax, c[:len(xs)])
		for i := range xs {
			q[i*8+l] = c[i]
		}
	}
}

func encAsymK(blk []byte, x, wt, wf []float32, s *impScratch, sp *kAsymSpec) {
	n, sub := sp.nsub, sp.sub
	var smaxV, mmaxV float64
	for j := 0; j < n; j++ {
		r := j * sub
		d, m, _, st := asymFit(x[r:r+sub], wf[r:r+sub], sp.nmax, true, tcFor(sp.nmax), s.codes[r:r+sub], s.tmp[:sub])
		s.fd[j], s.fm[j], s.fst[j] = d, m, st
		smaxV = max(smaxV, d)
		mmaxV = max(mmaxV, -m)
	}
	// proxy sums asymProxy over the sub-blocks. Within a pass one of the super-scales is
	// fixed, so its integer candidates per sub-block (pl.Fixed0/Fixed1) are computed once
	// per pass; kernels.AsymProxy8 evaluates four sub-blocks per step (the same bits), the
	// sum stays in index order.
	pl := &s.proxy
	for j := 0; j < n; j++ {
		pl.Fd[j], pl.Fm[j] = s.fd[j], s.fm[j]
		pl.Sqq[j], pl.Sq[j], pl.Sw[j] = s.fst[j].sqq, s.fst[j].sq, s.fst[j].sw
	}
	proxy := func(D, Dm float32, pass int) float64 {
		var c float64
		if kernels.AsymProxy8(pl, n, float64(D), float64(Dm), sp.smax, pass%2 == 0) {
			for j := 0; j < n; j++ {
				c += pl.Cost[j]
			}
			return c
		}
		for j := 0; j < n; j++ {
			ac := [2]int32{int32(pl.Fixed0[j]), int32(pl.Fixed1[j])}
			bc := ac
			if pass%2 == 0 {
				ac[0], ac[1] = proxyInts(s.fd[j], float64(D), sp.smax)
			} else {
				bc[0], bc[1] = proxyInts(-s.fm[j], float64(Dm), sp.smax)
			}
			_, _, cj := asymProxyPick(&s.fst[j], s.fd[j], s.fm[j], float64(D), float64(Dm), ac, bc)
			c += cj
		}
		return c
	}
	D, Dm := f16Grid(smaxV, sp.smax, 0), f16Grid(mmaxV, sp.smax, 0)
	for pass := 0; pass < 3; pass++ {
		for j := 0; j < n; j++ {
			var f0, f1 int32
			if pass%2 == 0 {
				f0, f1 = proxyInts(-s.fm[j], float64(Dm), sp.smax)
			} else {
				f0, f1 = proxyInts(s.fd[j], float64(D), sp.smax)
			}
			pl.Fixed0[j], pl.Fixed1[j] = float64(f0), float64(f1)
		}
		best := proxy(D, Dm, pass)
		for k := 0; k < 16; k++ {
			if pass%2 == 0 {
				if c := f16Grid(smaxV, sp.smax, k); c != D {
					if e := proxy(c, Dm, pass); e < best {
						best, D = e, c
					}
				}
			} else if c := f16Grid(mmaxV, sp.smax, k); c != Dm {
				if e := proxy(D, c, pass); e < best {
					best, Dm = e, c
				}
			}
		}
	}
	for j := 0; j < n; j++ {
		s.a[j], s.b[j], _ = asymProxy(&s.fst[j], s.fd[j], s.fm[j], float64(D), float64(Dm), sp.smax)
	}
	refineAsymK(x, wt, s, sp, &D, &Dm)

	// Encode through the same finishing code as the reference path.
	L := s.L[:QK_K]
	for i := range L {
		L[i] = uint8(s.codes[i])
	}
	switch sp.t {
	case gguf.TypeQ2_K:
		for j := 0; j < 16; j++ {
			blk[j] = uint8(s.a[j]) | uint8(s.b[j])<<4
		}
		putF16(blk[80:], D)
		putF16(blk[82:], Dm)
		finishQ2K(blk, x, L)
	default:
		var ls, lm [8]uint8
		for j := 0; j < 8; j++ {
			ls[j], lm[j] = uint8(s.a[j]), uint8(s.b[j])
		}
		packScalesK4(blk[4:16], &ls, &lm)
		putF16(blk[0:], D)
		putF16(blk[2:], Dm)
		finishQ45K(blk, x, L, sp.nmax)
	}
}

func refineAsymK(x, wt []float32, s *impScratch, sp *kAsymSpec, D, Dm *float32) {
	n, sub := sp.nsub, sp.sub
	total := 0.0
	for j := 0; j < n; j++ {
		r := j * sub
		s.subErr[j] = asymSubEval(x[r:r+sub], wt[r:r+sub], *D, *Dm, s.a[j], s.b[j], sp.nmax, s.codes[r:r+sub])
		total += s.subErr[j]
	}
	for iter := 0; iter < 3; iter++ {
		improved := false
		// (i) integers per sub-block, around the least-squares optimum for its codes.
		for j := 0; j < n; j++ {
			r := j * sub
			xs, ws := x[r:r+sub], wt[r:r+sub]
			st := asymStatsOf(xs, ws, s.codes[r:r+sub])
			if st.sw == 0 {
				continue
			}
			so, mo, _ := st.solve(true)
			var ac, bc [3]int32
			ac[0], bc[0] = s.a[j], s.b[j]
			ac[1], ac[2] = s.a[j], s.a[j]
			bc[1], bc[2] = s.b[j], s.b[j]
			if *D > 0 {
				ac[1], ac[2] = floorCeil(so/float64(*D), 0, sp.smax)
			}
			if *Dm > 0 {
				bc[1], bc[2] = floorCeil(-mo/float64(*Dm), 0, sp.smax)
			}
			// A pair tried before in this loop, or the pair it started from, is skipped: its
			// error is the same as then, and the current error is at most that. The others
			// (at most 8) are scored together, then accepted in order as one at a time would.
			var tried [10][2]int32
			tried[0] = [2]int32{s.a[j], s.b[j]}
			nt := 1
			for _, ca := range ac {
				for _, cb := range bc {
					if ca == s.a[j] && cb == s.b[j] || slices.Contains(tried[:nt], [2]int32{ca, cb}) {
						continue
					}
					tried[nt] = [2]int32{ca, cb}
					nt++
				}
			}
			if nt == 1 {
				continue
			}
			var ds, dm [8]float32
			for l := range ds {
				p := tried[1+min(l, nt-2)]
				ds[l], dm[l] = *D*float32(p[0]), *Dm*float32(p[1])
			}
			asymSubEvalLanes(xs, ws, &ds, &dm, nt-1, sp.nmax, &s.le, s.lq[:8*sub])
			for l := 0; l < nt-1; l++ {
				if e := s.le[l]; e < s.subErr[j] {
					total += e - s.subErr[j]
					s.subErr[j], s.a[j], s.b[j] = e, tried[1+l][0], tried[1+l][1]
					for i := 0; i < sub; i++ {
						s.codes[r+i] = s.lq[i*8+l]
					}
					improved = true
				}
			}
		}
		// (ii) super-scales by least squares for fixed integers and codes:
		// x ≈ D·(a_j·q) − Dm·b_j.
		var suu, suv, svv, sux, svx float64
		for j := 0; j < n; j++ {
			r := j * sub
			fa, fb := float64(s.a[j]), float64(s.b[j])
			for i, v := range x[r : r+sub] {
				w := float64(wt[r+i])
				u := fa * float64(s.codes[r+i])
				suu += w * u * u
				suv -= w * u * fb
				svv += w * fb * fb
				sux += w * u * float64(v)
				svx -= w * fb * float64(v)
			}
		}
		det := suu*svv - suv*suv
		if det > 0 {
			dOpt := (svv*sux - suv*svx) / det
			mOpt := (suu*svx - suv*sux) / det
			bestD, bestDm, bestE := *D, *Dm, total
			// the candidate pairs in order; with the lane kernel the first eight are scored for
			// every sub-block together, a ninth one sub-block at a time as its sum needs it, and
			// the sums then run as they would one pair at a time (index order, stopping once
			// over the best)
			var pd, pm [9]float32
			np := 0
			for _, hd := range f16Neighbours(FP32ToFP16(float32(max(dOpt, 0)))) {
				for _, hm := range f16Neighbours(FP32ToFP16(float32(max(mOpt, 0)))) {
					if !f16Finite(hd) || !f16Finite(hm) || hd&0x8000 != 0 || hm&0x8000 != 0 {
						continue
					}
					pd[np], pm[np] = fp16Table[hd], fp16Table[hm]
					np++
				}
			}
			nl := min(np, 8)
			if !kernels.HasLaneSearch() {
				nl = 0 // without the lanes, score each pair only as far as its sum needs
			}
			if nl > 0 {
				for j := 0; j < n; j++ {
					var ds, dm [8]float32
					fa, fb := float32(s.a[j]), float32(s.b[j])
					for l := range ds {
						p := min(l, nl-1)
						ds[l], dm[l] = pd[p]*fa, pm[p]*fb
					}
					r := j * sub
					asymSubEvalLanes(x[r:r+sub], wt[r:r+sub], &ds, &dm, nl, sp.nmax, &s.pe[j], s.lq[:8*sub])
				}
			}
			for p := 0; p < np; p++ {
				cd, cm := pd[p], pm[p]
				var e float64
				for j := 0; j < n && e < bestE; j++ {
					switch {
					case cd == *D && cm == *Dm:
						e += s.subErr[j] // what asymSubEval returns for the current scales
					case p < nl:
						e += s.pe[j][p]
					default:
						r := j * sub
						e += asymSubEval(x[r:r+sub], wt[r:r+sub], cd, cm, s.a[j], s.b[j], sp.nmax, s.ctry[:sub])
					}
				}
				if e < bestE {
					bestD, bestDm, bestE = cd, cm, e
				}
			}
			if bestE < total {
				*D, *Dm = bestD, bestDm
				total = 0
				for j := 0; j < n; j++ {
					r := j * sub
					s.subErr[j] = asymSubEval(x[r:r+sub], wt[r:r+sub], *D, *Dm, s.a[j], s.b[j], sp.nmax, s.codes[r:r+sub])
					total += s.subErr[j]
				}
				improved = true
			}
		}
		if !improved {
			break
		}
	}
}

// ---------------------------------------------------------------- symmetric super-blocks

type kSymSpec struct {
	t          gguf.GGMLType
	nsub, sub  int
	ls         *levelSet
	lmin, lmax int32     // signed integer sub-scale range
	tD         []float32 // level positions for the largest sub-scale
}

var (
	kSymQ3K   = kSymSpec{gguf.TypeQ3_K, 16, 16, levelsQ3_K, -32, 31, gridT(-32, 31, 4, 0.25)}
	kSymQ6K   = kSymSpec{gguf.TypeQ6_K, 16, 16, levelsQ6_K, -128, 127, gridT(-128, 127, 8, 0.5)}
	kSymIQ4XS = kSymSpec{gguf.TypeIQ4_XS, 8, 32, levelsIQ4, -32, 31, gridT(-32, 31, 4, 0.25)}
)

func symSubEval(xs, w []float32, D float32, l int32, ls *levelSet, q []int32) float64 {
	ds := D * float32(l)
	symCodes(xs, ds, ls, q)
	return symErr(xs, w, ds, ls, q)
}

func encSymK(blk []byte, x, wt, wf []float32, s *impScratch, sp *kSymSpec) {
	n, sub := sp.nsub, sp.sub
	var ext float64
	for j := 0; j < n; j++ {
		r := j * sub
		d, B := symFit(x[r:r+sub], wf[r:r+sub], sp.ls, s.codes[r:r+sub], s.tmp[:sub])
		s.fd[j], s.fB[j] = d, B
		if math.Abs(d) > math.Abs(ext) {
			ext = d
		}
	}
	var D float32
	if ext != 0 {
		D = float32(math.Inf(1)) // stays Inf (and loses to ggml's block) if every candidate overflows
		bestC := math.Inf(1)
		for _, t := range sp.tD {
			c := roundF16(float32(ext / float64(t)))
			if c == 0 || math.IsInf(float64(c), 0) {
				continue
			}
			var cost float64
			for j := 0; j < n; j++ {
				l := clampI(int32(math.RoundToEven(s.fd[j]/float64(c))), sp.lmin, sp.lmax)
				dd := float64(c)*float64(l) - s.fd[j]
				cost += s.fB[j] * dd * dd
			}
			if cost < bestC {
				bestC, D = cost, c
			}
		}
	}
	for j := 0; j < n; j++ {
		s.a[j] = 0
		if D != 0 {
			s.a[j] = clampI(int32(math.RoundToEven(s.fd[j]/float64(D))), sp.lmin, sp.lmax)
		}
	}
	refineSymK(x, wt, s, sp, &D)

	switch sp.t {
	case gguf.TypeQ3_K:
		var u [16]uint8
		for j := range u {
			u[j] = uint8(s.a[j] + 32)
		}
		packQ3Scales(blk[96:108], &u)
		putF16(blk[108:], D)
		L := s.L[:QK_K]
		for i := range L {
			L[i] = uint8(s.codes[i] + 4)
		}
		packQ3Labels(blk, L)
	case gguf.TypeQ6_K:
		for j := 0; j < 16; j++ {
			blk[192+j] = byte(int8(s.a[j]))
		}
		putF16(blk[208:], D)
		L := s.L[:QK_K]
		for i := range L {
			L[i] = uint8(s.codes[i] + 32)
		}
		packQ6KLabels(blk[0:128], blk[128:192], L)
	case gguf.TypeIQ4_XS:
		putF16(blk, D)
		var sh uint16
		for ib := 0; ib < 8; ib++ {
			u := uint8(s.a[ib] + 32)
			if ib%2 == 0 {
				blk[4+ib/2] = u & 0xf
			} else {
				blk[4+ib/2] |= (u & 0xf) << 4
			}
			sh |= uint16(u>>4) << (2 * ib)
		}
		blk[2], blk[3] = byte(sh), byte(sh>>8)
		L := s.L[:QK_K]
		for i := range L {
			L[i] = uint8(s.codes[i])
		}
		packIQ4Labels(blk[8:136], L)
	}
}

func refineSymK(x, wt []float32, s *impScratch, sp *kSymSpec, D *float32) {
	n, sub := sp.nsub, sp.sub
	total := 0.0
	for j := 0; j < n; j++ {
		r := j * sub
		s.subErr[j] = symSubEval(x[r:r+sub], wt[r:r+sub], *D, s.a[j], sp.ls, s.codes[r:r+sub])
		total += s.subErr[j]
	}
	if *D == 0 {
		return
	}
	for iter := 0; iter < 3; iter++ {
		improved := false
		for j := 0; j < n; j++ {
			r := j * sub
			xs, ws := x[r:r+sub], wt[r:r+sub]
			A, B := symStats(xs, ws, sp.ls, s.codes[r:r+sub])
			if B <= 0 {
				continue
			}
			l0, l1 := floorCeil(A/B/float64(*D), sp.lmin, sp.lmax)
			for _, cl := range [2]int32{l0, l1} {
				if cl == s.a[j] {
					continue
				}
				e := symSubEval(xs, ws, *D, cl, sp.ls, s.ctry[:sub])
				if e < s.subErr[j] {
					total += e - s.subErr[j]
					s.subErr[j], s.a[j] = e, cl
					copy(s.codes[r:r+sub], s.ctry[:sub])
					improved = true
				}
			}
		}
		var num, den float64
		for j := 0; j < n; j++ {
			r := j * sub
			A, B := symStats(x[r:r+sub], wt[r:r+sub], sp.ls, s.codes[r:r+sub])
			fl := float64(s.a[j])
			num += fl * A
			den += fl * fl * B
		}
		if den > 0 {
			bestD, bestE := *D, total
			for _, h := range f16Neighbours(FP32ToFP16(float32(num / den))) {
				if !f16Finite(h) {
					continue
				}
				c := fp16Table[h]
				var e float64
				for j := 0; j < n && e < bestE; j++ {
					r := j * sub
					e += symSubEval(x[r:r+sub], wt[r:r+sub], c, s.a[j], sp.ls, s.ctry[:sub])
				}
				if e < bestE {
					bestD, bestE = c, e
				}
			}
			if bestE < total {
				*D = bestD
				total = 0
				for j := 0; j < n; j++ {
					r := j * sub
					s.subErr[j] = symSubEval(x[r:r+sub], wt[r:r+sub], *D, s.a[j], sp.ls, s.codes[r:r+sub])
					total += s.subErr[j]
				}
				improved = true
			}
		}
		if !improved {
			break
		}
	}
}
