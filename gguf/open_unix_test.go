//go:build unix

package gguf

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

// Opening a GGUF path that is a FIFO used to block in open(2); one that is a symlink to a
// device must not be mapped. Every entry point refuses both at once.
func TestOpenRefusesFIFOAndDevice(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	paths := []string{fifo}
	if _, err := os.Stat("/dev/zero"); err == nil {
		zero := filepath.Join(dir, "zero.gguf")
		if err := os.Symlink("/dev/zero", zero); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, zero)
	}
	for _, p := range paths {
		for name, open := range map[string]func(string) error{
			"Open": func(p string) error {
				m, err := Open(p)
				if err == nil {
					m.Close()
				}
				return err
			},
			"ReadHeader": func(p string) error { _, err := ReadHeader(p); return err },
			"CheckFile":  func(p string) error { _, err := CheckFile(p); return err },
		} {
			done := make(chan error, 1)
			go func() { done <- open(p) }()
			select {
			case err := <-done:
				if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), p) {
					t.Errorf("%s(%s): %v", name, p, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s(%s) still blocked after 10s", name, p)
			}
		}
	}
}
