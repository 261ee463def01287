package quant

// GPTQOptions.Refine: after the column loop, re-fit each block's scales with the
// codes fixed, minimising the same error E = r·(H+λI)·rᵀ (r = w − q) rather than
// the block's own weighted error. Blocks are visited left to right; for a change Δ
// of a block's decoded values (r' = r − Δ) the error changes by
//
//	ΔE = Δᵀ·H_bb·Δ − 2·Δᵀ·g_b,   g = (H+λI)·r,
//
// so with g kept up to date every candidate is judged exactly. g is computed for a
// chunk of rows as one matrix product (kernels.Sgemm, n² per row); each accepted
// block updates g for the columns after it.

import (
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// gptqRefineRounds is how often a block's scale parameters and then its sub-block
// integers are revisited.
const gptqRefineRounds = 2

type gptqRefKind int

const (
	refSingle gptqRefKind = iota // one fp16 scale (and min) per block
	refKAsym                     // fp16 super-scale and super-min, integer sub-scales and sub-mins
	refKSym                      // fp16 super-scale, signed integer sub-scales
)

type gptqRefSpec struct {
	kind       gptqRefKind
	dOff, mOff int // byte offsets of the fp16 (super-)scale and (super-)min; mOff < 0: none
	ka         *kAsymSpec
	ks         *kSymSpec
}

var gptqRefSpecs = map[gguf.GGMLType]gptqRefSpec{
	gguf.TypeQ4_0:   {kind: refSingle, mOff: -1},
	gguf.TypeQ5_0:   {kind: refSingle, mOff: -1},
	gguf.TypeQ8_0:   {kind: refSingle, mOff: -1},
	gguf.TypeIQ4_NL: {kind: refSingle, mOff: -1},
	gguf.TypeQ4_1:   {kind: refSingle, mOff: 2},
	gguf.TypeQ5_1:   {kind: refSingle, mOff: 2},
	gguf.TypeQ2_K:   {kind: refKAsym, dOff: 80, mOff: 82, ka: &kAsymQ2K},
	gguf.TypeQ4_K:   {kind: refKAsym, dOff: 0, mOff: 2, ka: &kAsymQ4K},
	gguf.TypeQ5_K:   {kind: refKAsym, dOff: 0, mOff: 2, ka: &kAsymQ5K},
	gguf.TypeQ3_K:   {kind: refKSym, dOff: 108, mOff: -1, ks: &kSymQ3K},
	gguf.TypeQ6_K:   {kind: refKSym, dOff: 208, mOff: -1, ks: &kSymQ6K},
	gguf.TypeIQ4_XS: {kind: refKSym, dOff: 0, mOff: -1, ks: &kSymIQ4XS},
}

// gptqRefineWork is refineBlock's scratch (one per worker).
type gptqRefineWork struct {
	y, yc, d, hd, gb []float64 // per block: values, candidate values, Δ, H_bb·Δ, g_b
	y0               []float64 // values when the block was entered
	u, v, hu, hv     []float64 // basis vectors of the parameters being fitted and H times them
	x32              []float32 // float32 copy of the vector being multiplied by H_bb
	s, o             [gptqMaxSub]float32
	cand             []byte
}

func newGPTQRefineWork(n, bs, ts int) *gptqRefineWork {
	f := func() []float64 { return make([]float64, bs) }
	return &gptqRefineWork{y: f(), yc: f(), d: f(), hd: f(), gb: f(), y0: f(),
		u: f(), v: f(), hu: f(), hv: f(), x32: make([]float32, bs), cand: make([]byte, ts)}
}

// refineChunk refines the blocks of the chunk's m quantized rows in place, block by block
// (left to right) and, within a block, row by row: the block's part of H stays in cache for
// every row. gr holds the rows' (H+λI)·r for the codes the column loop chose; a block's g_b is
// brought up to date when the block is entered, for all rows at once, with one product of the
// changes made in the blocks before it (kept negated in ws.dl) and the matching part of H.
func (g *gptqRun) refineChunk(ws *gptqWork, r0, m int) error {
	sp, n := g.sp, g.n
	if ws.rf == nil {
		ws.rf = newGPTQRefineWork(n, sp.bs, sp.ts)
	}
	if ws.dl == nil {
		ws.dl = make([]float32, len(ws.gr))
	}
	dl := ws.dl[:m*n]
	clear(dl)
	for c0 := 0; c0 < n; c0 += sp.bs {
		if c0 > 0 {
			// g[:, c0:c0+bs] += (−Δ)[:, 0:c0] · H[0:c0, c0:c0+bs] (H is symmetric: its rows
			// c0.. give the columns)
			if err := kernels.Sgemm(m, sp.bs, c0, dl, n, g.hf[c0*n:], n, ws.gr[c0:], n, true); err != nil {
				return g.fail("%v", err)
			}
		}
		for r := 0; r < m; r++ {
			row := g.dst[(r0+r)*g.rs : (r0+r+1)*g.rs]
			g.refineBlock(ws.rf, row, ws.idx[r*n:(r+1)*n], ws.gr[r*n:(r+1)*n], dl[r*n:(r+1)*n], c0)
		}
	}
	if g.rec != nil && g.rec.grad != nil {
		copy(g.rec.grad[r0*n:(r0+m)*n], ws.gr[:m*n])
	}
	return nil
}

// refineBlock refines the block at column c0 of one quantized row in place. lev holds the level
// index of every element, grad the row's (H+λI)·r, up to date for this block; the block's
// total change of values is stored negated in ndl[c0:c0+bs].
func (g *gptqRun) refineBlock(rw *gptqRefineWork, row []byte, lev []uint8, grad, ndl []float32, c0 int) {
	sp := g.sp
	rs := gptqRefSpecs[sp.t]
	blk := row[c0/sp.bs*sp.ts : (c0/sp.bs+1)*sp.ts]
	bl := lev[c0 : c0+sp.bs]
	sp.params(blk, rw.s[:], rw.o[:])
	for i, k := range bl {
		rw.y[i] = float64(sp.value(int(k), rw.s[i/sp.sub], rw.o[i/sp.sub]))
		rw.gb[i] = float64(grad[c0+i])
	}
	copy(rw.y0, rw.y)
	for round := 0; round < gptqRefineRounds; round++ {
		changed := g.refineScales(rw, &rs, blk, bl, c0)
		if rs.kind != refSingle {
			for k := 0; k < sp.bs/sp.sub; k++ {
				changed = g.refineSub(rw, &rs, blk, bl, c0, k) || changed
			}
		}
		if !changed {
			break
		}
	}
	for i := range rw.y {
		ndl[c0+i] = float32(rw.y0[i] - rw.y[i])
	}
}

// subBlockSums returns, for every column c of the n×n matrix hf, the sums of its entries over
// each sub-block (of sub columns) of the bs-column block that holds c: out[c·(bs/sub) + s]. A
// parameter that shifts every value of a sub-block by the same amount (a K-quant sub-block's
// min, a Q4_1 block's min) changes H·Δ by those sums times the shift, so Refine needs no
// product with H for it.
func subBlockSums(hf []float32, n, bs, sub int) []float64 {
	ns := bs / sub
	out := make([]float64, n*ns)
	for c := 0; c < n; c++ {
		c0 := c / bs * bs
		row := hf[c*n+c0 : c*n+c0+bs]
		for s := range ns {
			var t float64
			for _, v := range row[s*sub : (s+1)*sub] {
				t += float64(v)
			}
			out[c*ns+s] = t
		}
	}
	return out
}

// hMul sets out[i] = Σ_{j in [lo,hi)} H[c0+i][c0+j]·x[j] for the rows i in
// [rlo, rhi), with float32 products and sums (the AVX2 dot kernel): x holds small
// integers times levels or differences of float32 values, and the results only
// rank candidates or are checked with a margin.
func (g *gptqRun) hMul(rw *gptqRefineWork, out, x []float64, c0, rlo, rhi, lo, hi int) {
	n, hf := g.n, g.hf
	for j := lo; j < hi; j++ {
		rw.x32[j] = float32(x[j])
	}
	xs := rw.x32[lo:hi]
	for i := rlo; i < rhi; i++ {
		out[i] = float64(kernels.DotF32(hf[(c0+i)*n+c0+lo:(c0+i)*n+c0+hi], xs))
	}
}

// tryCandidate decodes the candidate block in rw.cand for elements [lo, hi),
// computes the exact error change against the current values and, when it is
// clearly negative, accepts it: copies the candidate header into blk and updates
// the values and g_b. It reports whether it accepted. With hdKnown the caller has already put
// H_bb·Δ for the rows [lo, hi) into rw.hd (from earlier products); otherwise it is computed
// here.
func (g *gptqRun) tryCandidate(rw *gptqRefineWork, blk []byte, bl []uint8, c0, lo, hi int, hdKnown bool) bool {
	sp := g.sp
	sp.params(rw.cand, rw.s[:], rw.o[:])
	for i := range rw.d {
		rw.d[i] = 0
	}
	var lin, mag float64
	for i := lo; i < hi; i++ {
		y := sp.value(int(bl[i]), rw.s[i/sp.sub], rw.o[i/sp.sub])
		if math.IsNaN(float64(y)) || math.IsInf(float64(y), 0) {
			return false
		}
		rw.yc[i] = float64(y)
		rw.d[i] = rw.yc[i] - rw.y[i]
		lin += rw.d[i] * rw.gb[i]
		mag += math.Abs(rw.d[i] * rw.gb[i])
	}
	if !hdKnown {
		g.hMul(rw, rw.hd, rw.d, c0, lo, hi, lo, hi)
	}
	var quad float64
	for i := lo; i < hi; i++ {
		quad += rw.d[i] * rw.hd[i]
	}
	// g is a float32 product: demand a margin.
	if !(quad-2*lin < -1e-4*mag) {
		return false
	}
	copy(blk, rw.cand)
	copy(rw.y[lo:hi], rw.yc[lo:hi])
	g.hMul(rw, rw.hd, rw.d, c0, 0, lo, lo, hi)
	g.hMul(rw, rw.hd, rw.d, c0, hi, len(rw.hd), lo, hi)
	for i := range rw.gb {
		rw.gb[i] -= rw.hd[i]
	}
	return true
}

// f16Around returns the current fp16 value cur and the fp16 neighbours of target
// (finite, and non-negative when nonNeg).
func f16Around(cur uint16, target float64, nonNeg bool) []uint16 {
	out := []uint16{cur}
	for _, h := range f16Neighbours(FP32ToFP16(float32(target))) {
		if !f16Finite(h) || (nonNeg && h&0x8000 != 0 && h&0x7fff != 0) || h == cur {
			continue
		}
		out = append(out, h)
	}
	return out
}

func getU16(b []byte) uint16    { return uint16(b[0]) | uint16(b[1])<<8 }
func putU16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }

