package quant

// QuantizeGPTQ: error-compensating quantization (GPTQ / OBQ) inside ggml's block
// formats. See docs/quantization.md, "Error-compensating search (GPTQ in ggml
// blocks)", for the algorithm and its derivation.

import (
	"fmt"
	"math"
	"slices"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// GPTQOptions controls QuantizeGPTQ. The zero value (or nil) means the defaults.
type GPTQOptions struct {
	// Damp is the relative damping: λ = Damp·mean(diag H) is added to H's diagonal
	// before it is factorised (0 means 0.01, GPTQ's default). If the factorisation
	// still fails, λ is multiplied by 10 up to three times before giving up.
	Damp float64
	// BlockSize is the number of columns whose error feedback is applied lazily, as
	// one matrix product, to the columns after them (0 means 128). It must be a
	// multiple of 32 and either divide the type's block size or be a multiple of it;
	// values above the row length count as the row length. The result depends on it
	// only through float32 rounding.
	BlockSize int
	// Threads is the number of goroutines (<= 0: runtime.GOMAXPROCS). The output
	// does not depend on it.
	Threads int
	// TensorName is used in error messages.
	TensorName string
	// Refine re-fits every block's scales after the column loop, with the codes
	// fixed, to lower the same H-weighted error further (each change is kept only
	// where it does). It roughly doubles the cost of the error feedback and keeps
	// an extra n×n float32 copy of H with the cached factorisation.
	Refine bool
	// Importance optionally replaces the per-column weights the block scales are
	// fitted with (one non-negative value per column, like Options.Importance).
	// nil means diag(H) + λ.
	Importance []float32
	// ActOrder processes the columns in descending order of H_jj (GPTQ's "act order")
	// instead of left to right: the columns that matter most are rounded first, while the
	// error of each can still be compensated by the most others. A block's scales are
	// fitted when its first column in that order is reached (from the weights as updated so
	// far), a K-quant sub-block's scale likewise; the ggml layout is unchanged. In the
	// natural order (all H_jj equal) the bytes are those of the left-to-right search.
	ActOrder bool
}

func (o *GPTQOptions) name() string {
	if o == nil || o.TensorName == "" {
		return "(unnamed)"
	}
	return o.TensorName
}

// gptqDefaultDamp and gptqDefaultBlock are GPTQ's defaults (percdamp, blocksize).
const (
	gptqDefaultDamp  = 0.01
	gptqDefaultBlock = 128
	// gptqChunkRows is the rows one worker processes together (a multiple of Sgemm's 12-row
	// tile, so the rows of a work item fall in the same kernel tiles whatever it is): every
	// chunk packs Ṽ's and H's panels for its matrix products again, so more rows pack less
	// per row (48 → 192: the 1.01 B calibrated conversion 9 % faster, the same bytes), for
	// about 17·n bytes of scratch per row (w, gr, rn, dl in float32, idx): 15 MB per worker
	// at n = 4608.
	gptqChunkRows = 192
)

// gptqRecord receives diagnostics of one run (tests use it).
type gptqRecord struct {
	used []float32 // nrows×ncols: the value each column was rounded to in the loop
	loss []float64 // nrows: (w−q)·(H+λI)·(w−q)ᵀ accumulated by the column loop
	grad []float32 // nrows×ncols, optional: Refine's (H+λI)·(w−q) of each block as it was entered
}

// QuantizeGPTQ quantizes nrows×ncols float32 weights (row-major; each row is one
// output channel, each column one input) into t's ggml block format, minimising
// the output error Σ_rows (w−q)·H·(w−q)ᵀ for the input Gram matrix h (ncols ×
// ncols), instead of each block's own error as Quantize does. dst must be exactly
// nrows·RowSize(t, ncols) bytes and holds standard ggml blocks afterwards.
//
// Columns are processed left to right. When a column starts a block, that block's
// scales (and mins) are fitted by ModeImproved's block encoder to the current,
// error-updated weights, weighted by diag(H)+λ (or opts.Importance); each column is
// then rounded to the nearest value those scales can represent, and its rounding
// error is propagated to the later columns through the Cholesky factor of H, as
// GPTQ does. Rows are independent and processed in parallel; the factorisation is
// cached in h and shared.
//
// Supported types: GPTQTypes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K…Q6_K, IQ4_NL,
// IQ4_XS). It returns an error naming the tensor for an unsupported type, bad
// lengths, a row length that is not a multiple of the block size, a Hessian of the
// wrong size or one that cannot be factorised, bad options, NaN/Inf weights (with
// row and column), and block scales that overflow fp16.
func QuantizeGPTQ(t gguf.GGMLType, dst []byte, src []float32, nrows, ncols int, h *Hessian, opts *GPTQOptions) error {
	return quantizeGPTQ(t, dst, src, nrows, ncols, h, opts, nil)
}

func quantizeGPTQ(t gguf.GGMLType, dst []byte, src []float32, nrows, ncols int, h *Hessian, opts *GPTQOptions, rec *gptqRecord) error {
	name := opts.name()
	fail := func(format string, a ...any) error {
		return fmt.Errorf("quant: GPTQ: tensor %q (%v): %s", name, t, fmt.Sprintf(format, a...))
	}
	sp := gptqSpecs[t]
	if sp == nil {
		return fail("type is not supported (supported: %v)", GPTQTypes())
	}
	rs, err := rowSize(t, ncols)
	if err != nil {
		return fail("%v", err)
	}
	if nrows < 0 || (nrows > 0 && ncols > math.MaxInt/nrows) || len(src) != nrows*ncols {
		return fail("have %d values, want %d rows × %d columns", len(src), nrows, ncols)
	}
	if len(dst) != nrows*rs {
		return fail("destination has %d bytes, want %d (%d rows × %d)", len(dst), nrows*rs, nrows, rs)
	}
	if h == nil || h.n != ncols {
		n := 0
		if h != nil {
			n = h.n
		}
		return fail("Hessian has %d columns, want %d", n, ncols)
	}
	damp, block, threads := gptqDefaultDamp, gptqDefaultBlock, 0
	var imp []float32
	var refine, actOrder bool
	if opts != nil {
		if opts.Damp != 0 {
			damp = opts.Damp
		}
		if opts.BlockSize != 0 {
			block = opts.BlockSize
		}
		threads, imp, refine, actOrder = opts.Threads, opts.Importance, opts.Refine, opts.ActOrder
	}
	if !(damp > 0) || damp > 1e6 {
		return fail("damping %v must be positive and at most 1e6", damp)
	}
	if block < 32 || block%32 != 0 || (block%sp.bs != 0 && sp.bs%block != 0) {
		return fail("lazy block size %d must be a multiple of 32 that divides or is a multiple of the block size %d", block, sp.bs)
	}
	block = min(block, ncols) // ncols is a multiple of the block size and of 32
	if imp != nil {
		if _, err := checkImportance(imp, ncols, name); err != nil {
			return err
		}
	}
	if nrows == 0 {
		return nil
	}
	var f *gptqFactor
	var perm []int // perm[p]: the column processed p-th (nil: left to right)
	var hf []float32
	if actOrder {
		a, err := h.actOrder(damp, refine)
		if err != nil {
			return fail("%v", err)
		}
		f, perm, hf = a.fac, a.perm, a.hf
	} else {
		if f, err = h.factor(damp, refine); err != nil {
			return fail("%v", err)
		}
		hf = f.hf
	}
	// nat[p]: the natural column of position p; diagNat: diag(H)+λ in the natural order
	nat := perm
	if nat == nil {
		nat = make([]int, ncols)
		for i := range nat {
			nat[i] = i
		}
	}
	diagNat := make([]float64, ncols)
	pos := make([]int, ncols)
	for p, c := range nat {
		diagNat[c] = f.diag[p]
		pos[c] = p
	}
	// Fitting weights: the importance (or diag(H)+λ) scaled by a power of two that
	// brings the largest to [1, 2), as ModeImproved does; fitWeights replaces
	// all-zero 16-element chunks by ones.
	wt := make([]float32, ncols)
	var mx float64
	for i := range wt {
		if imp != nil {
			mx = max(mx, float64(imp[i]))
		} else {
			mx = max(mx, diagNat[i])
		}
	}
	sc := 1.0
	if mx > 0 {
		_, e := math.Frexp(mx)
		sc = math.Ldexp(1, 1-e)
	}
	for i := range wt {
		if imp != nil {
			wt[i] = float32(float64(imp[i]) * sc)
		} else {
			wt[i] = float32(diagNat[i] * sc)
		}
	}
	wf := make([]float32, ncols)
	for b := 0; b < ncols; b += sp.bs {
		fitWeights(wf[b:b+sp.bs], wt[b:b+sp.bs])
	}

	// Row-major copies of Ṽ's diagonal blocks, for the updates inside a batch.
	vdb := make([]float32, ncols*block)
	for b0 := 0; b0 < ncols; b0 += block {
		b1 := min(ncols, b0+block)
		for k := b0 + 1; k < b1; k++ {
			for j, v := range f.vc[k*ncols+b0 : k*ncols+k] {
				vdb[(b0+j)*block+k-b0] = v
			}
		}
	}
	g := &gptqRun{sp: sp, f: f, src: src, dst: dst, n: ncols, rs: rs, block: block, vdb: vdb,
		wt: wt, wf: wf, rec: rec, refine: refine, fail: fail, nat: nat, pos: pos, hf: hf, permuted: perm != nil,
		ref: rowQuantizer(t, ModeReference, true, 1), deq: dequantFunc(t)}
	if f.coupled && gptqQuickFitTypes[t] {
		// Blocks with a dead column keep the full fit: ggml's search gives a column of
		// almost no weight almost no say, and may clip it far beyond the live columns' error.
		g.quickFit = make([]bool, ncols/sp.bs)
		for b := range g.quickFit {
			g.quickFit[b] = !slices.ContainsFunc(pos[b*sp.bs:(b+1)*sp.bs], func(p int) bool { return f.dead[p] })
		}
	}
	if refine {
		g.hsub = subBlockSums(hf, ncols, sp.bs, sp.sub)
	}
	return g.parallel(nrows, threads)
}

// gptqRun holds what every worker shares.
type gptqRun struct {
	sp     *gptqSpec
	f      *gptqFactor
	src    []float32
	dst    []byte
	n, rs  int
	block  int
	wt, wf []float32
	vdb    []float32 // n×block: Ṽ[j][k] for k in j's lazy block, row-major (vdb[j·block + k−b0])
	rec    *gptqRecord
	refine bool
	fail   func(string, ...any) error
	nat    []int     // nat[p]: the natural column processed at position p (f is in this order)
	pos    []int     // pos[c]: the position of natural column c
	hf     []float32 // H + λI in the natural order, for Refine
	hsub   []float64 // Refine: hsub[c·(bs/sub) + s] = Σ of hf[c][j] over sub-block s of c's block
	// permuted is false for the left-to-right order (nat[p] = p)
	permuted bool
	ref      rowFunc
	deq      func([]float32, []byte)
	// quickFit[b]: block b is fitted with ggml's search alone (see gptqQuickFitTypes); nil
	// for none
	quickFit []bool
}

// gptqQuickFitTypes are the types whose blocks fitBlock fits with ggml's imatrix search alone
// when the error is fed back (H has correlations) and the block has no dead column: for them
// the improved encoder's better start made no difference to the error the column loop and
// Refine end at, on the Gram matrices of the three trained models (between 3.3 % lower and
// 0.8 % higher; docs/quantization.md, "The block fit under feedback"), and it took about 40 %
// of the search's time. Without feedback (H diagonal) the start is the result, so the
// improved encoder runs as for every other type.
var gptqQuickFitTypes = map[gguf.GGMLType]bool{
	gguf.TypeQ4_0: true, gguf.TypeQ2_K: true, gguf.TypeQ3_K: true, gguf.TypeQ4_K: true,
}

// gptqWork is one worker's scratch.
type gptqWork struct {
	w    []float32 // rows×n working weights w', in processing order
	res  []float32 // rows×block residuals w − q of the current lazy block
	idx  []uint8   // rows×n level indices (sp.lev) of the rounded values, natural order
	s, o []float32 // rows×(n/sub) parameters of every sub-block
	done []uint8   // rows×(n/sub): 1 once a sub-block's parameters are set, 2 for a fitted block's
	x    []float32 // one block's weights gathered in the natural order
	sc   scratch
	gr   []float32       // rows×n (H+λI)·r for Refine, allocated on first use
	rn   []float32       // rows×n r in the natural order (Refine after an act-order loop)
	rf   *gptqRefineWork // refineBlock's scratch, allocated on first use
	dl   []float32       // rows×n: −(Refine's change of each value), allocated on first use
}

func (g *gptqRun) parallel(nrows, threads int) error {
	m := min(gptqChunkRows, nrows)
	newWork := func() *gptqWork {
		ns := g.n / g.sp.sub
		return &gptqWork{
			w:    make([]float32, m*g.n),
			res:  make([]float32, m*g.block),
			idx:  make([]uint8, m*g.n),
			s:    make([]float32, m*ns),
			o:    make([]float32, m*ns),
			done: make([]uint8, m*ns),
			x:    make([]float32, g.sp.bs),
		}
	}
	return parallelChunks(nrows, gptqChunkRows, threads, newWork, func(r0, r1 int, ws *gptqWork) error { return g.chunk(ws, r0, r1) })
}

// blockFinite reports whether every fp16 field of one block is finite.
func blockFinite(t gguf.GGMLType, blk []byte) bool {
	for _, o := range f16Fields[t] {
		if !f16Finite(uint16(blk[o]) | uint16(blk[o+1])<<8) {
			return false
		}
	}
	return true
}

// chunk quantizes rows r0..r1-1. The columns are processed in the order g.nat (position p
// holds natural column g.nat[p]; ws.w, the residuals and the factorisation are in that
// order); level indices, block parameters and the output are in the natural order.
func (g *gptqRun) chunk(ws *gptqWork, r0, r1 int) error {
	sp, f, n, B := g.sp, g.f, g.n, g.block
	m := r1 - r0
	nat := g.nat
	ns, nsb := n/sp.sub, sp.bs/sp.sub // sub-blocks per row and per block
	for r := 0; r < m; r++ {
		row := g.src[(r0+r)*n : (r0+r+1)*n]
		for c, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return g.fail("row %d, column %d: value %v is not finite", r0+r, c, v)
			}
		}
		w := ws.w[r*n : (r+1)*n]
		for p, c := range nat {
			w[p] = row[c]
		}
	}
	clear(ws.done[:m*ns])
	var loss []float64
	if g.rec != nil {
		loss = g.rec.loss
	}
	for b0 := 0; b0 < n; b0 += B {
		b1 := min(n, b0+B)
		for r := 0; r < m; r++ {
			w := ws.w[r*n : (r+1)*n]
			orig := g.src[(r0+r)*n : (r0+r+1)*n]
			res := ws.res[r*B : r*B+B]
			lev := ws.idx[r*n : (r+1)*n]
			sAll, oAll := ws.s[r*ns:(r+1)*ns], ws.o[r*ns:(r+1)*ns]
			done := ws.done[r*ns : (r+1)*ns]
			var rowLoss float64
			for j := b0; j < b1; j++ {
				c := nat[j]
				bi, sb := c/sp.bs, c/sp.sub
				s, o := sAll[bi*nsb:(bi+1)*nsb], oAll[bi*nsb:(bi+1)*nsb]
				switch {
				case done[bi*nsb]&2 == 0: // the block's first column in this order: fit it
					x := g.gather(ws.x[:sp.bs], w, bi*sp.bs)
					if err := g.fitBlock(ws, r0+r, bi*sp.bs, x, s, o); err != nil {
						return err
					}
					done[bi*nsb] |= 2
					done[sb] |= 1
				case sp.resub != nil && done[sb]&1 == 0: // a K-quant sub-block's first column
					blk := g.dst[(r0+r)*g.rs+bi*sp.ts : (r0+r)*g.rs+(bi+1)*sp.ts]
					x := g.gather(ws.x[:sp.sub], w, sb*sp.sub)
					sp.resub(blk, (c%sp.bs)/sp.sub, x, g.wt[sb*sp.sub:(sb+1)*sp.sub], &ws.sc.imp)
					sp.params(blk, s, o)
					done[sb] |= 1
				}
				if v := float64(w[j]); math.IsNaN(v) || math.IsInf(v, 0) {
					return g.fail("row %d, column %d: the error feedback overflowed float32 (weights or Hessian too extreme)", r0+r, c)
				}
				k := (c % sp.bs) / sp.sub
				idx, y := sp.nearest(w[j], s[k], o[k])
				lev[c] = uint8(idx)
				rj := orig[c] - y
				res[j-b0] = rj
				e := float64(w[j]-y) * f.vdiag[j]
				rowLoss += e * e
				if g.refine {
					w[j] = rj // w'_j is not needed any more: keep r for Refine's gradient
				}
				if g.rec != nil {
					g.rec.used[(r0+r)*n+c] = y
				}
				if rj != 0 && j+1 < b1 {
					kernels.AxpyFMA(w[j+1:b1], rj, g.vdb[j*B+j+1-b0:j*B+b1-b0])
				}
			}
			if loss != nil {
				loss[r0+r] += rowLoss
			}
		}
		// Lazy update of the columns after the batch: W'[:, b1:] += R·Ṽ[b0:b1, b1:],
		// with Ṽ stored column-major (the B operand of C += A·Bᵀ).
		if b1 < n {
			if err := kernels.Sgemm(m, n-b1, b1-b0, ws.res, B, f.vc[b1*n+b0:], n, ws.w[b1:], n, true); err != nil {
				return g.fail("%v", err)
			}
		}
	}
	lab := ws.sc.Lu[:sp.bs]
	for r := 0; r < m; r++ {
		row := g.dst[(r0+r)*g.rs : (r0+r+1)*g.rs]
		lev := ws.idx[r*n : (r+1)*n]
		for b := 0; b < n/sp.bs; b++ {
			for i, k := range lev[b*sp.bs : (b+1)*sp.bs] {
				lab[i] = sp.lab[k]
			}
			sp.pack(row[b*sp.ts:(b+1)*sp.ts], lab)
		}
	}
	if g.refine {
		// Gradient rows (H+λI)·r for the whole chunk, r left in ws.w by the loop (in the
		// processing order: brought back to the natural one).
		if ws.gr == nil {
			ws.gr = make([]float32, len(ws.w))
		}
		rn := ws.w
		if g.permuted {
			if ws.rn == nil {
				ws.rn = make([]float32, len(ws.w))
			}
			rn = ws.rn
			for r := 0; r < m; r++ {
				src, dst := ws.w[r*n:(r+1)*n], rn[r*n:(r+1)*n]
				for p, c := range nat {
					dst[c] = src[p]
				}
			}
		}
		if err := kernels.Sgemm(m, n, n, rn, n, g.hf, n, ws.gr, n, false); err != nil {
			return g.fail("%v", err)
		}
		return g.refineChunk(ws, r0, m)
	}
	return nil
}

