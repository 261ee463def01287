package modelsrc

import (
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
)

// llamaLayer is the per-layer name map shared by the llama family (gguf-py tensor_mapping.py).
var llamaLayer = map[string]string{
	"input_layernorm.weight":          "attn_norm.weight",
	"self_attn.q_proj.weight":         "attn_q.weight",
	"self_attn.k_proj.weight":         "attn_k.weight",
	"self_attn.v_proj.weight":         "attn_v.weight",
	"self_attn.o_proj.weight":         "attn_output.weight",
	"post_attention_layernorm.weight": "ffn_norm.weight",
	"mlp.gate_proj.weight":            "ffn_gate.weight",
	"mlp.up_proj.weight":              "ffn_up.weight",
	"mlp.down_proj.weight":            "ffn_down.weight",
}

var llamaGlobal = map[string]string{
	"model.embed_tokens.weight": "token_embd.weight",
	"model.norm.weight":         "output_norm.weight",
	"lm_head.weight":            "output.weight",
}

func withEntries(base map[string]string, extra map[string]string) map[string]string {
	m := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// archLlama: LlamaForCausalLM / MistralForCausalLM (conversion/llama.py LlamaModel).
// q_proj and k_proj (weights and biases) are permuted from HF's rotate-half RoPE layout to the
// adjacent-pair layout llama.cpp's NORM RoPE expects; llama.vocab_size and
// llama.rope.dimension_count are added; Llama 3.1+ "llama3" RoPE scaling becomes a generated
// rope_freqs.weight tensor.
var archLlama = &archDef{
	name:    "llama",
	hfArchs: []string{"LlamaForCausalLM", "MistralForCausalLM", "LLaMAForCausalLM", "LlamaModel"},
	global:  llamaGlobal,
	layer: withEntries(llamaLayer, map[string]string{
		"self_attn.q_proj.bias": "attn_q.bias",
		"self_attn.k_proj.bias": "attn_k.bias",
		"self_attn.v_proj.bias": "attn_v.bias",
		"self_attn.o_proj.bias": "attn_output.bias",
	}),
	optional:  map[string]bool{"attn_q.bias": true, "attn_k.bias": true, "attn_v.bias": true, "attn_output.bias": true},
	permuteQK: true,
	metadata: func(c *archCtx, md *gguf.Metadata) error {
		if c.vocab > 0 {
			v, err := u32("llama.vocab_size", c.vocab)
			if err != nil {
				return err
			}
			md.Set("llama.vocab_size", v)
		}
		v, err := u32("llama.rope.dimension_count", c.headDim)
		if err != nil {
			return err
		}
		md.Set("llama.rope.dimension_count", v)
		return nil
	},
	extra: llama3RopeFreqs,
}

// llama3RopeFreqs generates rope_freqs.weight for rope_type "llama3" (LlamaModel.generate_extra_tensors).
func llama3RopeFreqs(c *archCtx) ([]*tensorPlan, error) {
	rp := c.h.ropeParams()
	rt, _ := rp["rope_type"].(string)
	if rt != "llama3" && rt != "Llama3" && rt != "LLAMA3" {
		return nil, nil
	}
	getF := func(k string, def float64) (float64, error) {
		v, ok := rp[k]
		if !ok || v == nil {
			return def, nil
		}
		f, err := asFloat(v)
		if err != nil {
			return 0, fmt.Errorf("%s: rope %s: %w", c.h.path, k, err)
		}
		return f, nil
	}
	base, err := getF("rope_theta", 10000)
	if err != nil {
		return nil, err
	}
	factor, err := getF("factor", 8)
	if err != nil {
		return nil, err
	}
	low, err := getF("low_freq_factor", 1)
	if err != nil {
		return nil, err
	}
	high, err := getF("high_freq_factor", 4)
	if err != nil {
		return nil, err
	}
	orig, err := getF("original_max_position_embeddings", 8192)
	if err != nil {
		return nil, err
	}
	if high == low {
		return nil, fmt.Errorf("%s: llama3 rope scaling with high_freq_factor == low_freq_factor", c.h.path)
	}
	dim := c.headDim
	// torch evaluates this in float32 (the Python scalars are cast to the tensor's dtype)
	lowWave, highWave := float32(orig)/float32(low), float32(orig)/float32(high)
	vals := make([]float32, dim/2)
	for i := range vals {
		exp := float32(2*i) / float32(dim)
		freq := 1 / float32(math.Pow(base, float64(exp)))
		wavelen := float32(2*math.Pi) / freq
		switch {
		case wavelen < highWave:
			vals[i] = 1
		case wavelen > lowWave:
			vals[i] = float32(factor)
		default:
			smooth := (float32(orig)/wavelen - float32(low)) / (float32(high) - float32(low))
			vals[i] = 1 / ((1-smooth)/float32(factor) + smooth)
		}
	}
	return []*tensorPlan{{name: "rope_freqs.weight", shape: []int64{dim / 2}, rows: 1, cols: dim / 2, gen: vals, rowsPerMatrix: 1}}, nil
}
