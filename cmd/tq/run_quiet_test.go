package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/infer/cuda"
)

// On a machine without a GPU, a plain tq run does not report that CUDA is unavailable (the
// CPU is what the user expects); --verbose does, and --json always carries the backend line.
func TestRunQuietWithoutGPU(t *testing.T) {
	model := toolModelQ8(t)
	t.Setenv(cuda.EnvLibrary, filepath.Join(t.TempDir(), "libcuda.so.1"))
	o := gpuRunOptions(t)
	_, stderr, err := runCapture(t, model, o)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "prompt ") {
		t.Errorf("plain run printed more than the speed line:\n%s", stderr)
	}
	o.verbose = true
	_, stderr, err = runCapture(t, model, o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stderr, "tq run: backend: cpu (cuda unavailable: ") {
		t.Errorf("--verbose does not say why the CPU runs:\n%s", stderr)
	}
	o.verbose, o.json = false, true
	r := runJSON(t, model, o)
	if !strings.HasPrefix(r.Backend, "backend: cpu (cuda unavailable: ") {
		t.Errorf("--json backend %q", r.Backend)
	}
}