// refineScales re-fits the block's fp16 scale (and min) or super-scale(s).
func (g *gptqRun) refineScales(rw *gptqRefineWork, rs *gptqRefSpec, blk []byte, bl []uint8, c0 int) bool {
	sp := g.sp
	bs := sp.bs
	sp.params(blk, rw.s[:], rw.o[:])
	two := rs.mOff >= 0
	for i, k := range bl {
		l := float64(sp.lev[k])
		sub := i / sp.sub
		switch rs.kind {
		case refSingle:
			rw.u[i], rw.v[i] = l, 1
		case refKAsym:
			a, b, _, _ := kAsymInts(blk, sub, sp.t)
			rw.u[i], rw.v[i] = float64(a)*l, -float64(b)
		case refKSym:
			li, _ := kSymInt(blk, sub, sp.t)
			rw.u[i] = float64(li) * l
		}
	}
	g.hMul(rw, rw.hu, rw.u, c0, 0, bs, 0, bs)
	var muu, muv, mvv, cu, cv float64
	for i := 0; i < bs; i++ {
		muu += rw.u[i] * rw.hu[i]
		cu += rw.u[i] * rw.gb[i]
	}
	if two {
		// v is constant on each sub-block (−b for a K-quant min, 1 for a block min): H·v
		// from the sub-block sums of H.
		ns := bs / sp.sub
		for i := 0; i < bs; i++ {
			hs := g.hsub[(c0+i)*ns : (c0+i+1)*ns]
			var t float64
			for k := range ns {
				t += rw.v[k*sp.sub] * hs[k]
			}
			rw.hv[i] = t
		}
		for i := 0; i < bs; i++ {
			muv += rw.u[i] * rw.hv[i]
			mvv += rw.v[i] * rw.hv[i]
			cv += rw.v[i] * rw.gb[i]
		}
	}
	var du, dv float64
	if two {
		det := muu*mvv - muv*muv
		if !(det > 0) {
			return false
		}
		du, dv = (mvv*cu-muv*cv)/det, (muu*cv-muv*cu)/det
	} else {
		if !(muu > 0) {
			return false
		}
		du = cu / muu
	}
	hd := getU16(blk[rs.dOff:])
	nonNeg := rs.kind == refKAsym || (rs.kind == refSingle && two)
	dc := f16Around(hd, float64(fp16Table[hd])+du, nonNeg)
	mc := []uint16{0}
	var hm uint16
	if two {
		hm = getU16(blk[rs.mOff:])
		mc = f16Around(hm, float64(fp16Table[hm])+dv, rs.kind == refKAsym)
	}
	// Pick the candidate with the lowest model error change, then check it exactly.
	best, bd, bm := 0.0, hd, hm
	for _, cd := range dc {
		for _, cm := range mc {
			if !two {
				cm = hm
			}
			if cd == hd && cm == hm {
				continue
			}
			x := float64(fp16Table[cd]) - float64(fp16Table[hd])
			y := float64(fp16Table[cm]) - float64(fp16Table[hm])
			if !two {
				y = 0
			}
			if e := x*x*muu + 2*x*y*muv + y*y*mvv - 2*(x*cu+y*cv); e < best {
				best, bd, bm = e, cd, cm
			}
		}
	}
	if bd == hd && bm == hm {
		return false
	}
	copy(rw.cand, blk)
	putU16(rw.cand[rs.dOff:], bd)
	var y float64
	if two {
		putU16(rw.cand[rs.mOff:], bm)
		y = float64(fp16Table[bm]) - float64(fp16Table[hm])
	}
	// The candidate moves the values by x·u + y·v, so H_bb·Δ is x·(H·u) + y·(H·v), both at
	// hand: no third product with H_bb.
	x := float64(fp16Table[bd]) - float64(fp16Table[hd])
	for i := 0; i < bs; i++ {
		rw.hd[i] = x * rw.hu[i]
		if two {
			rw.hd[i] += y * rw.hv[i]
		}
	}
	return g.tryCandidate(rw, blk, bl, c0, 0, bs, true)
}

