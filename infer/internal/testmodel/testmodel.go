// Package testmodel builds small random models (llama, qwen2, qwen3, qwen3moe) with
// heavy-tailed (Student-t) weights, any mix of ggml types, and a tiny byte-level BPE ("gpt2")
// vocabulary that llama.cpp accepts, for tests and benchmarks of package infer.
package testmodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
)

// Spec describes the model to build. Zero sizes take the defaults of [Default].
type Spec struct {
	Arch        string // llama, qwen2, qwen3, qwen3moe
	Embd        int
	Layers      int
	Heads       int
	HeadsKV     int
	HeadDim     int
	FF          int // dense FFN width (and feed_forward_length for MoE)
	Experts     int
	ExpertsUsed int
	FFExp       int
	Vocab       int // >= 258 (256 byte tokens + merges + 1 special token)
	Ctx         int
	// Types maps a tensor role to its type: "default" for every 2-D/3-D weight, or a role
	// such as "token_embd", "output", "attn_q", "attn_v", "ffn_down", "ffn_down_exps",
	// "ffn_gate_inp". 1-D tensors are always F32. Missing "default" means F32.
	Types map[string]gguf.GGMLType
	Tied  bool // no output.weight (LM head tied to token_embd)
	Seed  uint64
	// Rope scaling metadata (empty: none written).
	RopeScaling string
	RopeFactor  float64
	RopeOrigCtx int
	RopeBase    float64
	// RopeFreqs adds a llama "rope_freqs.weight" (Llama 3.1 style frequency divisors).
	RopeFreqs bool
}

// Default returns the standard test shape: hidden 256, 2 layers, 4 heads, 2 KV heads,
// head_dim 64, FFN 512, vocab 512 (MoE: 8 experts, 2 used, expert FFN 256).
func Default(arch string) Spec {
	s := Spec{Arch: arch, Embd: 256, Layers: 2, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512,
		Vocab: 512, Ctx: 2048, Seed: 1, RopeBase: 10000}
	if arch == "qwen3moe" {
		s.Experts, s.ExpertsUsed, s.FFExp = 8, 2, 256
		s.RopeBase = 1000000
	}
	return s
}

// Tensor is one built tensor.
type Tensor struct {
	Name string
	Type gguf.GGMLType
	Dims []uint64
	Data []byte
}

// Model is a built model: GGUF metadata and tensors in file order.
type Model struct {
	Meta    gguf.Metadata
	Tensors []Tensor
}

type builder struct {
	s   Spec
	rng *rand.Rand
	m   *Model
	err error
}

// studentT4 draws from a Student-t distribution with 4 degrees of freedom scaled to unit
// variance: z/sqrt(χ²₄/4), with χ²₄ = -2·ln(u1·u2).
func (b *builder) studentT4() float64 {
	z := b.rng.NormFloat64()
	u := (1 - b.rng.Float64()) * (1 - b.rng.Float64())
	chi := -2 * math.Log(u)
	return z / math.Sqrt(chi/4) / math.Sqrt(2)
}

func (b *builder) typeFor(role string, ndims int) gguf.GGMLType {
	if ndims == 1 {
		return gguf.TypeF32
	}
	if t, ok := b.s.Types[role]; ok {
		return t
	}
	if role == "ffn_gate_inp" {
		return gguf.TypeF32
	}
	if t, ok := b.s.Types["default"]; ok {
		return t
	}
	return gguf.TypeF32
}

// add draws a tensor: values = offset + scale·t₄ (unit-variance Student-t).
func (b *builder) add(name, role string, dims []uint64, scale, offset float64) {
	if b.err != nil {
		return
	}
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(offset + scale*b.studentT4())
	}
	t := b.typeFor(role, len(dims))
	rows := int(n / dims[0])
	rs, err := quant.RowSize(t, int(dims[0]))
	if err != nil {
		b.err = fmt.Errorf("%s: %v", name, err)
		return
	}
	data := make([]byte, rs*rows)
	if err := quant.Quantize(t, data, vals, rows, int(dims[0]), &quant.Options{TensorName: name, Threads: 1}); err != nil {
		b.err = err
		return
	}
	b.m.Tensors = append(b.m.Tensors, Tensor{Name: name, Type: t, Dims: dims, Data: data})
}

