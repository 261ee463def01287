package infer

import (
	"fmt"
	"math"
)

// qwen35 / qwen35moe (Qwen3.5, Qwen3.6): hybrid attention. Every block is either a Gated
// DeltaNet linear-attention layer (causal depthwise conv over q|k|v, L2-normalised q/k, a
// per-value-head dS×dS recurrent state with exponential decay and delta-rule writes, gated
// RMSNorm, output projection) or, every full_attention_interval-th block, gated softmax
// attention (q_proj yields query and gate per head, per-head q/k RMSNorm, partial interleaved
// multi-section RoPE — for text tokens NEOX RoPE over rope.dimension_count dims, pairs of an
// "extra" section unrotated — and output·σ(gate)). Both are followed by post_attention_norm
// and a dense SwiGLU FFN (qwen35) or routed experts plus a sigmoid-gated shared expert
// (qwen35moe). The MTP blocks after the trunk are loaded (shape-checked) but not run, as in
// llama.cpp's main pass.

// HybridConfig holds the hyperparameters of a hybrid-attention model.
type HybridConfig struct {
	NTrunk   int    // decoder blocks of the forward pass (block_count − nextn_predict_layers)
	NextN    int    // MTP blocks (nextn_predict_layers)
	ConvK    int    // ssm.conv_kernel
	DState   int    // ssm.state_size: key and value head size
	NKHeads  int    // ssm.group_count: key (and query) heads
	NVHeads  int    // ssm.time_step_rank: value heads (a multiple of NKHeads)
	Interval int    // full_attention_interval
	Linear   []bool // per trunk block: Gated DeltaNet (else gated attention)
	Sections [4]int // rope.dimension_sections
	// RopeIdentity marks the rotary pairs whose section takes the fourth ("extra") position
	// stream, which llama.cpp sets to 0 for text tokens: those pairs are not rotated.
	RopeIdentity []bool
	NFFShexp     int // expert_shared_feed_forward_length (qwen35moe)
}

// KeyDim is NKHeads·DState, ValueDim NVHeads·DState, ConvDim 2·KeyDim + ValueDim.
func (h *HybridConfig) KeyDim() int   { return h.NKHeads * h.DState }
func (h *HybridConfig) ValueDim() int { return h.NVHeads * h.DState }
func (h *HybridConfig) ConvDim() int  { return 2*h.KeyDim() + h.ValueDim() }

func init() {
	for _, moe := range []bool{false, true} {
		name := "qwen35"
		if moe {
			name = "qwen35moe"
		}
		registerArch(&archSpec{
			name:       name,
			rope:       RopeNeox,
			moe:        moe,
			readExtra:  readHybrid,
			loadGlobal: loadMTPBlocks,
			loadBlock: func(ld *loader, c *Config, il int) *block {
				return loadHybridBlock(ld, c, il, c.Hybrid.Linear[il])
			},
		})
	}
}

