package boundedread

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadFileRegularAndSymlink(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	want := bytes.Repeat([]byte("0123456789"), 1000)
	write(t, p, want)
	got, err := ReadFile(p, "config", int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("regular file at exactly the limit: %v (%d bytes)", err, len(got))
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(p, link); err != nil {
		t.Skipf("no symlinks here: %v", err)
	}
	got, err = ReadFile(link, "config", 1<<20)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("symlink to a regular file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	write(t, empty, nil)
	if got, err := ReadFile(empty, "config", 1); err != nil || len(got) != 0 {
		t.Fatalf("empty file: %v, %d bytes", err, len(got))
	}
}

func TestReadFileTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	write(t, p, make([]byte, 2049))
	_, err := ReadFile(p, "tokenizer file", 2048)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("2049-byte file with a 2048-byte limit: %v", err)
	}
	for _, s := range []string{p, "tokenizer file", "2049 bytes", "2 KiB (2048 bytes)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestReadFileMissing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.json")
	_, err := ReadFile(p, "config", 10)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), p) {
		t.Fatalf("missing file: %v", err)
	}
	if err := CheckRegular(p, "config"); err != nil {
		t.Fatalf("CheckRegular on a missing file: %v", err)
	}
}

func TestReadFileDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadFile(dir, "prompt file", 10)
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a directory") {
		t.Fatalf("directory: %v", err)
	}
	if err := CheckRegular(dir, "prompt file"); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("CheckRegular on a directory: %v", err)
	}
}

func TestReadFileBadLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	write(t, p, []byte("x"))
	for _, l := range []int64{0, -1} {
		if _, err := ReadFile(p, "x", l); err == nil {
			t.Fatalf("limit %d accepted", l)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1000: "1000 bytes", 1024: "1 KiB (1024 bytes)", 16 << 20: "16 MiB (16777216 bytes)",
		4 << 30: "4 GiB (4294967296 bytes)", 1<<20 + 1: "1048577 bytes",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLimitReader(t *testing.T) {
	data := []byte("0123456789")
	for _, limit := range []int64{10, 11, 100} {
		b, err := io.ReadAll(LimitReader(bytes.NewReader(data), "p", "k", limit))
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("limit %d: %v, %q", limit, err, b)
		}
	}
	b, err := io.ReadAll(LimitReader(bytes.NewReader(data), "p", "k", 9))
	if !errors.Is(err, ErrTooLarge) || len(b) > 9 {
		t.Fatalf("limit 9: %v, %d bytes returned", err, len(b))
	}
}
