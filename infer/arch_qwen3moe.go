package infer

// qwen3moe: qwen3 attention, mixture-of-experts FFN in every layer (router softmax over all
// experts, top-k, renormalised weights; experts stored as 3-D *_exps tensors).
func init() {
	registerArch(&archSpec{
		name: "qwen3moe",
		rope: RopeNeox,
		moe:  true,
		loadBlock: func(ld *loader, c *Config, il int) *block {
			b := &block{}
			loadAttention(ld, c, il, b, attnOpts{biases: true, qkNorm: true})
			loadMoEFFN(ld, c, il, b)
			return b
		},
	})
}
