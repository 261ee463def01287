//go:build unix

package gguf

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func flockWorks(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// TestStreamOutput: a FIFO output gets the same bytes as a file, in order, without a
// manifest or anything else created beside it; a split into a FIFO is refused. A
// character device node (root only) is written and stays a device.
func TestStreamOutput(t *testing.T) {
	tensors := makeTensors(5)
	md := Metadata{{"general.architecture", String("llama")}}
	ref := filepath.Join(t.TempDir(), "ref.gguf")
	writeModel(t, ref, md, tensors, WriterOptions{NoManifest: true})
	want, _ := os.ReadFile(ref)

	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := Create(fifo, WriterOptions{}); err == nil || !strings.Contains(err.Error(), "without a reader") {
		t.Fatalf("FIFO without reader: %v", err)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make(chan []byte, 1)
	go func() {
		// Wait for the writer to open, then read to EOF.
		for i := 0; i < 3000; i++ {
			var one [1]byte
			if n, _ := r.Read(one[:]); n == 1 {
				rest, _ := io.ReadAll(r)
				got <- append(one[:], rest...)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		got <- nil
	}()
	w := writeModel(t, fifo, md, tensors, WriterOptions{})
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("FIFO got %d bytes, want the %d of a file write", len(b), len(want))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("reader did not finish")
	}
	if w.ManifestPath() != "" || len(w.Files()) != 1 {
		t.Fatalf("manifest %q, files %v", w.ManifestPath(), w.Files())
	}
	assertOnly(t, dir, "pipe")

	// A split into a FIFO is refused (the reader sees EOF, nothing is created).
	w2, err := Create(fifo, WriterOptions{MaxShardTensors: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		w2.AddTensor(tt.name, tt.dims, tt.typ)
	}
	if err := w2.WriteTensorData(tensors[0].name, tensors[0].data); err == nil || !strings.Contains(err.Error(), "split output") {
		t.Fatalf("split into FIFO: %v", err)
	}
	assertOnly(t, dir, "pipe")

	t.Run("device", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("creating a device node needs root; /dev/null-style output not tested")
		}
		dir := t.TempDir()
		null := filepath.Join(dir, "null")
		if err := mknodChar0666(null, 1, 3); err != nil {
			t.Skipf("mknod: %v", err)
		}
		w := writeModel(t, null, md, tensors, WriterOptions{})
		if w.Files()[0].Size != int64(len(want)) || w.ManifestPath() != "" {
			t.Fatalf("files %v manifest %q", w.Files(), w.ManifestPath())
		}
		fi, err := os.Lstat(null)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("device node replaced: %v %v", fi.Mode(), err)
		}
		assertOnly(t, dir, "null")
	})
}
