package infer

import (
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// Prompt-batch attention in llama.cpp's order.
//
// For a batch of two or more tokens, llama.cpp's CPU backend (without flash attention)
// computes K·Q and V·softmax as matrix products, and ggml hands float matrix products with at
// least two columns to llamafile's tinyBLAS. tinyBLAS gives every output element one 8-lane
// float32 accumulator over the shared dimension (lane l takes elements l, l+8, ...; one FMA
// each) and adds the lanes at the end, which is a different float order from the 4×8-lane
// vec_dot kernels used for a single token. To reproduce llama.cpp's numbers, batches use the
// same order here (kernel dotLanes8): K·Q over head_dim with the query rounded to the key
// type, softmax as for one token, then V·p over the cache positions with p rounded to the value
// type (positions past the causal limit contribute exact zeros, as llama.cpp's masked
// probabilities do).

// attnChunk is the number of query tokens a work item handles after converting its KV group.
const attnChunk = 16

// gemmAttnChunk is attentionGemm's number of queries per work item: a multiple of the GEMM's
// 6-row tiles, so no product of a chunk takes the partial-tile path.
const gemmAttnChunk = 18

// useLanes8Attention reports whether a batch of T tokens takes the tinyBLAS-order attention:
// float K and V caches (a quantized cache keeps the vec_dot order, which tinyBLAS's quantized
// path shares) and not disabled by a negative gemmMin (tests use that to compare batch sizes).
func (s *Session) useLanes8Attention(T int) bool {
	if T < 2 || s.m.opts.gemmMin < 0 || !s.kv.vTrans || s.m.cfg.HeadDim%8 != 0 {
		return false
	}
	switch s.kv.tk {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		return true
	}
	return false
}

// roundTo rounds x to the values of float cache type t (f32: unchanged).
func roundTo(t gguf.GGMLType, x []float32) {
	switch t {
	case gguf.TypeF16:
		kernels.RoundF16(x) // h2f(f2h(v)) per element, vectorised
	case gguf.TypeBF16:
		for i, v := range x {
			x[i] = bf2f(f2bf(v))
		}
	}
}

// floatsOf converts n elements of a float cache row of type t into dst.
func floatsOf(t gguf.GGMLType, dst []float32, src []byte) {
	switch t {
	case gguf.TypeF32:
		copy(dst, bytesF32(src)[:len(dst)])
	case gguf.TypeF16:
		h := bytesU16(src)[:len(dst)]
		for i, v := range h {
			dst[i] = h2f(v)
		}
	case gguf.TypeBF16:
		h := bytesU16(src)[:len(dst)]
		for i, v := range h {
			dst[i] = bf2f(v)
		}
	}
}

// attnScratchFor makes every worker's attention scratch buffer hold at least need floats.
func (s *Session) attnScratchFor(need int) {
	nw := s.m.pool.threads()
	if len(s.attnScratch) < nw {
		s.attnScratch = make([][]float32, nw)
	}
	for w, b := range s.attnScratch {
		if cap(b) < need {
			s.attnScratch[w] = make([]float32, need)
		}
	}
}

// kvGroupFloats converts the first P cached keys of KV group g of layer il to float32 rows
// of kf (one per position) and the values to vf (one row of Pp positions per channel, zero
// beyond P).
func (s *Session) kvGroupFloats(il, g, P, Pp int, kf, vf []float32) {
	kv := s.kv
	hd := s.m.cfg.HeadDim
	for u := 0; u < P; u++ {
		floatsOf(kv.tk, kf[u*hd:(u+1)*hd], kv.keyHead(il, u, g))
	}
	for d := 0; d < hd; d++ {
		row := vf[d*Pp : (d+1)*Pp]
		floatsOf(kv.tv, row[:P], kv.v[il][(g*hd+d)*kv.vStride*kv.vElem:])
		clear(row[P:])
	}
}

// groupRun is the pool chunk for the batched attentions' work items, (KV group, query chunk)
// pairs in group-major order: a call gets a run of them and gathers each group's keys and
// values once per run rather than once per chunk; about four runs per thread keep the load
// balanced. The results do not depend on the split.
func (s *Session) groupRun(items int) int { return max(1, items/(4*s.m.pool.threads())) }

// attentionLanes8 is attention() for a prompt batch in tinyBLAS order (see above). Per KV
// group and chunk of attnChunk queries, each head's K·Q and V·p are two kernels.SgemmLanes8
// products, whose every element is DotLanes8 of its row pair: scores past a query's causal
// limit are computed and dropped, and V·p runs to the chunk's last query's (padded) position
// count, the earlier queries' probabilities being exact zeros there (finite values times
// zero add nothing to an accumulator that starts at +0), so every output is the per-query
// dot product's bit for bit.
func (s *Session) attentionLanes8(il, T, pos0 int) {
	c := s.m.cfg
	hd, nh, nkv := c.HeadDim, c.NHead, c.NHeadKV
	grp := nh / nkv
	qd := c.QDim()
	scale := 1 / float32(math.Sqrt(float64(hd)))
	kv := s.kv
	P := pos0 + T      // positions the last token sees
	Pp := (P + 7) &^ 7 // padded to the 8-lane width (zeros beyond P)
	chunks := (T + attnChunk - 1) / attnChunk
	need := P*hd + hd*Pp + attnChunk*Pp + attnChunk*hd
	s.attnScratchFor(need)
	s.m.pool.run(nkv*chunks, s.groupRun(nkv*chunks), func(w, lo, hi int) {
		buf := s.attnScratch[w][:need]
		kf := buf[:P*hd]                                // keys of the group, one row per position
		vf := buf[P*hd : P*hd+hd*Pp]                    // values of the group, one row of Pp positions per channel
		sc := buf[P*hd+hd*Pp : P*hd+hd*Pp+attnChunk*Pp] // scores / probabilities, one row of Pp per query
		qb := buf[P*hd+hd*Pp+attnChunk*Pp:]             // the chunk's queries, rounded to the key type
		lastG := -1
		for it := lo; it < hi; it++ {
			g, ch := it/chunks, it%chunks
			if g != lastG {
				s.kvGroupFloats(il, g, P, Pp, kf, vf)
				lastG = g
			}
			t0 := ch * attnChunk
			M := min(T, t0+attnChunk) - t0
			npos := pos0 + t0 + M  // positions the chunk's last query sees
			npc := (npos + 7) &^ 7 // ≤ Pp
			for hh := g * grp; hh < (g+1)*grp; hh++ {
				for i := 0; i < M; i++ {
					q := qb[i*hd : (i+1)*hd]
					copy(q, s.q[(t0+i)*qd+hh*hd:(t0+i)*qd+(hh+1)*hd])
					roundTo(kv.tk, q)
				}
				if err := kernels.SgemmLanes8(M, npos, hd, qb, hd, kf, hd, sc, Pp); err != nil {
					panic(err) // shapes are set above
				}
				for i := 0; i < M; i++ {
					n := pos0 + t0 + i + 1
					row := sc[i*Pp : (i+1)*Pp]
					softmaxMasked(row[:n], scale)
					roundTo(kv.tv, row[:n])
					clear(row[n:npc])
				}
				if err := kernels.SgemmLanes8(M, hd, npc, sc, Pp, vf, Pp, s.att[t0*qd+hh*hd:], qd); err != nil {
					panic(err)
				}
			}
		}
	})
}

// attentionGemm is attentionLanes8's computation with the packed GEMM (kernels.Sgemm) for
// K·Q and V·p over chunks of gemmAttnChunk queries of one head, for the calibration forward
// (FullPrecision), which does not reproduce llama.cpp's float order anyway: the packed kernel
// accumulates a tile of outputs in registers across the shared dimension (12×32 with AVX-512,
// 6×16 with AVX2), where the tinyBLAS order needs one 8-lane accumulator per output, reduced
// at the end (3×4 tiles). The query and the probabilities are not rounded to the cache types
// (FullPrecision).
func (s *Session) attentionGemm(il, T, pos0 int) {
	c := s.m.cfg
	hd, nh, nkv := c.HeadDim, c.NHead, c.NHeadKV
	grp := nh / nkv
	qd := c.QDim()
	scale := 1 / float32(math.Sqrt(float64(hd)))
	P := pos0 + T      // positions the last token sees
	Pp := (P + 7) &^ 7 // padded (zeros beyond P)
	chunks := (T + gemmAttnChunk - 1) / gemmAttnChunk
	need := P*hd + hd*Pp + gemmAttnChunk*Pp
	s.attnScratchFor(need)
	s.m.pool.run(nkv*chunks, s.groupRun(nkv*chunks), func(w, lo, hi int) {
		buf := s.attnScratch[w][:need]
		kf := buf[:P*hd]             // keys of the group, one row per position
		vf := buf[P*hd : P*hd+hd*Pp] // values of the group, one row of Pp positions per channel
		sc := buf[P*hd+hd*Pp:]       // scores / probabilities of a chunk, one row of Pp per query
		lastG := -1
		for it := lo; it < hi; it++ {
			g, ch := it/chunks, it%chunks
			if g != lastG {
				s.kvGroupFloats(il, g, P, Pp, kf, vf)
				lastG = g
			}
			t0 := ch * gemmAttnChunk
			M := min(T, t0+gemmAttnChunk) - t0
			np := pos0 + t0 + M // positions the chunk's last query sees
			for hh := g * grp; hh < (g+1)*grp; hh++ {
				sgemm(M, np, hd, s.q[t0*qd+hh*hd:], qd, kf, hd, sc, Pp)
				for i := 0; i < M; i++ {
					n := pos0 + t0 + i + 1
					row := sc[i*Pp : (i+1)*Pp]
					softmaxMasked(row[:n], scale)
					clear(row[n:])
				}
				sgemm(M, hd, Pp, sc, Pp, vf, Pp, s.att[t0*qd+hh*hd:], qd)
			}
		}
	})
}
