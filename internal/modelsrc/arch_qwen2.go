package modelsrc

import "github.com/tq-project/tq/gguf"

// archQwen2: Qwen2ForCausalLM (conversion/qwen.py Qwen2Model). llama names, no permutation
// (llama.cpp runs qwen2 with NEOX RoPE), q/k/v biases.
var archQwen2 = &archDef{
	name:    "qwen2",
	hfArchs: []string{"Qwen2ForCausalLM"},
	global:  llamaGlobal,
	layer: withEntries(llamaLayer, map[string]string{
		"self_attn.q_proj.bias": "attn_q.bias",
		"self_attn.k_proj.bias": "attn_k.bias",
		"self_attn.v_proj.bias": "attn_v.bias",
	}),
	optional: map[string]bool{"attn_q.bias": true, "attn_k.bias": true, "attn_v.bias": true},
	metadata: func(*archCtx, *gguf.Metadata) error { return nil },
}