// Build creates the model described by s.
func Build(s Spec) (*Model, error) {
	d := Default(s.Arch)
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&s.Embd, d.Embd)
	fill(&s.Layers, d.Layers)
	fill(&s.Heads, d.Heads)
	fill(&s.HeadsKV, d.HeadsKV)
	fill(&s.HeadDim, d.HeadDim)
	fill(&s.FF, d.FF)
	fill(&s.Vocab, d.Vocab)
	fill(&s.Ctx, d.Ctx)
	fill(&s.Experts, d.Experts)
	fill(&s.ExpertsUsed, d.ExpertsUsed)
	fill(&s.FFExp, d.FFExp)
	if s.RopeBase == 0 {
		s.RopeBase = d.RopeBase
	}
	switch s.Arch {
	case "llama", "qwen2", "qwen3", "qwen3moe":
	default:
		return nil, fmt.Errorf("testmodel: unknown arch %q", s.Arch)
	}
	if s.Vocab < 258 {
		return nil, fmt.Errorf("testmodel: vocab %d < 258", s.Vocab)
	}
	b := &builder{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x7e57)), m: &Model{}}
	b.meta()
	E, qd, kd := uint64(s.Embd), uint64(s.Heads*s.HeadDim), uint64(s.HeadsKV*s.HeadDim)
	lin := func(in uint64) float64 { return 1 / math.Sqrt(float64(in)) }
	embScale := 1.0
	if s.Tied { // the embedding doubles as the LM head: keep logits in a useful range
		embScale = 2 * lin(E)
	}
	b.add("token_embd.weight", "token_embd", []uint64{E, uint64(s.Vocab)}, embScale, 0)
	b.add("output_norm.weight", "output_norm", []uint64{E}, 0.2, 1)
	if !s.Tied {
		b.add("output.weight", "output", []uint64{E, uint64(s.Vocab)}, 2*lin(E), 0)
	}
	if s.RopeFreqs && s.Arch == "llama" {
		b.add("rope_freqs.weight", "rope_freqs", []uint64{uint64(s.HeadDim / 2)}, 1, 3)
		for i, v := range bytesAsF32(b.m.Tensors[len(b.m.Tensors)-1].Data) {
			if v < 1 { // divisors must be positive: fold into [1, ...)
				bytesPutF32(b.m.Tensors[len(b.m.Tensors)-1].Data, i, 2-v)
			}
		}
	}
	for il := 0; il < s.Layers; il++ {
		n := func(x string) string { return fmt.Sprintf("blk.%d.%s", il, x) }
		b.add(n("attn_norm.weight"), "attn_norm", []uint64{E}, 0.2, 1)
		b.add(n("attn_q.weight"), "attn_q", []uint64{E, qd}, lin(E), 0)
		b.add(n("attn_k.weight"), "attn_k", []uint64{E, kd}, lin(E), 0)
		b.add(n("attn_v.weight"), "attn_v", []uint64{E, kd}, lin(E), 0)
		if s.Arch == "qwen2" {
			b.add(n("attn_q.bias"), "attn_q.bias", []uint64{qd}, 0.2, 0)
			b.add(n("attn_k.bias"), "attn_k.bias", []uint64{kd}, 0.2, 0)
			b.add(n("attn_v.bias"), "attn_v.bias", []uint64{kd}, 0.2, 0)
		}
		b.add(n("attn_output.weight"), "attn_output", []uint64{qd, E}, lin(qd), 0)
		if s.Arch == "qwen3" || s.Arch == "qwen3moe" {
			b.add(n("attn_q_norm.weight"), "attn_q_norm", []uint64{uint64(s.HeadDim)}, 0.2, 1)
			b.add(n("attn_k_norm.weight"), "attn_k_norm", []uint64{uint64(s.HeadDim)}, 0.2, 1)
		}
		b.add(n("ffn_norm.weight"), "ffn_norm", []uint64{E}, 0.2, 1)
		if s.Arch == "qwen3moe" {
			X, F := uint64(s.Experts), uint64(s.FFExp)
			b.add(n("ffn_gate_inp.weight"), "ffn_gate_inp", []uint64{E, X}, 2*lin(E), 0)
			b.add(n("ffn_gate_exps.weight"), "ffn_gate_exps", []uint64{E, F, X}, lin(E), 0)
			b.add(n("ffn_up_exps.weight"), "ffn_up_exps", []uint64{E, F, X}, lin(E), 0)
			b.add(n("ffn_down_exps.weight"), "ffn_down_exps", []uint64{F, E, X}, lin(F), 0)
		} else {
			F := uint64(s.FF)
			b.add(n("ffn_gate.weight"), "ffn_gate", []uint64{E, F}, lin(E), 0)
			b.add(n("ffn_up.weight"), "ffn_up", []uint64{E, F}, lin(E), 0)
			b.add(n("ffn_down.weight"), "ffn_down", []uint64{F, E}, lin(F), 0)
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.m, nil
}

func (b *builder) meta() {
	s := b.s
	m := &b.m.Meta
	a := s.Arch
	u := func(k string, v int) { m.Set(a+"."+k, gguf.Uint32(uint32(v))) }
	m.Set("general.architecture", gguf.String(a))
	m.Set("general.type", gguf.String("model"))
	m.Set("general.name", gguf.String("tq-test-"+a))
	m.Set("general.quantization_version", gguf.Uint32(2))
	u("block_count", s.Layers)
	u("context_length", s.Ctx)
	u("embedding_length", s.Embd)
	u("feed_forward_length", s.FF)
	u("attention.head_count", s.Heads)
	u("attention.head_count_kv", s.HeadsKV)
	u("attention.key_length", s.HeadDim)
	u("attention.value_length", s.HeadDim)
	m.Set(a+".attention.layer_norm_rms_epsilon", gguf.Float32(1e-6))
	m.Set(a+".rope.freq_base", gguf.Float32(float32(s.RopeBase)))
	if a == "llama" {
		u("rope.dimension_count", s.HeadDim)
		u("vocab_size", s.Vocab)
	}
	if a == "qwen3moe" {
		u("expert_count", s.Experts)
		u("expert_used_count", s.ExpertsUsed)
		u("expert_feed_forward_length", s.FFExp)
	}
	if s.RopeScaling != "" {
		m.Set(a+".rope.scaling.type", gguf.String(s.RopeScaling))
		m.Set(a+".rope.scaling.factor", gguf.Float32(float32(s.RopeFactor)))
		if s.RopeOrigCtx > 0 {
			u("rope.scaling.original_context_length", s.RopeOrigCtx)
		}
	}
	toks, types, merges := Vocab(s.Vocab)
	m.Set("tokenizer.ggml.model", gguf.String("gpt2"))
	m.Set("tokenizer.ggml.pre", gguf.String("qwen2"))
	m.Set("tokenizer.ggml.tokens", gguf.Array(toks))
	m.Set("tokenizer.ggml.token_type", gguf.Array(types))
	m.Set("tokenizer.ggml.merges", gguf.Array(merges))
	eos := uint32(len(toks) - 1)
	m.Set("tokenizer.ggml.eos_token_id", gguf.Uint32(eos))
	m.Set("tokenizer.ggml.bos_token_id", gguf.Uint32(eos))
	m.Set("tokenizer.ggml.padding_token_id", gguf.Uint32(eos))
	m.Set("tokenizer.ggml.add_bos_token", gguf.Bool(false))
}

// byteRunes is GPT-2's bytes_to_unicode mapping.
func byteRunes() [256]rune {
	var out [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = rune(b)
		} else {
			out[b] = rune(256 + n)
			n++
		}
	}
	return out
}

