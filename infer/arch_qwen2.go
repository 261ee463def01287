package infer

// qwen2: NEOX RoPE, q/k/v biases, dense SwiGLU FFN.
func init() {
	registerArch(&archSpec{
		name: "qwen2",
		rope: RopeNeox,
		loadBlock: func(ld *loader, c *Config, il int) *block {
			b := &block{}
			loadAttention(ld, c, il, b, attnOpts{biases: true})
			loadDenseFFN(ld, c, il, b)
			return b
		},
	})
}
