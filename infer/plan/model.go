// Package plan computes the memory a model needs (weights per layer and tensor group, KV cache,
// compute buffers) and the best split between a GPU with a given VRAM budget and the CPU, with
// predicted decode speed and the equivalent llama.cpp arguments (-ngl, --n-cpu-moe / -ot).
//
// A plan starts from a GGUF file (real tensor types and sizes) or from a Hugging Face
// config.json plus a type mix (what a conversion would produce).
package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/hf"
	"github.com/tq-project/tq/quant"
)

// Shape holds the hyperparameters that decide a model's memory.
type Shape struct {
	Arch        string `json:"arch"`
	NLayer      int    `json:"n_layer"`
	NEmbd       int    `json:"n_embd"`
	NFF         int    `json:"n_ff"`
	NHead       int    `json:"n_head"`
	NHeadKV     int    `json:"n_head_kv"`
	HeadDim     int    `json:"head_dim"`
	NVocab      int    `json:"n_vocab"`
	NExpert     int    `json:"n_expert,omitempty"`
	NExpertUsed int    `json:"n_expert_used,omitempty"`
	NFFExp      int    `json:"n_ff_exp,omitempty"`
	Tied        bool   `json:"tied_embeddings"`
	QKVBias     bool   `json:"qkv_bias,omitempty"`
	QKNorm      bool   `json:"qk_norm,omitempty"`
	CtxTrain    int    `json:"ctx_train"`
	// Hybrid is set for qwen35 / qwen35moe (hybrid.go).
	Hybrid *HybridShape `json:"hybrid,omitempty"`
}

// MoE reports whether the model routes its FFN through experts.
func (s Shape) MoE() bool { return s.NExpert > 0 }

// Group names of tensors.
const (
	GroupEmbedding = "embedding"
	GroupOutput    = "output"
	GroupAttention = "attention"
	GroupFFN       = "ffn"
	GroupRouter    = "router"
	GroupExperts   = "experts"
	GroupNorm      = "norm"
)

// Tensor is one weight under its GGUF name.
type Tensor struct {
	Name  string        `json:"name"`
	Layer int           `json:"layer"` // -1 outside the repeating blocks
	Group string        `json:"group"`
	Dims  []int64       `json:"dims"`
	Type  gguf.GGMLType `json:"-"`
	TypeS string        `json:"type"`
	Bytes int64         `json:"bytes"`
}

// Elements is the product of the dimensions.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Model is a shape with its tensor inventory.
type Model struct {
	Shape   Shape    `json:"shape"`
	Source  string   `json:"source"`
	Tensors []Tensor `json:"-"`
}

// role is the tensor name without "blk.N." and ".weight"/".bias" (the key of a type mix).
func role(name string) string {
	if strings.HasPrefix(name, "blk.") {
		if i := strings.IndexByte(name[4:], '.'); i >= 0 {
			name = name[4+i+1:]
		}
	}
	name = strings.TrimSuffix(name, ".weight")
	return name
}

func groupOf(name string) string {
	r := role(name)
	switch {
	case r == "token_embd":
		return GroupEmbedding
	case r == "output":
		return GroupOutput
	case strings.HasSuffix(r, "_norm") || strings.HasSuffix(r, "norm") || r == "rope_freqs":
		return GroupNorm
	case strings.HasSuffix(r, "_exps"):
		return GroupExperts
	case r == "ffn_gate_inp":
		return GroupRouter
	case strings.HasPrefix(r, "ffn_"):
		return GroupFFN
	case strings.HasPrefix(r, "attn_"), strings.HasPrefix(r, "ssm_"):
		return GroupAttention
	}
	return GroupNorm
}

func layerOf(name string) int {
	if !strings.HasPrefix(name, "blk.") {
		return -1
	}
	var n int
	if _, err := fmt.Sscanf(name, "blk.%d.", &n); err != nil {
		return -1
	}
	return n
}

func tensorBytes(t gguf.GGMLType, dims []int64) (int64, error) {
	if len(dims) == 0 || dims[0] <= 0 {
		return 0, fmt.Errorf("bad dimensions %v", dims)
	}
	rb, err := t.RowBytes(dims[0])
	if err != nil {
		return 0, err
	}
	rows := int64(1)
	for _, d := range dims[1:] {
		if d <= 0 {
			return 0, fmt.Errorf("bad dimensions %v", dims)
		}
		rows *= d
	}
	return rb * rows, nil
}

