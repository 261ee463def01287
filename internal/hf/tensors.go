package hf

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tq-project/tq/internal/safetensors"
)

// TensorRole classifies an expected checkpoint tensor.
type TensorRole int

// Tensor roles.
const (
	RoleEmbedding TensorRole = iota // model.embed_tokens.weight
	RoleOutput                      // lm_head.weight
	RoleNorm                        // RMSNorm weights (incl. q_norm/k_norm)
	RoleLinear                      // projection weights [out, in]
	RoleBias                        // projection biases
	RoleRouter                      // MoE router (mlp.gate) and shared-expert gate
	RoleConv                        // causal conv1d kernel of a linear-attention layer
	RoleSSM                         // per-head linear-attention parameters (A_log, dt_bias)
)

// AllExperts is TensorSpec.Expert of a fused tensor that stacks every routed expert
// (mlp.experts.gate_up_proj / mlp.experts.down_proj).
const AllExperts = -2

// TensorSpec is one tensor a checkpoint of the configured architecture must contain.
type TensorSpec struct {
	Name   string
	Shape  []int64 // HF (PyTorch) order: [out, in] for linear weights
	Role   TensorRole
	Layer  int // decoder layer (num_hidden_layers + k for MTP layer k), or -1
	Expert int // routed expert index, AllExperts for a fused expert stack, or -1
	// MTP marks the multi-token-prediction layers' tensors (mtp.*), which the main forward
	// pass does not use.
	MTP bool
}

// ExpectedTensors lists the tensors (with HF names and shapes) that a checkpoint of this
// configuration contains, in a canonical order: embeddings, layers, final norm, lm_head.
func (c *Config) ExpectedTensors() ([]TensorSpec, error) {
	arch, err := c.Arch()
	if err != nil {
		return nil, err
	}
	if c.Hybrid != nil {
		return c.hybridTensors(), nil
	}
	h, hd := int64(c.HiddenSize), int64(c.HeadDim)
	q, kv := int64(c.NumAttentionHeads)*hd, int64(c.NumKeyValueHeads)*hd
	vocab := int64(c.VocabSize)
	qkvBias, oBias := c.AttentionBiases()
	var out []TensorSpec
	add := func(name string, role TensorRole, layer, expert int, shape ...int64) {
		out = append(out, TensorSpec{Name: name, Shape: shape, Role: role, Layer: layer, Expert: expert})
	}
	add("model.embed_tokens.weight", RoleEmbedding, -1, -1, vocab, h)
	for l := 0; l < c.NumHiddenLayers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		add(pre+"input_layernorm.weight", RoleNorm, l, -1, h)
		add(pre+"self_attn.q_proj.weight", RoleLinear, l, -1, q, h)
		add(pre+"self_attn.k_proj.weight", RoleLinear, l, -1, kv, h)
		add(pre+"self_attn.v_proj.weight", RoleLinear, l, -1, kv, h)
		add(pre+"self_attn.o_proj.weight", RoleLinear, l, -1, h, q)
		if qkvBias {
			add(pre+"self_attn.q_proj.bias", RoleBias, l, -1, q)
			add(pre+"self_attn.k_proj.bias", RoleBias, l, -1, kv)
			add(pre+"self_attn.v_proj.bias", RoleBias, l, -1, kv)
		}
		if oBias {
			add(pre+"self_attn.o_proj.bias", RoleBias, l, -1, h)
		}
		if arch == "qwen3" || arch == "qwen3moe" {
			add(pre+"self_attn.q_norm.weight", RoleNorm, l, -1, hd)
			add(pre+"self_attn.k_norm.weight", RoleNorm, l, -1, hd)
		}
		add(pre+"post_attention_layernorm.weight", RoleNorm, l, -1, h)
		if !c.IsMoELayer(l) {
			ff := int64(c.IntermediateSize)
			add(pre+"mlp.gate_proj.weight", RoleLinear, l, -1, ff, h)
			add(pre+"mlp.up_proj.weight", RoleLinear, l, -1, ff, h)
			add(pre+"mlp.down_proj.weight", RoleLinear, l, -1, h, ff)
			continue
		}
		ne, ff := int64(c.NumExperts), int64(c.MoeIntermediateSize)
		add(pre+"mlp.gate.weight", RoleRouter, l, -1, ne, h)
		for e := 0; e < c.NumExperts; e++ {
			ep := fmt.Sprintf("%smlp.experts.%d.", pre, e)
			add(ep+"gate_proj.weight", RoleLinear, l, e, ff, h)
			add(ep+"up_proj.weight", RoleLinear, l, e, ff, h)
			add(ep+"down_proj.weight", RoleLinear, l, e, h, ff)
		}
		if sf := int64(c.SharedExpertIntermediateSize); sf > 0 {
			add(pre+"mlp.shared_expert.gate_proj.weight", RoleLinear, l, -1, sf, h)
			add(pre+"mlp.shared_expert.up_proj.weight", RoleLinear, l, -1, sf, h)
			add(pre+"mlp.shared_expert.down_proj.weight", RoleLinear, l, -1, h, sf)
			add(pre+"mlp.shared_expert_gate.weight", RoleRouter, l, -1, 1, h)
		}
	}
	add("model.norm.weight", RoleNorm, -1, -1, h)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", RoleOutput, -1, -1, vocab, h)
	}
	return out, nil
}

