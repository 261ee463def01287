// Package hf loads Hugging Face model folders: config.json (typed and validated), the
// safetensors weights (through internal/safetensors) and the tokenizer side files.
package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
)

// MaxConfigSize bounds the size of config.json read into memory.
const MaxConfigSize = boundedread.MaxJSONConfig

// Sanity bounds on dimensions: far above any real model, low enough that products of a few
// of them cannot overflow int64.
const (
	maxDim    = 1 << 20 // hidden, intermediate, head_dim
	maxLayers = 1 << 14
	maxHeads  = 1 << 14
	maxVocab  = 1 << 24
	maxExpert = 1 << 14
	// maxExpertTensors bounds num_hidden_layers * num_experts (DeepSeek-V3 has ~15.6k).
	maxExpertTensors = 1 << 20
	maxParams        = 1e14
)

// RopeScaling is the rope_scaling (or rope_parameters) object of config.json.
type RopeScaling struct {
	Type                          string  // rope_type or type: "linear", "yarn", "llama3", "dynamic", ...
	Factor                        float64 // factor
	OriginalMaxPositionEmbeddings int     // original_max_position_embeddings (0 if absent)
	LowFreqFactor                 float64 // llama3: low_freq_factor
	HighFreqFactor                float64 // llama3: high_freq_factor
	BetaFast                      float64 // yarn: beta_fast (0 if absent)
	BetaSlow                      float64 // yarn: beta_slow (0 if absent)
	AttentionFactor               float64 // yarn: attention_factor or mscale (0 if absent)
	Raw                           map[string]any
}

// QuantizationConfig is the quantization_config object of config.json.
type QuantizationConfig struct {
	QuantMethod         string // quant_method, e.g. "fp8"
	Fmt                 string // fmt, e.g. "e4m3"
	ActivationScheme    string // activation_scheme, e.g. "dynamic"
	WeightBlockSize     []int  // weight_block_size, e.g. [128, 128] (rows, columns)
	ModulesToNotConvert []string
	Raw                 map[string]any
}

// Config is a typed view of config.json. Fields absent from the file hold the defaults of
// the corresponding transformers configuration class; Raw keeps every key.
type Config struct {
	Path string // the config.json read

	Architectures         []string
	ModelType             string
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int // default NumAttentionHeads
	HeadDim               int // default HiddenSize / NumAttentionHeads
	VocabSize             int
	RMSNormEps            float64 // default 1e-6
	RopeTheta             float64 // default 10000
	RopeScaling           *RopeScaling
	MaxPositionEmbeddings int
	TieWordEmbeddings     bool
	AttentionBias         bool
	HiddenAct             string // default "silu"

	NumExperts                   int // num_experts (or num_local_experts)
	NumExpertsPerTok             int
	MoeIntermediateSize          int
	NormTopKProb                 bool
	SharedExpertIntermediateSize int
	DecoderSparseStep            int // default 1
	MLPOnlyLayers                []int

	BOSTokenID []int // int or list in the file
	EOSTokenID []int // int or list in the file
	PadTokenID []int

	TorchDType         string // torch_dtype (or dtype)
	QuantizationConfig *QuantizationConfig

	// Hybrid-attention (Qwen3.5 / Qwen3.6, qwen35 and qwen35moe) fields; see qwen35.go.
	Hybrid *HybridConfig

	Raw map[string]any
}

