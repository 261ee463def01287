package infer

import (
	"fmt"
	"sort"
	"strings"
)

// archSpec describes one architecture: its RoPE pairing, whether its FFN is a mixture of
// experts, and how to load one transformer block (the arch_*.go files register these).
type archSpec struct {
	name string
	rope RopeMode
	moe  bool
	// loadGlobal loads architecture-specific tensors outside the blocks (may be nil).
	loadGlobal func(ld *loader, c *Config, m *Model)
	loadBlock  func(ld *loader, c *Config, il int) *block
	// readExtra reads architecture-specific hyperparameters after the common ones (may be nil).
	readExtra func(r metaReader, c *Config) error
}

var archs = map[string]*archSpec{}

func registerArch(s *archSpec) { archs[s.name] = s }

func supportedArchs() string {
	names := make([]string, 0, len(archs))
	for n := range archs {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// SupportedArchitectures lists the general.architecture values this package runs.
func SupportedArchitectures() []string { return strings.Split(supportedArchs(), ", ") }

// block is one transformer layer: attention (with optional biases and per-head q/k norms) and a
// dense SwiGLU FFN or a mixture of experts.
type block struct {
	attnNorm       []float32
	q, k, v, o     *linear
	bq, bk, bv, bo []float32
	qNorm, kNorm   []float32
	ffnNorm        []float32
	ffn            ffnBlock
	// hybrid, when set, replaces the standard layer (qwen35 / qwen35moe; arch_qwen35moe.go).
	hybrid *hybridBlock
}

// ffnBlock is the feed-forward half of a block.
type ffnBlock interface {
	// forward writes the FFN output for T normalised rows h (T×n_embd) into out.
	forward(s *Session, il int, h []float32, T int, out []float32)
}

type attnOpts struct {
	biases bool // accept optional q/k/v (and output) biases
	qkNorm bool // require per-head q/k RMSNorm weights
}

func blkName(il int, s string) string { return fmt.Sprintf("blk.%d.%s", il, s) }

// loadAttention loads the attention half of block il.
func loadAttention(ld *loader, c *Config, il int, b *block, o attnOpts) {
	n := func(s string) string { return blkName(il, s) }
	b.attnNorm = ld.vector(n("attn_norm.weight"), c.NEmbd, true)
	b.q = ld.linear(n("attn_q.weight"), c.NEmbd, c.QDim(), 1, true)
	b.k = ld.linear(n("attn_k.weight"), c.NEmbd, c.KVDim(), 1, true)
	b.v = ld.linear(n("attn_v.weight"), c.NEmbd, c.KVDim(), 1, true)
	b.o = ld.linear(n("attn_output.weight"), c.QDim(), c.NEmbd, 1, true)
	if o.biases {
		b.bq = ld.vector(n("attn_q.bias"), c.QDim(), false)
		b.bk = ld.vector(n("attn_k.bias"), c.KVDim(), false)
		b.bv = ld.vector(n("attn_v.bias"), c.KVDim(), false)
		b.bo = ld.vector(n("attn_output.bias"), c.NEmbd, false)
	}
	if o.qkNorm {
		b.qNorm = ld.vector(n("attn_q_norm.weight"), c.HeadDim, true)
		b.kNorm = ld.vector(n("attn_k_norm.weight"), c.HeadDim, true)
	}
}

// denseFFN is W_down·(SiLU(W_gate·h) ⊙ W_up·h).
type denseFFN struct {
	gate, up, down *linear
}

func loadDenseFFN(ld *loader, c *Config, il int, b *block) {
	n := func(s string) string { return blkName(il, s) }
	b.ffnNorm = ld.vector(n("ffn_norm.weight"), c.NEmbd, true)
	b.ffn = &denseFFN{
		gate: ld.linear(n("ffn_gate.weight"), c.NEmbd, c.NFF, 1, true),
		up:   ld.linear(n("ffn_up.weight"), c.NEmbd, c.NFF, 1, true),
		down: ld.linear(n("ffn_down.weight"), c.NFF, c.NEmbd, 1, true),
	}
}

// moeFFN routes every token to the top-k of E experts (softmax over all E router logits,
// top-k, renormalised weights) and sums the weighted expert SwiGLU outputs.
type moeFFN struct {
	router         *linear
	gate, up, down *linear // 3-D: ne {in, out, E}
	nExpert, nUsed int
	il             int
}

func loadMoEFFN(ld *loader, c *Config, il int, b *block) {
	n := func(s string) string { return blkName(il, s) }
	b.ffnNorm = ld.vector(n("ffn_norm.weight"), c.NEmbd, true)
	b.ffn = &moeFFN{
		router:  ld.linear(n("ffn_gate_inp.weight"), c.NEmbd, c.NExpert, 1, true),
		gate:    ld.linear(n("ffn_gate_exps.weight"), c.NEmbd, c.NFFExp, c.NExpert, true),
		up:      ld.linear(n("ffn_up_exps.weight"), c.NEmbd, c.NFFExp, c.NExpert, true),
		down:    ld.linear(n("ffn_down_exps.weight"), c.NFFExp, c.NEmbd, c.NExpert, true),
		nExpert: c.NExpert, nUsed: c.NExpertUse, il: il,
	}
}
