package calib

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteAtomicSafety: calibration outputs (quantize_config.json, statistics, imatrix
// .dat, checkpoint) written through a symbolic link keep the link and the target's mode; a
// read-only file is refused untouched (internal/safeout).
func TestWriteAtomicSafety(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	os.WriteFile(target, []byte("old"), 0o600)
	link := filepath.Join(dir, ConfigFile)
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	fill := func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }
	if err := writeAtomic(link, fill); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link replaced (%v)", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Fatalf("target: %q", b)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o600 {
		t.Fatalf("target mode %v", fi.Mode())
	}
	ro := filepath.Join(dir, StatsFile)
	os.WriteFile(ro, []byte("keep"), 0o444)
	os.Chmod(ro, 0o444)
	if err := writeAtomic(ro, fill); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only output: %v", err)
	}
	if b, _ := os.ReadFile(ro); string(b) != "keep" {
		t.Fatalf("read-only file changed: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("left behind: %v", ents)
	}
}
