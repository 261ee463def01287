package modelsrc

import "github.com/tq-project/tq/gguf"

// qwen3Attn adds the per-head RMS norms of Qwen3 attention.
var qwen3Attn = map[string]string{
	"self_attn.q_norm.weight": "attn_q_norm.weight",
	"self_attn.k_norm.weight": "attn_k_norm.weight",
	"self_attn.q_proj.bias":   "attn_q.bias",
	"self_attn.k_proj.bias":   "attn_k.bias",
	"self_attn.v_proj.bias":   "attn_v.bias",
}

// archQwen3: Qwen3ForCausalLM (conversion/qwen.py Qwen3Model): qwen2 plus q/k norms, usually
// no biases (accepted when present), head_dim from config (key_length/value_length).
var archQwen3 = &archDef{
	name:     "qwen3",
	hfArchs:  []string{"Qwen3ForCausalLM"},
	global:   llamaGlobal,
	layer:    withEntries(llamaLayer, qwen3Attn),
	optional: map[string]bool{"attn_q.bias": true, "attn_k.bias": true, "attn_v.bias": true},
	metadata: func(*archCtx, *gguf.Metadata) error { return nil },
}
