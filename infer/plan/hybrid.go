package plan

import (
	"fmt"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/hf"
)

// HybridShape holds what a Qwen3.5 / Qwen3.6 hybrid-attention model (qwen35, qwen35moe) adds
// to a Shape: Gated DeltaNet layers with a recurrent state instead of a KV cache, a shared
// expert, and MTP blocks that llama.cpp does not load for plain inference.
type HybridShape struct {
	Linear     []bool `json:"linear_layers"` // per block: Gated DeltaNet (no KV cache)
	KeyHeads   int    `json:"linear_key_heads"`
	ValueHeads int    `json:"linear_value_heads"`
	HeadDim    int    `json:"linear_head_dim"`
	ConvKernel int    `json:"conv_kernel"`
	MTP        int    `json:"mtp_layers"`
	NFFShexp   int    `json:"shared_expert_ff,omitempty"`
}

func (h *HybridShape) convDim() int64 { return int64((2*h.KeyHeads + h.ValueHeads) * h.HeadDim) }
func (h *HybridShape) valDim() int64  { return int64(h.ValueHeads * h.HeadDim) }

// nFull is the number of blocks with softmax attention (and a KV cache).
func (h *HybridShape) nFull() int {
	n := 0
	for _, l := range h.Linear {
		if !l {
			n++
		}
	}
	return n
}

// RecurrentBytes is the recurrent memory of one sequence in one Gated DeltaNet block: the last
// conv_kernel−1 q|k|v rows and value_heads head_dim×head_dim delta-rule states, f32 (llama.cpp's
// r/s caches).
func (h *HybridShape) RecurrentBytes() int64 {
	return 4 * (int64(h.ConvKernel-1)*h.convDim() + int64(h.ValueHeads)*int64(h.HeadDim)*int64(h.HeadDim))
}

func hybridShapeFromHF(c *hf.Config, s Shape) (Shape, error) {
	hy := c.Hybrid
	if hy == nil {
		return s, fmt.Errorf("%s: not a hybrid-attention configuration", c.Path)
	}
	if hy.LinearKeyHeadDim != hy.LinearValueHeadDim {
		return s, fmt.Errorf("%s: linear_key_head_dim %d != linear_value_head_dim %d is not supported by llama.cpp", c.Path, hy.LinearKeyHeadDim, hy.LinearValueHeadDim)
	}
	s.QKNorm = true
	h := &HybridShape{KeyHeads: hy.LinearNumKeyHeads, ValueHeads: hy.LinearNumValueHeads, HeadDim: hy.LinearKeyHeadDim,
		ConvKernel: hy.LinearConvKernelDim, MTP: hy.MTPLayers}
	for i := 0; i < c.NumHiddenLayers; i++ {
		h.Linear = append(h.Linear, c.IsLinearAttentionLayer(i))
	}
	if c.NumExperts > 0 {
		s.NExpert, s.NExpertUsed, s.NFFExp = c.NumExperts, c.NumExpertsPerTok, c.MoeIntermediateSize
		h.NFFShexp = c.SharedExpertIntermediateSize
	}
	s.Hybrid = h
	return s, s.validate()
}

func hybridShapeFromConfig(c *infer.Config) *HybridShape {
	hc := c.Hybrid
	return &HybridShape{Linear: append([]bool(nil), hc.Linear...), KeyHeads: hc.NKHeads, ValueHeads: hc.NVHeads,
		HeadDim: hc.DState, ConvKernel: hc.ConvK, MTP: hc.NextN, NFFShexp: hc.NFFShexp}
}

