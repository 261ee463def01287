//go:build unix

package hf_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/hf"
)

// within runs f and fails the test if it has not returned after 10 s (a FIFO open or a read
// of /dev/zero would otherwise never end).
func within(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("still running after 10s")
		return nil
	}
}

// replace turns dir/name into a symlink to /dev/zero or a FIFO.
func replace(t *testing.T, dir, name, kind string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	switch kind {
	case "devzero":
		if _, err := os.Stat("/dev/zero"); err != nil {
			t.Skipf("no /dev/zero: %v", err)
		}
		if err := os.Symlink("/dev/zero", p); err != nil {
			t.Fatal(err)
		}
	case "fifo":
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestLoadConfigRefusesDevicesAndFIFOs(t *testing.T) {
	for _, kind := range []string{"devzero", "fifo"} {
		dir := t.TempDir()
		p := replace(t, dir, "config.json", kind)
		for _, arg := range []string{p, dir} {
			err := within(t, func() error { _, err := hf.LoadConfig(arg); return err })
			if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s config.json, LoadConfig(%s): %v", kind, arg, err)
			}
		}
	}
}

func TestLoadConfigRefusesOversizeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(hf.MaxConfigSize + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	_, err = hf.LoadConfig(p)
	if !errors.Is(err, boundedread.ErrTooLarge) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "16 MiB") {
		t.Fatalf("oversize config.json: %v", err)
	}
}

// A side file that exists but is a device or a FIFO is an error, not an absent file.
func TestOpenRefusesIrregularSideFiles(t *testing.T) {
	dir := t.TempDir()
	if err := fixtures.Generate(dir, fixtures.Preset("qwen3")); err != nil {
		t.Fatal(err)
	}
	f, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.TokenizerJSON == "" || f.TokenizerConfig == "" || f.GenerationConfig == "" {
		t.Fatalf("side files of the fixture not found: %+v", f)
	}
	f.Close()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		for _, kind := range []string{"devzero", "fifo"} {
			d := copyDir(t, dir)
			p := replace(t, d, name, kind)
			err := within(t, func() error {
				f, err := hf.Open(d)
				if err == nil {
					f.Close()
				}
				return err
			})
			if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s as %s: %v", kind, name, err)
			}
		}
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
