//go:build unix

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/boundedread/hostiletest"
)

// `tq run -f` with a prompt file that is a symlink to /dev/zero died with "fatal error: out
// of memory"; a FIFO blocked. The prompt is read before the model is opened, so the model
// path need not exist.
func TestRunPromptFileRefusesDevicesAndFIFOs(t *testing.T) {
	for _, h := range hostiletest.Paths(t, "prompt.txt") {
		o := &runOptions{promptFile: h.Path, n: 1}
		var out, errb bytes.Buffer
		err := hostiletest.Within(t, 10*time.Second, "run -f "+h.What, func() error {
			return runRun(&out, &errb, filepath.Join(t.TempDir(), "absent.gguf"), o, false)
		})
		if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), h.Path) {
			t.Errorf("run -f %s: %v", h.What, err)
		}
	}
}

func TestToolsFileRefusesDevicesAndFIFOs(t *testing.T) {
	for _, h := range hostiletest.Paths(t, "tools.json") {
		err := hostiletest.Within(t, 10*time.Second, "--tools "+h.What, func() error { _, err := readToolsFile(h.Path); return err })
		if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), h.Path) {
			t.Errorf("--tools %s: %v", h.What, err)
		}
	}
}

func TestRunPromptFileRefusesOversize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "prompt.txt")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(boundedread.MaxPromptFile + 1); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	var out, errb bytes.Buffer
	err = runRun(&out, &errb, filepath.Join(t.TempDir(), "absent.gguf"), &runOptions{promptFile: p, n: 1}, false)
	if !errors.Is(err, boundedread.ErrTooLarge) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("oversize prompt file: %v", err)
	}
}