// Vocab returns a byte-level BPE vocabulary of n tokens: the 256 byte tokens, merges of
// common letter pairs (space-prefixed first), and a final control token "<|endoftext|>".
func Vocab(n int) (tokens []string, types []int32, merges []string) {
	br := byteRunes()
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(br[b]))
		types = append(types, 1)
	}
	seen := map[string]bool{}
	for _, t := range tokens {
		seen[t] = true
	}
	space := string(br[' '])
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	var pairs [][2]string
	for _, c := range letters {
		pairs = append(pairs, [2]string{space, string(c)})
	}
	for _, c1 := range letters {
		for _, c2 := range letters {
			pairs = append(pairs, [2]string{string(c1), string(c2)})
		}
	}
	for _, p := range pairs {
		if len(tokens) >= n-1 {
			break
		}
		t := p[0] + p[1]
		if seen[t] {
			continue
		}
		seen[t] = true
		tokens = append(tokens, t)
		types = append(types, 1)
		merges = append(merges, p[0]+" "+p[1])
	}
	for i := 0; len(tokens) < n-1; i++ { // pad with unreachable user tokens
		tokens = append(tokens, fmt.Sprintf("<|extra_%d|>", i))
		types = append(types, 4)
	}
	tokens = append(tokens, "<|endoftext|>")
	types = append(types, 3)
	return tokens, types, merges
}

func bytesAsF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func bytesPutF32(b []byte, i int, v float32) {
	binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
}

// WriteGGUF writes the model to path.
func (m *Model) WriteGGUF(path string) error {
	w, err := gguf.Create(path, gguf.WriterOptions{NoManifest: true})
	if err != nil {
		return err
	}
	w.Metadata = m.Meta.Clone()
	for _, t := range m.Tensors {
		if err := w.AddTensor(t.Name, t.Dims, t.Type); err != nil {
			w.Abort()
			return err
		}
	}
	for _, t := range m.Tensors {
		if err := w.WriteTensorData(t.Name, t.Data); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}