// ParamCount returns the number of parameters implied by the configuration (the tensors
// of ExpectedTensors, MTP layers included) and, for mixture-of-experts models, the number
// active per token in the main forward pass (routed experts counted num_experts_per_tok
// times per layer instead of num_experts; MTP layers, which only drafting runs, not at all).
func (c *Config) ParamCount() (total, active int64, err error) {
	specs, err := c.ExpectedTensors()
	if err != nil {
		return 0, 0, err
	}
	var expert, mtp int64
	for _, s := range specs {
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		total += n
		switch {
		case s.MTP:
			mtp += n
		case s.Expert >= 0 || s.Expert == AllExperts:
			expert += n
		}
	}
	active = total - mtp
	if c.NumExperts > 0 && expert > 0 {
		active = active - expert + expert/int64(c.NumExperts)*int64(c.NumExpertsPerTok)
	}
	return total, active, nil
}

// FP8BlockScaled reports whether the configuration declares block-scaled FP8 weights
// (quant_method "fp8" with weight_block_size), returning the block size [rows, cols].
func (c *Config) FP8BlockScaled() (rows, cols int, ok bool) {
	q := c.QuantizationConfig
	if q == nil || q.QuantMethod != "fp8" || len(q.WeightBlockSize) != 2 {
		return 0, 0, false
	}
	return q.WeightBlockSize[0], q.WeightBlockSize[1], true
}

// ScaleSuffix is appended to a block-scaled FP8 weight's name to name its scales.
const ScaleSuffix = "_scale_inv"

