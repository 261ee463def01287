//go:build unix

package imatrix

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

func loadWithin(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := Load(path); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("Load(%s) still running after 10s", path)
		return nil
	}
}

// An imatrix path naming a FIFO returned no error and never returned; one naming /dev/zero
// ran out of memory. Both are refused at once, and so is a legacy file over MaxDatBytes.
func TestLoadRefusesFIFODeviceAndOversize(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "imatrix.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := loadWithin(t, fifo); !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("FIFO: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		zero := filepath.Join(dir, "imatrix.dat")
		if err := os.Symlink("/dev/zero", zero); err != nil {
			t.Fatal(err)
		}
		if err := loadWithin(t, zero); !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), "/dev/zero") {
			t.Errorf("symlink to /dev/zero: %v", err)
		}
	}
	big := filepath.Join(dir, "big.dat")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxDatBytes + 1); err != nil { // sparse
		f.Close()
		t.Skipf("cannot make a sparse %d-byte file: %v", int64(MaxDatBytes+1), err)
	}
	f.Close()
	if err := loadWithin(t, big); err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "too large") {
		t.Errorf("oversize legacy imatrix: %v", err)
	}
}
