package main

import (
	"fmt"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
)

// kvCacheKey is the KV cache type a turboquant conversion records (tq convert copies the
// calibration config's kv_cache_dtype): tq run uses it unless --cache-type-k/-v say otherwise.
const kvCacheKey = "turboquant.kv_cache_dtype"

// kvCacheChoice is the KV cache tq run uses (--json "kv_cache") and where its types come from.
type kvCacheChoice struct {
	K      string `json:"k"`
	V      string `json:"v"`
	Source string `json:"source"` // in words: flags, the file's turboquant.kv_cache_dtype, the default
	fileK  bool   // K comes from the file
	fileV  bool
	gpuF16 bool // the file's type was replaced by f16 for the GPU
}

// chooseKVCache applies the file's turboquant.kv_cache_dtype to the cache types the user did
// not set. A value tq cannot use is ignored with a warning (verify's integrity check reports it).
func chooseKVCache(md gguf.Metadata, o *runOptions) (c kvCacheChoice, warning string) {
	c = kvCacheChoice{K: strings.ToLower(o.cacheK), V: strings.ToLower(o.cacheV)}
	if v, err := md.GetString(kvCacheKey); err == nil && (!o.cacheKSet || !o.cacheVSet) {
		if _, perr := infer.ParseCacheType(v); perr != nil || v == "" {
			warning = fmt.Sprintf("ignoring %s %q: %v; the KV cache stays %s/%s", kvCacheKey, shorten(v, 40), perr, c.K, c.V)
		} else {
			v = strings.ToLower(v)
			if !o.cacheKSet {
				c.K, c.fileK = v, true
			}
			if !o.cacheVSet {
				c.V, c.fileV = v, true
			}
		}
	}
	switch {
	case c.fileK && c.fileV:
		c.Source = "from the file's " + kvCacheKey + "; --cache-type-k/-v override it"
	case c.fileK:
		c.Source = "K from the file's " + kvCacheKey + ", V from --cache-type-v"
	case c.fileV:
		c.Source = "K from --cache-type-k, V from the file's " + kvCacheKey
	case o.cacheKSet || o.cacheVSet:
		c.Source = "from --cache-type-k/-v"
	default:
		c.Source = "default"
	}
	return c, warning
}

// forGPU is the cache of a run with GPU blocks: the GPU backend keeps f16 or q8_0 caches, so any
// other type taken from the file falls back to f16 there (one the user set is kept: Load then
// reports the GPU cannot run it).
func (c kvCacheChoice) forGPU() kvCacheChoice {
	g := c
	var changed bool
	onDevice := func(t string) bool { return t == "f16" || t == "q8_0" }
	if g.fileK && !onDevice(g.K) {
		g.K, g.fileK, changed = "f16", false, true
	}
	if g.fileV && !onDevice(g.V) {
		g.V, g.fileV, changed = "f16", false, true
	}
	if changed {
		file := c.K
		if !c.fileK {
			file = c.V
		}
		g.Source = fmt.Sprintf("not the file's %s %s: the GPU backend keeps f16 or q8_0 KV caches", kvCacheKey, file)
		g.gpuF16 = true
	}
	return g
}

// worthALine reports whether the file's key changed the cache from the f16 default (or would
// have, but for the GPU): the case tq run reports in a line.
func (c kvCacheChoice) worthALine() bool {
	return c.gpuF16 || c.fileK && c.K != "f16" || c.fileV && c.V != "f16"
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
