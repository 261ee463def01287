package infer

import (
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
)

// Device blocks of qwen35 / qwen35moe (Qwen3.5, Qwen3.6): the twin of hybridLayer and its parts
// in arch_qwen35moe.go, operation by operation, on the device. A Gated DeltaNet block's
// convolution rows and delta-rule states live in device memory per session (gpuSession.conv,
// .ssm), cleared at position 0 as the CPU clears its own; gated-attention blocks use the device
// KV cache. The shared expert (and its sigmoid gate) always runs on the device with its block:
// CPUMoE keeps only the routed experts on the host, as llama.cpp's --n-cpu-moe does.

// gpuHybrid holds the device weights of a hybrid block besides gpuBlock's attention (q is the
// gated attention's query+gate projection) and FFN fields.
type gpuHybrid struct {
	linear                      bool
	qkv, z, beta, alpha, out    *cuda.Tensor // Gated DeltaNet projections
	conv, dtBias, ssmA, ssmNorm cuda.Buffer
	state                       int          // index of the block's states in gpuSession.conv/.ssm
	shGate, shUp, shDown        *cuda.Tensor // shared expert (qwen35moe)
	shGateInp                   *cuda.Tensor // its gate: a one-row F32 matrix
}

// uploadHybrid uploads a hybrid block's own tensors with the upload helpers of gpuModel.upload
// (which record the first error in *err).
func (g *gpuModel) uploadHybrid(hb *hybridBlock, tensor func(*linear) *cuda.Tensor, vec func([]float32) cuda.Buffer, err *error) *gpuHybrid {
	gh := &gpuHybrid{linear: hb.linear, state: -1}
	if hb.linear {
		gh.qkv, gh.z, gh.beta, gh.alpha, gh.out = tensor(hb.qkv), tensor(hb.z), tensor(hb.beta), tensor(hb.alpha), tensor(hb.out)
		gh.conv, gh.dtBias, gh.ssmA, gh.ssmNorm = vec(hb.conv), vec(hb.dtBias), vec(hb.ssmA), vec(hb.ssmNorm)
		gh.state = g.nState
		g.nState++
	}
	if hb.shGate != nil {
		gh.shGate, gh.shUp, gh.shDown = tensor(hb.shGate), tensor(hb.shUp), tensor(hb.shDown)
		data := f32Bytes(hb.shGateInp)
		gh.shGateInp = tensor(&linear{name: hb.shGate.name + " (gate_inp_shexp)", t: gguf.TypeF32, in: len(hb.shGateInp),
			out: 1, nmat: 1, rowBytes: len(data), data: data})
	}
	if *err != nil {
		return nil
	}
	return gh
}

// hybridRopeFreqs returns the per-pair frequency divisors the device RoPE gets for a hybrid
// model: the model's own (or 1), and +Inf for the pairs of the fourth position stream
// (hybridRopeCache): θ/∞ = 0, so those pairs get cos·mscale = mscale and sin = 0 as on the CPU.
func hybridRopeFreqs(freqs []float32, identity []bool, nRot int) []float32 {
	out := make([]float32, nRot/2)
	for i := range out {
		out[i] = 1
		if i < len(freqs) {
			out[i] = freqs[i]
		}
		if i < len(identity) && identity[i] {
			out[i] = float32(math.Inf(1))
		}
	}
	return out
}

// gpuHybridLayer runs hybrid block il (device block b) on the T rows of the device hidden state
// at positions pos0..: the device twin of Session.hybridLayer.
func (s *Session) gpuHybridLayer(ops *devOps, ds *gpuSession, b *gpuBlock, il, T, pos0 int) {
	c := s.m.cfg
	be := ds.be
	E := c.NEmbd
	eps := float32(c.RMSEps)
	ops.do(func() error { return be.RMSNorm(ds.h, ds.x, b.attnNorm, E, T, eps) })
	if b.hy.linear {
		s.gpuDeltaNet(ops, ds, b.hy, T, pos0)
	} else {
		s.gpuGatedAttention(ops, ds, b, T, pos0)
	}
	ops.do(func() error { return be.Add(ds.x, ds.tmp, T*E) })
	ops.do(func() error { return be.RMSNorm(ds.h, ds.x, b.ffnNorm, E, T, eps) })
	s.gpuFFN(ops, ds, b, il, T)
	if hy := b.hy; hy.shGate != nil {
		nf := hy.shGate.Rows
		ops.do(func() error { return be.MatMul(ds.sh1, hy.shGate, 0, ds.h, T) })
		ops.do(func() error { return be.MatMul(ds.sh2, hy.shUp, 0, ds.h, T) })
		ops.do(func() error { return be.SwiGLU(ds.sh1, ds.sh2, T*nf) })
		ops.do(func() error { return be.MatMul(ds.ff, hy.shDown, 0, ds.sh1, T) })
		ops.do(func() error { return be.MatMul(ds.shg, hy.shGateInp, 0, ds.h, T) })
		ops.do(func() error { return be.RowSigmoidScale(ds.ff, ds.shg, E, T) })
		ops.do(func() error { return be.Add(ds.tmp, ds.ff, T*E) })
	}
	ops.do(func() error { return be.Add(ds.x, ds.tmp, T*E) })
}

