package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
)

// Thresholds are the gate's limits. A nil field is not checked. Fractions are in [0, 1].
type Thresholds struct {
	// MaxKLD bounds the mean KL divergence (nats) from the reference.
	MaxKLD *float64 `json:"max_kld,omitempty"`
	// MaxKLDP99 bounds the 99th percentile of the per-position KLD.
	MaxKLDP99 *float64 `json:"max_kld_p99,omitempty"`
	// MinTop1 is the least top-1 agreement with the reference ("same top p").
	MinTop1 *float64 `json:"min_top1,omitempty"`
	// MaxMeanAbsDeltaP bounds mean |p_model(tok) − p_ref(tok)| of the correct token.
	MaxMeanAbsDeltaP *float64 `json:"max_mean_abs_delta_p,omitempty"`
	// MaxPPLRatio bounds PPL(model)/PPL(reference) on the same tokens.
	MaxPPLRatio *float64 `json:"max_ppl_ratio,omitempty"`
	// MaxPPL bounds the model's perplexity (no reference needed).
	MaxPPL *float64 `json:"max_ppl,omitempty"`
	// MinToolCallValid is the least fraction of tool-call cases with only valid calls.
	MinToolCallValid *float64 `json:"min_toolcall_valid,omitempty"`
	// MinToolCallAnswered is the least fraction of cases whose turn ends with an answer or call.
	MinToolCallAnswered *float64 `json:"min_toolcall_answered,omitempty"`
	// MinToolCallExact is the least fraction of cases whose calls equal the reference's.
	MinToolCallExact *float64 `json:"min_toolcall_exact,omitempty"`
}

// DefaultThresholds are the limits used when neither a flag nor a config file sets them:
// mean KLD <= 0.05, PPL ratio <= 1.05 (both need a reference) and tool-call validity >= 0.95.
func DefaultThresholds() Thresholds {
	f := func(v float64) *float64 { return &v }
	return Thresholds{MaxKLD: f(0.05), MaxPPLRatio: f(1.05), MinToolCallValid: f(0.95)}
}

// thresholdSpec describes one threshold for gate evaluation.
type thresholdSpec struct {
	key     string // config / flag name (underscores)
	get     func(*Thresholds) **float64
	max     bool   // the value must be <= the threshold (else >=)
	needs   string // "reference" or "" (what the metric needs)
	metric  string // description
	section string // report section the metric comes from
}

var thresholdSpecs = []thresholdSpec{
	{"max_kld", func(t *Thresholds) **float64 { return &t.MaxKLD }, true, "reference", "mean KLD", "kld"},
	{"max_kld_p99", func(t *Thresholds) **float64 { return &t.MaxKLDP99 }, true, "reference", "99th percentile KLD", "kld"},
	{"min_top1", func(t *Thresholds) **float64 { return &t.MinTop1 }, false, "reference", "top-1 agreement", "kld"},
	{"max_mean_abs_delta_p", func(t *Thresholds) **float64 { return &t.MaxMeanAbsDeltaP }, true, "reference", "mean |Δp| of the correct token", "kld"},
	{"max_ppl_ratio", func(t *Thresholds) **float64 { return &t.MaxPPLRatio }, true, "reference", "PPL(model)/PPL(reference)", "kld"},
	{"max_ppl", func(t *Thresholds) **float64 { return &t.MaxPPL }, true, "", "perplexity", "ppl"},
	{"min_toolcall_valid", func(t *Thresholds) **float64 { return &t.MinToolCallValid }, false, "", "valid tool-call fraction", "toolcalls"},
	{"min_toolcall_answered", func(t *Thresholds) **float64 { return &t.MinToolCallAnswered }, false, "", "answered fraction", "toolcalls"},
	{"min_toolcall_exact", func(t *Thresholds) **float64 { return &t.MinToolCallExact }, false, "reference", "tool-call exact match with the reference", "toolcalls"},
}

// ThresholdNames lists the threshold keys (config file keys; flags use dashes).
func ThresholdNames() []string {
	out := make([]string, len(thresholdSpecs))
	for i, s := range thresholdSpecs {
		out[i] = s.key
	}
	return out
}