// gather copies the current working weights of natural columns [c0, c0+len(x)) (held at
// their processing positions in w) into x and returns it.
func (g *gptqRun) gather(x, w []float32, c0 int) []float32 {
	if !g.permuted {
		return w[c0 : c0+len(x)]
	}
	for i := range x {
		x[i] = w[g.pos[c0+i]]
	}
	return x
}

// fitBlock fits the scales of the block starting at column j of row r to the
// current weights x and decodes its per-sub-block parameters into s, o. Like
// ModeImproved it keeps whichever of the improved encoder's block and ggml's
// (imatrix) block has the lower weighted error on x; the improved search gives up
// on blocks whose every scale candidate rounds to zero or Inf in fp16, and ggml's
// algorithm then still handles tiny values.
func (g *gptqRun) fitBlock(ws *gptqWork, r, j int, x []float32, s, o []float32) error {
	sp := g.sp
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return g.fail("row %d, column %d: the error feedback overflowed float32 (weights or Hessian too extreme)", r, j+i)
		}
	}
	bi := j / sp.bs
	blk := g.dst[r*g.rs+bi*sp.ts : r*g.rs+(bi+1)*sp.ts]
	wt := g.wt[j : j+sp.bs]
	is := &ws.sc.imp
	if g.quickFit != nil && g.quickFit[bi] {
		g.ref(blk, x, wt, &ws.sc)
		if blockFinite(sp.t, blk) {
			sp.params(blk, s, o)
			return nil
		}
	}
	sp.enc(blk, x, wt, g.wf[j:j+sp.bs], is)
	gg := is.blk[:sp.ts]
	g.ref(gg, x, wt, &ws.sc)
	okE, okG := blockFinite(sp.t, blk), blockFinite(sp.t, gg)
	switch {
	case okE && okG:
		g.deq(is.y1[:sp.bs], blk)
		g.deq(is.y2[:sp.bs], gg)
		if weightedSSE(x, is.y2[:sp.bs], wt) < weightedSSE(x, is.y1[:sp.bs], wt) {
			copy(blk, gg)
		}
	case okG:
		copy(blk, gg)
	case !okE:
		return g.fail("row %d: block %d (columns %d..%d): scale is not finite (fp16 overflow: values too large for %v)",
			r, bi, j, j+sp.bs-1, sp.t)
	}
	sp.params(blk, s, o)
	return nil
}
