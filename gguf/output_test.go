package gguf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/safeout"
)

// TestReSplitRemovesOldShards: splitting again to the same name with another shard count
// removes the shards of the earlier split, and nothing else.
func TestReSplitRemovesOldShards(t *testing.T) {
	dir := t.TempDir()
	tensors := makeTensors(6)[:6] // 11 tensors made; 6 kept
	out := filepath.Join(dir, "m.gguf")
	writeModel(t, out, nil, tensors, WriterOptions{MaxShardTensors: 2}) // 3 shards
	keep := []string{"m.gguf", "m-00001-of-00003.gguf.bak", "other-00002-of-00003.gguf", "xm-00001-of-00003.gguf", "m-00001-of-00003.gguf.sha256"}
	for _, n := range keep {
		os.WriteFile(filepath.Join(dir, n), []byte("unrelated"), 0o644)
	}
	// A symbolic link named like an old shard is not a regular file: kept.
	os.Remove(filepath.Join(dir, SplitPath("m", 2, 3)))
	if err := os.Symlink("m.gguf", filepath.Join(dir, SplitPath("m", 2, 3))); err != nil {
		t.Fatal(err)
	}
	var notes []string
	safeout.SetNotify(func(m string) { notes = append(notes, m) })
	defer safeout.SetNotify(nil)
	w := writeModel(t, out, nil, tensors, WriterOptions{MaxShardTensors: 3}) // 2 shards
	want := append([]string{SplitPath("m", 0, 2), SplitPath("m", 1, 2), ManifestName, SplitPath("m", 2, 3)}, keep...)
	assertOnly(t, dir, want...)
	if len(notes) != 1 || !strings.Contains(notes[0], "removed 2 shard(s)") || !strings.Contains(notes[0], "m-00001-of-00003.gguf") {
		t.Fatalf("notes %q", notes)
	}
	if res, err := VerifyManifest(w.Files()[0].Path); err != nil || len(res) != 2 {
		t.Fatalf("manifest: %v (%d entries)", err, len(res))
	}
	// Same count again: nothing to remove.
	notes = nil
	writeModel(t, out, nil, tensors, WriterOptions{MaxShardTensors: 3})
	assertOnly(t, dir, want...)
	if len(notes) != 0 {
		t.Fatalf("notes %q", notes)
	}
	// A failed split write removes nothing of the existing set.
	w2, err := Create(out, WriterOptions{MaxShardTensors: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		w2.AddTensor(tt.name, tt.dims, tt.typ)
	}
	w2.WriteTensorData(tensors[0].name, tensors[0].data)
	w2.Abort()
	assertOnly(t, dir, want...)
}

// TestStaleShardTemps: a split write removes the temporary shard files an interrupted
// split of the same name left (any shard count), not other files.
func TestStaleShardTemps(t *testing.T) {
	dir := t.TempDir()
	stale := []string{".m-00002-of-00005.gguf.tmp-12", ".m.gguf.tmp-3", ".SHA256SUMS.tmp-9"}
	keep := []string{".n-00002-of-00005.gguf.tmp-12", ".m-00002-of-00005.gguf.tmp-x"}
	for _, n := range append(append([]string{}, stale...), keep...) {
		os.WriteFile(filepath.Join(dir, n), []byte("junk"), 0o600)
	}
	writeModel(t, filepath.Join(dir, "m.gguf"), nil, makeTensors(4)[:4], WriterOptions{MaxShardTensors: 2})
	want := append([]string{SplitPath("m", 0, 2), SplitPath("m", 1, 2), ManifestName}, keep...)
	if !flockWorks(t, dir) {
		want = append(want, stale...)
	}
	assertOnly(t, dir, want...)
}

// TestOutputRefusals: a read-only output or manifest is refused before any data is
// written and is left as it was.
func TestOutputRefusals(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.gguf")
	os.WriteFile(out, []byte("keep"), 0o444)
	os.Chmod(out, 0o444)
	if _, err := Create(out, WriterOptions{}); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only output: %v", err)
	}
	os.Chmod(out, 0o644)
	os.WriteFile(out+ManifestSuffix, []byte("keep"), 0o444)
	os.Chmod(out+ManifestSuffix, 0o444)
	w, err := Create(out, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tt := makeTensors(1)[0]
	w.AddTensor(tt.name, tt.dims, tt.typ)
	if err := w.WriteTensorData(tt.name, tt.data); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only manifest: %v", err)
	}
	w.Close()
	for _, p := range []string{out, out + ManifestSuffix} {
		if b, _ := os.ReadFile(p); string(b) != "keep" {
			t.Fatalf("%s changed: %q", p, b)
		}
	}
	assertOnly(t, dir, "m.gguf", "m.gguf.sha256")
}