// FromGGUF reads a GGUF model's hyperparameters and tensor inventory (no tensor data is read).
func FromGGUF(path string) (*Model, error) {
	src, err := infer.OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	cfg, err := infer.ReadConfig(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m := &Model{Source: path}
	for _, mt := range src.GGUF().Tensors() {
		dims := make([]int64, len(mt.Dims))
		for i, d := range mt.Dims {
			dims[i] = int64(d)
		}
		m.Tensors = append(m.Tensors, Tensor{Name: mt.Name, Layer: layerOf(mt.Name), Group: groupOf(mt.Name),
			Dims: dims, Type: mt.Type, TypeS: mt.Type.String(), Bytes: int64(mt.NBytes())})
	}
	emb, ok := src.Tensor("token_embd.weight")
	if !ok || len(emb.Dims) < 2 {
		return nil, fmt.Errorf("%s: tensor token_embd.weight is missing", path)
	}
	_, hasOut := src.Tensor("output.weight")
	_, hasBias := src.Tensor("blk.0.attn_q.bias")
	_, hasQKN := src.Tensor("blk.0.attn_q_norm.weight")
	m.Shape = Shape{Arch: cfg.Arch, NLayer: cfg.NLayer, NEmbd: cfg.NEmbd, NFF: cfg.NFF, NHead: cfg.NHead,
		NHeadKV: cfg.NHeadKV, HeadDim: cfg.HeadDim, NVocab: int(emb.Dims[1]), NExpert: cfg.NExpert,
		NExpertUsed: cfg.NExpertUse, NFFExp: cfg.NFFExp, Tied: !hasOut, QKVBias: hasBias, QKNorm: hasQKN,
		CtxTrain: cfg.CtxTrain}
	if cfg.Hybrid != nil {
		m.Shape.Hybrid = hybridShapeFromConfig(cfg)
	}
	return m, nil
}

// ShapeFromHF reads the shape from a Hugging Face config.json.
func ShapeFromHF(path string) (Shape, error) {
	c, err := hf.LoadConfig(path)
	if err != nil {
		return Shape{}, err
	}
	arch, err := c.Arch()
	if err != nil {
		return Shape{}, err
	}
	s := Shape{Arch: arch, NLayer: c.NumHiddenLayers, NEmbd: c.HiddenSize, NFF: c.IntermediateSize,
		NHead: c.NumAttentionHeads, NHeadKV: c.NumKeyValueHeads, HeadDim: c.HeadDim, NVocab: c.VocabSize,
		Tied: c.TieWordEmbeddings, CtxTrain: c.MaxPositionEmbeddings}
	switch arch {
	case "qwen35", "qwen35moe":
		return hybridShapeFromHF(c, s)
	case "qwen2":
		s.QKVBias = true
	case "qwen3", "qwen3moe":
		s.QKNorm = true
	case "llama":
		s.QKVBias, _ = c.AttentionBiases()
	}
	if arch == "qwen3moe" {
		s.NExpert, s.NExpertUsed, s.NFFExp = c.NumExperts, c.NumExpertsPerTok, c.MoeIntermediateSize
		for i := 0; i < c.NumHiddenLayers; i++ {
			if !c.IsMoELayer(i) {
				return Shape{}, fmt.Errorf("%s: layer %d is dense; mixed dense/MoE qwen3moe layouts are not supported", path, i)
			}
		}
	}
	return s, s.validate()
}

func (s Shape) validate() error {
	if s.NLayer <= 0 || s.NEmbd <= 0 || s.NHead <= 0 || s.NHeadKV <= 0 || s.HeadDim <= 0 || s.NVocab <= 0 {
		return fmt.Errorf("incomplete model shape %+v", s)
	}
	if s.NLayer > 1<<16 || s.NEmbd > 1<<20 || s.NVocab > 1<<24 || s.NFF > 1<<22 || s.NExpert > 1<<14 {
		return fmt.Errorf("model shape out of range %+v", s)
	}
	if s.MoE() && (s.NExpertUsed <= 0 || s.NExpertUsed > s.NExpert || s.NFFExp <= 0) {
		return fmt.Errorf("incomplete MoE shape: %d experts, %d used, expert FFN %d", s.NExpert, s.NExpertUsed, s.NFFExp)
	}
	if !s.MoE() && s.NFF <= 0 {
		return fmt.Errorf("feed-forward length missing")
	}
	return nil
}

// TypeMix assigns ggml types to tensor roles: Default for every quantizable 2-D/3-D weight,
// Overrides by role ("token_embd", "output", "attn_v", "ffn_down_exps", ...). Norms and biases
// are F32; the MoE router stays F32 unless overridden (llama-quantize leaves it as is).
type TypeMix struct {
	Default   gguf.GGMLType
	Overrides map[string]gguf.GGMLType
}

// ParseTypeMix parses "q4_K" or "q4_K,token_embd=q8_0,ffn_down=q6_K".
func ParseTypeMix(s string) (TypeMix, error) {
	mix := TypeMix{Default: gguf.TypeF16, Overrides: map[string]gguf.GGMLType{}}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, isKV := strings.Cut(part, "=")
		if !isKV {
			if i != 0 {
				return mix, fmt.Errorf("type mix %q: %q needs the form role=type", s, part)
			}
			v = k
		}
		t, err := gguf.ParseType(strings.TrimSpace(v))
		if err != nil {
			return mix, fmt.Errorf("type mix %q: %v", s, err)
		}
		if tr, _ := t.Traits(); tr.ActivationOnly || !quant.Supported(t) {
			return mix, fmt.Errorf("type mix %q: %s cannot store weights", s, t)
		}
		if isKV {
			mix.Overrides[strings.TrimSpace(k)] = t
		} else {
			mix.Default = t
		}
	}
	return mix, nil
}

