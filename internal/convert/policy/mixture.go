package policy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/tq-project/tq/gguf"
)

// Decision is the type chosen for one tensor.
type Decision struct {
	Name string
	// Type is the ggml type the tensor is written as.
	Type gguf.GGMLType
	// Quantize is true when the tensor is (re)encoded by the policy; false when it keeps the
	// type it has in the input (tensors llama-quantize never quantizes).
	Quantize bool
	// Fallback is true when the rule's type did not fit the row length and a fallback was used.
	Fallback bool
	// Rule is a short explanation (for --dry-run).
	Rule string
	// Weighted asks for the importance-weighted search (turboquant) when importance is available.
	Weighted bool
	// Fixed marks a choice the user made explicitly (--tensor-type, --output-tensor-type,
	// turboquant tensor_types / skip_layers) that a size budget must not change.
	Fixed bool
}

// Override is one --tensor-type PATTERN=TYPE item: the (lower-cased) pattern is a regular
// expression searched anywhere in the tensor name; the first matching override wins.
type Override struct {
	Pattern string
	Type    gguf.GGMLType
	re      *regexp.Regexp
}

// ParseOverride parses "PATTERN=TYPE" (TYPE a ggml type name such as q6_k or f16).
func ParseOverride(s string) (Override, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 || i == len(s)-1 {
		return Override{}, fmt.Errorf("tensor type override %q: want PATTERN=TYPE", s)
	}
	pat := strings.ToLower(s[:i])
	t, err := gguf.ParseType(s[i+1:])
	if err != nil {
		return Override{}, fmt.Errorf("tensor type override %q: %w", s, err)
	}
	if err := checkWritable(t); err != nil {
		return Override{}, fmt.Errorf("tensor type override %q: %w", s, err)
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return Override{}, fmt.Errorf("tensor type override %q: bad pattern: %w", s, err)
	}
	return Override{Pattern: pat, Type: t, re: re}, nil
}

// Match reports whether the override applies to a tensor name.
func (o Override) Match(name string) bool {
	if o.re == nil {
		o.re = regexp.MustCompile(o.Pattern)
	}
	return o.re.MatchString(name)
}

// writable lists the ggml types tq can encode.
var writable = map[gguf.GGMLType]bool{
	gguf.TypeF32: true, gguf.TypeF16: true, gguf.TypeBF16: true,
	gguf.TypeQ4_0: true, gguf.TypeQ4_1: true, gguf.TypeQ5_0: true, gguf.TypeQ5_1: true, gguf.TypeQ8_0: true,
	gguf.TypeQ2_K: true, gguf.TypeQ3_K: true, gguf.TypeQ4_K: true, gguf.TypeQ5_K: true, gguf.TypeQ6_K: true,
	gguf.TypeIQ4_NL: true, gguf.TypeIQ4_XS: true,
}

func checkWritable(t gguf.GGMLType) error {
	if !writable[t] {
		return fmt.Errorf("type %s cannot be written by tq (supported: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs)", t)
	}
	return nil
}

// Writable reports whether tq can encode tensors of type t.
func Writable(t gguf.GGMLType) bool { return writable[t] }

// Mixture is a llama.cpp preset with llama-quantize's options.
type Mixture struct {
	FileType FileType
	// Pure disables the mixture rules (every quantizable tensor gets the default type,
	// except output/token-embedding types and overrides, which still apply).
	Pure bool
	// HasImatrix switches the rules that depend on an importance matrix being present.
	HasImatrix bool
	// LeaveOutput keeps output.weight unquantized (--leave-output-tensor).
	LeaveOutput bool
	// OutputType and TokenEmbeddingType force the type of output.weight / token_embd.weight;
	// gguf.TypeCount means unset.
	OutputType         gguf.GGMLType
	TokenEmbeddingType gguf.GGMLType
	// Overrides are --tensor-type items in the order given.
	Overrides []Override
}

// NewMixture returns a mixture for ft with no options set.
func NewMixture(ft FileType) *Mixture {
	return &Mixture{FileType: ft, OutputType: gguf.TypeCount, TokenEmbeddingType: gguf.TypeCount}
}

