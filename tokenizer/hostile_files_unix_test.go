//go:build unix

package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/boundedread"
)

// loadWithin runs LoadHF and fails the test if it has not returned after d (a FIFO open or a
// read of /dev/zero would otherwise never end).
func loadWithin(t *testing.T, dir string, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := LoadHF(dir); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("LoadHF(%s) still running after %v", dir, d)
		return nil
	}
}

// Every file LoadHF reads that is a symlink to /dev/zero, or a FIFO, gives one error naming
// it instead of exhausting memory or blocking.
func TestLoadHFRefusesDevicesAndFIFOs(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skipf("no /dev/zero: %v", err)
	}
	good := syntheticByteLevelJSON(t, defaultAdded())
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "config.json",
		"special_tokens_map.json", "chat_template.jinja", "tokenizer.model"} {
		for _, kind := range []string{"devzero", "fifo"} {
			dir := t.TempDir()
			if name != "tokenizer.json" {
				if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), good, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(dir, name)
			if kind == "devzero" {
				if err := os.Symlink("/dev/zero", p); err != nil {
					t.Fatal(err)
				}
			} else if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			err := loadWithin(t, dir, 10*time.Second)
			if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s as %s: %v", kind, name, err)
			}
		}
	}
}

func TestLoadHFRefusesOversizeTokenizerJSON(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: the size check must come before any read.
	if err := f.Truncate(boundedread.MaxTokenizerJSON + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = loadWithin(t, dir, 10*time.Second)
	if !errors.Is(err, boundedread.ErrTooLarge) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "256 MiB") {
		t.Fatalf("oversize tokenizer.json: %v", err)
	}
}