// readHybrid reads the Gated DeltaNet and MTP keys (llama_model_qwen35(moe)::load_arch_hparams)
// and makes NLayer the trunk depth.
func readHybrid(r metaReader, c *Config) error {
	k := func(s string) string { return c.Arch + "." + s }
	h := &HybridConfig{}
	geti := func(key string, req bool, def, lo, hi int64) (int, error) {
		v, err := r.int(k(key), req, def)
		if err != nil {
			return 0, err
		}
		if v < lo || v > hi {
			return 0, fmt.Errorf("metadata key %q = %d is out of range [%d, %d]", k(key), v, lo, hi)
		}
		return int(v), nil
	}
	var err error
	if h.NextN, err = geti("nextn_predict_layers", false, 0, 0, int64(c.NLayer-1)); err != nil {
		return err
	}
	h.NTrunk = c.NLayer - h.NextN
	if h.ConvK, err = geti("ssm.conv_kernel", true, 0, 1, 64); err != nil {
		return err
	}
	if h.DState, err = geti("ssm.state_size", true, 0, 1, 4096); err != nil {
		return err
	}
	if h.NKHeads, err = geti("ssm.group_count", true, 0, 1, 4096); err != nil {
		return err
	}
	if h.NVHeads, err = geti("ssm.time_step_rank", true, 0, 1, 4096); err != nil {
		return err
	}
	inner, err := geti("ssm.inner_size", true, 0, 1, maxDim)
	if err != nil {
		return err
	}
	if h.NVHeads%h.NKHeads != 0 {
		return fmt.Errorf("%s: ssm.time_step_rank %d is not a multiple of ssm.group_count %d", c.Arch, h.NVHeads, h.NKHeads)
	}
	if inner != h.NVHeads*h.DState {
		return fmt.Errorf("%s: ssm.inner_size %d != time_step_rank %d × state_size %d (llama.cpp sizes value heads with state_size)", c.Arch, inner, h.NVHeads, h.DState)
	}
	if h.Interval, err = geti("full_attention_interval", false, 4, 1, maxDim); err != nil {
		return err
	}
	h.Linear = make([]bool, h.NTrunk)
	if v, ok := r.src.Meta(k("attention.recurrent_layers")); ok {
		flags, ok := boolOrIntArray(v)
		if !ok || len(flags) < h.NTrunk {
			return fmt.Errorf("metadata key %q: want a bool or integer array of %d entries", k("attention.recurrent_layers"), c.NLayer)
		}
		copy(h.Linear, flags)
	} else {
		for i := range h.Linear {
			h.Linear[i] = (i+1)%h.Interval != 0
		}
	}
	sv, ok := r.src.Meta(k("rope.dimension_sections"))
	if !ok {
		return fmt.Errorf("metadata key %q is missing", k("rope.dimension_sections"))
	}
	secs, ok := intArray(sv)
	if !ok || len(secs) == 0 || len(secs) > 4 {
		return fmt.Errorf("metadata key %q: want up to 4 integers", k("rope.dimension_sections"))
	}
	sum := 0
	for i, s := range secs {
		if s < 0 || s > maxDim {
			return fmt.Errorf("metadata key %q: negative or huge section %d", k("rope.dimension_sections"), s)
		}
		h.Sections[i] = int(s)
		sum += int(s)
	}
	if sum == 0 || sum > c.HeadDim {
		return fmt.Errorf("metadata key %q: sections %v sum to %d, want 1..key_length %d", k("rope.dimension_sections"), secs, sum, c.HeadDim)
	}
	h.RopeIdentity = imropeIdentity(h.Sections, max(c.NRot/2, 0))
	if c.NExpert > 0 {
		nff := 0
		if v, err := r.int(k("feed_forward_length"), false, 0); err == nil {
			nff = int(v)
		}
		if h.NFFShexp, err = geti("expert_shared_feed_forward_length", false, int64(nff), 1, maxDim); err != nil {
			return err
		}
	}
	c.NLayer = h.NTrunk
	c.Hybrid = h
	return nil
}

// imropeIdentity marks, of nPairs rotary pairs, those that interleaved multi-section RoPE
// (ggml's GGML_ROPE_TYPE_IMROPE) assigns to the fourth position stream: pair i is in sector
// s = i mod Σsections, which takes the height stream when s ≡ 1 (mod 3) and s < 3·sections[1],
// the width stream when s ≡ 2 and s < 3·sections[2], the time stream when s ≡ 0 and
// s < 3·sections[0], and the fourth stream otherwise. sections must not sum to 0.
func imropeIdentity(sections [4]int, nPairs int) []bool {
	sum := sections[0] + sections[1] + sections[2] + sections[3]
	id := make([]bool, nPairs)
	for i := range id {
		s := i % sum
		rot := (s%3 == 1 && s < 3*sections[1]) || (s%3 == 2 && s < 3*sections[2]) || (s%3 == 0 && s < 3*sections[0])
		id[i] = !rot
	}
	return id
}

