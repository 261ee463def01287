package safeout

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func assertNames(t *testing.T, dir string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v", dir, got, want)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, path, content string) error {
	t.Helper()
	return WriteFile(path, []byte(content), Options{})
}

func TestNewAndReplace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	if err := write(t, p, "one"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != newFileMode(0o644) {
		t.Fatalf("new file mode %v (%v), want %v", fi.Mode(), err, newFileMode(0o644))
	}
	// A replaced file keeps its permission bits, whatever the umask and Perm say.
	for _, mode := range []os.FileMode{0o600, 0o640, 0o755, 0o604} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(p, []byte("two"), Options{Perm: 0o666}); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("replaced %04o file now has mode %v (%v)", mode, fi.Mode(), err)
		}
		if got := readString(t, p); got != "two" {
			t.Fatalf("content %q", got)
		}
	}
	assertNames(t, dir, "out.bin")
}

func TestAbortKeepsTarget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.bin")
	os.WriteFile(p, []byte("old"), 0o644)
	f, err := Create(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(f.Name()), ".out.bin.tmp-") {
		t.Fatalf("temporary file %s", f.Name())
	}
	f.Abort()
	f.Abort()
	if err := f.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if got := readString(t, p); got != "old" {
		t.Fatalf("aborted write changed the file: %q", got)
	}
	assertNames(t, dir, "out.bin")
}

// TestReadOnlyRefused: a file without write permission bits is not replaced (cp without
// -f refuses it too), even by root, and nothing is left behind.
func TestReadOnlyRefused(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keep.gguf")
	os.WriteFile(p, []byte("precious"), 0o444)
	os.Chmod(p, 0o444)
	err := write(t, p, "new")
	if err == nil || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v, want a read-only error naming %s", err, p)
	}
	fi, _ := os.Stat(p)
	if got := readString(t, p); got != "precious" || fi.Mode().Perm() != 0o444 {
		t.Fatalf("read-only file changed: %q, mode %v", got, fi.Mode())
	}
	assertNames(t, dir, "keep.gguf")
}

func TestSymlinkKept(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "store")
	os.Mkdir(other, 0o755)
	target := filepath.Join(other, "real.gguf")
	os.WriteFile(target, []byte("old"), 0o640)
	link := filepath.Join(dir, "link.gguf")
	if err := os.Symlink(filepath.Join("store", "real.gguf"), link); err != nil {
		t.Fatal(err)
	}
	var notes []string
	SetNotify(func(m string) { notes = append(notes, m) })
	defer SetNotify(nil)
	if err := write(t, link, "new"); err != nil {
		t.Fatal(err)
	}
	lfi, err := os.Lstat(link)
	if err != nil || lfi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", lfi.Mode(), err)
	}
	fi, _ := os.Stat(target)
	if got := readString(t, target); got != "new" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("target: %q mode %v", got, fi.Mode())
	}
	assertNames(t, dir, "link.gguf", "store")
	assertNames(t, other, "real.gguf")
	if len(notes) != 1 || !strings.Contains(notes[0], "symbolic link") || !strings.Contains(notes[0], "real.gguf") {
		t.Fatalf("notes %q", notes)
	}

	// A dangling link is refused and its target is not created.
	dangling := filepath.Join(dir, "dangling.gguf")
	os.Symlink(filepath.Join(dir, "missing", "x.gguf"), dangling)
	if err := write(t, dangling, "x"); err == nil || !strings.Contains(err.Error(), "dangling") {
		t.Fatalf("dangling link: %v", err)
	}
	// A link to a read-only file is refused like the file itself.
	os.Chmod(target, 0o444)
	if err := write(t, link, "x"); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("link to read-only file: %v", err)
	}
	assertNames(t, dir, "dangling.gguf", "link.gguf", "store")
	assertNames(t, other, "real.gguf")
}

func TestDirectoryRefused(t *testing.T) {
	dir := t.TempDir()
	if err := write(t, dir, "x"); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("err %v", err)
	}
	if err := write(t, filepath.Join(dir, "no", "such", "dir", "f"), "x"); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestStaleTemps: Create removes the unlocked temporary files of the same output only.
func TestStaleTemps(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf")
	stale := []string{".m.gguf.tmp-123", ".m.gguf.tmp-4294967295"}
	keep := []string{".m.gguf.tmp-abc", ".m.gguf.tmp-", ".other.gguf.tmp-1", "m.gguf.tmp-1", ".m.gguf.tmp-9.bak"}
	for _, n := range append(slices.Clone(stale), keep...) {
		os.WriteFile(filepath.Join(dir, n), []byte("junk"), 0o600)
	}
	os.Mkdir(filepath.Join(dir, ".m.gguf.tmp-77"), 0o755) // not a regular file
	var notes []string
	SetNotify(func(m string) { notes = append(notes, m) })
	defer SetNotify(nil)
	// A temporary file held by a live writer is not stale.
	live, err := Create(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(t, p, "second"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live.Name()); err != nil {
		t.Fatalf("the live writer's temporary file was removed: %v", err)
	}
	if !flockSupported(t, dir) {
		t.Skip("flock not supported here: stale temporary files are never removed")
	}
	want := append([]string{"m.gguf", ".m.gguf.tmp-77", filepath.Base(live.Name())}, keep...)
	assertNames(t, dir, want...)
	if len(notes) != len(stale) {
		t.Fatalf("notes %q", notes)
	}
	live.Write([]byte("first"))
	if err := live.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, p); got != "first" {
		t.Fatalf("content %q", got)
	}
}

func TestCheckNotInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "model.safetensors")
	os.WriteFile(in, []byte("weights"), 0o644)
	other := filepath.Join(dir, "other.json")
	os.WriteFile(other, []byte("{}"), 0o644)
	link := filepath.Join(dir, "link.gguf")
	os.Symlink("model.safetensors", link)
	hard := filepath.Join(dir, "hard.gguf")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	inputs := []string{other, filepath.Join(dir, "missing"), in}
	cases := []struct{ out, want string }{
		{in, "it is the input file"},
		{filepath.Join(dir, ".", "model.safetensors"), "it is the input file"},
		{link, "is a symbolic link to the input file"},
		{hard, "is a hard link of the input file"},
	}
	for _, c := range cases {
		err := CheckNotInput(c.out, inputs)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.out) || !strings.Contains(err.Error(), in) {
			t.Errorf("CheckNotInput(%s): %v, want %q naming both paths", c.out, err, c.want)
		}
	}
	for _, out := range []string{filepath.Join(dir, "new.gguf"), filepath.Join(dir, "x", "y")} {
		if err := CheckNotInput(out, inputs); err != nil {
			t.Errorf("CheckNotInput(%s): %v", out, err)
		}
	}
	os.WriteFile(filepath.Join(dir, "old.gguf"), nil, 0o644)
	if err := CheckNotInput(filepath.Join(dir, "old.gguf"), inputs); err != nil {
		t.Errorf("existing non-input output: %v", err)
	}
}
