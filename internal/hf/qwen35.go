package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Layer kinds of a hybrid-attention model (config.json "layer_types").
const (
	LayerLinearAttention = "linear_attention" // Gated DeltaNet
	LayerFullAttention   = "full_attention"   // gated softmax attention
)

// HybridConfig holds the fields of a Qwen3.5 / Qwen3.6 hybrid-attention model
// (Qwen3_5ForConditionalGeneration, Qwen3_5ForCausalLM, Qwen3_5MoeForConditionalGeneration,
// Qwen3_5MoeForCausalLM): Gated DeltaNet linear-attention layers interleaved with gated full
// attention, partial interleaved multi-section RoPE and multi-token-prediction (MTP) layers.
type HybridConfig struct {
	// LayerTypes has one entry per decoder layer, LayerLinearAttention or LayerFullAttention;
	// from layer_types, or derived from FullAttentionInterval when absent.
	LayerTypes []string
	// FullAttentionInterval: layer i is full attention iff (i+1) % interval == 0 (default 4).
	// llama.cpp derives the layer kinds from it alone, so layer_types must agree with it.
	FullAttentionInterval int

	LinearNumKeyHeads   int // linear_num_key_heads (Hk)
	LinearNumValueHeads int // linear_num_value_heads (Hv, a multiple of Hk)
	LinearKeyHeadDim    int // linear_key_head_dim (dk)
	LinearValueHeadDim  int // linear_value_head_dim (dv)
	LinearConvKernelDim int // linear_conv_kernel_dim (K, the causal conv width)

	// PartialRotaryFactor is the fraction of head_dim RoPE rotates (default 0.25); from
	// rope_parameters / rope_scaling or the root.
	PartialRotaryFactor float64
	// MRopeSection is rope_parameters.mrope_section (nil when absent; llama.cpp's converter
	// then writes [11, 11, 10, 0]).
	MRopeSection []int
	// MTPLayers is mtp_num_hidden_layers: extra full-attention decoder layers (mtp.layers.K.*)
	// used for multi-token prediction, not run by the main forward pass.
	MTPLayers int
	// AttnOutputGate (attn_output_gate, default true): q_proj also produces a per-head gate
	// applied to the attention output through a sigmoid.
	AttnOutputGate bool
	// Multimodal is true for a *ForConditionalGeneration checkpoint: text weights live under
	// "model.language_model.", a vision tower under "model.visual." (not listed by
	// ExpectedTensors; llama.cpp puts it in a separate mmproj file).
	Multimodal bool
}

// IsHybrid reports whether the architecture is a Qwen3.5-style hybrid-attention model.
func (c *Config) IsHybrid() bool { return c.Hybrid != nil }

// IsLinearAttentionLayer reports whether decoder layer i (< num_hidden_layers) is a Gated
// DeltaNet layer. MTP layers and layers of non-hybrid models use full attention.
func (c *Config) IsLinearAttentionLayer(i int) bool {
	h := c.Hybrid
	if h == nil || i < 0 || i >= len(h.LayerTypes) {
		return false
	}
	return h.LayerTypes[i] == LayerLinearAttention
}

// LinearKeyDim is linear_num_key_heads·linear_key_head_dim (0 for non-hybrid models).
func (h *HybridConfig) LinearKeyDim() int {
	if h == nil {
		return 0
	}
	return h.LinearNumKeyHeads * h.LinearKeyHeadDim
}

// LinearValueDim is linear_num_value_heads·linear_value_head_dim.
func (h *HybridConfig) LinearValueDim() int {
	if h == nil {
		return 0
	}
	return h.LinearNumValueHeads * h.LinearValueHeadDim
}

// ConvDim is the width of the fused q|k|v projection and of the causal convolution:
// 2·key_dim + value_dim.
func (h *HybridConfig) ConvDim() int { return 2*h.LinearKeyDim() + h.LinearValueDim() }

// RopeDims is int(head_dim·partial_rotary_factor), the rotated dimensions per head
// (llama.cpp's rope.dimension_count).
func (c *Config) RopeDims() int {
	if c.Hybrid == nil {
		return c.HeadDim
	}
	return int(float64(c.HeadDim) * c.Hybrid.PartialRotaryFactor)
}