func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// Assign chooses the type of every tensor with llama-quantize's algorithm (llama_tensor_get_type):
// the tensors are visited in SortTensors order (the running attn_v / ffn_down counters depend on
// it); the result is returned in the order of ts.
func (m *Mixture) Assign(model Model, ts []Tensor) ([]Decision, error) {
	def := m.FileType.DefaultType()
	if def == gguf.TypeCount {
		return nil, fmt.Errorf("unsupported file type %v", m.FileType)
	}
	for _, t := range []gguf.GGMLType{m.OutputType, m.TokenEmbeddingType} {
		if t != gguf.TypeCount {
			if err := checkWritable(t); err != nil {
				return nil, err
			}
		}
	}
	order := make([]int, len(ts))
	sorted := make([]Tensor, len(ts))
	copy(sorted, ts)
	idx := make(map[string]int, len(ts))
	for i, t := range ts {
		if _, dup := idx[t.Name]; dup {
			return nil, fmt.Errorf("duplicate tensor %q", t.Name)
		}
		idx[t.Name] = i
	}
	SortTensors(sorted)
	for i, t := range sorted {
		order[i] = idx[t.Name]
	}

	st := mixState{m: m, model: model, tied: true}
	for _, t := range sorted {
		c := CategoryOf(t.Name)
		if c.isAttnV() {
			st.nAttnV++
		}
		if c == CatOutput {
			st.tied = false
		}
	}
	st.nFFN = model.NLayer

	out := make([]Decision, len(ts))
	for i, t := range sorted {
		d, err := st.decide(t, def)
		if err != nil {
			return nil, err
		}
		d.Name = t.Name
		out[order[i]] = d
	}
	return out, nil
}

type mixState struct {
	m                         *Mixture
	model                     Model
	tied                      bool
	nAttnV, nFFN              int
	iAttnV, iDown, iGate, iUp int
}

func (s *mixState) decide(t Tensor, def gguf.GGMLType) (Decision, error) {
	m := s.m
	if !AllowsQuantization(t, m.LeaveOutput) {
		return Decision{Type: t.Type, Rule: "kept (never quantized)"}, nil
	}
	c := CategoryOf(t.Name)
	if m.TokenEmbeddingType != gguf.TypeCount && c == CatTokenEmbd {
		return fixed(s.fallback(t, m.TokenEmbeddingType, "--token-embedding-type"))
	}
	if m.OutputType != gguf.TypeCount && c == CatOutput {
		return fixed(s.fallback(t, m.OutputType, "--output-tensor-type"))
	}
	// --tensor-type applies whatever the file type, as in llama_model_quantize_impl
	// (src/llama-quant.cpp), where the overrides are consulted after llama_tensor_get_type.
	for _, o := range m.Overrides {
		if o.Match(t.Name) {
			return fixed(s.fallback(t, o.Type, "--tensor-type "+o.Pattern))
		}
	}
	if tr, _ := def.Traits(); !tr.Quantized {
		return Decision{Type: def, Quantize: true, Rule: "file type " + m.FileType.String()}, nil
	}
	nt, rule := def, "default"
	if !m.Pure {
		var err error
		nt, rule, err = s.rules(t, c, def)
		if err != nil {
			return Decision{}, err
		}
	} else {
		rule = "pure"
	}
	return s.fallback(t, nt, rule)
}

func fixed(d Decision, err error) (Decision, error) {
	d.Fixed = true
	return d, err
}