// CheckWeights verifies that w holds every tensor of ExpectedTensors with the expected
// shape, and that each FP8 (F8_E4M3) linear weight has its weight_scale_inv block scales
// of shape [ceil(out/rows), ceil(in/cols)] ([E, ceil(out/rows), ceil(in/cols)] for a 3-D
// expert stack, per-expert tensors included). Extra tensors are allowed.
func (c *Config) CheckWeights(w *safetensors.Model) error {
	specs, err := c.ExpectedTensors()
	if err != nil {
		return err
	}
	var missing []string
	for _, s := range specs {
		ti, ok := w.Lookup(s.Name)
		if !ok {
			if alt := perExpertLayout(s); alt != nil && hasAll(w, alt) {
				if err := c.checkShapes(w, alt); err != nil {
					return err
				}
				continue
			}
			missing = append(missing, s.Name)
			continue
		}
		if !slices.Equal(ti.Shape, s.Shape) {
			return fmt.Errorf("hf: %s: tensor %q has shape %v, config.json implies %v", ti.File, s.Name, ti.Shape, s.Shape)
		}
		if err := c.checkFP8(w, s, ti); err != nil {
			return err
		}
	}
	if n := len(missing); n > 0 {
		more := ""
		if len(missing) > 5 {
			more = fmt.Sprintf(" and %d more", len(missing)-5)
			missing = missing[:5]
		}
		return fmt.Errorf("hf: weights lack %d tensor(s) that config.json implies: %s%s", n, strings.Join(missing, ", "), more)
	}
	return nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// perExpertLayout returns the per-expert tensors that may stand in for a fused expert stack
// (mlp.experts.E.{gate,up}_proj.weight for gate_up_proj, mlp.experts.E.down_proj.weight for
// down_proj), or nil for any other tensor.
func perExpertLayout(s TensorSpec) []TensorSpec {
	if s.Expert != AllExperts || len(s.Shape) != 3 {
		return nil
	}
	base, proj, ok := strings.Cut(s.Name, "mlp.experts.")
	if !ok {
		return nil
	}
	ne, rows, cols := s.Shape[0], s.Shape[1], s.Shape[2]
	var out []TensorSpec
	for e := int64(0); e < ne; e++ {
		ep := fmt.Sprintf("%smlp.experts.%d.", base, e)
		switch proj {
		case "gate_up_proj":
			out = append(out, TensorSpec{Name: ep + "gate_proj.weight", Shape: []int64{rows / 2, cols}, Role: RoleLinear, Layer: s.Layer, Expert: int(e)},
				TensorSpec{Name: ep + "up_proj.weight", Shape: []int64{rows / 2, cols}, Role: RoleLinear, Layer: s.Layer, Expert: int(e)})
		case "down_proj":
			out = append(out, TensorSpec{Name: ep + "down_proj.weight", Shape: []int64{rows, cols}, Role: RoleLinear, Layer: s.Layer, Expert: int(e)})
		default:
			return nil
		}
	}
	return out
}

func hasAll(w *safetensors.Model, specs []TensorSpec) bool {
	for _, s := range specs {
		if _, ok := w.Lookup(s.Name); !ok {
			return false
		}
	}
	return true
}

func (c *Config) checkShapes(w *safetensors.Model, specs []TensorSpec) error {
	for _, s := range specs {
		ti, _ := w.Lookup(s.Name)
		if !slices.Equal(ti.Shape, s.Shape) {
			return fmt.Errorf("hf: %s: tensor %q has shape %v, config.json implies %v", ti.File, s.Name, ti.Shape, s.Shape)
		}
		if err := c.checkFP8(w, s, ti); err != nil {
			return err
		}
	}
	return nil
}

// checkFP8 verifies the block scales of an FP8 tensor ti (spec s; no-op for other dtypes):
// weight_scale_inv has shape [ceil(out/rows), ceil(in/cols)], or [E, ceil(out/rows),
// ceil(in/cols)] for a 3-D stack of experts (one grid per expert, as blocks never span two).
func (c *Config) checkFP8(w *safetensors.Model, s TensorSpec, ti safetensors.TensorInfo) error {
	if ti.DType != safetensors.F8E4M3 && ti.DType != safetensors.F8E5M2 {
		return nil
	}
	br, bc, fp8 := c.FP8BlockScaled()
	if s.Role != RoleLinear || !fp8 {
		return fmt.Errorf("hf: %s: tensor %q is %v but config.json declares no block-scaled fp8 quantization for it", ti.File, s.Name, ti.DType)
	}
	nd := len(s.Shape)
	if nd != 2 && (nd != 3 || s.Expert != AllExperts) {
		return fmt.Errorf("hf: %s: tensor %q is a %d-D %v tensor; only 2-D fp8 weights and 3-D expert stacks are supported", ti.File, s.Name, nd, ti.DType)
	}
	scaleName := s.Name + ScaleSuffix
	sc, ok := w.Lookup(scaleName)
	if !ok {
		return fmt.Errorf("hf: %s: fp8 tensor %q has no %q", ti.File, s.Name, scaleName)
	}
	want := []int64{ceilDiv(s.Shape[nd-2], int64(br)), ceilDiv(s.Shape[nd-1], int64(bc))}
	if nd == 3 {
		want = append([]int64{s.Shape[0]}, want...)
	}
	if !slices.Equal(sc.Shape, want) {
		return fmt.Errorf("hf: %s: tensor %q has shape %v, want %v for block size [%d, %d]", sc.File, scaleName, sc.Shape, want, br, bc)
	}
	if !sc.DType.IsFloat() {
		return fmt.Errorf("hf: %s: tensor %q has dtype %v, want a float type", sc.File, scaleName, sc.DType)
	}
	return nil
}