// hybrid reads the hybrid-attention fields when the architecture is qwen35 / qwen35moe.
func (p *parser) hybrid(c *Config) *HybridConfig {
	if p.err != nil {
		return nil
	}
	arch, err := c.Arch()
	if err != nil || (arch != "qwen35" && arch != "qwen35moe") {
		return nil
	}
	h := &HybridConfig{}
	for _, a := range c.Architectures {
		if strings.HasSuffix(a, "ForConditionalGeneration") {
			h.Multimodal = true
		}
	}
	h.FullAttentionInterval = p.intOpt("full_attention_interval", 4, 1, maxLayers)
	h.LinearNumKeyHeads = p.intReq("linear_num_key_heads", 1, maxHeads)
	h.LinearNumValueHeads = p.intReq("linear_num_value_heads", 1, maxHeads)
	h.LinearKeyHeadDim = p.intReq("linear_key_head_dim", 1, maxDim)
	h.LinearValueHeadDim = p.intReq("linear_value_head_dim", 1, maxDim)
	h.LinearConvKernelDim = p.intReq("linear_conv_kernel_dim", 1, 1024)
	h.MTPLayers = p.intOpt("mtp_num_hidden_layers", 0, 0, 64)
	h.AttnOutputGate = p.boolean("attn_output_gate", true)
	if p.has("layer_types") {
		h.LayerTypes = p.strings("layer_types")
	}
	// rope_parameters (transformers v5) or rope_scaling carry partial_rotary_factor and
	// mrope_section; the root may carry partial_rotary_factor too.
	h.PartialRotaryFactor = p.float("partial_rotary_factor", 0)
	for _, key := range []string{"rope_parameters", "rope_scaling"} {
		obj, ok := p.rawAny[key].(map[string]any)
		if !ok {
			continue
		}
		if v, ok := obj["partial_rotary_factor"]; ok && v != nil {
			n, isNum := v.(json.Number)
			f, err := n.Float64()
			if !isNum || err != nil {
				p.fail(key, "partial_rotary_factor: expected a number, found %v", v)
				return nil
			}
			h.PartialRotaryFactor = f
		}
		if v, ok := obj["mrope_section"]; ok && v != nil {
			list, isList := v.([]any)
			if !isList {
				p.fail(key, "mrope_section: expected a list of integers, found %v", v)
				return nil
			}
			for _, e := range list {
				n, isNum := e.(json.Number)
				i, err := n.Int64()
				if !isNum || err != nil || i < 0 || i > maxDim {
					p.fail(key, "mrope_section: expected non-negative integers, found %v", e)
					return nil
				}
				h.MRopeSection = append(h.MRopeSection, int(i))
			}
		}
		break
	}
	if h.PartialRotaryFactor == 0 {
		h.PartialRotaryFactor = 0.25
	}
	return h
}

