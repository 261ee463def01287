package modelsrc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
)

// hparams is config.json as convert_hf_to_gguf.py sees it: the root object with the keys of a
// nested "text_config" merged over it. Lookups take a list of candidate keys, first found wins
// (the converter's find_hparam).
type hparams struct {
	path string
	m    map[string]any
}

func loadHParams(dir string) (*hparams, error) {
	path := filepath.Join(dir, "config.json")
	b, err := boundedread.ReadFile(path, "config", boundedread.MaxJSONConfig)
	if err != nil {
		return nil, fmt.Errorf("model folder %s: %w", dir, err)
	}
	return parseHParams(path, b)
}

func parseHParams(path string, b []byte) (*hparams, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s: not a JSON object", path)
	}
	if tc, ok := m["text_config"].(map[string]any); ok {
		for k, v := range tc {
			m[k] = v
		}
	}
	return &hparams{path: path, m: m}, nil
}

func (h *hparams) find(keys ...string) (string, any, bool) {
	for _, k := range keys {
		if v, ok := h.m[k]; ok && v != nil {
			return k, v, true
		}
	}
	return "", nil, false
}

// int returns the first present key as an integer; ok is false when none is present.
func (h *hparams) int(keys ...string) (int64, bool, error) {
	k, v, ok := h.find(keys...)
	if !ok {
		return 0, false, nil
	}
	n, err := asInt(v)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %q: %w", h.path, k, err)
	}
	return n, true, nil
}

// mustInt is int for a required key; the value must be positive.
func (h *hparams) mustInt(keys ...string) (int64, error) {
	n, ok, err := h.int(keys...)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%s: missing %s", h.path, strings.Join(keys, " / "))
	}
	if n <= 0 || n > 1<<40 {
		return 0, fmt.Errorf("%s: %s = %d is out of range", h.path, keys[0], n)
	}
	return n, nil
}

func (h *hparams) float(keys ...string) (float64, bool, error) {
	k, v, ok := h.find(keys...)
	if !ok {
		return 0, false, nil
	}
	f, err := asFloat(v)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %q: %w", h.path, k, err)
	}
	return f, true, nil
}

func (h *hparams) str(keys ...string) (string, bool) {
	_, v, ok := h.find(keys...)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

func (h *hparams) object(key string) map[string]any {
	o, _ := h.m[key].(map[string]any)
	return o
}

func (h *hparams) architectures() []string {
	arr, _ := h.m["architectures"].([]any)
	var out []string
	for _, a := range arr {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func asInt(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		return int64(f), nil
	case bool:
		return 0, fmt.Errorf("%v is a boolean, not an integer", x)
	}
	return 0, fmt.Errorf("%v (%T) is not an integer", v, v)
}

func asFloat(v any) (float64, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%v is not a finite number", x)
		}
		return f, nil
	}
	return 0, fmt.Errorf("%v (%T) is not a number", v, v)
}

// ropeParams is the converter's rope_parameters: "rope_parameters" or "rope_scaling", with
// rope_theta / rope_type / original_max_position_embeddings mirrored from the root keys.
func (h *hparams) ropeParams() map[string]any {
	rp := map[string]any{}
	src, _ := h.m["rope_parameters"].(map[string]any)
	if src == nil {
		src, _ = h.m["rope_scaling"].(map[string]any)
	}
	for k, v := range src {
		rp[k] = v
	}
	if fa, ok := rp["full_attention"].(map[string]any); ok {
		return fa
	}
	if _, ok := rp["rope_theta"]; !ok {
		if _, v, ok := h.find("global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"); ok {
			rp["rope_theta"] = v
		}
	}
	if _, ok := rp["rope_type"]; !ok {
		if t, ok := rp["type"]; ok {
			rp["rope_type"] = t
		}
	}
	if _, ok := rp["original_max_position_embeddings"]; !ok {
		if v, ok := h.m["original_max_position_embeddings"]; ok {
			rp["original_max_position_embeddings"] = v
		}
	}
	return rp
}
