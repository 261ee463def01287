package modelsrc

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/safetensors"
)

// Qwen3.5 / Qwen3.6 hybrid-attention models (conversion/qwen.py Qwen3_5TextModel and
// Qwen3_5MoeTextModel: _Qwen35MRopeMixin + _LinearAttentionVReorderBase over Qwen3NextModel,
// _QwenMtpMixin and Qwen2MoeModel). Every (1+w)-style RMSNorm weight gets +1 (except
// linear_attn.norm), A_log becomes ssm_a = -exp(A_log), dt_bias becomes ssm_dt.bias, the conv1d
// kernel [conv_dim, 1, K] is squeezed to {K, conv_dim}, value heads are reordered from grouped
// to tiled order when linear_num_value_heads != linear_num_key_heads, and the MTP block
// (mtp.*) is exported as block num_hidden_layers + k with nextn.* tensors.

// hybridLayer is the name map of both variants (post_attention_layernorm is
// post_attention_norm, not ffn_norm, for these architectures).
var hybridLayer = map[string]string{
	"input_layernorm.weight":          "attn_norm.weight",
	"post_attention_layernorm.weight": "post_attention_norm.weight",
	"self_attn.q_proj.weight":         "attn_q.weight",
	"self_attn.k_proj.weight":         "attn_k.weight",
	"self_attn.v_proj.weight":         "attn_v.weight",
	"self_attn.o_proj.weight":         "attn_output.weight",
	"self_attn.q_norm.weight":         "attn_q_norm.weight",
	"self_attn.k_norm.weight":         "attn_k_norm.weight",
	"linear_attn.in_proj_qkv.weight":  "attn_qkv.weight",
	"linear_attn.in_proj_z.weight":    "attn_gate.weight",
	"linear_attn.in_proj_b.weight":    "ssm_beta.weight",
	"linear_attn.in_proj_a.weight":    "ssm_alpha.weight",
	"linear_attn.conv1d.weight":       "ssm_conv1d.weight",
	"linear_attn.dt_bias":             "ssm_dt.bias",
	"linear_attn.A_log":               "ssm_a",
	"linear_attn.norm.weight":         "ssm_norm.weight",
	"linear_attn.out_proj.weight":     "ssm_out.weight",
	// MTP block, after the rename of mtp.fc / mtp.pre_fc_norm_* / mtp.norm
	"eh_proj.weight":          "nextn.eh_proj.weight",
	"enorm.weight":            "nextn.enorm.weight",
	"hnorm.weight":            "nextn.hnorm.weight",
	"shared_head.norm.weight": "nextn.shared_head_norm.weight",
}

var hybridMoE = withEntries(hybridLayer, map[string]string{
	"mlp.gate.weight":                    "ffn_gate_inp.weight",
	"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
	"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
	"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
	"mlp.shared_expert_gate.weight":      "ffn_gate_inp_shexp.weight",
})

var hybridDense = withEntries(hybridLayer, map[string]string{
	"mlp.gate_proj.weight": "ffn_gate.weight",
	"mlp.up_proj.weight":   "ffn_up.weight",
	"mlp.down_proj.weight": "ffn_down.weight",
})

// archQwen35: Qwen3_5ForConditionalGeneration / Qwen3_5ForCausalLM (dense SwiGLU FFN).
var archQwen35 = &archDef{
	name:      "qwen35",
	hfArchs:   []string{"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"},
	global:    llamaGlobal,
	layer:     hybridDense,
	hybrid:    true,
	rename:    hybridRename,
	transform: hybridTransform,
	required:  hybridRequired,
	metadata:  hybridMetadata,
}

// archQwen35MoE: Qwen3_5MoeForConditionalGeneration / Qwen3_5MoeForCausalLM (also Qwen3.6 MoE):
// routed experts (stacked or fused, as qwen3moe) plus a sigmoid-gated shared expert.
var archQwen35MoE = &archDef{
	name:          "qwen35moe",
	hfArchs:       []string{"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"},
	global:        llamaGlobal,
	layer:         hybridMoE,
	moe:           true,
	hybrid:        true,
	sharedExperts: true,
	rename:        hybridRename,
	transform:     hybridTransform,
	required:      hybridRequired,
	metadata:      hybridMetadata,
}

// hybridDims are the hyper-parameters of the linear-attention layers and the RoPE layout.
type hybridDims struct {
	hk, hv, dk, dv, kernel int64 // key heads, value heads, head dims, conv width
	interval               int64 // full_attention_interval
	nRot                   int64 // int(head_dim * partial_rotary_factor)
	sections               [4]int32
	linear                 []bool // per decoder layer: Gated DeltaNet
}