// gpuDeltaNet is gatedDeltaNet on the device: projections, gates, convolution with the rolling
// state, L2 norms of the query and key heads, the delta rule with the state, gated RMSNorm,
// ssm_out into ds.tmp.
func (s *Session) gpuDeltaNet(ops *devOps, ds *gpuSession, hy *gpuHybrid, T, pos0 int) {
	c := s.m.cfg
	h := c.Hybrid
	be := ds.be
	cd, vd, dS, hv, hk := h.ConvDim(), h.ValueDim(), h.DState, h.NVHeads, h.NKHeads
	eps := float32(c.RMSEps)
	conv, ssm := ds.conv[hy.state], ds.ssm[hy.state]
	if pos0 == 0 { // a new sequence starts from zero states
		if h.ConvK > 1 {
			ops.do(func() error { return be.Zero(conv, (h.ConvK-1)*cd) })
		}
		ops.do(func() error { return be.Zero(ssm, hv*dS*dS) })
	}
	ops.do(func() error { return be.MatMul(ds.mixed, hy.qkv, 0, ds.h, T) })
	ops.do(func() error { return be.MatMul(ds.z, hy.z, 0, ds.h, T) })
	ops.do(func() error { return be.MatMul(ds.bb, hy.beta, 0, ds.h, T) })
	ops.do(func() error { return be.MatMul(ds.aa, hy.alpha, 0, ds.h, T) })
	ops.do(func() error { return be.DeltaNetGates(ds.bb, ds.aa, hy.dtBias, hy.ssmA, hv, T) })
	ops.do(func() error { return be.SSMConv(ds.cout, ds.mixed, conv, hy.conv, T, cd, h.ConvK) })
	ops.do(func() error { return be.L2NormHeads(ds.cout, dS, 2*hk, T, cd, eps) })
	shape := cuda.DeltaNetShape{DState: dS, NKHeads: hk, NVHeads: hv, Stride: cd}
	scale := 1 / float32(math.Sqrt(float64(dS)))
	ops.do(func() error { return be.DeltaRule(ds.y, ds.cout, ds.bb, ds.aa, ssm, T, shape, scale) })
	ops.do(func() error { return be.RMSNorm(ds.y, ds.y, hy.ssmNorm, dS, T*hv, eps) })
	ops.do(func() error { return be.SwiGLU(ds.z, ds.y, T*vd) }) // z = SiLU(z)·RMSNorm(o)·w
	ops.do(func() error { return be.MatMul(ds.tmp, hy.out, 0, ds.z, T) })
}

// gpuGatedAttention is gatedAttention on the device: query and gate from attn_q, per-head q/k
// RMSNorm, RoPE (pairs of the fourth stream unrotated through their +Inf divisor), the KV cache,
// attention, output·σ(gate), attn_output into ds.tmp.
func (s *Session) gpuGatedAttention(ops *devOps, ds *gpuSession, b *gpuBlock, T, pos0 int) {
	c := s.m.cfg
	g := s.m.gpu
	be := ds.be
	hd, nh, nkv := c.HeadDim, c.NHead, c.NHeadKV
	qd := c.QDim()
	eps := float32(c.RMSEps)
	ops.do(func() error { return be.MatMul(ds.qg, b.q, 0, ds.h, T) })
	ops.do(func() error { return be.SplitHeads(ds.q, ds.gate, ds.qg, hd, nh, T) })
	ops.do(func() error { return be.MatMul(ds.k, b.k, 0, ds.h, T) })
	ops.do(func() error { return be.MatMul(ds.v, b.v, 0, ds.h, T) })
	ops.do(func() error { return be.RMSNorm(ds.q, ds.q, b.qNorm, hd, T*nh, eps) })
	ops.do(func() error { return be.RMSNorm(ds.k, ds.k, b.kNorm, hd, T*nkv, eps) })
	ops.do(func() error { return be.RoPE(ds.q, T, nh, hd, pos0, &g.rope) })
	ops.do(func() error { return be.RoPE(ds.k, T, nkv, hd, pos0, &g.rope) })
	ops.do(func() error { return be.KVStore(ds.kv, b.kv, pos0, T, ds.k, ds.v) })
	ops.do(func() error { return be.Attention(ds.att, ds.q, ds.kv, b.kv, pos0, T, nh, nkv, hd) })
	ops.do(func() error { return be.SigmoidMul(ds.att, ds.gate, T*qd) })
	ops.do(func() error { return be.MatMul(ds.tmp, b.o, 0, ds.att, T) })
}