// validateHybrid checks the hybrid-attention fields against each other and the rest of the
// configuration, and fills LayerTypes when config.json has none.
func (c *Config) validateHybrid() error {
	h := c.Hybrid
	if h == nil {
		return nil
	}
	fail := func(field, format string, args ...any) error {
		return &ConfigError{Path: c.Path, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if h.LinearNumValueHeads%h.LinearNumKeyHeads != 0 {
		return fail("linear_num_value_heads", "%d is not a multiple of linear_num_key_heads (%d)", h.LinearNumValueHeads, h.LinearNumKeyHeads)
	}
	if !(h.PartialRotaryFactor > 0 && h.PartialRotaryFactor <= 1) || math.IsNaN(h.PartialRotaryFactor) {
		return fail("partial_rotary_factor", "%g is not in (0, 1]", h.PartialRotaryFactor)
	}
	if n := c.RopeDims(); n < 2 || n%2 != 0 {
		return fail("partial_rotary_factor", "head_dim %d x %g gives %d rotated dimensions, want a positive even number", c.HeadDim, h.PartialRotaryFactor, n)
	}
	if len(h.MRopeSection) > 4 {
		return fail("rope_parameters", "mrope_section has %d entries, at most 4 allowed", len(h.MRopeSection))
	}
	if h.MRopeSection != nil {
		sum := 0
		for _, s := range h.MRopeSection {
			sum += s
		}
		if sum == 0 || sum > c.HeadDim {
			return fail("rope_parameters", "mrope_section %v sums to %d, want a value in [1, head_dim %d]", h.MRopeSection, sum, c.HeadDim)
		}
	}
	derived := make([]string, c.NumHiddenLayers)
	for i := range derived {
		derived[i] = LayerLinearAttention
		if (i+1)%h.FullAttentionInterval == 0 {
			derived[i] = LayerFullAttention
		}
	}
	if h.LayerTypes == nil {
		h.LayerTypes = derived
	} else {
		if len(h.LayerTypes) != c.NumHiddenLayers {
			return fail("layer_types", "%d entries for %d layers", len(h.LayerTypes), c.NumHiddenLayers)
		}
		for i, t := range h.LayerTypes {
			if t != LayerLinearAttention && t != LayerFullAttention {
				return fail("layer_types", "entry %d is %q, want %q or %q", i, t, LayerLinearAttention, LayerFullAttention)
			}
			if t != derived[i] {
				return fail("layer_types", "layer %d is %s but full_attention_interval %d makes it %s (llama.cpp derives the layer kinds from the interval)", i, t, h.FullAttentionInterval, derived[i])
			}
		}
	}
	// bound the extra parameters of the linear-attention projections
	conv, v := float64(h.ConvDim()), float64(h.LinearValueDim())
	if est := float64(c.NumHiddenLayers) * float64(c.HiddenSize) * (conv + 2*v); est > maxParams {
		return fail("", "linear-attention dimensions imply about %.3g parameters, over the %.0g limit", est, float64(maxParams))
	}
	return nil
}

// hybridPrefix is the name prefix of the text model's tensors: multimodal checkpoints keep
// them under model.language_model.
func (c *Config) hybridPrefix() string {
	if c.Hybrid != nil && c.Hybrid.Multimodal {
		return "model.language_model."
	}
	return "model."
}

// hybridTensors lists the checkpoint tensors of a qwen35 / qwen35moe model, in the layout of
// the released checkpoints: routed experts of the decoder layers as fused 3-D tensors
// (mlp.experts.gate_up_proj [E, 2·ff, hidden], mlp.experts.down_proj [E, hidden, ff]),
// those of the MTP layers one tensor per expert; A_log and dt_bias per value head; the
// conv1d kernel as [conv_dim, 1, K]. The vision tower of multimodal checkpoints is not listed.
func (c *Config) hybridTensors() []TensorSpec {
	h := c.Hybrid
	hid, hd := int64(c.HiddenSize), int64(c.HeadDim)
	nh, nkv := int64(c.NumAttentionHeads), int64(c.NumKeyValueHeads)
	vocab := int64(c.VocabSize)
	var out []TensorSpec
	add := func(name string, role TensorRole, layer, expert int, mtp bool, shape ...int64) {
		out = append(out, TensorSpec{Name: name, Shape: shape, Role: role, Layer: layer, Expert: expert, MTP: mtp})
	}
	pre := c.hybridPrefix()
	qOut := nh * hd
	if h.AttnOutputGate {
		qOut *= 2
	}
	fullAttn := func(lp string, l int, mtp bool) {
		add(lp+"self_attn.q_proj.weight", RoleLinear, l, -1, mtp, qOut, hid)
		add(lp+"self_attn.k_proj.weight", RoleLinear, l, -1, mtp, nkv*hd, hid)
		add(lp+"self_attn.v_proj.weight", RoleLinear, l, -1, mtp, nkv*hd, hid)
		add(lp+"self_attn.o_proj.weight", RoleLinear, l, -1, mtp, hid, nh*hd)
		add(lp+"self_attn.q_norm.weight", RoleNorm, l, -1, mtp, hd)
		add(lp+"self_attn.k_norm.weight", RoleNorm, l, -1, mtp, hd)
	}
	ffn := func(lp string, l int, mtp bool) {
		if c.NumExperts == 0 {
			ff := int64(c.IntermediateSize)
			add(lp+"mlp.gate_proj.weight", RoleLinear, l, -1, mtp, ff, hid)
			add(lp+"mlp.up_proj.weight", RoleLinear, l, -1, mtp, ff, hid)
			add(lp+"mlp.down_proj.weight", RoleLinear, l, -1, mtp, hid, ff)
			return
		}
		ne, ff := int64(c.NumExperts), int64(c.MoeIntermediateSize)
		add(lp+"mlp.gate.weight", RoleRouter, l, -1, mtp, ne, hid)
		if mtp {
			for e := 0; e < c.NumExperts; e++ {
				ep := fmt.Sprintf("%smlp.experts.%d.", lp, e)
				add(ep+"gate_proj.weight", RoleLinear, l, e, mtp, ff, hid)
				add(ep+"up_proj.weight", RoleLinear, l, e, mtp, ff, hid)
				add(ep+"down_proj.weight", RoleLinear, l, e, mtp, hid, ff)
			}
		} else {
			add(lp+"mlp.experts.gate_up_proj", RoleLinear, l, AllExperts, mtp, ne, 2*ff, hid)
			add(lp+"mlp.experts.down_proj", RoleLinear, l, AllExperts, mtp, ne, hid, ff)
		}
		if sf := int64(c.SharedExpertIntermediateSize); sf > 0 {
			add(lp+"mlp.shared_expert.gate_proj.weight", RoleLinear, l, -1, mtp, sf, hid)
			add(lp+"mlp.shared_expert.up_proj.weight", RoleLinear, l, -1, mtp, sf, hid)
			add(lp+"mlp.shared_expert.down_proj.weight", RoleLinear, l, -1, mtp, hid, sf)
			add(lp+"mlp.shared_expert_gate.weight", RoleRouter, l, -1, mtp, 1, hid)
		}
	}
	add(pre+"embed_tokens.weight", RoleEmbedding, -1, -1, false, vocab, hid)
	hv, dv := int64(h.LinearNumValueHeads), int64(h.LinearValueHeadDim)
	conv, vdim := int64(h.ConvDim()), int64(h.LinearValueDim())
	for l := 0; l < c.NumHiddenLayers; l++ {
		lp := fmt.Sprintf("%slayers.%d.", pre, l)
		add(lp+"input_layernorm.weight", RoleNorm, l, -1, false, hid)
		if c.IsLinearAttentionLayer(l) {
			la := lp + "linear_attn."
			add(la+"in_proj_qkv.weight", RoleLinear, l, -1, false, conv, hid)
			add(la+"in_proj_z.weight", RoleLinear, l, -1, false, vdim, hid)
			add(la+"in_proj_b.weight", RoleLinear, l, -1, false, hv, hid)
			add(la+"in_proj_a.weight", RoleLinear, l, -1, false, hv, hid)
			add(la+"conv1d.weight", RoleConv, l, -1, false, conv, 1, int64(h.LinearConvKernelDim))
			add(la+"dt_bias", RoleSSM, l, -1, false, hv)
			add(la+"A_log", RoleSSM, l, -1, false, hv)
			add(la+"norm.weight", RoleNorm, l, -1, false, dv)
			add(la+"out_proj.weight", RoleLinear, l, -1, false, hid, vdim)
		} else {
			fullAttn(lp, l, false)
		}
		add(lp+"post_attention_layernorm.weight", RoleNorm, l, -1, false, hid)
		ffn(lp, l, false)
	}
	add(pre+"norm.weight", RoleNorm, -1, -1, false, hid)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", RoleOutput, -1, -1, false, vocab, hid)
	}
	for k := 0; k < h.MTPLayers; k++ {
		l := c.NumHiddenLayers + k
		lp := fmt.Sprintf("mtp.layers.%d.", k)
		add(lp+"input_layernorm.weight", RoleNorm, l, -1, true, hid)
		fullAttn(lp, l, true)
		add(lp+"post_attention_layernorm.weight", RoleNorm, l, -1, true, hid)
		ffn(lp, l, true)
	}
	if h.MTPLayers > 0 {
		l := c.NumHiddenLayers
		add("mtp.fc.weight", RoleLinear, l, -1, true, hid, 2*hid)
		add("mtp.pre_fc_norm_embedding.weight", RoleNorm, l, -1, true, hid)
		add("mtp.pre_fc_norm_hidden.weight", RoleNorm, l, -1, true, hid)
		add("mtp.norm.weight", RoleNorm, l, -1, true, hid)
	}
	return out
}
