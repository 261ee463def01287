package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTurboRefusesPresetFlags: the flags that adjust a preset's mixture are refused with
// --use-turboquant instead of being ignored, and nothing is written.
func TestTurboRefusesPresetFlags(t *testing.T) {
	dir := t.TempDir()
	hf := hfFixture(t, dir, "qwen3")
	out := filepath.Join(dir, "out.gguf")
	for _, extra := range [][]string{
		{"--tensor-type", `attn_v=q8_0`},
		{"--pure"},
		{"--output-tensor-type", "q8_0"},
		{"--token-embedding-type", "q8_0"},
	} {
		args := append([]string{"convert", hf, "--use-turboquant", "-o", out}, extra...)
		_, _, err := tqRun(t, args...)
		if err == nil || !strings.Contains(err.Error(), extra[0]) || !strings.Contains(err.Error(), "quantize_config.json") {
			t.Fatalf("tq %s: error %v, want one naming %s and quantize_config.json", strings.Join(args, " "), err, extra[0])
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "out*")); len(m) != 0 {
			t.Fatalf("tq %s wrote %v", strings.Join(args, " "), m)
		}
	}
	// the turboquant flag of its own is accepted
	tqCmd(t, "convert", hf, "--use-turboquant", "--embedding-type", "q8_0", "--dry-run")
}
