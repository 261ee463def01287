package convert

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/fixtures"
)

// Contradictions in quantize_config.json stop convert before anything is written, with an
// error naming the file and the field; accepted-with-a-warning entries reach Plan.Warnings.
func TestTurboConfigCheckedAtLoad(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3"))
	cfgDir := t.TempDir()
	plan := func(body string) (*Plan, string, error) {
		cfg := filepath.Join(cfgDir, "quantize_config.json")
		writeFile(t, cfg, `{"quant_method":"turboquant",`+body+`}`)
		p, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfg}})
		return p, cfg, err
	}
	for body, want := range map[string]string{
		`"weight_dtype":"int8","tensors":{"blk.0.attn_q.weight":{"type":"q4_0"}}`: `tensors["blk.0.attn_q.weight"].type = "q4_0"`,
		`"tensors":{"blk.99.attn_q.weight":{"type":"q4_K"}}`:                      `tensors["blk.99.attn_q.weight"] names no tensor`,
		`"tensor_types":{"output.weight":"q4_0"}`:                                 `tensor_types["output.weight"] = "q4_0"`,
		`"group_size":0`: `group_size = 0`,
	} {
		_, cfg, err := plan(body)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), cfg) {
			t.Errorf("%s: %v, want an error naming %s and %q", body, err, cfg, want)
		}
	}
	p, cfg, err := plan(`"tensor_types":{"blk.0.attn_q.weight":"q8_0"},"tensors":{"blk.0.attn_q.weight":{"type":"q4_K"}}`)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range p.Warnings {
		found = found || strings.Contains(w, cfg) && strings.Contains(w, `tensors["blk.0.attn_q.weight"]: calibrated q4_K not used`)
	}
	if !found {
		t.Errorf("warning for a record overridden by tensor_types missing: %q", p.Warnings)
	}
}
