package mmap

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestMapReadsTheFile(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 4095, 4096, 1<<20 + 3} {
		want := make([]byte, n)
		r := rand.New(rand.NewPCG(uint64(n), 1))
		for i := range want {
			want[i] = byte(r.Uint32())
		}
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Map(f, int64(n))
		f.Close() // the mapping must survive the file
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if b == nil || !bytes.Equal(b, want) {
			t.Fatalf("n=%d: mapped bytes differ from the file", n)
		}
		if err := Unmap(b); err != nil {
			t.Fatalf("n=%d: unmap: %v", n, err)
		}
	}
}

func TestMapRejectsBadSizes(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if _, err := Map(f, -1); err == nil {
		t.Fatal("negative size accepted")
	}
}

func TestMapRejectsNonRegularFiles(t *testing.T) {
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Map(f, 1); err == nil {
		t.Fatal("a directory was mapped")
	}
	if d, err := os.Open(os.DevNull); err == nil {
		defer d.Close()
		if _, err := Map(d, 4096); err == nil {
			t.Fatalf("%s was mapped", os.DevNull)
		}
	}
}

func TestMapRejectsSizeBeyondFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Map(f, 4096); err == nil {
		t.Fatal("a 4096-byte mapping of a 100-byte file was made (touching it past the end raises SIGBUS)")
	}
}
