//go:build unix

package hostiletest

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

// Refused makes the hostile paths (Paths) for each file name of readers and requires its
// reader to refuse every one within 10 s with boundedread.ErrNotRegular and an error naming
// the path.
func Refused(t testing.TB, readers map[string]func(path string) error) {
	t.Helper()
	for name, read := range readers {
		for _, h := range Paths(t, name) {
			err := Within(t, 10*time.Second, name+" "+h.What, func() error { return read(h.Path) })
			if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), h.Path) {
				t.Errorf("%s as %s: %v", h.What, name, err)
			}
		}
	}
}
