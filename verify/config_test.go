package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"
)

func TestParseConfig(t *testing.T) {
	yaml := `---
# tq verify gate
max_kld: 0.05        # mean KLD
max_ppl_ratio: 1.05
min_toolcall_valid: 0.9
min_top1: 0.85
ctx: 256
cache_type: "q8_0"
require_manifest: true
max_ppl: ~
`
	c, err := ParseConfig([]byte(yaml), "verify.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if *c.MaxKLD != 0.05 || *c.MaxPPLRatio != 1.05 || *c.MinToolCallValid != 0.9 || *c.MinTop1 != 0.85 ||
		*c.Ctx != 256 || *c.CacheType != "q8_0" || !*c.RequireManifest || c.MaxPPL != nil {
		t.Fatalf("parsed %+v", c)
	}
	js := `{"max_kld": 0.1, "min_toolcall_exact": 0.5, "chunks": 4}`
	c2, err := ParseConfig([]byte(js), "verify.json")
	if err != nil {
		t.Fatal(err)
	}
	if *c2.MaxKLD != 0.1 || *c2.MinToolCallExact != 0.5 || *c2.Chunks != 4 {
		t.Fatalf("parsed %+v", c2)
	}
	merged := DefaultThresholds().Merge(c2.Thresholds)
	if *merged.MaxKLD != 0.1 || *merged.MaxPPLRatio != 1.05 || *merged.MinToolCallExact != 0.5 {
		t.Fatalf("merged %+v", merged)
	}
	bad := []struct{ name, data, want string }{
		{"v.yaml", "max_kdl: 1", "unknown key"},
		{"v.yaml", "max_kld: lots", "want a number"},
		{"v.yaml", "min_top1: 1.5", "fraction"},
		{"v.yaml", "max_kld: -1", "non-negative"},
		{"v.yaml", "max_kld: nan", "finite"},
		{"v.yaml", "thresholds:\n  max_kld: 1", "nested"},
		{"v.yaml", "- max_kld", "lists"},
		{"v.yaml", "max_kld: 1\nmax_kld: 2", "twice"},
		{"v.yaml", "max_kld:1", "space"},
		{"v.yaml", "ctx: 12.5", "integer"},
		{"v.yaml", "cache_type: [a]", "scalar"},
		{"v.yaml", "novalue", "key: value"},
		{"v.json", `{"max_kld": "x"}`, "want a number"},
		{"v.json", `{"max_kld": 1,}`, "invalid"},
	}
	for _, b := range bad {
		_, err := ParseConfig([]byte(b.data), b.name)
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), b.name) {
			t.Errorf("%q: error %v, want %q", b.data, err, b.want)
		}
	}
	dir := t.TempDir()
	if FindConfig(dir) != "" {
		t.Error("found a config in an empty dir")
	}
	os.WriteFile(filepath.Join(dir, "verify.json"), []byte(`{"max_kld": 0.2}`), 0o644)
	if p := FindConfig(dir); filepath.Base(p) != "verify.json" {
		t.Errorf("FindConfig %q", p)
	}
	if c, err := LoadConfig(filepath.Join(dir, "verify.json")); err != nil || *c.MaxKLD != 0.2 {
		t.Errorf("LoadConfig: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("max_kld: 0.05\n# c\nctx: 128\ncache_type: 'f16'\n"), false)
	f.Add([]byte(`{"min_top1": 0.9}`), true)
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		name := "f.yaml"
		if isJSON {
			name = "f.json"
		}
		c, err := ParseConfig(data, name)
		if err != nil {
			return
		}
		for _, sp := range thresholdSpecs {
			if v := *sp.get(&c.Thresholds); v != nil && (*v < 0 || *v != *v || (!sp.max && *v > 1)) {
				t.Fatalf("accepted threshold %s = %v", sp.key, *v)
			}
		}
	})
}

// The examples shipped in testdata/verify (and quoted in docs/verify.md) parse.
func TestShippedExamples(t *testing.T) {
	dir := filepath.Join(llamacppref.RepoRoot(t), "testdata", "verify")
	c, err := LoadConfig(filepath.Join(dir, "verify.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if *c.MaxKLD != 0.03 || *c.MinTop1 != 0.9 || *c.CacheType != "q8_0" || len(c.SetNames()) != 6 {
		t.Fatalf("verify.yaml: %+v", c)
	}
	s, err := LoadSuite(filepath.Join(dir, "toolcalls-example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Cases) != 2 || len(s.Conversations) != 1 || s.Cases[1].MaxTokens != 512 || !*s.Cases[1].EnableThinking {
		t.Fatalf("suite: %+v", s)
	}
}