// Set sets the threshold named key (underscores or dashes).
func (t *Thresholds) Set(key string, v float64) error {
	key = strings.ReplaceAll(key, "-", "_")
	for _, s := range thresholdSpecs {
		if s.key == key {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("threshold %s: %v is not a finite non-negative number", key, v)
			}
			if !s.max && v > 1 {
				return fmt.Errorf("threshold %s: %v is a fraction and must be in [0, 1]", key, v)
			}
			*s.get(t) = &v
			return nil
		}
	}
	return fmt.Errorf("unknown threshold %q", key)
}

// SetNames lists the thresholds t sets.
func (t *Thresholds) SetNames() []string {
	var out []string
	for _, s := range thresholdSpecs {
		if *s.get(t) != nil {
			out = append(out, s.key)
		}
	}
	return out
}

// Merge returns t with every threshold o sets replaced by o's value.
func (t Thresholds) Merge(o Thresholds) Thresholds {
	for _, s := range thresholdSpecs {
		if v := *s.get(&o); v != nil {
			*s.get(&t) = v
		}
	}
	return t
}

// Config is a verify.json / verify.yaml file: thresholds plus a few run settings.
type Config struct {
	Thresholds
	Ctx               *int    `json:"ctx,omitempty"`
	Chunks            *int    `json:"chunks,omitempty"`
	CacheType         *string `json:"cache_type,omitempty"`
	ToolCallMaxTokens *int    `json:"toolcall_max_tokens,omitempty"`
	SampleRows        *int    `json:"sample_rows,omitempty"`
	RequireManifest   *bool   `json:"require_manifest,omitempty"`
	TopK              *int    `json:"top_k,omitempty"`
}

// ConfigFileNames are looked for in the working directory when no --config is given.
var ConfigFileNames = []string{"verify.yaml", "verify.yml", "verify.json"}

// MaxConfigBytes bounds a config file.
const MaxConfigBytes = 1 << 20

// LoadConfig reads a verify.json or verify.yaml file (YAML: flat "key: value" lines; see
// docs/verify.md). Unknown keys are errors.
func LoadConfig(path string) (*Config, error) {
	data, err := boundedread.ReadFile(path, "verify config", MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	return ParseConfig(data, path)
}

// ParseConfig parses config contents; JSON when name ends in ".json" or the text starts with
// "{", YAML otherwise.
func ParseConfig(data []byte, name string) (*Config, error) {
	var raw map[string]any
	trimmed := bytes.TrimSpace(data)
	if strings.EqualFold(filepath.Ext(name), ".json") || bytes.HasPrefix(trimmed, []byte("{")) {
		if err := json.Unmarshal(trimmed, &raw); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
	} else {
		var err error
		if raw, err = parseFlatYAML(data, name); err != nil {
			return nil, err
		}
	}
	c := &Config{}
	for k, v := range raw {
		if v == nil {
			continue
		}
		f, isNum := v.(float64)
		isThreshold := false
		for _, s := range thresholdSpecs {
			if s.key == k {
				isThreshold = true
			}
		}
		switch {
		case isThreshold:
			if !isNum {
				return nil, fmt.Errorf("%s: %s: want a number, got %v", name, k, v)
			}
			if err := c.Thresholds.Set(k, f); err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
		case k == "ctx" || k == "chunks" || k == "toolcall_max_tokens" || k == "sample_rows" || k == "top_k":
			if !isNum || f != math.Trunc(f) || f < 0 || f > 1<<30 {
				return nil, fmt.Errorf("%s: %s: want a non-negative integer, got %v", name, k, v)
			}
			n := int(f)
			switch k {
			case "ctx":
				c.Ctx = &n
			case "chunks":
				c.Chunks = &n
			case "toolcall_max_tokens":
				c.ToolCallMaxTokens = &n
			case "sample_rows":
				c.SampleRows = &n
			case "top_k":
				c.TopK = &n
			}
		case k == "cache_type":
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s: cache_type: want a string, got %v", name, v)
			}
			c.CacheType = &s
		case k == "require_manifest":
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: require_manifest: want true or false, got %v", name, v)
			}
			c.RequireManifest = &b
		default:
			return nil, fmt.Errorf("%s: unknown key %q (thresholds: %s; settings: ctx, chunks, cache_type, toolcall_max_tokens, sample_rows, require_manifest, top_k)",
				name, k, strings.Join(ThresholdNames(), ", "))
		}
	}
	return c, nil
}

// FindConfig returns the first of ConfigFileNames present in dir, or "".
func FindConfig(dir string) string {
	for _, n := range ConfigFileNames {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}
