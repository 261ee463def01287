package infer

// qwen3: NEOX RoPE, per-head RMSNorm of q and k before RoPE, dense SwiGLU FFN.
func init() {
	registerArch(&archSpec{
		name: "qwen3",
		rope: RopeNeox,
		loadBlock: func(ld *loader, c *Config, il int) *block {
			b := &block{}
			loadAttention(ld, c, il, b, attnOpts{biases: true, qkNorm: true})
			loadDenseFFN(ld, c, il, b)
			return b
		},
	})
}