// fromHybridShape lists the tensors llama.cpp's converter writes for a qwen35 / qwen35moe
// model (MTP blocks included, numbered after the trunk), typed by mix; conv kernels and the
// shared-expert gate stay F32 as the converter and llama-quantize keep them.
func fromHybridShape(s Shape, mix TypeMix) (*Model, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	h := s.Hybrid
	m := &Model{Shape: s, Source: "shape"}
	E, qd, kd, hd := int64(s.NEmbd), int64(s.NHead*s.HeadDim), int64(s.NHeadKV*s.HeadDim), int64(s.HeadDim)
	var errs []error
	add := func(name string, dims ...int64) {
		t := mix.typeFor(name, dims)
		if len(dims) >= 2 && (dims[1] == 1 || strings.HasSuffix(name, "ssm_conv1d.weight")) {
			t = gguf.TypeF32
		}
		b, err := tensorBytes(t, dims)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
			return
		}
		m.Tensors = append(m.Tensors, Tensor{Name: name, Layer: layerOf(name), Group: groupOf(name), Dims: dims,
			Type: t, TypeS: t.String(), Bytes: b})
	}
	add("token_embd.weight", E, int64(s.NVocab))
	add("output_norm.weight", E)
	if !s.Tied {
		add("output.weight", E, int64(s.NVocab))
	}
	for il := 0; il < s.NLayer+h.MTP; il++ {
		n := func(x string) string { return fmt.Sprintf("blk.%d.%s", il, x) }
		add(n("attn_norm.weight"), E)
		add(n("post_attention_norm.weight"), E)
		if il < s.NLayer && h.Linear[il] {
			conv, vd, hv := h.convDim(), h.valDim(), int64(h.ValueHeads)
			add(n("attn_qkv.weight"), E, conv)
			add(n("attn_gate.weight"), E, vd)
			add(n("ssm_beta.weight"), E, hv)
			add(n("ssm_alpha.weight"), E, hv)
			add(n("ssm_conv1d.weight"), int64(h.ConvKernel), conv)
			add(n("ssm_dt.bias"), hv)
			add(n("ssm_a"), hv)
			add(n("ssm_norm.weight"), int64(h.HeadDim))
			add(n("ssm_out.weight"), vd, E)
		} else {
			add(n("attn_q.weight"), E, 2*qd)
			add(n("attn_k.weight"), E, kd)
			add(n("attn_v.weight"), E, kd)
			add(n("attn_output.weight"), qd, E)
			add(n("attn_q_norm.weight"), hd)
			add(n("attn_k_norm.weight"), hd)
		}
		if s.MoE() {
			X, F, SF := int64(s.NExpert), int64(s.NFFExp), int64(h.NFFShexp)
			add(n("ffn_gate_inp.weight"), E, X)
			add(n("ffn_gate_exps.weight"), E, F, X)
			add(n("ffn_up_exps.weight"), E, F, X)
			add(n("ffn_down_exps.weight"), F, E, X)
			if SF > 0 {
				add(n("ffn_gate_inp_shexp.weight"), E, 1)
				add(n("ffn_gate_shexp.weight"), E, SF)
				add(n("ffn_up_shexp.weight"), E, SF)
				add(n("ffn_down_shexp.weight"), SF, E)
			}
		} else {
			F := int64(s.NFF)
			add(n("ffn_gate.weight"), E, F)
			add(n("ffn_up.weight"), E, F)
			add(n("ffn_down.weight"), F, E)
		}
		if il >= s.NLayer {
			add(n("nextn.eh_proj.weight"), 2*E, E)
			add(n("nextn.enorm.weight"), E)
			add(n("nextn.hnorm.weight"), E)
			add(n("nextn.shared_head_norm.weight"), E)
		}
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return m, nil
}

// isMTP reports whether tensor t belongs to an MTP block (after the trunk), which llama.cpp
// skips when loading a model for plain inference.
func (s Shape) isMTP(t Tensor) bool { return s.Hybrid != nil && t.Layer >= s.NLayer }

// hybridKV replaces the per-layer KV cache of a hybrid model: full-attention blocks cache ctx
// tokens, Gated DeltaNet blocks hold a fixed recurrent state.
func hybridKV(s Shape, b *Breakdown, kvRow int64, o Options) {
	h := s.Hybrid
	nFull := h.nFull()
	b.KVPerToken = kvRow * int64(nFull)
	b.KV = b.KVPerToken * int64(o.Ctx)
	for i := range b.Layers {
		if i < len(h.Linear) && h.Linear[i] {
			b.Layers[i].KV = h.RecurrentBytes()
			b.KV += h.RecurrentBytes()
		} else {
			b.Layers[i].KV = kvRow * int64(o.Ctx)
		}
	}
}
