package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/boundedread"
)

// TurboQuantMethod is the quant_method value of a turboquant quantize_config.json.
const TurboQuantMethod = "turboquant"

// DefaultLayersToQuantize is the layers_to_quantize used when a config does not give one: the
// attention input projections and the gated-FFN input projections (MoE experts and shared
// experts included, since their role is gate_proj/up_proj too).
var DefaultLayersToQuantize = []string{"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}

// DefaultSkipLayers is the skip_layers used when a config does not give one: the attention and
// FFN output projections ("not int4": Q8_0) and lm_head (F16).
var DefaultSkipLayers = []string{"o_proj", "down_proj", "lm_head"}

// TurboConfig is quantize_config.json as written by `tq calibrate` (documented in
// docs/formats-convert.md).
type TurboConfig struct {
	QuantMethod       string `json:"quant_method"`
	WeightDType       string `json:"weight_dtype"`   // "int4" or "int8"
	KVCacheDType      string `json:"kv_cache_dtype"` // recorded in the GGUF; applied at run time
	GroupSize         int    `json:"group_size"`     // 32, 64 or 128
	Symmetric         *bool  `json:"symmetric"`
	CalibrationMethod string `json:"calibration_method"`
	NumPrompts        int    `json:"num_prompts"`
	CalibrationHash   string `json:"calibration_hash"`
	// LayersToQuantize and SkipLayers hold module roles (q_proj, k_proj, v_proj, o_proj,
	// gate_proj, up_proj, down_proj, lm_head, embed_tokens), Hugging Face module names or
	// dot-separated parts of them ("model.layers.0", "experts", "self_attn"), or GGUF names.
	LayersToQuantize []string `json:"layers_to_quantize"`
	SkipLayers       []string `json:"skip_layers"`
	// EmbeddingDType is the ggml type of token_embd.weight (default q8_0).
	EmbeddingDType string `json:"embedding_dtype,omitempty"`
	// TensorTypes are per-tensor choices: GGUF tensor name (or a pattern as in layer lists)
	// -> ggml type name. They win over every other rule.
	TensorTypes map[string]string `json:"tensor_types,omitempty"`
	// Imatrix optionally names the calibration statistics (a llama.cpp imatrix GGUF or .dat),
	// relative to the config file's directory.
	Imatrix   string `json:"imatrix,omitempty"`
	TQVersion string `json:"tq_version,omitempty"`
	// Tensors are the calibration's per-tensor search results (GGUF name -> record); for
	// tensors the policy quantizes with the int4/int8 container, the recorded type and group
	// size are used.
	Tensors map[string]TensorRecord `json:"tensors,omitempty"`

	// Unknown lists top-level keys this version does not understand (reported as warnings).
	Unknown []string `json:"-"`
	// FileSHA256 is the hex SHA-256 of the file LoadTurboConfig read ("" otherwise).
	FileSHA256 string `json:"-"`
}

// TensorRecord is the part of a calibration search result (quantize_config.json "tensors")
// the policy reads; other fields are ignored.
type TensorRecord struct {
	Type      string `json:"type"`
	GroupSize int    `json:"group_size"`
}

// DefaultTurboConfig is the policy used by --use-turboquant without a config file.
func DefaultTurboConfig() *TurboConfig {
	sym := true
	return &TurboConfig{
		QuantMethod: TurboQuantMethod, WeightDType: "int4", KVCacheDType: "f16", GroupSize: 128,
		Symmetric: &sym, CalibrationMethod: "none",
		LayersToQuantize: append([]string(nil), DefaultLayersToQuantize...),
		SkipLayers:       append([]string(nil), DefaultSkipLayers...),
	}
}

// MaxConfigBytes bounds the size of a quantize_config.json.
const MaxConfigBytes = boundedread.MaxJSONConfig

// LoadTurboConfig reads and validates a quantize_config.json.
func LoadTurboConfig(path string) (*TurboConfig, error) {
	b, err := boundedread.ReadFile(path, "quantize config", MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	c, err := ParseTurboConfig(b)
	if err != nil {
		return nil, fmt.Errorf("quantize config %s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	c.FileSHA256 = hex.EncodeToString(sum[:])
	return c, nil
}

var knownConfigKeys = map[string]bool{
	"quant_method": true, "weight_dtype": true, "kv_cache_dtype": true, "group_size": true,
	"symmetric": true, "calibration_method": true, "num_prompts": true, "calibration_hash": true,
	"layers_to_quantize": true, "skip_layers": true, "embedding_dtype": true, "tensor_types": true,
	"imatrix": true, "tq_version": true, "tensors": true, "calibration": true,
}

// ParseTurboConfig parses and validates quantize_config.json contents. Missing optional fields
// take the defaults of DefaultTurboConfig.
func ParseTurboConfig(b []byte) (*TurboConfig, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	c := &TurboConfig{}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("bad field: %w", err)
	}
	for k := range raw {
		if !knownConfigKeys[k] {
			c.Unknown = append(c.Unknown, k)
		}
	}
	sort.Strings(c.Unknown)
	if _, ok := raw["layers_to_quantize"]; !ok {
		c.LayersToQuantize = append([]string(nil), DefaultLayersToQuantize...)
	}
	if _, ok := raw["skip_layers"]; !ok {
		c.SkipLayers = append([]string(nil), DefaultSkipLayers...)
	}
	if c.WeightDType == "" {
		c.WeightDType = "int4"
	}
	// An absent group_size takes the default; an explicit 0 (or null) is refused by Validate.
	if _, ok := raw["group_size"]; !ok {
		c.GroupSize = 128
	}
	if c.Symmetric == nil {
		sym := true
		c.Symmetric = &sym
	}
	if c.KVCacheDType == "" {
		c.KVCacheDType = "f16"
	}
	return c, c.Validate()
}

var kvCacheTypes = map[string]bool{"f32": true, "f16": true, "bf16": true, "q8_0": true, "q4_0": true,
	"q4_1": true, "q5_0": true, "q5_1": true, "iq4_nl": true}

// recordTypes are the types a "tensors" record may hold for each weight_dtype: the containers
// WeightCandidates offers (F16 for rows that are not a multiple of 32).
var recordTypes = map[string][]gguf.GGMLType{
	"int4": {gguf.TypeQ4_K, gguf.TypeIQ4_NL, gguf.TypeF16},
	"int8": {gguf.TypeQ8_0, gguf.TypeF16},
}

// Validate checks field values and the contradictions visible without the model (not the
// lm_head rule, which CheckSkipsLMHead reports; Assign checks the config against the model's
// tensors). Errors name the field as a JSON path: tensors["blk.0.attn_q.weight"].type.
func (c *TurboConfig) Validate() error {
	var errs []error
	if c.QuantMethod != TurboQuantMethod {
		errs = append(errs, fmt.Errorf("quant_method is %q, want %q", c.QuantMethod, TurboQuantMethod))
	}
	switch c.WeightDType {
	case "int4", "int8":
	default:
		errs = append(errs, fmt.Errorf("weight_dtype %q: want int4 or int8", c.WeightDType))
	}
	switch c.GroupSize {
	case 32, 64, 128:
	default:
		errs = append(errs, fmt.Errorf("group_size = %d: want 32, 64 or 128 (omit it for the default 128)", c.GroupSize))
	}
	if !kvCacheTypes[strings.ToLower(c.KVCacheDType)] {
		errs = append(errs, fmt.Errorf("kv_cache_dtype %q: want one of f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl", c.KVCacheDType))
	}
	if c.NumPrompts < 0 {
		errs = append(errs, fmt.Errorf("num_prompts %d is negative", c.NumPrompts))
	}
	if c.EmbeddingDType != "" {
		if t, err := gguf.ParseType(c.EmbeddingDType); err != nil || !writable[t] {
			errs = append(errs, fmt.Errorf("embedding_dtype %q is not a type tq can write", c.EmbeddingDType))
		}
	}
	for _, k := range sortedKeys(c.Tensors) {
		r := c.Tensors[k]
		t, err := gguf.ParseType(r.Type)
		switch {
		case err != nil || !writable[t]:
			errs = append(errs, fmt.Errorf("tensors[%q].type = %q is not a type tq can write", k, r.Type))
		case !slices.Contains(recordTypes[c.WeightDType], t) && recordTypes[c.WeightDType] != nil:
			errs = append(errs, fmt.Errorf("tensors[%q].type = %q contradicts weight_dtype %q, whose tensors are stored as %s",
				k, r.Type, c.WeightDType, typeList(recordTypes[c.WeightDType])))
		}
		switch r.GroupSize {
		case 0, 32, 64, 128:
		default:
			errs = append(errs, fmt.Errorf("tensors[%q].group_size = %d: want 0, 32, 64 or 128", k, r.GroupSize))
		}
	}
	for _, k := range sortedKeys(c.TensorTypes) {
		v := c.TensorTypes[k]
		if t, err := gguf.ParseType(v); err != nil || !writable[t] {
			errs = append(errs, fmt.Errorf("tensor_types[%q] = %q is not a type tq can write", k, v))
		}
	}
	for _, l := range [][]string{c.LayersToQuantize, c.SkipLayers} {
		for _, e := range l {
			if strings.TrimSpace(e) == "" {
				errs = append(errs, errors.New("empty entry in layers_to_quantize/skip_layers"))
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func typeList(ts []gguf.GGMLType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

// ErrLMHeadNotSkipped is returned (wrapped) when skip_layers does not contain lm_head.
var ErrLMHeadNotSkipped = errors.New("skip_layers does not contain lm_head")

// CheckSkipsLMHead enforces the lm_head rule: the output projection maps every hidden state to
// the whole vocabulary, so its quantization error lands directly on every logit (and, with tied
// embeddings, on every input embedding too); turboquant keeps it in F16. A config that does not
// skip it is refused unless force is set.
func (c *TurboConfig) CheckSkipsLMHead(force bool) error {
	for _, s := range c.SkipLayers {
		if s == "lm_head" || s == "output.weight" || s == "output" || s == "lm_head.weight" {
			return nil
		}
	}
	if force {
		return nil
	}
	return fmt.Errorf("%w: the output projection (lm_head) maps each hidden state onto the whole "+
		"vocabulary, so its quantization error goes straight into every logit (and into every input "+
		"embedding when embeddings are tied); turboquant keeps it in F16. Add \"lm_head\" to skip_layers, "+
		"or pass --force to quantize it anyway", ErrLMHeadNotSkipped)
}

// WeightCandidates lists the ggml block types layers_to_quantize may be written in for rows of
// cols weights, the default first (see docs/formats-convert.md):
//
//	int4 -> Q4_K: 256-weight super-blocks of eight 32-weight sub-blocks, each with a 6-bit scale
//	        and a 6-bit min under the super-block's fp16 scale and min (4.5 bits per weight);
//	        then IQ4_NL: one fp16 scale per 32 weights on a non-uniform 16-level grid (also 4.5
//	        bits per weight). Rows that are not a multiple of 256 can only take IQ4_NL (instead
//	        of llama.cpp's 5.5-bit Q5_0 fallback for Q4_K).
//	int8 -> Q8_0: one fp16 scale per 32 weights (8.5 bits per weight).
//
// Calibration measures every candidate and records the one with the lowest importance-weighted
// error per tensor ("tensors"); without a record the first is used. The ggml container fixes
// where scales are stored, so group_size (the calibration's granularity, recorded in the config
// and in the GGUF metadata) and symmetric do not change the bytes. Rows that are not a multiple
// of 32 get F16.
func (c *TurboConfig) WeightCandidates(cols int64) []gguf.GGMLType {
	switch {
	case cols%32 != 0:
		return []gguf.GGMLType{gguf.TypeF16}
	case c.WeightDType == "int8":
		return []gguf.GGMLType{gguf.TypeQ8_0}
	case cols%256 != 0:
		return []gguf.GGMLType{gguf.TypeIQ4_NL}
	}
	return []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeIQ4_NL}
}

// Role is the Hugging Face module role of a GGUF tensor name: q_proj, k_proj, v_proj, o_proj,
// gate_proj, up_proj, down_proj (dense, expert and shared-expert FFNs alike), lm_head,
// embed_tokens, router, norm; for Qwen3.5 linear attention in_proj_qkv (attn_qkv), in_proj_z
// (attn_gate), in_proj_a (ssm_alpha), in_proj_b (ssm_beta), out_proj (ssm_out), conv1d; the
// MTP block's fc (nextn.eh_proj); or "" for anything else.
func Role(name string) string {
	switch {
	case name == "output.weight":
		return "lm_head"
	case name == "token_embd.weight":
		return "embed_tokens"
	case strings.HasSuffix(name, "_norm.weight") || strings.HasSuffix(name, ".enorm.weight") || strings.HasSuffix(name, ".hnorm.weight"):
		return "norm"
	case strings.Contains(name, "ffn_gate_inp"):
		return "router"
	case strings.Contains(name, "attn_qkv.weight"):
		return "in_proj_qkv"
	case strings.Contains(name, "attn_gate.weight"):
		return "in_proj_z"
	case strings.Contains(name, "ssm_alpha.weight"):
		return "in_proj_a"
	case strings.Contains(name, "ssm_beta.weight"):
		return "in_proj_b"
	case strings.Contains(name, "ssm_out.weight"):
		return "out_proj"
	case strings.Contains(name, "ssm_conv1d"):
		return "conv1d"
	case strings.Contains(name, "nextn.eh_proj"):
		return "fc"
	}
	switch CategoryOf(name) {
	case CatAttnQ:
		return "q_proj"
	case CatAttnK:
		return "k_proj"
	case CatAttnV:
		return "v_proj"
	case CatAttnOutput:
		return "o_proj"
	case CatFFNGate:
		return "gate_proj"
	case CatFFNUp:
		return "up_proj"
	case CatFFNDown:
		return "down_proj"
	}
	return ""
}

// roleAliases lets the usual layer-list entries select the Qwen3.5 linear-attention
// projections: the fused in_proj_qkv is quantized with q_proj/k_proj/v_proj, the output gate
// in_proj_z with gate_proj (like the FFN gate, it only scales a SiLU-gated output), out_proj
// with o_proj.
var roleAliases = map[string][]string{
	"in_proj_qkv": {"q_proj", "k_proj", "v_proj"},
	"in_proj_z":   {"gate_proj"},
	"out_proj":    {"o_proj"},
}

// KeepsHighPrecision reports tensors the turboquant and budget policies keep in F16 whatever
// the bit budget: Qwen3.5's Gated DeltaNet decay and write-strength projections (ssm_alpha,
// ssm_beta). They are tiny (linear_num_value_heads rows), and their outputs pass through
// exp(-exp(A)·softplus(·)) and a sigmoid into a recurrent state, so an error persists over every
// later token instead of touching one output.
func KeepsHighPrecision(t Tensor) bool {
	switch Role(t.Name) {
	case "in_proj_a", "in_proj_b":
		return true
	}
	return false
}

// matchEntry reports whether a layer-list entry selects tensor t: the entry equals the role,
// the GGUF name (with or without ".weight"), or its dot-separated parts occur as a contiguous
// run in the GGUF name or one of the Hugging Face source names.
func matchEntry(entry string, t Tensor, role string) bool {
	entry = strings.TrimSuffix(strings.TrimSpace(entry), ".weight")
	if entry == "" {
		return false
	}
	if entry == role || entry == strings.TrimSuffix(t.Name, ".weight") {
		return true
	}
	for _, a := range roleAliases[role] {
		if entry == a {
			return true
		}
	}
	if role == "lm_head" && (entry == "output") {
		return true
	}
	parts := strings.Split(entry, ".")
	if containsRun(strings.Split(strings.TrimSuffix(t.Name, ".weight"), "."), parts) {
		return true
	}
	for _, s := range t.Sources {
		if containsRun(strings.Split(strings.TrimSuffix(s, ".weight"), "."), parts) {
			return true
		}
	}
	return false
}

func containsRun(hay, needle []string) bool {
	if len(needle) == 0 || len(needle) > len(hay) {
		return false
	}
outer:
	for i := 0; i+len(needle) <= len(hay); i++ {
		for j := range needle {
			if hay[i+j] != needle[j] {
				continue outer
			}
		}
		return true
	}
	return false
}

// TurboPolicy assigns types for --use-turboquant.
type TurboPolicy struct {
	Config *TurboConfig
	// Force accepts a config whose skip_layers lacks lm_head.
	Force bool
	// EmbeddingType overrides the config's embedding_dtype when not nil.
	EmbeddingType *gguf.GGMLType
	// Warnings are set by Assign: config entries it accepted but did not follow as written
	// (each says what was done instead).
	Warnings []string
}

// Assign decides every tensor's type. Rules, first match wins:
//  1. tensors llama.cpp never quantizes (norms, routers, biases, 1-D, conv1d kernels): F32;
//  2. tensor_types (per-tensor choices from calibration);
//     then Qwen3.5's ssm_alpha / ssm_beta: F16 (KeepsHighPrecision);
//  3. lm_head (output.weight, or token_embd.weight when embeddings are tied): F16 when skipped;
//  4. other skip_layers matches (o_proj, down_proj, ...): "not int4", Q8_0;
//  5. layers_to_quantize matches: the calibrated container recorded in "tensors" for that
//     tensor, else the first of WeightCandidates (int4: Q4_K, int8: Q8_0), importance-weighted;
//  6. token_embd.weight: the embedding type (default Q8_0);
//  7. everything else: Q8_0.
//
// Every chosen type passes the block-size fallback, so llama.cpp can load the result.
//
// The config is checked against the model's tensors first; contradictions are errors naming
// the field: a layer-list or tensor_types entry that selects no tensor; a tensor_types entry
// that quantizes the skipped lm_head (F16), or gives another skipped tensor ("not int4") fewer
// than 8 bits per weight; a tensors record naming no tensor, or a tensor that rule 5 does not
// decide. Entries followed in part are accepted with a warning in p.Warnings (a tensors record
// overridden by tensor_types; embedding_dtype unused because the tied embedding is the
// skipped lm_head).
func (p *TurboPolicy) Assign(ts []Tensor) ([]Decision, error) {
	c := p.Config
	if c == nil {
		return nil, errors.New("turboquant policy without a config")
	}
	p.Warnings = nil
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := c.CheckSkipsLMHead(p.Force); err != nil {
		return nil, err
	}
	embType := gguf.TypeQ8_0
	if c.EmbeddingDType != "" {
		embType, _ = gguf.ParseType(c.EmbeddingDType)
	}
	if p.EmbeddingType != nil {
		if !writable[*p.EmbeddingType] {
			return nil, fmt.Errorf("embedding type %s cannot be written by tq", *p.EmbeddingType)
		}
		embType = *p.EmbeddingType
	}
	tied := true
	for _, t := range ts {
		if t.Name == "output.weight" {
			tied = false
		}
	}
	used := map[string]bool{}
	match := func(list []string, t Tensor, role string) bool {
		hit := false
		for _, e := range list {
			if matchEntry(e, t, role) {
				used[e] = true
				hit = true
			}
		}
		return hit
	}
	firstMatch := func(list []string, t Tensor, role string) string {
		for _, e := range list {
			if matchEntry(e, t, role) {
				used[e] = true
				return e
			}
		}
		return ""
	}
	// deterministic pattern order for tensor_types
	ttKeys := sortedKeys(c.TensorTypes)

	var errs []error
	recordUsed := map[string]bool{}
	index := make(map[string]int, len(ts))
	out := make([]Decision, len(ts))
	for i, t := range ts {
		index[t.Name] = i
		d := Decision{Name: t.Name, Quantize: true}
		role := Role(t.Name)
		if !AllowsQuantization(t, false) {
			d.Type, d.Quantize, d.Rule = gguf.TypeF32, false, "never quantized: F32"
			if t.Type != 0 && t.Type != gguf.TypeCount && t.Type.Known() {
				if tr, _ := t.Type.Traits(); !tr.Quantized {
					d.Type = t.Type
				}
			}
			out[i] = d
			continue
		}
		isHead := role == "lm_head" || (tied && role == "embed_tokens")
		headRole := role
		if isHead {
			headRole = "lm_head"
		}
		var nt gguf.GGMLType
		rule := ""
		done := false
		// exact names first, then patterns
		ttKey := ""
		if _, ok := c.TensorTypes[t.Name]; ok {
			ttKey, rule = t.Name, "tensor_types"
		} else {
			for _, k := range ttKeys {
				if matchEntry(k, t, role) {
					ttKey, rule = k, "tensor_types "+k
					break
				}
			}
		}
		if ttKey != "" {
			nt, _ = gguf.ParseType(c.TensorTypes[ttKey])
			done = true
			used[ttKey] = true
			d.Fixed = true
			if e := firstMatch(c.SkipLayers, t, headRole); e != "" {
				tr, _ := nt.Traits()
				switch {
				case isHead && tr.Quantized:
					what := t.Name
					if role == "embed_tokens" {
						what += " (the output head: embeddings are tied)"
					}
					errs = append(errs, fmt.Errorf("tensor_types[%q] = %q quantizes %s, which skip_layers entry %q keeps in F16: remove one of the two",
						ttKey, c.TensorTypes[ttKey], what, e))
				case !isHead && tr.Quantized && nt != gguf.TypeQ8_0:
					errs = append(errs, fmt.Errorf("tensor_types[%q] = %q gives %s fewer than 8 bits per weight, but skip_layers entry %q keeps it out of int4 (Q8_0): remove one of the two",
						ttKey, c.TensorTypes[ttKey], t.Name, e))
				}
			}
			if _, ok := c.Tensors[t.Name]; ok {
				recordUsed[t.Name] = true
				p.warn("tensors[%q]: calibrated %s not used: tensor_types[%q] sets %s", t.Name, c.Tensors[t.Name].Type, ttKey, nt)
			}
		}
		if !done && KeepsHighPrecision(t) {
			nt, rule, done = gguf.TypeF16, "recurrent gate projection: F16", true
			d.Fixed = true
		}
		if !done && isHead && match(c.SkipLayers, t, headRole) {
			nt, rule, done = gguf.TypeF16, "lm_head: skipped, F16", true
			d.Fixed = true
			if role == "embed_tokens" && (c.EmbeddingDType != "" || p.EmbeddingType != nil) && embType != gguf.TypeF16 {
				p.warn("embedding type %s not used: embeddings are tied, so token_embd.weight is the output head, which skip_layers keeps in F16", embType)
			}
		}
		if !done && !isHead && match(c.SkipLayers, t, role) {
			nt, rule, done = gguf.TypeQ8_0, "skip_layers: Q8_0", true
			d.Fixed = true
		}
		if !done && match(c.LayersToQuantize, t, headRole) {
			nt = c.WeightCandidates(t.Cols())[0]
			rule = "layers_to_quantize: " + c.WeightDType
			if r, ok := c.Tensors[t.Name]; ok {
				recordUsed[t.Name] = true
				nt, _ = gguf.ParseType(r.Type)
				rule = "calibrated choice"
			}
			d.Weighted = true
			done = true
		}
		if !done && role == "embed_tokens" && !isHead {
			nt, rule, done = embType, "embedding", true
		}
		if !done {
			nt, rule = gguf.TypeQ8_0, "not listed: Q8_0"
		}
		ft, fb, err := Fallback(nt, t.Cols())
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if fb {
			rule += fmt.Sprintf("; fallback %s->%s (row %d)", nt, ft, t.Cols())
		}
		d.Type, d.Fallback, d.Rule = ft, fb, rule
		out[i] = d
	}
	// every layer-list entry must select something, or it is probably a typo
	for _, l := range [][]string{c.LayersToQuantize, c.SkipLayers} {
		for _, e := range l {
			if !used[e] && e != "lm_head" {
				errs = append(errs, fmt.Errorf("entry %q matches no tensor of this model", e))
			}
		}
	}
	for _, k := range ttKeys {
		if !used[k] {
			errs = append(errs, fmt.Errorf("tensor_types entry %q matches no tensor of this model", k))
		}
	}
	// every calibration record must be one the policy follows
	for _, k := range sortedKeys(c.Tensors) {
		if recordUsed[k] {
			continue
		}
		i, ok := index[k]
		if !ok {
			errs = append(errs, fmt.Errorf("tensors[%q] names no tensor of this model", k))
			continue
		}
		errs = append(errs, fmt.Errorf("tensors[%q].type = %q contradicts the policy: the tensor is stored as %s by rule %q, not with weight_dtype %s (records apply to layers_to_quantize tensors only)",
			k, c.Tensors[k].Type, out[i].Type, out[i].Rule, c.WeightDType))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (p *TurboPolicy) warn(format string, a ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, a...))
}
