package infer

// llama (also Mistral): NORM RoPE (q/k rows permuted at conversion), optional q/k/v/output
// biases, optional rope_freqs (Llama 3.1 frequency factors), dense SwiGLU FFN.
func init() {
	registerArch(&archSpec{
		name: "llama",
		rope: RopeNorm,
		loadGlobal: func(ld *loader, c *Config, m *Model) {
			m.ropeFreqs = ld.vector("rope_freqs.weight", c.NRot/2, false)
		},
		loadBlock: func(ld *loader, c *Config, il int) *block {
			b := &block{}
			loadAttention(ld, c, il, b, attnOpts{biases: true})
			loadDenseFFN(ld, c, il, b)
			return b
		},
	})
}
