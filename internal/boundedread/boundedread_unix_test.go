//go:build unix

package boundedread

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test if it does not return in time (a FIFO open that blocks
// would otherwise hang the test binary).
func within(t *testing.T, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
		return nil
	}
}

func TestReadFileDevZeroSymlink(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skipf("no /dev/zero: %v", err)
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.Symlink("/dev/zero", p); err != nil {
		t.Fatal(err)
	}
	err := within(t, 10*time.Second, func() error { _, err := ReadFile(p, "config", 1<<20); return err })
	if !errors.Is(err, ErrNotRegular) {
		t.Fatalf("symlink to /dev/zero: %v", err)
	}
	for _, s := range []string{p, "/dev/zero", "character device"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if _, _, err := Open(p, "gguf"); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("Open of a symlink to /dev/zero: %v", err)
	}
}

func TestReadFileFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "imatrix.dat")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	err := within(t, 10*time.Second, func() error { _, err := ReadFile(p, "imatrix", 1<<20); return err })
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "FIFO") || !strings.Contains(err.Error(), p) {
		t.Fatalf("FIFO: %v", err)
	}
	err = within(t, 10*time.Second, func() error {
		f, _, err := Open(p, "imatrix")
		if err == nil {
			f.Close()
		}
		return err
	})
	if !errors.Is(err, ErrNotRegular) {
		t.Fatalf("Open of a FIFO: %v", err)
	}
	// A FIFO behind a symlink is refused the same way.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	err = within(t, 10*time.Second, func() error { _, err := ReadFile(link, "imatrix", 1<<20); return err })
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "symlink to "+p) {
		t.Fatalf("symlink to a FIFO: %v", err)
	}
}

// A file whose fstat size understates its contents (procfs reports 0 bytes) is still
// bounded by the limit: the read goes through io.LimitReader(limit+1).
func TestReadFileGrowsPastLimit(t *testing.T) {
	const p = "/proc/self/status"
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Size() != 0 {
		t.Skipf("no procfs file reporting size 0 here (%v)", err)
	}
	_, err = ReadFile(p, "status", 16)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "grew") {
		t.Fatalf("file longer than its stat size: %v", err)
	}
	b, err := ReadFile(p, "status", 1<<20)
	if err != nil || !strings.Contains(string(b), "VmHWM") && !strings.Contains(string(b), "Name:") {
		t.Fatalf("procfs file under the limit: %v", err)
	}
}