func (d *hybridDims) keyDim() int64  { return d.hk * d.dk }
func (d *hybridDims) valDim() int64  { return d.hv * d.dv }
func (d *hybridDims) convDim() int64 { return 2*d.keyDim() + d.valDim() }

// newHybridDims reads and checks the hybrid hyper-parameters into c.hy and c.nMTP.
func newHybridDims(c *archCtx) error {
	h := c.h
	d := &hybridDims{}
	for _, f := range []struct {
		key string
		dst *int64
	}{{"linear_num_key_heads", &d.hk}, {"linear_num_value_heads", &d.hv}, {"linear_key_head_dim", &d.dk},
		{"linear_value_head_dim", &d.dv}, {"linear_conv_kernel_dim", &d.kernel}} {
		v, err := h.mustInt(f.key)
		if err != nil {
			return err
		}
		if v > 1<<16 {
			return fmt.Errorf("%s: %s = %d is out of range", h.path, f.key, v)
		}
		*f.dst = v
	}
	if d.hv%d.hk != 0 {
		return fmt.Errorf("%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", h.path, d.hv, d.hk)
	}
	if d.dk != d.dv {
		return fmt.Errorf("%s: linear_key_head_dim %d != linear_value_head_dim %d: llama.cpp's %s loader sizes both with ssm.state_size and cannot load this model", h.path, d.dk, d.dv, c.arch.name)
	}
	d.interval = 4
	if v, ok, err := h.int("full_attention_interval"); err != nil {
		return err
	} else if ok {
		if v <= 0 || v > 1<<16 {
			return fmt.Errorf("%s: full_attention_interval %d is out of range", h.path, v)
		}
		d.interval = v
	}
	d.linear = make([]bool, c.nLayer)
	for i := range d.linear {
		d.linear[i] = (int64(i)+1)%d.interval != 0
	}
	if lt, ok := h.m["layer_types"]; ok && lt != nil {
		arr, isArr := lt.([]any)
		if !isArr || int64(len(arr)) != c.nLayer {
			return fmt.Errorf("%s: layer_types must list one entry per layer (%d)", h.path, c.nLayer)
		}
		for i, e := range arr {
			s, _ := e.(string)
			if (s == "linear_attention") != d.linear[i] || (s != "linear_attention" && s != "full_attention") {
				return fmt.Errorf("%s: layer_types[%d] = %v disagrees with full_attention_interval %d (layer %d must be %s); llama.cpp derives the layer kinds from the interval",
					h.path, i, e, d.interval, i, map[bool]string{true: "linear_attention", false: "full_attention"}[d.linear[i]])
			}
		}
	}
	if gate, ok := h.m["attn_output_gate"].(bool); ok && !gate {
		return fmt.Errorf("%s: attn_output_gate false is not supported: llama.cpp's %s expects a gated q_proj of 2·heads·head_dim rows", h.path, c.arch.name)
	}
	rp := h.ropeParams()
	factor := 0.25
	if v, ok := rp["partial_rotary_factor"]; ok && v != nil {
		f, err := asFloat(v)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Errorf("%s: partial_rotary_factor %v is not in (0, 1]", h.path, v)
		}
		factor = f
	} else if _, v, ok := h.find("partial_rotary_factor", "rope_pct", "rope_percent"); ok {
		f, err := asFloat(v)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Errorf("%s: partial_rotary_factor %v is not in (0, 1]", h.path, v)
		}
		factor = f
	}
	d.nRot = int64(float64(c.headDim) * factor)
	if d.nRot < 2 || d.nRot%2 != 0 {
		return fmt.Errorf("%s: head_dim %d x partial_rotary_factor %g = %d rotated dimensions, want a positive even number", h.path, c.headDim, factor, d.nRot)
	}
	d.sections = [4]int32{11, 11, 10, 0}
	if v, ok := rp["mrope_section"]; ok && v != nil {
		arr, isArr := v.([]any)
		if !isArr || len(arr) > 4 {
			return fmt.Errorf("%s: mrope_section %v: want at most 4 integers", h.path, v)
		}
		d.sections = [4]int32{}
		var sum int64
		for i, e := range arr {
			n, err := asInt(e)
			if err != nil || n < 0 || n > math.MaxInt32 {
				return fmt.Errorf("%s: mrope_section %v: want non-negative integers", h.path, v)
			}
			d.sections[i] = int32(n)
			sum += n
		}
		if sum == 0 || sum > c.headDim {
			return fmt.Errorf("%s: mrope_section %v sums to %d, want 1..head_dim %d", h.path, v, sum, c.headDim)
		}
	}
	if n, ok, err := h.int("mtp_num_hidden_layers"); err != nil {
		return err
	} else if ok {
		if n < 0 || n > 64 {
			return fmt.Errorf("%s: mtp_num_hidden_layers %d is out of range", h.path, n)
		}
		c.nMTP = n
	}
	c.hy = d
	return nil
}