func boolOrIntArray(v any) ([]bool, bool) {
	if b, ok := v.([]bool); ok {
		return b, true
	}
	if a, ok := intArray(v); ok {
		out := make([]bool, len(a))
		for i, x := range a {
			out[i] = x != 0
		}
		return out, true
	}
	return nil, false
}

// hybridBlock holds the tensors of a qwen35 / qwen35moe block besides block's attnNorm,
// q/k/v/o, qNorm/kNorm and ffn.
type hybridBlock struct {
	linear   bool
	postNorm []float32
	// Gated DeltaNet
	qkv, z, beta, alpha, out *linear
	conv                     []float32 // ConvDim × ConvK taps (ssm_conv1d {K, conv})
	dtBias, ssmA, ssmNorm    []float32
	// shared expert (qwen35moe)
	shGate, shUp, shDown *linear
	shGateInp            []float32
}

// loadHybridBlock loads block il (a linear-attention or a full-attention one).
func loadHybridBlock(ld *loader, c *Config, il int, linearAttn bool) *block {
	h := c.Hybrid
	n := func(s string) string { return blkName(il, s) }
	b := &block{hybrid: &hybridBlock{linear: linearAttn}}
	hb := b.hybrid
	E := c.NEmbd
	b.attnNorm = ld.vector(n("attn_norm.weight"), E, true)
	hb.postNorm = ld.vector(n("post_attention_norm.weight"), E, true)
	if linearAttn {
		conv, vd := h.ConvDim(), h.ValueDim()
		hb.qkv = ld.linear(n("attn_qkv.weight"), E, conv, 1, true)
		hb.z = ld.linear(n("attn_gate.weight"), E, vd, 1, true)
		hb.beta = ld.linear(n("ssm_beta.weight"), E, h.NVHeads, 1, true)
		hb.alpha = ld.linear(n("ssm_alpha.weight"), E, h.NVHeads, 1, true)
		hb.conv = ld.floats(n("ssm_conv1d.weight"), h.ConvK, conv)
		hb.dtBias = ld.vector(n("ssm_dt.bias"), h.NVHeads, true)
		hb.ssmA = ld.vector(n("ssm_a"), h.NVHeads, true)
		hb.ssmNorm = ld.vector(n("ssm_norm.weight"), h.DState, true)
		hb.out = ld.linear(n("ssm_out.weight"), vd, E, 1, true)
	} else {
		b.q = ld.linear(n("attn_q.weight"), E, 2*c.QDim(), 1, true)
		b.k = ld.linear(n("attn_k.weight"), E, c.KVDim(), 1, true)
		b.v = ld.linear(n("attn_v.weight"), E, c.KVDim(), 1, true)
		b.o = ld.linear(n("attn_output.weight"), c.QDim(), E, 1, true)
		b.qNorm = ld.vector(n("attn_q_norm.weight"), c.HeadDim, true)
		b.kNorm = ld.vector(n("attn_k_norm.weight"), c.HeadDim, true)
	}
	if c.NExpert > 0 {
		b.ffn = &moeFFN{
			router:  ld.linear(n("ffn_gate_inp.weight"), E, c.NExpert, 1, true),
			gate:    ld.linear(n("ffn_gate_exps.weight"), E, c.NFFExp, c.NExpert, true),
			up:      ld.linear(n("ffn_up_exps.weight"), E, c.NFFExp, c.NExpert, true),
			down:    ld.linear(n("ffn_down_exps.weight"), c.NFFExp, E, c.NExpert, true),
			nExpert: c.NExpert, nUsed: c.NExpertUse, il: il,
		}
		sf := h.NFFShexp
		hb.shGateInp = ld.vector(n("ffn_gate_inp_shexp.weight"), E, true)
		hb.shGate = ld.linear(n("ffn_gate_shexp.weight"), E, sf, 1, true)
		hb.shUp = ld.linear(n("ffn_up_shexp.weight"), E, sf, 1, true)
		hb.shDown = ld.linear(n("ffn_down_shexp.weight"), sf, E, 1, true)
	} else {
		b.ffn = &denseFFN{
			gate: ld.linear(n("ffn_gate.weight"), E, c.NFF, 1, true),
			up:   ld.linear(n("ffn_up.weight"), E, c.NFF, 1, true),
			down: ld.linear(n("ffn_down.weight"), c.NFF, E, 1, true),
		}
	}
	// every row this block reads must fit the per-worker scratch rows of the model
	if ld.err == nil {
		for _, w := range []int{h.ValueDim(), h.NFFShexp} {
			if w > max(E, c.NFF, c.NFFExp, c.QDim()) {
				ld.fail(fmt.Errorf("%s: a row length of %d exceeds the widths the runner sizes its buffers for", c.Arch, w))
			}
		}
	}
	return b
}