// ConfigError names the config.json file and field that failed validation.
type ConfigError struct {
	Path  string
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("hf: %s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("hf: %s: field %q: %s", e.Path, e.Field, e.Msg)
}

// LoadConfig reads and validates config.json; path may be the file or its folder.
func LoadConfig(path string) (*Config, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := boundedread.ReadFile(path, "config", MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses and validates the contents of a config.json; path is used in errors.
func ParseConfig(path string, data []byte) (*Config, error) {
	p := &parser{path: path}
	if err := p.load(data); err != nil {
		return nil, err
	}
	c := &Config{Path: path, Raw: p.rawAny}
	c.Architectures = p.strings("architectures")
	c.ModelType = p.str("model_type", "")
	c.HiddenSize = p.intReq("hidden_size", 1, maxDim)
	c.NumHiddenLayers = p.intReq("num_hidden_layers", 1, maxLayers)
	c.NumAttentionHeads = p.intReq("num_attention_heads", 1, maxHeads)
	c.NumKeyValueHeads = p.intOpt("num_key_value_heads", c.NumAttentionHeads, 1, maxHeads)
	c.VocabSize = p.intReq("vocab_size", 1, maxVocab)
	c.RMSNormEps = p.float("rms_norm_eps", 1e-6)
	c.MaxPositionEmbeddings = p.intOpt("max_position_embeddings", defaultMaxPos(c.ModelType), 0, 1<<30)
	c.TieWordEmbeddings = p.boolean("tie_word_embeddings", false)
	c.AttentionBias = p.boolean("attention_bias", false)
	c.HiddenAct = p.str("hidden_act", "silu")
	c.NumExperts = p.intOpt("num_experts", 0, 0, maxExpert)
	if c.NumExperts == 0 {
		c.NumExperts = p.intOpt("num_local_experts", 0, 0, maxExpert)
	}
	c.NumExpertsPerTok = p.intOpt("num_experts_per_tok", 0, 0, maxExpert)
	c.MoeIntermediateSize = p.intOpt("moe_intermediate_size", 0, 0, maxDim)
	c.NormTopKProb = p.boolean("norm_topk_prob", false)
	c.SharedExpertIntermediateSize = p.intOpt("shared_expert_intermediate_size", 0, 0, maxDim)
	c.DecoderSparseStep = p.intOpt("decoder_sparse_step", 1, 1, maxLayers)
	c.MLPOnlyLayers = p.ints("mlp_only_layers")
	c.BOSTokenID = p.intOrList("bos_token_id")
	c.EOSTokenID = p.intOrList("eos_token_id")
	c.PadTokenID = p.intOrList("pad_token_id")
	c.TorchDType = p.str("torch_dtype", "")
	if c.TorchDType == "" {
		c.TorchDType = p.str("dtype", "")
	}
	c.RopeTheta = p.float("rope_theta", 0)
	c.RopeScaling = p.rope(&c.RopeTheta)
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	c.QuantizationConfig = p.quant()
	c.IntermediateSize = p.intOpt("intermediate_size", 0, 0, maxDim)
	if p.has("head_dim") {
		c.HeadDim = p.intReq("head_dim", 1, maxDim)
	}
	c.Hybrid = p.hybrid(c)
	if p.err != nil {
		return nil, p.err
	}
	return c, c.validate(p)
}

func defaultMaxPos(modelType string) int {
	if strings.HasPrefix(modelType, "qwen") {
		return 32768
	}
	return 2048
}

func (c *Config) validate(p *parser) error {
	fail := func(field, format string, args ...any) error {
		return &ConfigError{Path: c.Path, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fail("num_key_value_heads", "%d does not divide num_attention_heads (%d)", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return fail("num_attention_heads", "%d does not divide hidden_size (%d) and head_dim is not given", c.NumAttentionHeads, c.HiddenSize)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return fail("rms_norm_eps", "%g is not in (0, 1)", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fail("rope_theta", "%g is not a positive finite number", c.RopeTheta)
	}
	if c.NumExperts > 0 {
		if c.NumExpertsPerTok < 1 || c.NumExpertsPerTok > c.NumExperts {
			return fail("num_experts_per_tok", "%d is not in [1, num_experts=%d]", c.NumExpertsPerTok, c.NumExperts)
		}
		if c.MoeIntermediateSize < 1 {
			// Mixtral-style configs size experts with intermediate_size.
			if p.has("moe_intermediate_size") || c.IntermediateSize < 1 {
				return fail("moe_intermediate_size", "must be positive for a model with %d experts", c.NumExperts)
			}
			c.MoeIntermediateSize = c.IntermediateSize
		}
	}
	for i, l := range c.MLPOnlyLayers {
		if l < 0 || l >= c.NumHiddenLayers {
			return fail("mlp_only_layers", "entry %d (%d) is not a layer in [0, %d)", i, l, c.NumHiddenLayers)
		}
	}
	needDense := false
	for i := 0; i < c.NumHiddenLayers; i++ {
		if !c.IsMoELayer(i) {
			needDense = true
			break
		}
	}
	if needDense && c.IntermediateSize < 1 {
		return fail("intermediate_size", "missing or not positive, but the model has dense MLP layers")
	}
	if c.NumExperts > 0 && c.NumHiddenLayers*c.NumExperts > maxExpertTensors {
		return fail("num_experts", "%d experts x %d layers exceeds the limit of %d expert MLPs", c.NumExperts, c.NumHiddenLayers, maxExpertTensors)
	}
	// Bound the implied parameter count so that later int64 products cannot overflow.
	h, L := float64(c.HiddenSize), float64(c.NumHiddenLayers)
	attn := h * float64(c.HeadDim) * float64(2*c.NumAttentionHeads+2*c.NumKeyValueHeads)
	mlp := 3 * h * (float64(c.IntermediateSize) + float64(c.NumExperts)*float64(c.MoeIntermediateSize) + float64(c.SharedExpertIntermediateSize))
	if est := L*(attn+mlp) + 2*h*float64(c.VocabSize); est > maxParams {
		return fail("", "dimensions imply about %.3g parameters, over the %.0g limit", est, float64(maxParams))
	}
	if rs := c.RopeScaling; rs != nil {
		switch rs.Type {
		case "linear", "yarn", "llama3", "dynamic", "longrope":
			if !(rs.Factor > 0) {
				return fail("rope_scaling", "%s scaling needs a positive factor, found %g", rs.Type, rs.Factor)
			}
		}
		if rs.Type == "llama3" {
			if rs.OriginalMaxPositionEmbeddings < 1 || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) {
				return fail("rope_scaling", "llama3 scaling needs original_max_position_embeddings > 0 and 0 < low_freq_factor < high_freq_factor")
			}
		}
	}
	if err := c.validateHybrid(); err != nil {
		return err
	}
	if q := c.QuantizationConfig; q != nil && q.QuantMethod == "fp8" && q.WeightBlockSize != nil {
		if len(q.WeightBlockSize) != 2 || q.WeightBlockSize[0] < 1 || q.WeightBlockSize[1] < 1 {
			return fail("quantization_config", "weight_block_size must be two positive integers, found %v", q.WeightBlockSize)
		}
	}
	return nil
}

// IsMoELayer reports whether decoder layer i uses a sparse (mixture-of-experts) MLP, per
// num_experts, mlp_only_layers and decoder_sparse_step.
func (c *Config) IsMoELayer(i int) bool {
	if c.NumExperts == 0 {
		return false
	}
	for _, l := range c.MLPOnlyLayers {
		if l == i {
			return false
		}
	}
	step := c.DecoderSparseStep
	if step < 1 {
		step = 1
	}
	return (i+1)%step == 0
}

// AttentionBiases reports which attention projections carry biases: Qwen2 always has q/k/v
// biases; otherwise attention_bias adds them to q/k/v and o.
func (c *Config) AttentionBiases() (qkv, o bool) {
	if a, _ := c.Arch(); a == "qwen2" {
		return true, false
	}
	return c.AttentionBias, c.AttentionBias
}

var archByClass = map[string]string{
	"LlamaForCausalLM":    "llama",
	"MistralForCausalLM":  "llama",
	"Qwen2ForCausalLM":    "qwen2",
	"Qwen3ForCausalLM":    "qwen3",
	"Qwen3MoeForCausalLM": "qwen3moe",

	"Qwen3_5ForConditionalGeneration":    "qwen35",
	"Qwen3_5ForCausalLM":                 "qwen35",
	"Qwen3_5MoeForConditionalGeneration": "qwen35moe",
	"Qwen3_5MoeForCausalLM":              "qwen35moe",
}

var archByModelType = map[string]string{
	"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3moe",
	"qwen3_5": "qwen35", "qwen3_5_text": "qwen35", "qwen3_5_moe": "qwen35moe", "qwen3_5_moe_text": "qwen35moe",
}

// Arch returns tq's architecture name ("llama", "qwen2", "qwen3", "qwen3moe", "qwen35",
// "qwen35moe") for the first entry of architectures (or for model_type when architectures
// is absent).
func (c *Config) Arch() (string, error) {
	if len(c.Architectures) > 0 {
		if a, ok := archByClass[c.Architectures[0]]; ok {
			return a, nil
		}
		return "", fmt.Errorf("hf: %s: architecture %q is not supported (supported: %s)", c.Path, c.Architectures[0], supportedClasses())
	}
	if a, ok := archByModelType[c.ModelType]; ok {
		return a, nil
	}
	return "", fmt.Errorf("hf: %s: no architectures and model_type %q is not supported (supported: %s)", c.Path, c.ModelType, supportedClasses())
}

func supportedClasses() string {
	names := make([]string, 0, len(archByClass))
	for k := range archByClass {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// parser decodes config.json fields one at a time so that errors name the field. The
// first error sticks; later calls become no-ops.
type parser struct {
	path   string
	raw    map[string]json.RawMessage
	rawAny map[string]any
	err    error
}

func (p *parser) fail(field, format string, args ...any) {
	if p.err == nil {
		p.err = &ConfigError{Path: p.path, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
}

func (p *parser) load(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root map[string]json.RawMessage
	if err := dec.Decode(&root); err != nil {
		return &ConfigError{Path: p.path, Msg: "invalid JSON: " + err.Error()}
	}
	if root == nil {
		return &ConfigError{Path: p.path, Msg: "not a JSON object"}
	}
	if dec.More() {
		return &ConfigError{Path: p.path, Msg: "unexpected data after the JSON object"}
	}
	// Multimodal wrappers keep the language model's settings in text_config; its keys
	// override the root's (as llama.cpp's converter does).
	if tc, ok := root["text_config"]; ok && !isNull(tc) {
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(tc, &sub); err != nil {
			return &ConfigError{Path: p.path, Field: "text_config", Msg: "not a JSON object"}
		}
		for k, v := range sub {
			root[k] = v
		}
	}
	p.raw = root
	p.rawAny = make(map[string]any, len(root))
	for k, v := range root {
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		var a any
		if err := d.Decode(&a); err != nil {
			return &ConfigError{Path: p.path, Field: k, Msg: "invalid JSON: " + err.Error()}
		}
		p.rawAny[k] = a
	}
	return nil
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// has reports whether key is present and non-null.
func (p *parser) has(key string) bool {
	v, ok := p.raw[key]
	return ok && !isNull(v)
}

func (p *parser) number(key string) (float64, bool) {
	v, ok := p.raw[key]
	if !ok || isNull(v) || p.err != nil {
		return 0, false
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil || bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
		p.fail(key, "expected a number, found %.40s", v)
		return 0, false
	}
	f, err := n.Float64()
	if err != nil {
		p.fail(key, "invalid number %s", n)
		return 0, false
	}
	return f, true
}

func (p *parser) toInt(key string, f float64, lo, hi int) int {
	if f != math.Trunc(f) {
		p.fail(key, "expected an integer, found %g", f)
		return 0
	}
	if f < float64(lo) || f > float64(hi) {
		p.fail(key, "%g is out of range [%d, %d]", f, lo, hi)
		return 0
	}
	return int(f)
}

func (p *parser) intReq(key string, lo, hi int) int {
	f, ok := p.number(key)
	if !ok {
		if p.err == nil {
			p.fail(key, "missing (required)")
		}
		return 0
	}
	return p.toInt(key, f, lo, hi)
}

func (p *parser) intOpt(key string, def, lo, hi int) int {
	f, ok := p.number(key)
	if !ok {
		return def
	}
	return p.toInt(key, f, lo, hi)
}

func (p *parser) float(key string, def float64) float64 {
	f, ok := p.number(key)
	if !ok {
		return def
	}
	return f
}

// field returns key decoded as a T: def when the key is absent or null (or an earlier field
// failed); a value of another JSON type fails the parse with "expected <want>".
func field[T any](p *parser, key string, def T, want string) T {
	v, ok := p.raw[key]
	if !ok || isNull(v) || p.err != nil {
		return def
	}
	var x T
	if err := json.Unmarshal(v, &x); err != nil {
		p.fail(key, "expected %s, found %.40s", want, v)
		return def
	}
	return x
}

func (p *parser) boolean(key string, def bool) bool { return field(p, key, def, "true or false") }

func (p *parser) str(key, def string) string { return field(p, key, def, "a string") }

func (p *parser) strings(key string) []string {
	return field[[]string](p, key, nil, "a list of strings")
}

func (p *parser) ints(key string) []int { return field[[]int](p, key, nil, "a list of integers") }

// intOrList accepts an integer, a list of integers or null.
func (p *parser) intOrList(key string) []int {
	if v, ok := p.raw[key]; ok && p.err == nil {
		var one int
		if err := json.Unmarshal(v, &one); err == nil && !isNull(v) {
			return []int{one}
		}
	}
	return field[[]int](p, key, nil, "an integer or a list of integers")
}

// rope reads rope_scaling, or rope_parameters (newer transformers, which may also carry
// rope_theta). A "default" type means no scaling.
func (p *parser) rope(theta *float64) *RopeScaling {
	key := "rope_scaling"
	if !p.has(key) {
		key = "rope_parameters"
		if !p.has(key) {
			return nil
		}
	}
	obj, ok := p.rawAny[key].(map[string]any)
	if !ok {
		p.fail(key, "expected an object")
		return nil
	}
	num := func(names ...string) float64 {
		for _, n := range names {
			v, ok := obj[n]
			if !ok || v == nil {
				continue
			}
			jn, isNum := v.(json.Number)
			if !isNum {
				p.fail(key, "%s: expected a number, found %v", n, v)
				return 0
			}
			f, err := jn.Float64()
			if err != nil {
				p.fail(key, "%s: invalid number %v", n, jn)
			}
			return f
		}
		return 0
	}
	rs := &RopeScaling{Raw: obj}
	for _, n := range []string{"rope_type", "type"} {
		if s, ok := obj[n].(string); ok {
			rs.Type = s
			break
		}
	}
	if t := num("rope_theta"); t != 0 && *theta == 0 {
		*theta = t
	}
	rs.Factor = num("factor")
	omp := num("original_max_position_embeddings")
	if omp < 0 || omp > 1<<30 || omp != math.Trunc(omp) {
		p.fail(key, "original_max_position_embeddings: invalid value %g", omp)
	}
	rs.OriginalMaxPositionEmbeddings = int(omp)
	rs.LowFreqFactor = num("low_freq_factor")
	rs.HighFreqFactor = num("high_freq_factor")
	rs.BetaFast = num("beta_fast")
	rs.BetaSlow = num("beta_slow")
	rs.AttentionFactor = num("attention_factor", "mscale")
	if rs.Type == "" || rs.Type == "default" {
		if rs.Factor == 0 {
			return nil
		}
		if rs.Type == "" {
			p.fail(key, "missing rope_type")
			return nil
		}
	}
	return rs
}

func (p *parser) quant() *QuantizationConfig {
	key := "quantization_config"
	if !p.has(key) {
		return nil
	}
	obj, ok := p.rawAny[key].(map[string]any)
	if !ok {
		p.fail(key, "expected an object")
		return nil
	}
	q := &QuantizationConfig{Raw: obj}
	q.QuantMethod, _ = obj["quant_method"].(string)
	q.Fmt, _ = obj["fmt"].(string)
	q.ActivationScheme, _ = obj["activation_scheme"].(string)
	if v, ok := obj["weight_block_size"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			p.fail(key, "weight_block_size: expected a list of integers")
			return q
		}
		for _, e := range list {
			n, ok := e.(json.Number)
			i, err := n.Int64()
			if !ok || err != nil || i < 1 || i > maxDim {
				p.fail(key, "weight_block_size: expected positive integers, found %v", e)
				return q
			}
			q.WeightBlockSize = append(q.WeightBlockSize, int(i))
		}
	}
	for _, name := range []string{"modules_to_not_convert", "ignored_layers"} {
		if list, ok := obj[name].([]any); ok {
			for _, e := range list {
				if s, ok := e.(string); ok {
					q.ModulesToNotConvert = append(q.ModulesToNotConvert, s)
				}
			}
		}
	}
	return q
}