// refineSub re-chooses the integer scale (and min) of sub-block k.
func (g *gptqRun) refineSub(rw *gptqRefineWork, rs *gptqRefSpec, blk []byte, bl []uint8, c0, k int) bool {
	sp := g.sp
	lo, hi := k*sp.sub, (k+1)*sp.sub
	var D, Dm float64
	var a, b int32
	var lmin, lmax int32
	two := rs.kind == refKAsym
	if two {
		var fD, fDm float32
		a, b, fD, fDm = kAsymInts(blk, k, sp.t)
		D, Dm = float64(fD), float64(fDm)
		lmin, lmax = 0, rs.ka.smax
	} else {
		var fD float32
		a, fD = kSymInt(blk, k, sp.t)
		D = float64(fD)
		lmin, lmax = rs.ks.lmin, rs.ks.lmax
	}
	if D == 0 {
		return false
	}
	for i := range rw.u {
		rw.u[i], rw.v[i] = 0, 0
	}
	for i := lo; i < hi; i++ {
		rw.u[i] = D * float64(sp.lev[bl[i]])
		rw.v[i] = -Dm
	}
	g.hMul(rw, rw.hu, rw.u, c0, lo, hi, lo, hi)
	var muu, muv, mvv, cu, cv float64
	for i := lo; i < hi; i++ {
		muu += rw.u[i] * rw.hu[i]
		cu += rw.u[i] * rw.gb[i]
	}
	if two && Dm > 0 {
		ns := sp.bs / sp.sub // v is −Dm on the sub-block: H·v from its sums
		for i := lo; i < hi; i++ {
			rw.hv[i] = -Dm * g.hsub[(c0+i)*ns+k]
		}
		for i := lo; i < hi; i++ {
			muv += rw.u[i] * rw.hv[i]
			mvv += rw.v[i] * rw.hv[i]
			cv += rw.v[i] * rw.gb[i]
		}
	}
	var da, db float64
	if mvv > 0 {
		det := muu*mvv - muv*muv
		if !(det > 0) {
			return false
		}
		da, db = (mvv*cu-muv*cv)/det, (muu*cv-muv*cu)/det
	} else if muu > 0 {
		da = cu / muu
	} else {
		return false
	}
	a0, a1 := floorCeil(float64(a)+da, lmin, lmax)
	ac := [3]int32{a, a0, a1}
	bc := [3]int32{b, b, b}
	if mvv > 0 {
		b0, b1 := floorCeil(float64(b)+db, 0, lmax)
		bc = [3]int32{b, b0, b1}
	}
	best, ba, bb := 0.0, a, b
	for _, ca := range ac {
		for _, cb := range bc {
			if ca == a && cb == b {
				continue
			}
			x, y := float64(ca-a), float64(cb-b)
			if e := x*x*muu + 2*x*y*muv + y*y*mvv - 2*(x*cu+y*cv); e < best {
				best, ba, bb = e, ca, cb
			}
		}
	}
	if ba == a && bb == b {
		return false
	}
	copy(rw.cand, blk)
	if two {
		setKAsymInts(rw.cand, k, sp.t, ba, bb)
	} else {
		setKSymInt(rw.cand, k, sp.t, ba)
	}
	return g.tryCandidate(rw, blk, bl, c0, lo, hi, false)
}