// floats loads a 2-D tensor {cols, rows} as float32.
func (ld *loader) floats(name string, cols, rows int) []float32 {
	t := ld.lookup(name, true, cols, rows)
	if t == nil {
		return nil
	}
	out := make([]float32, cols*rows)
	if err := kDequant(t.Type, t.Data, out); err != nil {
		ld.fail(fmt.Errorf("tensor %q: %v", name, err))
		return nil
	}
	return out
}

// loadMTPBlocks shape-checks the multi-token-prediction blocks (full attention, FFN and the
// nextn.* tensors) so that a complete file loads; the main forward pass does not run them.
// A LayerRunner (NLayer 1) skips them.
func loadMTPBlocks(ld *loader, c *Config, m *Model) {
	h := c.Hybrid
	if c.NLayer != h.NTrunk {
		return
	}
	E := c.NEmbd
	for il := h.NTrunk; il < h.NTrunk+h.NextN && ld.err == nil; il++ {
		loadHybridBlock(ld, c, il, false)
		n := func(s string) string { return blkName(il, s) }
		ld.linear(n("nextn.eh_proj.weight"), 2*E, E, 1, true)
		ld.vector(n("nextn.enorm.weight"), E, true)
		ld.vector(n("nextn.hnorm.weight"), E, true)
		ld.vector(n("nextn.shared_head_norm.weight"), E, false)
		if c.NVocab > 0 {
			ld.linear(n("nextn.embed_tokens.weight"), E, c.NVocab, 1, false)
			ld.linear(n("nextn.shared_head_head.weight"), E, c.NVocab, 1, false)
		}
	}
}

// hybridState is a session's recurrent memory: per Gated DeltaNet block the last ConvK−1
// q|k|v rows before the convolution and the NVHeads dS×dS delta-rule states (float32, as
// llama.cpp's recurrent cache; allocated on first use), plus scratch.
type hybridState struct {
	conv, ssm [][]float32
	// scratch, sized for the largest batch seen
	capT                        int
	mixed, cout, z, bb, aa, y   []float32
	qg, gate, sh1, sh2, shg, ff []float32
	convTmp                     []float32
}

func (s *Session) hybridState() *hybridState {
	if s.hy != nil {
		return s.hy
	}
	c := s.m.cfg
	h := c.Hybrid
	st := &hybridState{conv: make([][]float32, c.NLayer), ssm: make([][]float32, c.NLayer)}
	st.convTmp = make([]float32, (h.ConvK-1)*h.ConvDim())
	s.hy = st
	return st
}

func (st *hybridState) ensure(c *Config, T int) {
	if T <= st.capT {
		return
	}
	h := c.Hybrid
	st.capT = T
	st.mixed = grow(st.mixed, T*h.ConvDim())
	st.cout = grow(st.cout, T*h.ConvDim())
	st.z = grow(st.z, T*h.ValueDim())
	st.y = grow(st.y, T*h.ValueDim())
	st.bb = grow(st.bb, T*h.NVHeads)
	st.aa = grow(st.aa, T*h.NVHeads)
	st.qg = grow(st.qg, 2*T*c.QDim())
	st.gate = grow(st.gate, T*c.QDim())
	st.ff = grow(st.ff, T*c.NEmbd)
	if h.NFFShexp > 0 {
		st.sh1 = grow(st.sh1, T*h.NFFShexp)
		st.sh2 = grow(st.sh2, T*h.NFFShexp)
		st.shg = grow(st.shg, T)
	}
}

