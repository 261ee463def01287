package infer

import (
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// tokenTile is how many activation rows one weight row is multiplied with before moving on, so
// that a tile of weight rows stays in L1 while the activations stream from L2.
const tokenTile = 32

// gemmTile is the number of weight rows dequantized at once on the GEMM path.
const gemmTile = 64

// PackedWeightBytes is the memory Options.PackWeights takes for a BF16/F16 weight of ggml shape
// {in, out, nmat...}: every tile of gemmTile rows packed by kernels.PackHalf.
func PackedWeightBytes(shape []int64) int64 {
	if len(shape) < 2 || shape[0] <= 0 || shape[1] <= 0 {
		return 0
	}
	in, out, nmat := int(shape[0]), int(shape[1]), int64(1)
	for _, d := range shape[2:] {
		nmat *= d
	}
	full := int64(out / gemmTile)
	per := full * kernels.PackedHalfBytes(gemmTile, in)
	if r := out % gemmTile; r > 0 {
		per += kernels.PackedHalfBytes(r, in)
	}
	return nmat * per
}

// linear applies weight l (matrix 0) to T rows of x, writing T rows of l.out into y, and reports
// the input to the observer.
func (s *Session) linear(l *linear, x []float32, T int, y []float32) {
	if s.obs != nil {
		s.obs.Linear(l.name, -1, x[:T*l.in], T, l.in)
	}
	s.matmul(l, 0, x, T, y)
}

func (s *Session) actBuf(n int) []byte {
	if cap(s.act) < n {
		s.act = f32Bytes(make([]float32, (n+3)/4))
	}
	return s.act[:n]
}

// gemmMode is how a product over a batch of rows is computed.
type gemmMode int

const (
	gemmNone   gemmMode = iota // one dot product per (row, token): ggml's vec_dot kernels
	gemmLanes8                 // f32 GEMM in llama.cpp's tinyBLAS order (float weights, >= 2 rows)
	gemmFast                   // packed f32 GEMM (FullPrecision, BatchGEMM)
)

// gemmFor chooses how a product of weight l over T rows is computed.
//
// llama.cpp's CPU backend hands a float (f32, f16, bf16) weight matrix multiplied by two or
// more activation rows to llamafile's tinyBLAS, whose per-element order (one 8-lane FMA
// accumulator, quant/kernels.SgemmLanes8) differs from the vec_dot kernels used for a single
// row; we do the same, so prompt logits match llama.cpp's (MoE expert stacks go through
// ggml's mul_mat_id, which keeps vec_dot). Quantized weights keep ggml's integer dot
// products: tinyBLAS's quantized kernels and the repack kernels have the same per-element
// order for one row as for many. FullPrecision (calibration) and BatchGEMM use the packed
// GEMM for speed instead. A negative gemmMin (tests) forces the dot path.
func (s *Session) gemmFor(l *linear, T int) gemmMode {
	o := &s.m.opts
	if o.FullPrecision {
		return gemmFast
	}
	g := o.gemmMin
	if g == 0 {
		g = defaultGemmMin
	}
	if g < 0 || T < 2 {
		return gemmNone
	}
	switch l.t {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		if l.nmat == 1 && l.in%8 == 0 && l.out%4 == 0 { // llamafile_sgemm's conditions
			return gemmLanes8
		}
		if l.nmat > 1 && !o.BatchGEMM {
			return gemmNone
		}
	}
	if o.BatchGEMM && T >= g {
		return gemmFast
	}
	return gemmNone
}

// matmul computes y[t][r] = W_e[r] · x[t] for t < T, r < l.out.
//
// Few rows (decode): every activation row is converted once to the weight type's vec_dot type
// (q8_0, q8_K, f16, ...) and each weight row is dotted with it by the integer/float kernels, as
// ggml does. Rows are split across the worker pool in chunks of multiples of 16.
//
// Many rows (prompt batches, see gemmFor): the activation rows are rounded to the values their vec_dot
// type represents (unless FullPrecision), weight tiles are dequantized to f32 and multiplied by
// the GEMM kernel. Both paths compute the same products; they differ only in float32
// summation order.
func (s *Session) matmul(l *linear, e int, x []float32, T int, y []float32) {
	if mode := s.gemmFor(l, T); mode != gemmNone {
		s.matmulGemm(l, e, x, T, y, mode == gemmLanes8)
		return
	}
	m := s.m
	ab := l.k.act.rowBytes(l.in)
	a := s.actBuf(T * ab)
	s.prepActs(l, a, x, T)
	m.pool.run(l.out, m.pool.chunkFor(l.out, 16), func(w, lo, hi int) {
		s.matmulRows(l, e, a, T, y, w, lo, hi)
	})
}

// prepActs converts T rows of x to l's activation type into a (T rows of
// l.k.act.rowBytes(l.in) bytes).
func (s *Session) prepActs(l *linear, a []byte, x []float32, T int) {
	n, act := l.in, l.k.act
	ab := act.rowBytes(n)
	if T == 1 {
		act.prep(a[:ab], x[:n])
		return
	}
	s.m.pool.run(T, 1, func(_, lo, hi int) {
		for t := lo; t < hi; t++ {
			act.prep(a[t*ab:(t+1)*ab], x[t*n:(t+1)*n])
		}
	})
}

// matmulRows computes rows [lo, hi) of y[t][r] = W_e[r] · x[t] for the T activation rows a
// (prepActs), on worker w's scratch space, with the kernel of l's type: every element has
// llama.cpp's per-element order (see the comments at each case).
func (s *Session) matmulRows(l *linear, e int, a []byte, T int, y []float32, worker, lo, hi int) {
	m := s.m
	n, out := l.in, l.out
	ab := l.k.act.rowBytes(n)
	w := l.data[e*out*l.rowBytes : (e+1)*out*l.rowBytes]
	var err error
	rt := l.k.repack
	switch kt, q0 := q0Tiles[l.t]; {
	case rt != 0 && l.nmat == 1:
		// ggml's CPU_REPACK mul_mat: groups of 4 activation rows in gemm order, the rest in
		// gemv order. Worker row ranges are multiples of 16, so every row runs in the
		// multi-row kernels.
		err = kernels.MatMulRepack(rt, y, out, w, l.rowBytes, a, ab, T, lo, hi)
	case rt != 0:
		// MoE expert stacks of a repacked type: ggml's mul_mat_id runs the gemv kernel per
		// token. MatMulRepackGemv gives those bits for several tokens at once (Q4_K in gemv
		// order; Q4_0/IQ4_NL through the gemm kernels, equal to the gemv for activations from
		// QuantizeRowQ8_0, which never writes −128).
		err = kernels.MatMulRepackGemv(rt, y, out, w, l.rowBytes, a, ab, T, lo, hi)
	case q0 && (l.k.batchDot == nil || m.opts.gemmMin >= 0):
		// 32-element block types: register tiles of rows × tokens (kernels.MatMulQ0), every
		// element bit-identical to the vec_dot kernel, or for iq4_nl batches to tinyBLAS's
		// order (what llama.cpp runs; tests forcing the dot path keep vec_dot).
		err = kernels.MatMulQ0(kt, y, out, w, l.rowBytes, a, ab, T, lo, hi)
	default:
		if kt, ok := kTiles[l.t]; ok && T >= 2 {
			// K-quants (and iq4_xs) over a batch: register tiles of rows × tokens
			// (kernels.MatMulK), every element bit-identical to the vec_dot kernel (llama.cpp's
			// order for these).
			err = kernels.MatMulK(kt, y, out, w, l.rowBytes, a, ab, T, lo, hi)
			break
		}
		dot := l.k.dot
		if T >= 2 && l.nmat == 1 && l.k.batchDot != nil && m.opts.gemmMin >= 0 {
			dot = l.k.batchDot // llama.cpp's tinyBLAS order for a 2-D matrix over a batch
		}
		tmp := m.wscratch[worker]
		for t0 := 0; t0 < T; t0 += tokenTile {
			t1 := min(T, t0+tokenTile)
			for r := lo; r < hi; r++ {
				wr := l.row(e, r)
				for t := t0; t < t1; t++ {
					y[t*out+r] = dot(wr, a[t*ab:(t+1)*ab], n, tmp)
				}
			}
		}
	}
	if err != nil {
		panic(err) // shapes are checked at load
	}
}

// expertRows is one expert's share of a routed batch: its n activation rows start at row off
// of the packed inputs and outputs.
type expertRows struct{ e, off, n int }

// matmulExperts computes, for every expert g of es, the n_g rows y[off_g+t] = W_{e_g} ·
// x[off_g+t] of the expert stack l in one pool run: the activation rows are converted once
// (expertActs) and the workers take chunks of (expert, weight rows) from one queue, so a
// decode step pays one barrier per projection instead of one per routed expert. Every
// element is computed by matmulRows as matmul computes it (same kernels, same inputs), so
// the bits are the same. Callers use it only where gemmFor(l, n_g) is gemmNone for every
// expert.
func (s *Session) matmulExperts(l *linear, es []expertRows, x []float32, y []float32) {
	s.matmulExpertsPrepared(l, es, s.expertActs(l, es, x), y)
}

// expertActs converts the packed rows x of es to l's activation type (in s.act).
func (s *Session) expertActs(l *linear, es []expertRows, x []float32) []byte {
	R := 0
	for _, g := range es {
		R += g.n
	}
	a := s.actBuf(R * l.k.act.rowBytes(l.in))
	s.prepActs(l, a, x, R)
	return a
}

// matmulExpertsPrepared is matmulExperts on activations already converted by expertActs for
// a weight with the same activation type and input width (gate and up share theirs).
func (s *Session) matmulExpertsPrepared(l *linear, es []expertRows, a []byte, y []float32) {
	m := s.m
	ab := l.k.act.rowBytes(l.in)
	chunk := max(16, min(l.out, (l.out*len(es)/(m.pool.threads()*4))/16*16))
	per := (l.out + chunk - 1) / chunk
	m.pool.run(len(es)*per, 1, func(w, lo, hi int) {
		for u := lo; u < hi; u++ {
			g := es[u/per]
			r0 := (u % per) * chunk
			r1 := min(l.out, r0+chunk)
			s.matmulRows(l, g.e, a[g.off*ab:(g.off+g.n)*ab], g.n, y[g.off*l.out:(g.off+g.n)*l.out], w, r0, r1)
		}
	})
}

// q0Tiles maps the 32-element block weight types MatMulQ0 multiplies to their quant/kernels
// types (activations: q8_0 rows, or q8_1 rows for q4_1/q5_1).
var q0Tiles = map[gguf.GGMLType]kernels.Type{
	gguf.TypeQ8_0: kernels.Q8_0, gguf.TypeQ4_0: kernels.Q4_0, gguf.TypeQ5_0: kernels.Q5_0,
	gguf.TypeIQ4_NL: kernels.IQ4_NL, gguf.TypeQ4_1: kernels.Q4_1, gguf.TypeQ5_1: kernels.Q5_1,
}

// kTiles maps the K-quant (and iq4_xs) weight types MatMulK multiplies to their quant/kernels types.
var kTiles = map[gguf.GGMLType]kernels.Type{
	gguf.TypeQ4_K: kernels.Q4_K, gguf.TypeQ5_K: kernels.Q5_K, gguf.TypeQ6_K: kernels.Q6_K,
	gguf.TypeQ2_K: kernels.Q2_K, gguf.TypeQ3_K: kernels.Q3_K, gguf.TypeIQ4_XS: kernels.IQ4_XS,
}

// amxTileMax bounds the weight rows of one AMX GEMM call. Every call streams all the split
// activation rows (six bytes per value) from memory, so the tiles are as wide as this allows,
// and as many as the workers (or a multiple of them), so that they finish together.
const amxTileMax = 512

// amxTiles splits out weight rows into nt tiles of rows rows (a multiple of 32; the last tile
// may be shorter).
func amxTiles(out, workers int) (nt, rows int) {
	workers = max(workers, 1)
	nt = workers * ((out + workers*amxTileMax - 1) / (workers * amxTileMax))
	rows = (out + nt - 1) / nt
	rows = (rows + 31) / 32 * 32
	return (out + rows - 1) / rows, rows
}

// amxPackPool holds per-worker scratch for the packed weight tile of the AMX path.
var amxPackPool = sync.Pool{New: func() any { return new([]uint32) }}

// matmulAMX is matmulGemm for bf16 weights on the AMX path (kernels.UsingAMX, at least
// kernels.AMXMinRows rows; a routed expert's handful of tokens stays on the FMA GEMM) or, with
// rounded set, on the rounded path (Options.BF16Products: AMX tiles or AVX512-BF16). The
// activation rows are split into bf16 pieces (kernels.SplitRows) or rounded to bf16
// (kernels.RoundedRows) once, rows spread over the workers, then every tile of weight rows
// (amxTiles) is packed and multiplied (kernels.SgemmHalfSplit, kernels.SgemmHalfRounded). With
// the pieces each product of a piece with a weight is exact and the sums are float32, so the
// result agrees with the FMA GEMM's to float32 rounding, in another order of addition; the
// rounded path multiplies the rounded rows exactly (on AMX in a third of the tile products).
// PackWeights is not used: packing the bf16 rows costs little beside the product.
func (s *Session) matmulAMX(l *linear, e int, xr []float32, T int, y []float32, rounded bool) {
	n, out := l.in, l.out
	if rounded {
		s.rounded.Reset(T, n)
		s.m.pool.run(T, 16, func(_, lo, hi int) { s.rounded.Set(lo, hi, xr, n) })
	} else {
		s.split.Reset(T, n)
		s.m.pool.run(T, 16, func(_, lo, hi int) { s.split.Set(lo, hi, xr, n) })
	}
	nt, rows := amxTiles(out, s.m.pool.n)
	s.m.pool.run(nt, 1, func(_, lo, hi int) {
		pp := amxPackPool.Get().(*[]uint32)
		for ti := lo; ti < hi; ti++ {
			r0 := ti * rows
			r1 := min(out, r0+rows)
			off := (e*l.out + r0) * l.rowBytes
			w := l.data[off : off+(r1-r0)*l.rowBytes]
			var err error
			if rounded {
				*pp, err = kernels.SgemmHalfRounded(&s.rounded, r1-r0, w, n, y[r0:], out, false, *pp)
			} else {
				*pp, err = kernels.SgemmHalfSplit(&s.split, r1-r0, w, n, y[r0:], out, false, *pp)
			}
			if err != nil {
				panic(err) // shapes are ours
			}
		}
		amxPackPool.Put(pp)
	})
}

// BF16Rounded reports whether these options make bf16 weights' batches take the rounded path
// of matmulAMX (BF16Products with FullPrecision, on a CPU that runs kernels.SgemmHalfRounded:
// AMX tiles or AVX512-BF16).
func (o Options) BF16Rounded() bool {
	return o.BF16Products && o.FullPrecision && kernels.UsingRounded()
}

// tilePool holds dequantized weight tiles for the GEMM path.
var tilePool = sync.Pool{New: func() any { return new([]float32) }}

// roundActs writes into dst the f32 values the T rows of x take after conversion to
// activation type a (matmulGemm uses x in place when nothing is rounded).
func (s *Session) roundActs(a actType, dst, x []float32, T, n int) {
	s.m.pool.run(T, 1, func(_, lo, hi int) {
		for t := lo; t < hi; t++ {
			a.roundTrip(dst[t*n:(t+1)*n], x[t*n:(t+1)*n])
		}
	})
}

// matmulGemm dequantizes tiles of gemmTile weight rows to f32 and multiplies them with the
// (rounded) f32 activation rows.
// With lanes8 every element is computed in tinyBLAS's order (kernels.SgemmLanes8).
func (s *Session) matmulGemm(l *linear, e int, x []float32, T int, y []float32, lanes8 bool) {
	m := s.m
	n, out := l.in, l.out
	xr := x[:T*n] // unrounded (FullPrecision, f32 activations): used in place
	if !s.m.opts.FullPrecision && l.k.act != actF32 {
		s.xr = grow(s.xr, T*n)
		xr = s.xr
		s.roundActs(l.k.act, xr, x, T, n)
	}
	rounded := l.t == gguf.TypeBF16 && m.opts.BF16Rounded()
	bf16Tiles := l.t == gguf.TypeBF16 && kernels.UsingAMX() || rounded // matmulAMX's weights
	if !lanes8 && bf16Tiles && T >= kernels.AMXMinRows {
		s.matmulAMX(l, e, xr, T, y, rounded)
		return
	}
	nt := (out + gemmTile - 1) / gemmTile
	var packed []*kernels.PackedHalf
	// (bf16 on the AMX or the rounded path is not kept packed: short batches, which come here,
	// take SgemmHalf's FMA path, and long ones matmulAMX)
	if m.opts.PackWeights && m.opts.FullPrecision && !lanes8 && !bf16Tiles && (l.t == gguf.TypeBF16 || l.t == gguf.TypeF16) {
		l.mu.Lock()
		if l.packed == nil {
			l.packed = make([]*kernels.PackedHalf, l.nmat*nt)
		}
		packed = l.packed[e*nt : (e+1)*nt]
		l.mu.Unlock()
	}
	m.pool.run(nt, 1, func(_, lo, hi int) {
		bp := tilePool.Get().(*[]float32)
		if cap(*bp) < gemmTile*n {
			*bp = make([]float32, gemmTile*n)
		}
		buf := (*bp)[:gemmTile*n]
		for ti := lo; ti < hi; ti++ {
			r0 := ti * gemmTile
			r1 := min(out, r0+gemmTile)
			off := (e*l.out + r0) * l.rowBytes
			raw := l.data[off : off+(r1-r0)*l.rowBytes]
			if lanes8 && l.t != gguf.TypeF32 {
				// f16/bf16 weights read in place; the activations are already rounded to the type
				f := kernels.SgemmLanes8F16
				if l.t == gguf.TypeBF16 {
					f = kernels.SgemmLanes8BF16
				}
				if err := f(T, r1-r0, n, xr, n, raw, n, y[r0:], out); err != nil {
					panic(err) // shapes are ours
				}
				continue
			}
			if !lanes8 && (l.t == gguf.TypeBF16 || l.t == gguf.TypeF16) {
				// 16-bit float weights are widened while the GEMM packs them (exact, so the
				// same bits as a float32 copy); with PackWeights the packed tile is kept
				ht := kernels.BF16
				if l.t == gguf.TypeF16 {
					ht = kernels.F16
				}
				if packed != nil {
					p := packed[ti]
					if p == nil {
						var err error
						if p, err = kernels.PackHalf(ht, r1-r0, n, raw, n); err != nil {
							panic(err) // shapes are ours
						}
						packed[ti] = p // each tile has one worker per call; calls are ordered by the pool
					}
					if kernels.SgemmPackedHalf(T, xr, n, p, y[r0:], out, false) == nil {
						continue
					} // packed for the assembly, which tests have since turned off: unpacked below
				}
				if err := kernels.SgemmHalf(ht, T, r1-r0, n, xr, n, raw, n, y[r0:], out, false); err != nil {
					panic(err) // shapes are ours
				}
				continue
			}
			w := buf
			if l.t == gguf.TypeF32 {
				w = bytesF32(raw)
			} else {
				for r := r0; r < r1; r++ {
					if err := kDequant(l.t, l.row(e, r), buf[(r-r0)*n:(r-r0+1)*n]); err != nil {
						panic(err) // checked at load
					}
				}
			}
			if lanes8 {
				if err := kernels.SgemmLanes8(T, r1-r0, n, xr, n, w, n, y[r0:], out); err != nil {
					panic(err) // shapes are ours
				}
				continue
			}
			sgemm(T, r1-r0, n, xr, n, w, n, y[r0:], out)
		}
		tilePool.Put(bp)
	})
}
