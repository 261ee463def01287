//go:build unix

package safetensors

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

// A shard or index that is a FIFO used to block in open(2); a symlink to /dev/zero as the
// index was read without end. Both are refused at once.
func TestOpenRefusesFIFOAndDevice(t *testing.T) {
	cases := map[string]string{"model.safetensors": "fifo", IndexFileName: "fifo"}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases["model.safetensors.index.json#zero"] = "devzero"
	}
	for name, kind := range cases {
		dir := t.TempDir()
		name = strings.TrimSuffix(name, "#zero")
		p := filepath.Join(dir, name)
		if kind == "fifo" {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Symlink("/dev/zero", p); err != nil {
			t.Fatal(err)
		}
		for _, arg := range []string{dir, p} {
			done := make(chan error, 1)
			go func() {
				m, err := Open(arg)
				if err == nil {
					m.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, boundedread.ErrNotRegular) || !strings.Contains(err.Error(), p) {
					t.Errorf("%s %s, Open(%s): %v", kind, name, arg, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s %s: Open(%s) still blocked after 10s", kind, name, arg)
			}
		}
	}
}