// hybridLayer runs block il of a qwen35 / qwen35moe model on the T rows of s.x at positions
// pos0..pos0+T−1 (llama_model_qwen35moe::graph).
func (s *Session) hybridLayer(b *block, il, T, pos0 int) {
	c := s.m.cfg
	hb := b.hybrid
	st := s.hybridState()
	st.ensure(c, T)
	E := c.NEmbd
	eps := float32(c.RMSEps)
	x, h := s.x[:T*E], s.h[:T*E]
	for t := 0; t < T; t++ {
		rmsNorm(h[t*E:(t+1)*E], x[t*E:(t+1)*E], b.attnNorm, eps)
	}
	out := s.tmp[:T*E]
	if hb.linear {
		s.gatedDeltaNet(b, il, T, pos0, out)
	} else {
		s.gatedAttention(b, il, T, pos0, out)
	}
	addInPlace(x, out)
	for t := 0; t < T; t++ {
		rmsNorm(h[t*E:(t+1)*E], x[t*E:(t+1)*E], hb.postNorm, eps)
	}
	b.ffn.forward(s, il, h, T, out)
	if hb.shGate != nil {
		s.sharedExpert(hb, h, T, st.ff[:T*E])
		addInPlace(out, st.ff[:T*E]) // moe_out + gated shared expert
	}
	addInPlace(x, out)
}

// sharedExpert writes σ(w·h) · W_down(SiLU(W_gate·h) ⊙ W_up·h) for T rows of h into y.
func (s *Session) sharedExpert(hb *hybridBlock, h []float32, T int, y []float32) {
	c := s.m.cfg
	E, nf := c.NEmbd, c.Hybrid.NFFShexp
	st := s.hy
	g, u := st.sh1[:T*nf], st.sh2[:T*nf]
	s.linear(hb.shGate, h, T, g)
	s.linear(hb.shUp, h, T, u)
	swiglu(g, u, nf)
	s.linear(hb.shDown, g, T, y)
	for t := 0; t < T; t++ {
		gate := sharedExpertGate(hb.shGateInp, h[t*E:(t+1)*E])
		row := y[t*E : (t+1)*E]
		for i := range row {
			row[i] *= gate
		}
	}
}

// gatedAttention: query and gate from attn_q, per-head q/k RMSNorm, RoPE on the first NRot
// dims (NEOX pairing; "extra"-section pairs unrotated), causal attention against the KV cache,
// output·σ(gate), attn_output.
func (s *Session) gatedAttention(b *block, il, T, pos0 int, out []float32) {
	c := s.m.cfg
	hy := c.Hybrid
	st := s.hy
	E, hd, nh := c.NEmbd, c.HeadDim, c.NHead
	qd, kd := c.QDim(), c.KVDim()
	eps := float32(c.RMSEps)
	h := s.h[:T*E]
	qg := st.qg[:2*T*qd]
	s.linear(b.q, h, T, qg)
	q, gate := s.q[:T*qd], st.gate[:T*qd]
	for t := 0; t < T; t++ {
		for j := 0; j < nh; j++ {
			src := qg[t*2*qd+2*j*hd:]
			copy(q[t*qd+j*hd:t*qd+(j+1)*hd], src[:hd])
			copy(gate[t*qd+j*hd:t*qd+(j+1)*hd], src[hd:2*hd])
		}
	}
	s.linear(b.k, h, T, s.k[:T*kd])
	s.linear(b.v, h, T, s.v[:T*kd])
	rope := s.ropeRows(pos0, T, func(cs []float32, pos int) { hybridRopeCache(&s.m.rope, hy.RopeIdentity, cs, pos) })
	nr := c.NRot
	for t := 0; t < T; t++ {
		qt := q[t*qd : (t+1)*qd]
		kt := s.k[t*kd : (t+1)*kd]
		for i := 0; i < qd; i += hd {
			rmsNorm(qt[i:i+hd], qt[i:i+hd], b.qNorm, eps)
		}
		for i := 0; i < kd; i += hd {
			rmsNorm(kt[i:i+hd], kt[i:i+hd], b.kNorm, eps)
		}
		cs := rope[t*nr : (t+1)*nr]
		for i := 0; i < qd; i += hd {
			s.m.rope.apply(qt[i:i+hd], cs)
		}
		for i := 0; i < kd; i += hd {
			s.m.rope.apply(kt[i:i+hd], cs)
		}
		s.kv.store(il, pos0+t, kt, s.v[t*kd:(t+1)*kd])
	}
	s.attention(il, T, pos0)
	att := s.att[:T*qd]
	for i, g := range gate {
		att[i] *= sigmoid(g)
	}
	s.linear(b.o, att, T, out)
}

