package modelsrc

import (
	"testing"

	"github.com/tq-project/tq/gguf"
)

// Hostile config.json: parse errors or architecture errors, never a panic.
func FuzzConfigJSON(f *testing.F) {
	f.Add([]byte(`{"architectures":["Qwen3MoeForCausalLM"],"hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"intermediate_size":512,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":256,"rope_theta":1e6,"rms_norm_eps":1e-6,"vocab_size":1536}`))
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"intermediate_size":11008,"rope_scaling":{"rope_type":"llama3","factor":8,"original_max_position_embeddings":8192},"text_config":{"hidden_size":7}}`))
	f.Add([]byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":-1,"num_attention_heads":0}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"architectures":["Qwen3_5MoeForConditionalGeneration"],"text_config":{"hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":256,"shared_expert_intermediate_size":256,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":64,"linear_value_head_dim":64,"linear_conv_kernel_dim":4,"mtp_num_hidden_layers":1,"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],"rope_parameters":{"rope_theta":1e7,"partial_rotary_factor":0.25,"mrope_section":[3,3,2]},"rms_norm_eps":1e-6,"vocab_size":1536}}`))
	f.Add([]byte(`{"architectures":["Qwen3_5ForCausalLM"],"hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":512,"linear_num_key_heads":0,"linear_num_value_heads":3,"linear_key_head_dim":64,"linear_value_head_dim":32,"linear_conv_kernel_dim":4,"full_attention_interval":-1,"rope_parameters":{"mrope_section":"x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHParams("config.json", b)
		if err != nil {
			return
		}
		a, _, err := findArch(h)
		if err != nil {
			return
		}
		c, err := newArchCtx(h, a)
		if err != nil {
			return
		}
		var md gguf.Metadata
		if err := commonHParams(c, &md); err != nil {
			return
		}
		if a.metadata != nil {
			a.metadata(c, &md)
		}
		if a.extra != nil {
			a.extra(c)
		}
		for _, n := range []string{"blk.0.attn_q.weight", "token_embd.weight", "blk.1.ffn_down_exps.weight", "blk.0.ssm_conv1d.weight", "blk.1.ssm_a"} {
			c.expectedNE(n)
		}
		if a.required != nil {
			for i := int64(0); i < min(c.nBlocks(), 8); i++ {
				a.required(c, i)
			}
		}
		if a.rename != nil {
			a.rename(c, "mtp.layers.0.self_attn.q_proj.weight")
			a.rename(c, "mtp.fc.weight")
		}
	})
}
