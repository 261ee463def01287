package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func dirNames(t *testing.T, dir string) []string {
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

// assertOnly fails unless dir holds exactly the names in want.
func assertOnly(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := dirNames(t, dir)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("directory holds %v, want %v", got, want)
	}
}

// TestAtomicWriteFailure injects a write failure after every interesting number of bytes
// (inside the header, inside tensor data, at a shard boundary) and checks that the error
// surfaces and nothing is left in the directory but the pre-existing file.
func TestAtomicWriteFailure(t *testing.T) {
	md := Metadata{{"general.architecture", String("llama")}, {"tokenizer.ggml.tokens", Array(makeStrings(500))}}
	tensors := makeTensors(9)
	// Learn the total size of the split output first.
	ref := t.TempDir()
	w := writeModel(t, filepath.Join(ref, "m.gguf"), md, tensors, WriterOptions{MaxShardTensors: 3})
	var total int64
	for _, f := range w.Files() {
		total += f.Size
	}
	limits := []int64{1, 24, 100, 2000, w.Files()[0].Size - 1, w.Files()[0].Size, w.Files()[0].Size + 50, total - 1}
	for _, limit := range limits {
		for _, bufSize := range []int{1, 64, 1 << 20} {
			dir := t.TempDir()
			keep := filepath.Join(dir, "unrelated.txt")
			os.WriteFile(keep, []byte("x"), 0o644)
			opts := WriterOptions{MaxShardTensors: 3, BufferSize: bufSize, failAfter: limit}
			w, err := Create(filepath.Join(dir, "m.gguf"), opts)
			if err != nil {
				t.Fatal(err)
			}
			w.Metadata = md
			for _, tt := range tensors {
				if err := w.AddTensor(tt.name, tt.dims, tt.typ); err != nil {
					t.Fatal(err)
				}
			}
			var firstErr error
			for _, tt := range tensors {
				if err := w.WriteTensor(tt.name, bytes.NewReader(tt.data)); err != nil {
					firstErr = err
					break
				}
			}
			cerr := w.Close()
			if firstErr == nil && cerr == nil {
				t.Fatalf("limit %d buf %d: no error reported", limit, bufSize)
			}
			if cerr == nil || (firstErr != nil && cerr != firstErr) {
				t.Fatalf("limit %d: Close returned %v after %v", limit, cerr, firstErr)
			}
			if !strings.Contains(cerr.Error(), "simulated write failure") {
				t.Fatalf("limit %d: error %v", limit, cerr)
			}
			assertOnly(t, dir, "unrelated.txt")
		}
	}
}

func TestAtomicMisuse(t *testing.T) {
	tensors := makeTensors(2)
	start := func(t *testing.T) (*Writer, string) {
		dir := t.TempDir()
		w, err := Create(filepath.Join(dir, "m.gguf"), WriterOptions{MaxShardTensors: 4})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tensors {
			if err := w.AddTensor(tt.name, tt.dims, tt.typ); err != nil {
				t.Fatal(err)
			}
		}
		return w, dir
	}
	cases := []struct {
		name string
		run  func(w *Writer) error
		want string
	}{
		{"short reader", func(w *Writer) error {
			return w.WriteTensor(tensors[0].name, bytes.NewReader(tensors[0].data[:3]))
		}, "reader ended after 3 of 28 bytes"},
		{"long reader", func(w *Writer) error {
			return w.WriteTensor(tensors[0].name, bytes.NewReader(append(tensors[0].data, 1)))
		}, "reader yields more than 28 bytes"},
		{"too much data", func(w *Writer) error {
			return w.WriteTensorData(tensors[0].name, append(tensors[0].data, 1))
		}, "more than its size"},
		{"too little data", func(w *Writer) error {
			return w.WriteTensorData(tensors[0].name, tensors[0].data[1:])
		}, "got 27 bytes, want 28"},
		{"out of order", func(w *Writer) error {
			return w.WriteTensorData(tensors[1].name, tensors[1].data)
		}, "out of order"},
		{"undeclared", func(w *Writer) error { return w.WriteTensorData("nope", nil) }, "not declared"},
		{"missing tensors", func(w *Writer) error {
			if err := w.WriteTensorData(tensors[0].name, tensors[0].data); err != nil {
				return err
			}
			return w.Close()
		}, "tensor \"blk.b.weight\" was not written"},
		{"writer left open", func(w *Writer) error {
			if _, err := w.TensorWriter(tensors[0].name); err != nil {
				return err
			}
			return w.Close()
		}, "still open"},
		{"add after start", func(w *Writer) error {
			if err := w.WriteTensorData(tensors[0].name, tensors[0].data); err != nil {
				return err
			}
			if err := w.AddTensor("late", []uint64{1}, TypeF32); err == nil {
				return nil
			}
			return w.Abort()
		}, ""},
		{"abort midway", func(w *Writer) error {
			for _, tt := range tensors[:6] { // crosses a shard boundary
				if err := w.WriteTensorData(tt.name, tt.data); err != nil {
					return err
				}
			}
			w.Abort()
			return w.Close()
		}, "aborted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, dir := start(t)
			err := c.run(w)
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if cerr := w.Close(); cerr == nil {
				t.Fatal("Close succeeded after a fatal error")
			}
			assertOnly(t, dir)
		})
	}
}

func TestAtomicCreateAndRenameFailures(t *testing.T) {
	if _, err := Create(filepath.Join(t.TempDir(), "no", "such", "dir", "m.gguf"), WriterOptions{}); err == nil {
		t.Fatal("Create in a missing directory succeeded")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "a\nb.gguf"), WriterOptions{}); err == nil {
		t.Fatal("newline in name accepted")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "m.gguf"), WriterOptions{Alignment: 48}); err == nil {
		t.Fatal("alignment 48 accepted")
	}
	// A shard's final name taken by a directory is refused when the shard is created.
	dir := t.TempDir()
	blocker := filepath.Join(dir, SplitPath("m", 1, 3))
	os.MkdirAll(filepath.Join(blocker, "sub"), 0o755)
	tensors := makeTensors(4)
	w, err := Create(filepath.Join(dir, "m.gguf"), WriterOptions{MaxShardTensors: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		w.AddTensor(tt.name, tt.dims, tt.typ)
	}
	var werr error
	for _, tt := range tensors {
		if werr = w.WriteTensorData(tt.name, tt.data); werr != nil {
			break
		}
	}
	if werr == nil || !strings.Contains(werr.Error(), "is a directory") {
		t.Fatalf("write over a directory: %v", werr)
	}
	w.Close()
	assertOnly(t, dir, filepath.Base(blocker))
	// The second shard's final name is taken by a non-empty directory after the shards
	// were written, so its rename fails after the first shard was renamed: the first must
	// be removed again.
	os.RemoveAll(blocker)
	w, err = Create(filepath.Join(dir, "m.gguf"), WriterOptions{MaxShardTensors: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		w.AddTensor(tt.name, tt.dims, tt.typ)
	}
	for _, tt := range tensors {
		if err := w.WriteTensorData(tt.name, tt.data); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(blocker, "sub"), 0o755)
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "rename") {
		t.Fatalf("Close: %v", err)
	}
	assertOnly(t, dir, filepath.Base(blocker))
	// Abort after a successful Close keeps the output.
	dir2 := t.TempDir()
	w2 := writeModel(t, filepath.Join(dir2, "m.gguf"), nil, tensors[:1], WriterOptions{})
	w2.Abort()
	assertOnly(t, dir2, "m.gguf", "m.gguf.sha256")
}
