package convert

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The imatrix named by quantize_config.json must stay inside the config's folder, like the
// shard names of a safetensors index.
func TestConfigImatrixPathStaysInFolder(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "calib")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "quantize_config.json")
	writeFile(t, cfg, "{}")
	writeFile(t, filepath.Join(dir, "imatrix.gguf"), "x")
	writeFile(t, filepath.Join(dir, "sub", "im.dat"), "x")
	writeFile(t, filepath.Join(root, "outside.dat"), "x")
	symlinks := os.Symlink(filepath.Join(root, "outside.dat"), filepath.Join(dir, "link.dat")) == nil

	for _, c := range []struct{ im, want string }{
		{"imatrix.gguf", filepath.Join(dir, "imatrix.gguf")},
		{"sub/im.dat", filepath.Join(dir, "sub", "im.dat")},
		{filepath.Join(dir, "imatrix.gguf"), filepath.Join(dir, "imatrix.gguf")},
		{"", ""},
	} {
		got, err := configImatrixPath(cfg, c.im)
		if err != nil || got != c.want {
			t.Errorf("imatrix %q: got %q, %v; want %q", c.im, got, err, c.want)
		}
	}
	bad := []struct{ im, msg string }{
		{"../outside.dat", "escapes"},
		{"sub/../../outside.dat", "escapes"},
		{filepath.Join(root, "outside.dat"), "absolute path outside"},
		{"missing.dat", "not found"},
	}
	if symlinks {
		bad = append(bad, struct{ im, msg string }{"link.dat", "outside the model folder"})
	}
	for _, c := range bad {
		_, err := configImatrixPath(cfg, c.im)
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), c.im) {
			t.Errorf("imatrix %q: %v, want an error naming the config, the path and %q", c.im, err, c.msg)
		}
	}
}

// Whatever the config says, an accepted imatrix path resolves inside the config's folder.
func FuzzConfigImatrixPath(f *testing.F) {
	root := f.TempDir()
	dir := filepath.Join(root, "calib")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		f.Fatal(err)
	}
	cfg := filepath.Join(dir, "quantize_config.json")
	for _, p := range []string{cfg, filepath.Join(dir, "imatrix.gguf"), filepath.Join(dir, "sub", "x"), filepath.Join(root, "outside")} {
		writeFile(f, p, "x")
	}
	_ = os.Symlink(filepath.Join(root, "outside"), filepath.Join(dir, "link"))
	_ = os.Symlink("sub", filepath.Join(dir, "subdir"))
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"imatrix.gguf", "../outside", "sub/x", "subdir/x", "link", filepath.Join(dir, "sub", "x"),
		filepath.Join(root, "outside"), "sub/../imatrix.gguf", "./imatrix.gguf", "/", "..", "sub/./x", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, im string) {
		p, err := configImatrixPath(cfg, im)
		if err != nil || im == "" {
			return
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatalf("accepted %q -> %q, which does not resolve: %v", im, p, err)
		}
		if rel, err := filepath.Rel(realDir, real); err != nil || !filepath.IsLocal(rel) {
			t.Fatalf("accepted %q -> %q, outside %s", im, real, realDir)
		}
	})
}