func (s *mixState) fallback(t Tensor, nt gguf.GGMLType, rule string) (Decision, error) {
	ft, fb, err := Fallback(nt, t.Cols())
	if err != nil {
		return Decision{}, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	if fb {
		rule += fmt.Sprintf("; fallback %s->%s (row %d)", nt, ft, t.Cols())
	}
	return Decision{Type: ft, Quantize: true, Fallback: fb, Rule: rule}, nil
}

// layerInfo mirrors llama-quant.cpp: for MoE models the layer index is parsed from the name.
func (s *mixState) layerInfo(counter int, name string) (int, int, error) {
	n := s.nFFN
	if s.model.NExpert > 1 {
		l := LayerOf(name)
		if l < 0 {
			return 0, 0, fmt.Errorf("failed to determine layer for tensor %s", name)
		}
		if l >= n {
			return 0, 0, fmt.Errorf("bad layer %d for tensor %s: must be in [0, %d)", l, name, n)
		}
		return l, n, nil
	}
	return counter, n, nil
}

// rules is llama_tensor_get_type_impl restricted to the presets tq supports (no IQ1/IQ2/IQ3
// mixtures, no MXFP4, non-FALCON architectures).
func (s *mixState) rules(t Tensor, c Category, def gguf.GGMLType) (gguf.GGMLType, string, error) {
	ft := s.m.FileType
	model := s.model
	nt := def
	switch {
	case c == CatOutput || (s.tied && c == CatTokenEmbd):
		dtr, _ := def.Traits()
		switch {
		case t.Cols()%int64(dtr.BlockSize) != 0:
			return gguf.TypeQ8_0, "output: row not a multiple of the block size", nil
		case nt != gguf.TypeQ8_0:
			return gguf.TypeQ6_K, "output", nil
		}
		return nt, "output", nil
	case c == CatTokenEmbd:
		return nt, "token_embd", nil
	case c.isAttnV():
		rule := "attn_v"
		switch {
		case ft == FileTypeQ2_K:
			if model.nGQA() >= 4 {
				nt = gguf.TypeQ4_K
			} else {
				nt = gguf.TypeQ3_K
			}
		case ft == FileTypeQ3_K_M:
			if s.iAttnV < 2 {
				nt = gguf.TypeQ5_K
			} else {
				nt = gguf.TypeQ4_K
			}
		case ft == FileTypeQ3_K_L:
			nt = gguf.TypeQ5_K
		case (ft == FileTypeIQ4_NL || ft == FileTypeIQ4_XS) && model.nGQA() >= 4:
			nt = gguf.TypeQ5_K
		case (ft == FileTypeQ4_K_M || ft == FileTypeQ5_K_M) && useMoreBits(s.iAttnV, s.nAttnV):
			nt = gguf.TypeQ6_K
			rule = "attn_v: use_more_bits"
		case ft == FileTypeQ4_K_S && s.iAttnV < 4:
			nt = gguf.TypeQ5_K
		}
		if model.Arch == "llama" && model.NLayer == 80 && model.NHead != model.NHeadKV &&
			(nt == gguf.TypeQ3_K || nt == gguf.TypeQ4_K) {
			nt = gguf.TypeQ5_K
			rule = "attn_v: 70B"
		}
		if model.NExpert == 8 {
			nt = gguf.TypeQ8_0
			rule = "attn_v: 8 experts"
		}
		s.iAttnV++
		return nt, rule, nil
	case c == CatAttnK:
		if model.NExpert == 8 {
			return gguf.TypeQ8_0, "attn_k: 8 experts", nil
		}
		return nt, "default", nil
	case c == CatAttnQ:
		return nt, "default", nil
	case c == CatFFNDown:
		i, n, err := s.layerInfo(s.iDown, t.Name)
		if err != nil {
			return 0, "", err
		}
		s.iDown++
		rule := "ffn_down"
		switch {
		case ft == FileTypeQ2_K:
			nt = gguf.TypeQ3_K
		case ft == FileTypeQ3_K_M:
			if i < n/16 {
				nt = gguf.TypeQ5_K
			} else {
				nt = gguf.TypeQ4_K
			}
		case ft == FileTypeQ3_K_L:
			nt = gguf.TypeQ5_K
		case ft == FileTypeQ4_K_M:
			if useMoreBits(i, n) {
				nt = gguf.TypeQ6_K
				rule = "ffn_down: use_more_bits"
			}
		case i < n/8 && (ft == FileTypeIQ4_NL || ft == FileTypeIQ4_XS) && !s.m.HasImatrix:
			nt = gguf.TypeQ5_K
		case ft == FileTypeQ5_K_M && useMoreBits(i, n):
			nt = gguf.TypeQ6_K
			rule = "ffn_down: use_more_bits"
		case ft == FileTypeQ4_K_S && i < n/8:
			nt = gguf.TypeQ5_K
		case (ft == FileTypeQ4_0 || ft == FileTypeQ5_0) && s.m.HasImatrix && i < n/8:
			if ft == FileTypeQ4_0 {
				nt = gguf.TypeQ4_1
			} else {
				nt = gguf.TypeQ5_1
			}
		}
		return nt, rule, nil
	case c == CatAttnOutput:
		if model.NExpert == 8 {
			switch ft {
			case FileTypeQ2_K, FileTypeQ3_K_S, FileTypeQ3_K_M, FileTypeIQ4_NL, FileTypeQ4_K_S,
				FileTypeQ4_K_M, FileTypeIQ4_XS:
				return gguf.TypeQ5_K, "attn_output: 8 experts", nil
			}
			return nt, "default", nil
		}
		switch ft {
		case FileTypeQ2_K:
			nt = gguf.TypeQ3_K
		case FileTypeQ3_K_M:
			nt = gguf.TypeQ4_K
		case FileTypeQ3_K_L:
			nt = gguf.TypeQ5_K
		}
		return nt, "attn_output", nil
	case c == CatFFNGate:
		if _, _, err := s.layerInfo(s.iGate, t.Name); err != nil {
			return 0, "", err
		}
		s.iGate++
		return nt, "default", nil
	case c == CatFFNUp:
		if _, _, err := s.layerInfo(s.iUp, t.Name); err != nil {
			return 0, "", err
		}
		s.iUp++
		return nt, "default", nil
	}
	return nt, "default", nil
}
