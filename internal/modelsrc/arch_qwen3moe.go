package modelsrc

import "github.com/tq-project/tq/gguf"

// archQwen3MoE: Qwen3MoeForCausalLM (conversion/qwen.py Qwen3MoeModel / Qwen2MoeModel).
// Attention as qwen3; every layer's FFN is a mixture of experts: the router mlp.gate becomes
// ffn_gate_inp (F32), the per-expert projections mlp.experts.E.{gate,up,down}_proj are stacked
// along a new slowest axis into ffn_{gate,up,down}_exps {in, out, n_expert} (fused
// gate_up_proj / down_proj checkpoints are split/mapped). Adds expert_feed_forward_length.
var archQwen3MoE = &archDef{
	name:    "qwen3moe",
	hfArchs: []string{"Qwen3MoeForCausalLM"},
	global:  llamaGlobal,
	layer: withEntries(map[string]string{
		"input_layernorm.weight":          "attn_norm.weight",
		"self_attn.q_proj.weight":         "attn_q.weight",
		"self_attn.k_proj.weight":         "attn_k.weight",
		"self_attn.v_proj.weight":         "attn_v.weight",
		"self_attn.o_proj.weight":         "attn_output.weight",
		"post_attention_layernorm.weight": "ffn_norm.weight",
		"mlp.gate.weight":                 "ffn_gate_inp.weight",
		// Qwen2-MoE-style shared expert (gguf-py names). llama.cpp's qwen3moe does not load
		// these; Convert warns when a checkpoint has them.
		"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
		"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
		"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
		"mlp.shared_expert_gate.weight":      "ffn_gate_inp_shexp.weight",
	}, qwen3Attn),
	optional: map[string]bool{"attn_q.bias": true, "attn_k.bias": true, "attn_v.bias": true,
		"ffn_gate_shexp.weight": true, "ffn_up_shexp.weight": true, "ffn_down_shexp.weight": true,
		"ffn_gate_inp_shexp.weight": true},
	moe: true,
	metadata: func(c *archCtx, md *gguf.Metadata) error {
		v, err := u32("qwen3moe.expert_feed_forward_length", c.moeFF)
		if err != nil {
			return err
		}
		md.Set("qwen3moe.expert_feed_forward_length", v)
		if c.sharedFF > 0 {
			v, err := u32("qwen3moe.expert_shared_feed_forward_length", c.sharedFF)
			if err != nil {
				return err
			}
			md.Set("qwen3moe.expert_shared_feed_forward_length", v)
		}
		return nil
	},
}
