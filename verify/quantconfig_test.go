package verify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert"
)

// TestQuantizeConfigCheck: a turboquant file checked against the quantize_config.json it was
// converted from passes; against an edited config (other SHA-256) it fails; a recorded tensor
// stored in a smaller type fails, in a larger one warns; without --quantize-config the check
// does not run.
func TestQuantizeConfigCheck(t *testing.T) {
	f := getFixtures(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "quantize_config.json")
	body := `{"quant_method": "turboquant", "weight_dtype": "int8", "kv_cache_dtype": "q8_0", "group_size": 32,
	"skip_layers": ["lm_head"], "tensors": {"blk.0.attn_q.weight": {"type": "q8_0", "group_size": 32},
	"blk.1.ffn_up.weight": {"type": "q8_0", "group_size": 32}}}`
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "m.gguf")
	opts := convert.Options{Types: convert.TypeOptions{TurboQuant: true, ConfigPath: cfg}, Report: convert.ReportOptions{Warn: func(string) {}}}
	if _, err := convert.Convert(context.Background(), f.hf, model, opts); err != nil {
		t.Fatal(err)
	}
	check := func(model, cfg string) string {
		return problemsOf(integrityOnly(t, model, func(o *Options) { o.QuantizeConfig = cfg }), CheckQuantizeConfig)
	}
	if got := check(model, cfg); got != "pass: " {
		t.Fatalf("matching config: %q", got)
	}
	if got := problemsOf(integrityOnly(t, model, nil), CheckQuantizeConfig); got != "missing" {
		t.Errorf("without a config: %q", got)
	}
	edited := filepath.Join(dir, "edited.json")
	if err := os.WriteFile(edited, []byte(body+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := check(model, edited); !strings.HasPrefix(got, "fail") || !strings.Contains(got, "another config") {
		t.Errorf("edited config: %q", got)
	}
	smaller := filepath.Join(dir, "smaller.gguf")
	rewriteTyped(t, model, smaller, nil, map[string]gguf.GGMLType{"blk.0.attn_q.weight": gguf.TypeQ4_0},
		map[string][]byte{"blk.0.attn_q.weight": requantize(t, model, "blk.0.attn_q.weight", gguf.TypeQ4_0)})
	if got := check(smaller, cfg); !strings.HasPrefix(got, "fail") || !strings.Contains(got, "blk.0.attn_q.weight is q4_0, recorded q8_0") {
		t.Errorf("smaller type: %q", got)
	}
	larger := filepath.Join(dir, "larger.gguf")
	rewriteTyped(t, model, larger, nil, map[string]gguf.GGMLType{"blk.1.ffn_up.weight": gguf.TypeF16},
		map[string][]byte{"blk.1.ffn_up.weight": requantize(t, model, "blk.1.ffn_up.weight", gguf.TypeF16)})
	if got := check(larger, cfg); !strings.HasPrefix(got, "warn") || !strings.Contains(got, "blk.1.ffn_up.weight f16 (recorded q8_0)") {
		t.Errorf("larger type: %q", got)
	}
}