var mtpLayerRe = regexp.MustCompile(`^mtp\.layers\.(\d+)\.(.+)$`)

// hybridCountMTP sets the MTP layer count from the checkpoint when config.json does not give
// it (as _QwenMtpMixin does for Qwen3-Next).
func hybridCountMTP(c *archCtx, names []string) {
	if c.nMTP > 0 {
		return
	}
	for _, n := range names {
		n = strings.TrimPrefix(canonicalName(n), "model.")
		if m := mtpLayerRe.FindStringSubmatch(n); m != nil {
			if k, err := strconv.ParseInt(m[1], 10, 64); err == nil && k < 64 && k+1 > c.nMTP {
				c.nMTP = k + 1
			}
		}
	}
}

var mtpGlobal = map[string]string{"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm", "norm": "shared_head.norm"}

// hybridRename is _QwenMtpMixin.filter_tensors: mtp.layers.K.X -> model.layers.{L+K}.X,
// mtp.{fc,pre_fc_norm_embedding,pre_fc_norm_hidden,norm}.S -> model.layers.L.{eh_proj,enorm,
// hnorm,shared_head.norm}.S.
func hybridRename(c *archCtx, name string) string {
	if strings.HasPrefix(name, "model.mtp.") {
		name = strings.TrimPrefix(name, "model.")
	}
	if !strings.HasPrefix(name, "mtp.") {
		return name
	}
	if m := mtpLayerRe.FindStringSubmatch(name); m != nil {
		if k, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			return fmt.Sprintf("model.layers.%d.%s", c.nLayer+k, m[2])
		}
	}
	parts := strings.SplitN(name, ".", 3)
	if len(parts) == 3 {
		if g, ok := mtpGlobal[parts[1]]; ok {
			return fmt.Sprintf("model.layers.%d.%s.%s", c.nLayer, g, parts[2])
		}
	}
	return name
}

// vHeadPerm maps value-head-indexed positions from HF's grouped order (head g·r + j) to
// llama.cpp's tiled order (head j·hk + g): new[(j·hk+g)·size+t] = old[(g·r+j)·size+t].
type vHeadPerm struct{ hk, r, size int64 }

func (p vHeadPerm) src(n int64) int64 {
	head, t := n/p.size, n%p.size
	j, g := head/p.hk, head%p.hk
	return (g*p.r+j)*p.size + t
}

// hybridTransform applies Qwen3NextModel.modify_tensors and the V-head reorder of
// _LinearAttentionVReorderBase to one tensor plan (hfName after the MTP rename).
func hybridTransform(c *archCtx, hfName string, p *tensorPlan) error {
	d := c.hy
	f16 := len(p.parts) == 1 && p.parts[0].src.info.DType == safetensors.F16
	switch {
	case strings.HasSuffix(hfName, ".A_log"):
		p.elem = func(x float32) float32 { return -float32(math.Exp(float64(x))) }
		p.elemF16 = f16
	case strings.HasSuffix(hfName, "norm.weight") && !strings.HasSuffix(hfName, "linear_attn.norm.weight"):
		p.elem = func(x float32) float32 { return x + 1 }
		p.elemF16 = f16
	}
	if !strings.Contains(hfName, "linear_attn.") {
		return nil
	}
	if strings.HasSuffix(hfName, "linear_attn.conv1d.weight") {
		// [conv_dim, 1, K] squeezed: ggml {K, conv_dim}
		if len(p.shape) == 3 && p.shape[1] == 1 {
			p.shape = []int64{p.shape[0], p.shape[2]}
			p.rowsPerMatrix = p.shape[1]
		}
	}
	if d.hk == d.hv {
		return nil
	}
	r := d.hv / d.hk
	pt := p.parts[0]
	if len(p.parts) != 1 {
		return fmt.Errorf("tensor %s: cannot reorder value heads of a multi-part tensor", hfName)
	}
	switch {
	case strings.HasSuffix(hfName, ".in_proj_qkv.weight"), strings.HasSuffix(hfName, ".conv1d.weight"):
		qk := 2 * d.keyDim()
		if p.rows != d.convDim() {
			return fmt.Errorf("tensor %s has %d rows, want conv_dim %d", hfName, p.rows, d.convDim())
		}
		p.parts = []part{{src: pt.src, rowOff: 0, rows: qk},
			{src: pt.src, rowOff: qk, rows: d.valDim(), perm: vHeadPerm{d.hk, r, d.dv}}}
	case strings.HasSuffix(hfName, ".in_proj_z.weight"):
		p.parts[0].perm = vHeadPerm{d.hk, r, d.dv}
	case strings.HasSuffix(hfName, ".in_proj_a.weight"), strings.HasSuffix(hfName, ".in_proj_b.weight"),
		strings.HasSuffix(hfName, ".A_log"), strings.HasSuffix(hfName, ".dt_bias"):
		p.parts[0].perm = vHeadPerm{d.hk, r, 1}
	case strings.HasSuffix(hfName, ".out_proj.weight"):
		p.colPerm = vHeadPerm{d.hk, r, d.dv}
	}
	return nil
}

