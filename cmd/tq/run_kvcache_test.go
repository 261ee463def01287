package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/internal/llamacppref"
)

// turboModel converts the tool model with turboquant and a config recording kv_cache_dtype kv.
func turboModel(t *testing.T, kv string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "quantize_config.json")
	writeString(t, cfg, `{"quant_method":"turboquant","weight_dtype":"int4","kv_cache_dtype":"`+kv+`","group_size":128,
		"symmetric":true,"layers_to_quantize":["q_proj","k_proj","v_proj","gate_proj","up_proj"],"skip_layers":["lm_head"]}`)
	model := filepath.Join(dir, "tq.gguf")
	tqCmd(t, "convert", filepath.Join(llamacppref.RepoRoot(t), "testdata", "verify", "toolmodel"), "--use-turboquant", "--config", cfg, "-o", model)
	return model
}

// A turboquant file's turboquant.kv_cache_dtype is the KV cache tq run uses when
// --cache-type-k/-v are not given: the model runs with it, one line says so, --json records it;
// each flag overrides its half.
func TestRunUsesFileKVCache(t *testing.T) {
	model := turboModel(t, "q8_0")
	t.Setenv(cuda.EnvLibrary, filepath.Join(t.TempDir(), "libcuda.so.1"))
	o := gpuRunOptions(t)
	o.n = 4
	rm, err := loadRunModel(&strings.Builder{}, model, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := rm.m.Options(); got.CacheTypeK != "q8_0" || got.CacheTypeV != "q8_0" {
		t.Errorf("model loaded with KV cache %s/%s, want the file's q8_0", got.CacheTypeK, got.CacheTypeV)
	}
	rm.Close()

	_, stderr, err := runCapture(t, model, o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "tq run: KV cache q8_0/q8_0, from the file's turboquant.kv_cache_dtype") {
		t.Errorf("no line about the file's KV cache:\n%s", stderr)
	}
	o.json = true
	r := runJSON(t, model, o)
	if r.KVCache.K != "q8_0" || r.KVCache.V != "q8_0" || !strings.Contains(r.KVCache.Source, "turboquant.kv_cache_dtype") {
		t.Errorf("--json kv_cache %+v", r.KVCache)
	}

	// --cache-type-k f16 given: K from the flag, V still from the file
	o.cacheK, o.cacheKSet = "f16", true
	r = runJSON(t, model, o)
	if r.KVCache.K != "f16" || r.KVCache.V != "q8_0" || !strings.Contains(r.KVCache.Source, "K from --cache-type-k") {
		t.Errorf("--cache-type-k f16: kv_cache %+v", r.KVCache)
	}

	// a file without the key (or with f16) keeps the default and prints nothing about it
	o = gpuRunOptions(t)
	_, stderr, err = runCapture(t, toolModelQ8(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "KV cache") {
		t.Errorf("a line about the KV cache for a file without %s:\n%s", kvCacheKey, stderr)
	}
}

func TestChooseKVCache(t *testing.T) {
	md := func(v string) gguf.Metadata {
		var m gguf.Metadata
		if v != "-" {
			m.Set(kvCacheKey, gguf.String(v))
		}
		return m
	}
	def := &runOptions{cacheK: "f16", cacheV: "f16"}
	cases := []struct {
		file    string
		o       *runOptions
		k, v    string
		warn    bool
		gpuK    string
		gpuNote string // the Source of the GPU's choice when it is worth a line
	}{
		{"-", def, "f16", "f16", false, "f16", ""},
		{"q8_0", def, "q8_0", "q8_0", false, "q8_0", "from the file's"},
		{"Q4_0", def, "q4_0", "q4_0", false, "f16", "GPU backend keeps f16 or q8_0"},
		{"f16", def, "f16", "f16", false, "f16", ""},
		{"q8_0", &runOptions{cacheK: "q4_0", cacheV: "f32", cacheKSet: true, cacheVSet: true}, "q4_0", "f32", false, "q4_0", ""},
		{"int4", def, "f16", "f16", true, "f16", ""},
		{"", def, "f16", "f16", true, "f16", ""},
	}
	for _, c := range cases {
		got, warn := chooseKVCache(md(c.file), c.o)
		if got.K != c.k || got.V != c.v || (warn != "") != c.warn {
			t.Errorf("file %q, flags %+v: %s/%s warning %q", c.file, *c.o, got.K, got.V, warn)
		}
		g := got.forGPU()
		if g.K != c.gpuK || g.worthALine() != (c.gpuNote != "") || !strings.Contains(g.Source, c.gpuNote) {
			t.Errorf("file %q on the GPU: %+v", c.file, g)
		}
	}
}

func writeString(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