// gatedDeltaNet is build_layer_attn_linear: projections, conv, L2 norms, the delta rule per
// value head (value head j reads key head j mod NKHeads), gated RMSNorm, ssm_out.
func (s *Session) gatedDeltaNet(b *block, il, T, pos0 int, out []float32) {
	c := s.m.cfg
	hy := c.Hybrid
	hb := b.hybrid
	st := s.hy
	E := c.NEmbd
	cd, vd, ds, hv, hk := hy.ConvDim(), hy.ValueDim(), hy.DState, hy.NVHeads, hy.NKHeads
	kdim := hy.KeyDim()
	eps := float32(c.RMSEps)
	h := s.h[:T*E]
	if st.conv[il] == nil { // allocated on first use
		st.conv[il] = make([]float32, (hy.ConvK-1)*cd)
		st.ssm[il] = make([]float32, hv*ds*ds)
	}
	if pos0 == 0 { // a new sequence starts from zero conv and delta-rule states
		clear(st.conv[il])
		clear(st.ssm[il])
	}
	mixed, cout := st.mixed[:T*cd], st.cout[:T*cd]
	z, bb, aa, y := st.z[:T*vd], st.bb[:T*hv], st.aa[:T*hv], st.y[:T*vd]
	s.linear(hb.qkv, h, T, mixed)
	s.linear(hb.z, h, T, z)
	s.linear(hb.beta, h, T, bb)
	s.linear(hb.alpha, h, T, aa)
	deltaNetGates(bb, aa, hb.dtBias, hb.ssmA, hv) // β and the log decay g ≤ 0
	causalConv1d(cout, mixed, st.conv[il], hb.conv, st.convTmp, T, cd, hy.ConvK)
	for t := 0; t < T; t++ {
		row := cout[t*cd : (t+1)*cd]
		l2NormHeads(row[:2*kdim], ds, eps) // q and k heads
	}
	scale := 1 / float32(math.Sqrt(float64(ds)))
	state := st.ssm[il]
	s.m.pool.run(hv, 1, func(w, lo, hi int) {
		delta := s.m.wscratch[w][:ds]
		for j := lo; j < hi; j++ {
			kh := j % hk
			deltaNetHead(state[j*ds*ds:(j+1)*ds*ds], cout[kh*ds:], cout[kdim+kh*ds:], cout[2*kdim+j*ds:],
				aa[j:], bb[j:], y[j*ds:], delta, T, ds, cd, cd, cd, hv, vd, scale)
		}
	})
	if d, ok := s.obs.(DeltaNetObserver); ok {
		d.DeltaNet(il, &DeltaNetTrace{T: T, Pos0: pos0, X: h, QK: cout, QKStride: cd, Beta: bb, G: aa, O: y, Z: z,
			Norm: hb.ssmNorm, Eps: eps, NEmbd: E, DState: ds, NKHeads: hk, NVHeads: hv, Scale: scale})
	}
	gatedRMSNorm(y, z, hb.ssmNorm, ds, eps)
	s.linear(hb.out, y, T, out)
}