func (mix TypeMix) typeFor(name string, dims []int64) gguf.GGMLType {
	r := role(name)
	if len(dims) < 2 || strings.HasSuffix(name, ".bias") || strings.HasSuffix(r, "_norm") || r == "rope_freqs" {
		return gguf.TypeF32
	}
	t, ok := mix.Overrides[r]
	if !ok {
		if r == "ffn_gate_inp" {
			return gguf.TypeF32
		}
		t = mix.Default
	}
	return quant.FallbackType(t, int(dims[0]))
}

// FromShape builds the GGUF tensor inventory a converter writes for s, typed by mix.
func FromShape(s Shape, mix TypeMix) (*Model, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if s.Hybrid != nil {
		return fromHybridShape(s, mix)
	}
	m := &Model{Shape: s, Source: "shape"}
	E, qd, kd := int64(s.NEmbd), int64(s.NHead*s.HeadDim), int64(s.NHeadKV*s.HeadDim)
	add := func(name string, dims ...int64) error {
		t := mix.typeFor(name, dims)
		b, err := tensorBytes(t, dims)
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		m.Tensors = append(m.Tensors, Tensor{Name: name, Layer: layerOf(name), Group: groupOf(name), Dims: dims,
			Type: t, TypeS: t.String(), Bytes: b})
		return nil
	}
	errs := []error{add("token_embd.weight", E, int64(s.NVocab)), add("output_norm.weight", E)}
	if !s.Tied {
		errs = append(errs, add("output.weight", E, int64(s.NVocab)))
	}
	for il := 0; il < s.NLayer; il++ {
		n := func(x string) string { return fmt.Sprintf("blk.%d.%s", il, x) }
		errs = append(errs, add(n("attn_norm.weight"), E), add(n("attn_q.weight"), E, qd),
			add(n("attn_k.weight"), E, kd), add(n("attn_v.weight"), E, kd), add(n("attn_output.weight"), qd, E),
			add(n("ffn_norm.weight"), E))
		if s.QKVBias {
			errs = append(errs, add(n("attn_q.bias"), qd), add(n("attn_k.bias"), kd), add(n("attn_v.bias"), kd))
		}
		if s.QKNorm {
			errs = append(errs, add(n("attn_q_norm.weight"), int64(s.HeadDim)), add(n("attn_k_norm.weight"), int64(s.HeadDim)))
		}
		if s.MoE() {
			X, F := int64(s.NExpert), int64(s.NFFExp)
			errs = append(errs, add(n("ffn_gate_inp.weight"), E, X), add(n("ffn_gate_exps.weight"), E, F, X),
				add(n("ffn_up_exps.weight"), E, F, X), add(n("ffn_down_exps.weight"), F, E, X))
		} else {
			F := int64(s.NFF)
			errs = append(errs, add(n("ffn_gate.weight"), E, F), add(n("ffn_up.weight"), E, F), add(n("ffn_down.weight"), F, E))
		}
	}
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	return m, nil
}

// FromHF reads config.json and builds the inventory for mix.
func FromHF(path string, mix TypeMix) (*Model, error) {
	s, err := ShapeFromHF(path)
	if err != nil {
		return nil, err
	}
	m, err := FromShape(s, mix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Source = path
	return m, nil
}

// Params returns the total parameter count and the count active per token (experts counted
// n_expert_used times per layer instead of n_expert; the tied LM head counted once; MTP
// blocks in the total only).
func (m *Model) Params() (total, active int64) {
	for _, t := range m.Tensors {
		n := t.Elements()
		total += n
		if m.Shape.isMTP(t) {
			continue
		}
		if t.Group == GroupExperts && m.Shape.NExpert > 0 {
			active += n / int64(m.Shape.NExpert) * int64(m.Shape.NExpertUsed)
		} else {
			active += n
		}
	}
	return total, active
}

// typeSummary lists the types used with their byte totals, largest first.
func (m *Model) typeSummary() []TypeBytes {
	by := map[string]int64{}
	for _, t := range m.Tensors {
		if m.Shape.isMTP(t) {
			continue // not loaded (Breakdown.MTPBytes)
		}
		by[t.TypeS] += t.Bytes
	}
	var out []TypeBytes
	for k, v := range by {
		out = append(out, TypeBytes{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Bytes > out[j].Bytes || (out[i].Bytes == out[j].Bytes && out[i].Type < out[j].Type)
	})
	return out
}

// TypeBytes is the storage of all tensors of one type.
type TypeBytes struct {
	Type  string `json:"type"`
	Bytes int64  `json:"bytes"`
}
