package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// convert --calibration DIR takes tq calibrate's folder whole: the policy for turboquant, the
// imatrix, and the Gram matrices, with which the quantized tensors are planned for the
// error-compensating search.
func TestConvertWithCalibrationDir(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3")
	cal := filepath.Join(dir, "cal")
	prompts := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(prompts, []byte("The history of printing begins with seals and stamps.\n\nA river carries silt to the sea, and the delta grows.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tqCmd(t, "calibrate", hfDir, "-o", cal, "--threads", "2", "--calibration-dataset", prompts, "--no-baseline", "--search-rows", "32")
	for _, args := range [][]string{{"--outtype", "q4_k_m"}, {"--use-turboquant"}, {"--target-bpw", "5"}} {
		out := tqCmd(t, append([]string{"convert", hfDir, "--calibration", cal, "--dry-run", "--json"}, args...)...)
		var plan struct {
			Policy  string `json:"policy"`
			Tensors []struct {
				Name    string `json:"name"`
				Type    string `json:"type"`
				Hessian bool   `json:"hessian"`
			} `json:"tensors"`
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		hess := 0
		for _, pt := range plan.Tensors {
			if pt.Hessian {
				hess++
			}
			if strings.Contains(pt.Name, "attn_q.weight") && !pt.Hessian {
				t.Errorf("%v: %s (%s) planned without the calibration's Gram matrix", args, pt.Name, pt.Type)
			}
		}
		if hess == 0 {
			t.Errorf("%v: no tensor uses the calibration's Gram matrices", args)
		}
	}
	// without sensitivity.json (these two short prompts are below the pass's minimum sample)
	// a budget says that it weighs tensors by weight error alone; a preset does not need it
	if err := os.Remove(filepath.Join(cal, "sensitivity.json")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		warn bool
	}{{[]string{"--target-bpw", "5"}, true}, {[]string{"--outtype", "q4_k_m"}, false}} {
		_, errs, err := tqRun(t, append([]string{"convert", hfDir, "--calibration", cal, "--dry-run"}, c.args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, errs)
		}
		if got := strings.Contains(errs, "no measured sensitivities"); got != c.warn {
			t.Errorf("%v without sensitivity.json: warning %v, want %v\n%s", c.args, got, c.warn, errs)
		}
	}
	// a folder without what calibrate writes is an error naming it
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tqRun(t, "convert", hfDir, "--calibration", empty, "--dry-run"); err == nil || !strings.Contains(err.Error(), "imatrix.gguf") {
		t.Errorf("empty calibration folder: %v", err)
	}
}
