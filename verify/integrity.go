package verify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/tokenizer"
)

// Check statuses.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusWarn    = "warn"    // a defect that does not fail the gate
	StatusSkipped = "skipped" // not run (the reason is in Detail)
)

// Check is one integrity check and its outcome.
type Check struct {
	Name     string   `json:"name"`
	Status   string   `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

func (c *Check) fail(format string, a ...any) {
	c.Status = StatusFail
	c.Problems = append(c.Problems, fmt.Sprintf(format, a...))
}

func (c *Check) warn(format string, a ...any) {
	if c.Status != StatusFail {
		c.Status = StatusWarn
	}
	c.Problems = append(c.Problems, fmt.Sprintf(format, a...))
}

// Names of the integrity checks, in the order they run.
const (
	CheckManifest   = "manifest"   // SHA-256 manifest of every shard
	CheckStructure  = "structure"  // GGUF layout: offsets, sizes, alignment (gguf.CheckModel)
	CheckTypes      = "types"      // every tensor type is one llama.cpp runs
	CheckMetadata   = "metadata"   // architecture keys, tokenizer, key types, tensor set
	CheckTurboQuant = "turboquant" // turboquant.* keys and the policy actually applied
	CheckValues     = "values"     // no NaN/Inf in dequantized tensors
)

// IntegrityReport lists the integrity checks and per-tensor statistics.
type IntegrityReport struct {
	Files   []string     `json:"files"`
	Checks  []Check      `json:"checks"`
	Tensors []TensorStat `json:"tensors,omitempty"`
	// Full is true when every row of every tensor was decoded (--full), false when rows were
	// sampled.
	Full bool `json:"full"`
}

// Check returns the named check, or nil.
func (r *IntegrityReport) Check(name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// Failed reports whether any check failed.
func (r *IntegrityReport) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == StatusFail {
			return true
		}
	}
	return false
}

// checkManifest verifies the SHA-256 manifest that covers the model and that it lists every
// shard. A missing manifest is a warning unless required.
func checkManifest(path string, shards []string, require bool) Check {
	c := Check{Name: CheckManifest, Status: StatusPass}
	mans, err := gguf.FindManifests(path)
	if err != nil {
		if require {
			c.fail("no manifest: %v", err)
		} else {
			c.Status = StatusWarn
			c.Detail = "no SHA256SUMS or .sha256 manifest found; checksums not verified"
		}
		return c
	}
	c.Detail = "manifest " + strings.Join(baseNames(mans), ", ")
	results, err := gguf.VerifyManifest(path)
	listed := map[string]bool{}
	for _, r := range results {
		listed[filepath.Clean(r.Path)] = true
		switch {
		case r.Err != nil:
			c.fail("%s: %v", r.Name, r.Err)
		case !r.OK():
			c.fail("%s: SHA-256 mismatch: manifest %s, file %s", r.Name, r.SHA256, r.Got)
		}
	}
	if err != nil && c.Status != StatusFail {
		c.fail("%v", err)
	}
	for _, s := range shards {
		if !listed[filepath.Clean(s)] {
			c.fail("%s is not listed in the manifest", filepath.Base(s))
		}
	}
	if c.Status == StatusPass {
		c.Detail += fmt.Sprintf(": %d file(s) match", len(results))
	}
	return c
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

// shardPaths returns the files a model consists of: every shard of a split model (whether it
// exists or not), or the file itself.
func shardPaths(path string) []string {
	prefix, _, count, ok := gguf.ParseSplitPath(path)
	if !ok {
		return []string{path}
	}
	out := make([]string, count)
	for i := range count {
		out[i] = gguf.SplitPath(prefix, i, count)
	}
	return out
}

// checkStructure runs gguf.CheckModel (every shard: header, offsets, sizes, alignment, split
// keys).
func checkStructure(path string) Check {
	c := Check{Name: CheckStructure, Status: StatusPass}
	probs, err := gguf.CheckModel(path)
	if err != nil {
		c.fail("%v", err)
		return c
	}
	for _, p := range probs {
		c.fail("%s", p.Error())
	}
	if c.Status == StatusPass {
		c.Detail = "offsets, sizes, alignment and split keys are valid"
	}
	return c
}

// checkTypes verifies that every tensor type is one llama.cpp defines and can hold weights.
func checkTypes(m *gguf.Model) Check {
	c := Check{Name: CheckTypes, Status: StatusPass}
	count := map[string]int{}
	for _, t := range m.Tensors() {
		tr, ok := t.Type.Traits()
		switch {
		case !ok:
			c.fail("tensor %q: unknown ggml type id %d", t.Name, uint32(t.Type))
		case tr.ActivationOnly:
			c.fail("tensor %q: type %s is an activation format llama.cpp cannot load as a weight", t.Name, t.Type)
		default:
			count[t.Type.String()]++
		}
	}
	if c.Status == StatusPass {
		var parts []string
		for _, k := range slices.Sorted(mapsKeys(count)) {
			parts = append(parts, fmt.Sprintf("%s×%d", k, count[k]))
		}
		c.Detail = strings.Join(parts, " ")
	}
	return c
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// keyTypes lists the metadata keys llama.cpp reads type-strictly (§1.9). perLayer keys may also
// be an INT32/UINT32 array of block_count elements.
var keyTypes = []struct {
	suffix   string // after "{arch}." ("" prefix for absolute keys starting with a dot-free name)
	abs      bool   // key is absolute
	typ      gguf.ValueType
	perLayer bool
}{
	{"general.architecture", true, gguf.ValueString, false},
	{"general.alignment", true, gguf.ValueUint32, false},
	{"general.file_type", true, gguf.ValueUint32, false},
	{"general.quantization_version", true, gguf.ValueUint32, false},
	{"context_length", false, gguf.ValueUint32, false},
	{"embedding_length", false, gguf.ValueUint32, false},
	{"block_count", false, gguf.ValueUint32, false},
	{"feed_forward_length", false, gguf.ValueUint32, true},
	{"attention.head_count", false, gguf.ValueUint32, true},
	{"attention.head_count_kv", false, gguf.ValueUint32, true},
	{"expert_count", false, gguf.ValueUint32, false},
	{"expert_used_count", false, gguf.ValueUint32, true},
	{"expert_feed_forward_length", false, gguf.ValueUint32, true},
	{"expert_shared_feed_forward_length", false, gguf.ValueUint32, false},
	{"attention.key_length", false, gguf.ValueUint32, false},
	{"attention.value_length", false, gguf.ValueUint32, false},
	{"attention.layer_norm_rms_epsilon", false, gguf.ValueFloat32, false},
	{"rope.freq_base", false, gguf.ValueFloat32, false},
	{"rope.scaling.factor", false, gguf.ValueFloat32, false},
	{"rope.dimension_count", false, gguf.ValueUint32, false},
	{"rope.scaling.type", false, gguf.ValueString, false},
	{"rope.scaling.original_context_length", false, gguf.ValueUint32, false},
	{"vocab_size", false, gguf.ValueUint32, false},
	{"tokenizer.ggml.model", true, gguf.ValueString, false},
	{"tokenizer.ggml.pre", true, gguf.ValueString, false},
	{"tokenizer.chat_template", true, gguf.ValueString, false},
	{"tokenizer.ggml.add_bos_token", true, gguf.ValueBool, false},
	{"tokenizer.ggml.add_eos_token", true, gguf.ValueBool, false},
	{"tokenizer.ggml.add_sep_token", true, gguf.ValueBool, false},
}

// required architecture keys (suffixes after "{arch}.").
var requiredArchKeys = []string{"context_length", "embedding_length", "block_count", "attention.head_count"}

var blkRe = regexp.MustCompile(`^blk\.(\d+)\.`)

// knownTensors are the tensor names (after "blk.N.") llama.cpp's loader requests for the
// architectures tq supports; anything else makes llama.cpp refuse the file (§5.6).
var knownTensors = map[string]map[string]bool{}

func init() {
	common := []string{"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
		"attn_q.bias", "attn_k.bias", "attn_v.bias", "ffn_norm.weight"}
	dense := []string{"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}
	moe := []string{"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
		"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight", "ffn_gate_inp_shexp.weight"}
	qk := []string{"attn_q_norm.weight", "attn_k_norm.weight"}
	set := func(lists ...[]string) map[string]bool {
		m := map[string]bool{"token_embd.weight": true, "output_norm.weight": true, "output.weight": true}
		for _, l := range lists {
			for _, n := range l {
				m[n] = true
			}
		}
		return m
	}
	knownTensors["llama"] = set(common, dense, moe, []string{"attn_output.bias", "rope_freqs.weight"})
	knownTensors["qwen2"] = set(common, dense)
	knownTensors["qwen3"] = set(common, dense, qk)
	knownTensors["qwen3moe"] = set(common, moe, qk)
}

// checkMetadata verifies the architecture keys (presence and llama.cpp's exact types), the
// hyper-parameters the runner derives from them, the tensor set, and the tokenizer.
func checkMetadata(m *gguf.Model) (Check, *tokenizer.Tokenizer) {
	c := Check{Name: CheckMetadata, Status: StatusPass}
	md := m.Metadata()
	arch, err := md.GetString("general.architecture")
	if err != nil {
		c.fail("general.architecture: %v", err)
		return c, nil
	}
	nLayer := int64(-1)
	if v, err := md.GetInt(arch + ".block_count"); err == nil {
		nLayer = v
	}
	for _, kt := range keyTypes {
		key := kt.suffix
		if !kt.abs {
			key = arch + "." + kt.suffix
		}
		v, ok := md.Get(key)
		if !ok {
			continue
		}
		if v.Type() == kt.typ {
			continue
		}
		if kt.perLayer && v.Type() == gguf.ValueArray && (v.ElemType() == gguf.ValueInt32 || v.ElemType() == gguf.ValueUint32) {
			if int64(v.Len()) != nLayer {
				c.fail("%s: per-layer array of %d elements, block_count is %d", key, v.Len(), nLayer)
			}
			continue
		}
		c.fail("%s: stored as %s, llama.cpp requires %s", key, v.Type(), kt.typ)
	}
	for _, k := range requiredArchKeys {
		if !md.Has(arch + "." + k) {
			c.fail("%s.%s is missing", arch, k)
		}
	}
	// tensor set: layers within block_count, every layer present, names llama.cpp requests
	layers := map[int64]bool{}
	known := knownTensors[arch]
	for _, t := range m.Tensors() {
		rest := t.Name
		if sm := blkRe.FindStringSubmatch(t.Name); sm != nil {
			var l int64
			fmt.Sscan(sm[1], &l)
			layers[l] = true
			if nLayer >= 0 && l >= nLayer {
				c.fail("tensor %q: layer %d but block_count is %d", t.Name, l, nLayer)
			}
			rest = t.Name[len(sm[0]):]
		}
		if known != nil && !known[rest] {
			c.fail("tensor %q is not one llama.cpp's %s loader requests (llama.cpp rejects files with extra tensors)", t.Name, arch)
		}
	}
	for l := int64(0); l < nLayer; l++ {
		if !layers[l] {
			c.fail("layer %d has no tensors (block_count is %d)", l, nLayer)
		}
	}
	// hyper-parameters as the runner reads them
	if slices.Contains(infer.SupportedArchitectures(), arch) {
		src, err := infer.NewGGUFSource(m)
		if err == nil {
			_, err = infer.ReadConfig(src)
		}
		if err != nil {
			c.fail("hyper-parameters: %v", err)
		}
	} else {
		c.warn("architecture %q: tq cannot run it, so perplexity, KLD and tool calls are skipped", arch)
	}
	// tokenizer
	tok, terr := tokenizerFromGGUF(md)
	if terr != nil {
		c.fail("tokenizer: %v", terr)
	}
	nVocab := int64(-1)
	if te, ok := m.Tensor("token_embd.weight"); ok && len(te.Dims) >= 2 {
		nVocab = int64(te.Dims[1])
	} else {
		c.fail("token_embd.weight is missing or not 2-D")
	}
	if toks, err := md.GetStringArray(tokenizer.KeyTokens); err == nil && nVocab >= 0 && int64(len(toks)) != nVocab {
		c.fail("tokenizer has %d tokens but token_embd.weight has %d rows", len(toks), nVocab)
	}
	if out, ok := m.Tensor("output.weight"); ok && nVocab >= 0 && (len(out.Dims) < 2 || int64(out.Dims[1]) != nVocab) {
		c.fail("output.weight has shape %v, vocabulary is %d", out.Dims, nVocab)
	}
	if v, err := md.GetInt(arch + ".vocab_size"); err == nil && nVocab >= 0 && v != nVocab {
		c.fail("%s.vocab_size is %d, token_embd.weight has %d rows", arch, v, nVocab)
	}
	for _, kind := range tokenizer.SpecialKeyNames {
		key := tokenizer.SpecialIDKey(kind)
		if v, ok := md.Get(key); ok {
			id, _ := v.AsUint()
			if nVocab >= 0 && int64(id) >= nVocab {
				c.fail("%s = %d is outside the vocabulary (%d)", key, id, nVocab)
			}
		}
	}
	if !md.Has(tokenizer.KeyChatTemplate) {
		c.warn("no tokenizer.chat_template: chat and tool-call checks cannot run")
	}
	if c.Status == StatusPass {
		c.Detail = fmt.Sprintf("architecture %s, %d layers, vocabulary %d, tokenizer %s", arch, nLayer, nVocab, tokName(md))
	}
	if terr != nil {
		tok = nil
	}
	return c, tok
}

func tokName(md gguf.Metadata) string {
	m, _ := md.GetString(tokenizer.KeyModel)
	if p, err := md.GetString(tokenizer.KeyPre); err == nil {
		return m + "/" + p
	}
	return m
}

// tokenizerFromGGUF builds the tokenizer llama.cpp would build from the metadata.
func tokenizerFromGGUF(md gguf.Metadata) (*tokenizer.Tokenizer, error) {
	return tokenizer.FromGGUFMetadata(md)
}

// Turbo-quant provenance keys (written by tq convert --use-turboquant).
var turboKeys = []struct {
	key string
	typ gguf.ValueType
}{
	{"turboquant.version", gguf.ValueUint32},
	{"turboquant.quant_method", gguf.ValueString},
	{"turboquant.weight_dtype", gguf.ValueString},
	{"turboquant.kv_cache_dtype", gguf.ValueString},
	{"turboquant.group_size", gguf.ValueUint32},
	{"turboquant.symmetric", gguf.ValueBool},
	{"turboquant.tq_version", gguf.ValueString},
}

// atLeast8Bit are the types that keep 8 or more bits per weight.
var atLeast8Bit = map[gguf.GGMLType]bool{gguf.TypeQ8_0: true, gguf.TypeF16: true, gguf.TypeBF16: true, gguf.TypeF32: true}

// checkTurboQuant verifies the turboquant.* keys and that the tensors follow the policy they
// record: lm_head (output.weight, or token_embd.weight when tied) F16, attn_output and ffn_down
// at 8 bits or more, the layers_to_quantize roles in the weight_dtype container, and a valid
// kv_cache_dtype. Models without turboquant keys skip the check.
func checkTurboQuant(m *gguf.Model) Check {
	c := Check{Name: CheckTurboQuant, Status: StatusPass}
	md := m.Metadata()
	has := false
	for _, k := range md.Keys() {
		has = has || strings.HasPrefix(k, "turboquant.")
	}
	if !has {
		c.Status = StatusSkipped
		c.Detail = "no turboquant.* metadata (not a turboquant conversion)"
		return c
	}
	for _, kt := range turboKeys {
		v, ok := md.Get(kt.key)
		switch {
		case !ok:
			c.fail("%s is missing", kt.key)
		case v.Type() != kt.typ:
			c.fail("%s: stored as %s, expected %s", kt.key, v.Type(), kt.typ)
		}
	}
	if qm, err := md.GetString("turboquant.quant_method"); err == nil && qm != policy.TurboQuantMethod {
		c.fail("turboquant.quant_method is %q, expected %q", qm, policy.TurboQuantMethod)
	}
	kv, err := md.GetString("turboquant.kv_cache_dtype")
	if err == nil {
		if _, perr := infer.ParseCacheType(kv); perr != nil || kv == "" {
			c.fail("turboquant.kv_cache_dtype %q is not a KV cache type llama.cpp accepts", kv)
		}
	}
	wd, _ := md.GetString("turboquant.weight_dtype")
	if wd != "int4" && wd != "int8" {
		c.fail("turboquant.weight_dtype %q is not int4 or int8", wd)
	}
	if gs, err := md.GetUint("turboquant.group_size"); err == nil && gs != 32 && gs != 64 && gs != 128 {
		c.fail("turboquant.group_size %d is not 32, 64 or 128", gs)
	}
	skip, _ := md.GetStringArray("turboquant.skip_layers")
	layers, _ := md.GetStringArray("turboquant.layers_to_quantize")
	if len(layers) == 0 {
		layers = policy.DefaultLayersToQuantize
	}
	// lm_head
	head := "output.weight"
	if _, ok := m.Tensor(head); !ok {
		head = "token_embd.weight" // tied embeddings
	}
	if slices.Contains(skip, "lm_head") || slices.Contains(skip, "output") {
		if t, ok := m.Tensor(head); ok && t.Type != gguf.TypeF16 && t.Type != gguf.TypeF32 {
			c.fail("lm_head (%s) is %s; the policy keeps it in F16", head, t.Type)
		}
	} else {
		c.fail("turboquant.skip_layers does not contain lm_head (the output projection must stay F16)")
	}
	var mism []string
	for _, t := range m.Tensors() {
		role := policy.Role(t.Name)
		switch role {
		case "o_proj", "down_proj":
			if !atLeast8Bit[t.Type] && !(slices.Contains(layers, role) && containerOK(t.Type, wd)) {
				c.fail("%s (%s) is %s; the policy keeps it at 8 bits or more", t.Name, role, t.Type)
			}
		}
		if role != "" && role != "lm_head" && slices.Contains(layers, role) && !containerOK(t.Type, wd) && !atLeast8Bit[t.Type] {
			mism = append(mism, fmt.Sprintf("%s (%s) is %s", t.Name, role, t.Type))
		}
	}
	if len(mism) > 0 {
		sort.Strings(mism)
		c.warn("%d tensor(s) in layers_to_quantize are not in the %s container (calibration overrides?): %s",
			len(mism), wd, strings.Join(firstN(mism, 8), "; "))
	}
	if c.Status == StatusPass {
		c.Detail = fmt.Sprintf("weight_dtype %s, kv_cache_dtype %s, lm_head %s, attn_output/ffn_down >= 8 bit", wd, kv, head)
	}
	return c
}

// containerOK reports whether t is a container the policy writes for the weight dtype
// (policy.TurboConfig.WeightCandidates: int4 in the 4.5-bit Q4_K or IQ4_NL, int8 in Q8_0).
func containerOK(t gguf.GGMLType, wd string) bool {
	switch wd {
	case "int4":
		return t == gguf.TypeQ4_K || t == gguf.TypeIQ4_NL
	case "int8":
		return t == gguf.TypeQ8_0
	}
	return false
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("… %d more", len(s)-n))
}

// openModelChecked opens the model after the structural checks; errors become a failed
// structure check.
func openModelChecked(path string) (*gguf.Model, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	m, err := gguf.Open(path)
	if err != nil {
		var p *gguf.Problem
		if errors.As(err, &p) {
			return nil, p
		}
		return nil, err
	}
	return m, nil
}