// hybridRequired lists the tensors llama.cpp's qwen35 / qwen35moe loader requires in block il
// (attn_qkv and attn_gate are optional there, but the graph needs them, so tq requires them).
func hybridRequired(c *archCtx, il int64) []string {
	out := []string{"attn_norm.weight", "post_attention_norm.weight"}
	full := []string{"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q_norm.weight", "attn_k_norm.weight"}
	switch {
	case il >= c.nLayer:
		out = append(out, full...)
		out = append(out, "nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight")
	case c.hy.linear[il]:
		out = append(out, "attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a",
			"ssm_beta.weight", "ssm_alpha.weight", "ssm_norm.weight", "ssm_out.weight")
	default:
		out = append(out, full...)
	}
	if c.arch.moe {
		out = append(out, "ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
			"ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")
	} else {
		out = append(out, "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
	}
	return out
}

// expectedNE gives the ggml shapes of the hybrid-specific tensors (nil for the others).
func (d *hybridDims) expectedNE(c *archCtx, suffix string) []int64 {
	e := c.nEmbd
	switch suffix {
	case "attn_q.weight":
		return []int64{e, 2 * c.nHead * c.headDim} // query and gate per head
	case "attn_qkv.weight":
		return []int64{e, d.convDim()}
	case "attn_gate.weight":
		return []int64{e, d.valDim()}
	case "ssm_beta.weight", "ssm_alpha.weight":
		return []int64{e, d.hv}
	case "ssm_conv1d.weight":
		return []int64{d.kernel, d.convDim()}
	case "ssm_dt.bias", "ssm_a":
		return []int64{d.hv}
	case "ssm_norm.weight":
		return []int64{d.dv}
	case "ssm_out.weight":
		return []int64{d.valDim(), e}
	case "post_attention_norm.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight":
		return []int64{e}
	case "nextn.eh_proj.weight":
		return []int64{2 * e, e}
	case "ffn_gate_inp_shexp.weight":
		return []int64{e}
	}
	return nil
}

// hybridMetadata writes the keys of Qwen2MoeModel (expert widths), Qwen3NextModel (ssm.*,
// full_attention_interval, rope.dimension_count), _Qwen35MRopeMixin (rope.dimension_sections)
// and _QwenMtpMixin (nextn_predict_layers).
func hybridMetadata(c *archCtx, md *gguf.Metadata) error {
	a := c.arch.name
	d := c.hy
	set := func(key string, v int64) error {
		val, err := u32(a+"."+key, v)
		if err != nil {
			return err
		}
		md.Set(a+"."+key, val)
		return nil
	}
	if c.arch.moe {
		if err := set("expert_feed_forward_length", c.moeFF); err != nil {
			return err
		}
		if _, ok, _ := c.h.int("shared_expert_intermediate_size"); ok {
			if err := set("expert_shared_feed_forward_length", c.sharedFF); err != nil {
				return err
			}
		}
	}
	for _, kv := range []struct {
		key string
		v   int64
	}{{"ssm.conv_kernel", d.kernel}, {"ssm.state_size", d.dk}, {"ssm.group_count", d.hk}, {"ssm.time_step_rank", d.hv},
		{"ssm.inner_size", d.dv * d.hv}, {"full_attention_interval", d.interval}, {"rope.dimension_count", d.nRot}} {
		if err := set(kv.key, kv.v); err != nil {
			return err
		}
	}
	md.Set(a+".rope.dimension_sections", gguf.Array(d.sections[:]))
	if c.nMTP > 0 {
		if err := set("nextn_predict_layers", c.nMTP); err != nil {
			return err
		}
	}
	return nil
}
