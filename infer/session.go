package infer

import (
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// Logits selects the positions [Session.Eval] returns next-token logits for.
type Logits int

const (
	// LogitsLast returns logits for the last token of the call only.
	LogitsLast Logits = iota
	// LogitsAll returns logits for every token of the call.
	LogitsAll
	// LogitsNone returns no logits (prefill only).
	LogitsNone
)

// Session is one sequence being evaluated: a KV cache, a position and scratch buffers. A
// session is not safe for concurrent use; several sessions may share a Model.
type Session struct {
	m   *Model
	kv  *kvCache
	pos int
	obs Observer

	capT                    int // tokens the scratch buffers hold
	x, h, q, k, v, att, tmp []float32
	g, u                    []float32
	cs                      []float32 // RoPE cos/sin tables of the batch's positions (ropeRows)
	ropePos0, ropeT         int       // positions the tables in cs hold
	act                     []byte
	xr                      []float32           // rounded activation rows (GEMM path)
	split                   kernels.SplitRows   // the activation rows split for the AMX GEMM (matmulAMX)
	rounded                 kernels.RoundedRows // the activation rows rounded for the AVX512-BF16 GEMM (matmulAMX)
	qp                      [][]byte            // per-worker prepared query head
	moe                     moeScratch
	hy                      *hybridState // recurrent state of qwen35 / qwen35moe (arch_qwen35moe.go)
	attnScratch             [][]float32  // per-worker buffers of attentionLanes8
	gpu                     *gpuSession  // device KV cache and buffers of the GPU layers (gpu_session.go)
}

// NewSession allocates a KV cache of the model's context size.
func (m *Model) NewSession() (*Session, error) {
	kv, err := newKVCache(m.cfg, m.opts.CtxSize, m.tk, m.tv, m.GPUPlacement().First)
	if err != nil {
		return nil, fmt.Errorf("infer: %w", err)
	}
	s := &Session{m: m, kv: kv}
	s.qp = make([][]byte, m.pool.threads())
	for i := range s.qp {
		s.qp[i] = f32Bytes(make([]float32, m.cfg.HeadDim))
	}
	return s, nil
}

// Model returns the session's model.
func (s *Session) Model() *Model { return s.m }

// Pos is the number of tokens in the KV cache.
func (s *Session) Pos() int { return s.pos }

// CtxSize is the KV cache capacity in tokens.
func (s *Session) CtxSize() int { return s.kv.ctx }

// KVBytes is the host memory the KV cache holds (the cache of GPU layers is in device memory
// and not counted).
func (s *Session) KVBytes() int64 { return s.kv.bytes() }

// Reset empties the KV cache.
func (s *Session) Reset() { s.pos = 0 }

// Truncate drops cached tokens from position n on (0 <= n <= Pos()).
func (s *Session) Truncate(n int) error {
	if n < 0 || n > s.pos {
		return fmt.Errorf("infer: truncate to %d: session holds %d tokens", n, s.pos)
	}
	if s.m.cfg.Hybrid != nil && n != 0 && n != s.pos {
		return fmt.Errorf("infer: truncate to %d: the recurrent state of a %s model cannot be rolled back (only to 0)", n, s.m.cfg.Arch)
	}
	s.pos = n
	return nil
}

// SetObserver installs (or, with nil, removes) an activation observer.
func (s *Session) SetObserver(o Observer) { s.obs = o }

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// beginBatch sizes the scratch buffers for a batch of T tokens.
func (s *Session) beginBatch(T int) { s.ensure(T) }

func (s *Session) ensure(T int) {
	if T <= s.capT {
		return
	}
	c := s.m.cfg
	s.capT = T
	s.x = grow(s.x, T*c.NEmbd)
	s.h = grow(s.h, T*c.NEmbd)
	s.tmp = grow(s.tmp, T*c.NEmbd)
	s.q = grow(s.q, T*c.QDim())
	s.att = grow(s.att, T*c.QDim())
	s.k = grow(s.k, T*c.KVDim())
	s.v = grow(s.v, T*c.KVDim())
	s.g = grow(s.g, T*c.NFF)
	s.u = grow(s.u, T*c.NFF)
}

// ropeRows returns the RoPE cos/sin tables (n_rot floats per position) of positions
// pos0..pos0+T−1, computed by fill once per batch and shared by every layer: with the C
// library's cosf/sinf (each a call through purego) one table costs ~90 µs for n_rot 128, so
// recomputing it per layer would cost a few percent of a prompt.
func (s *Session) ropeRows(pos0, T int, fill func(cs []float32, pos int)) []float32 {
	n := s.m.cfg.NRot
	if s.ropeT < T || s.ropePos0 != pos0 {
		s.cs = grow(s.cs, T*n)
		for t := 0; t < T; t++ {
			fill(s.cs[t*n:(t+1)*n], pos0+t)
		}
		s.ropePos0, s.ropeT = pos0, T
	}
	return s.cs[:T*n]
}

// Eval appends tokens to the sequence, runs them through the model (in batches of at most
// Options.BatchSize tokens per layer pass) and returns next-token logits as selected by want.
// Each returned row has n_vocab entries and belongs to the caller.
func (s *Session) Eval(tokens []int32, want Logits) ([][]float32, error) {
	c := s.m.cfg
	if len(tokens) == 0 {
		return nil, fmt.Errorf("infer: no tokens to evaluate")
	}
	if s.pos+len(tokens) > s.kv.ctx {
		return nil, fmt.Errorf("infer: %d tokens do not fit the context: %d already cached, context size %d", len(tokens), s.pos, s.kv.ctx)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= c.NVocab {
			return nil, fmt.Errorf("infer: token %d at index %d is outside the vocabulary (n_vocab %d)", t, i, c.NVocab)
		}
	}
	var out [][]float32
	B := s.m.opts.BatchSize
	for off := 0; off < len(tokens); off += B {
		batch := tokens[off:min(off+B, len(tokens))]
		T := len(batch)
		s.beginBatch(T)
		s.embed(batch)
		if err := s.runBlocks(T); err != nil { // gpu_session.go: CPU blocks, then device blocks
			return nil, err
		}
		s.pos += T
		var rows []int
		switch want {
		case LogitsAll:
			for t := range T {
				rows = append(rows, t)
			}
		case LogitsLast:
			if off+T == len(tokens) {
				rows = []int{T - 1}
			}
		}
		if len(rows) > 0 {
			lg, err := s.outputLogits(rows)
			if err != nil {
				return nil, err
			}
			out = append(out, lg...)
		}
	}
	return out, nil
}

func (s *Session) embed(tokens []int32) {
	E := s.m.cfg.NEmbd
	emb := s.m.tokEmbd
	for t, tok := range tokens {
		if err := kDequant(emb.t, emb.row(0, int(tok)), s.x[t*E:(t+1)*E]); err != nil {
			panic(err) // type checked at load
		}
	}
}

func (s *Session) logits(rows []int) [][]float32 {
	c := s.m.cfg
	E := c.NEmbd
	R := len(rows)
	h := s.h[:R*E]
	for i, t := range rows {
		rmsNorm(h[i*E:(i+1)*E], s.x[t*E:(t+1)*E], s.m.outNorm, float32(c.RMSEps))
	}
	flat := make([]float32, R*c.NVocab)
	s.linear(s.m.output, h, R, flat)
	out := make([][]float32, R)
	for i := range out {
		out[i] = flat[i*c.NVocab : (i+1)*c.NVocab : (i+1)*c.NVocab]
	}
	return out
}

func addBias(y, b []float32, T int) {
	if b == nil {
		return
	}
	n := len(b)
	for t := 0; t < T; t++ {
		addInPlace(y[t*n:(t+1)*n], b)
	}
}

// layer runs block il on the T rows of s.x at positions pos0..pos0+T-1.
func (s *Session) layer(b *block, il, T, pos0 int) {
	if b.hybrid != nil {
		s.hybridLayer(b, il, T, pos0)
		return
	}
	c := s.m.cfg
	E := c.NEmbd
	qd, kd := c.QDim(), c.KVDim()
	eps := float32(c.RMSEps)
	x, h := s.x[:T*E], s.h[:T*E]
	if T >= parallelRows {
		s.m.pool.run(T, s.rowChunk(T), func(_, lo, hi int) { normRows(h, x, b.attnNorm, E, eps, lo, hi) })
	} else {
		normRows(h, x, b.attnNorm, E, eps, 0, T)
	}
	s.linear(b.q, h, T, s.q[:T*qd])
	addBias(s.q, b.bq, T)
	s.linear(b.k, h, T, s.k[:T*kd])
	addBias(s.k, b.bk, T)
	s.linear(b.v, h, T, s.v[:T*kd])
	addBias(s.v, b.bv, T)
	rope := s.ropeRows(pos0, T, s.m.rope.cache)
	if T >= parallelRows {
		s.m.pool.run(T, s.rowChunk(T), func(_, lo, hi int) { s.qkRows(b, il, pos0, rope, lo, hi) })
	} else {
		s.qkRows(b, il, pos0, rope, 0, T)
	}
	s.attention(il, T, pos0)
	s.linear(b.o, s.att[:T*qd], T, s.tmp[:T*E])
	addBias(s.tmp, b.bo, T)
	addInPlace(x, s.tmp[:T*E])
	if T >= parallelRows {
		s.m.pool.run(T, s.rowChunk(T), func(_, lo, hi int) { normRows(h, x, b.ffnNorm, E, eps, lo, hi) })
	} else {
		normRows(h, x, b.ffnNorm, E, eps, 0, T)
	}
	b.ffn.forward(s, il, h, T, s.tmp[:T*E])
	addInPlace(x, s.tmp[:T*E])
}

// parallelRows is the batch size from which a layer's per-token work (norms, RoPE, KV cache
// stores) is split across the worker pool; every token's result is independent of the split.
const parallelRows = 16

// rowChunk is the pool chunk for T per-token items: about four per thread.
func (s *Session) rowChunk(T int) int { return max(1, T/(4*s.m.pool.threads())) }

// normRows writes the RMS-normalised rows [lo, hi) of x (n values each) into y.
func normRows(y, x, w []float32, n int, eps float32, lo, hi int) {
	for t := lo; t < hi; t++ {
		rmsNorm(y[t*n:(t+1)*n], x[t*n:(t+1)*n], w, eps)
	}
}

// qkRows finishes the query and key rows [lo, hi) of a batch at positions pos0+t: per-head
// RMSNorm (Qwen3), RoPE (rope: the batch's cos/sin rows), and stores the keys and values in
// the cache.
func (s *Session) qkRows(b *block, il, pos0 int, rope []float32, lo, hi int) {
	c := s.m.cfg
	hd, qd, kd, nr := c.HeadDim, c.QDim(), c.KVDim(), c.NRot
	eps := float32(c.RMSEps)
	for t := lo; t < hi; t++ {
		q := s.q[t*qd : (t+1)*qd]
		k := s.k[t*kd : (t+1)*kd]
		if b.qNorm != nil {
			for i := 0; i < qd; i += hd {
				rmsNorm(q[i:i+hd], q[i:i+hd], b.qNorm, eps)
			}
			for i := 0; i < kd; i += hd {
				rmsNorm(k[i:i+hd], k[i:i+hd], b.kNorm, eps)
			}
		}
		cs := rope[t*nr : (t+1)*nr]
		for i := 0; i < qd; i += hd {
			s.m.rope.apply(q[i:i+hd], cs)
		}
		for i := 0; i < kd; i += hd {
			s.m.rope.apply(k[i:i+hd], cs)
		}
		s.kv.store(il, pos0+t, k, s.v[t*kd:(t+1)*kd])
	}
}

// attention computes causal multi-head attention of the T query rows in s.q against the cache
// (positions 0..pos0+t for row t) into s.att.
func (s *Session) attention(il, T, pos0 int) {
	c := s.m.cfg
	hd, nh := c.HeadDim, c.NHead
	grp := nh / c.NHeadKV
	qd := c.QDim()
	scale := 1 / float32(math.Sqrt(float64(hd)))
	if s.useLanes8Attention(T) {
		if s.m.opts.FullPrecision {
			s.attentionGemm(il, T, pos0)
			return
		}
		s.attentionLanes8(il, T, pos0)
		return
	}
	kv := s.kv
	kk := kv.kk
	s.m.pool.run(T*nh, 1, func(w, lo, hi int) {
		sc := s.m.wscratch[w]
		qp := s.qp[w]
		var vt [512]float32
		vtmp := vt[:]
		if hd > len(vtmp) {
			vtmp = make([]float32, hd)
		}
		for it := lo; it < hi; it++ {
			t, hh := it/nh, it%nh
			p := pos0 + t
			g := hh / grp
			kk.act.prep(qp, s.q[t*qd+hh*hd:t*qd+(hh+1)*hd])
			scores := sc[:p+1]
			if kv.tk == gguf.TypeF16 {
				// kk.dot for every position in one call (same per-row kernel and bits)
				kernels.DotF16F32Rows(scores, kv.k[il][g*kv.kHead:], kv.kRow, bytesF32(qp)[:hd])
			} else {
				for u := 0; u <= p; u++ {
					scores[u] = kk.dot(kv.keyHead(il, u, g), qp, hd, nil)
				}
			}
			softmaxMasked(scores, scale)
			kv.accumulateV(il, g, scores, s.att[t*qd+hh*hd:t*qd+(hh+1)*hd], vtmp)
		}
	})
}

func (f *denseFFN) forward(s *Session, il int, h []float32, T int, out []float32) {
	n := f.gate.out
	g, u := s.g[:T*n], s.u[:T*n]
	s.linear(f.gate, h, T, g)
	s.linear(f.up, h, T, u)
	swiglu(g, u, n)
	s.linear(f.down, g, T, out)
}
