//go:build unix

package hostiletest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Paths makes, in a fresh folder, a FIFO named name and (where /dev/zero exists) a symlink
// to /dev/zero named "zero-"+name.
func Paths(t testing.TB, name string) []Path {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, name)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out := []Path{{fifo, "fifo"}}
	if _, err := os.Stat("/dev/zero"); err == nil {
		zero := filepath.Join(dir, "zero-"+name)
		if err := os.Symlink("/dev/zero", zero); err != nil {
			t.Fatal(err)
		}
		out = append(out, Path{zero, "devzero"})
	}
	return out
}
