package gguf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSplitPathNames(t *testing.T) {
	if p := SplitPath("d/m", 1, 3); p != "d/m-00002-of-00003.gguf" {
		t.Fatal(p)
	}
	prefix, idx, n, ok := ParseSplitPath("d/m-00002-of-00003.gguf")
	if !ok || prefix != "d/m" || idx != 1 || n != 3 {
		t.Fatal(prefix, idx, n, ok)
	}
	for _, bad := range []string{"m.gguf", "m-00000-of-00003.gguf", "m-00004-of-00003.gguf", "m-0001-of-0003.gguf", "-00001-of-00001.gguf"} {
		if _, _, _, ok := ParseSplitPath(bad); ok {
			t.Errorf("%q parsed as a shard name", bad)
		}
	}
}

// TestPlanShardsMatchesGGUFSplit checks the distribution on hand-worked cases of
// llama-gguf-split's rules (facts doc §1.10).
func TestPlanShardsMatchesGGUFSplit(t *testing.T) {
	// --split-max-tensors 2 over 5 tensors: [0,1] [2,3] [4].
	if got := planShards(make([]uint64, 5), 0, 2); !slices.Equal(got, []shardRange{{0, 2}, {2, 4}, {4, 5}}) {
		t.Fatal(got)
	}
	// --split-max-size 100 with padded sizes 40 40 40 100 10 10: 40+40=80 ok, +40=120 >
	// 100 -> new; 40+100 > 100 -> new; 100 ok alone; 100+10 > 100 -> new; 10+10 ok.
	got := planShards([]uint64{40, 40, 40, 100, 10, 10}, 100, 0)
	if !slices.Equal(got, []shardRange{{0, 2}, {2, 3}, {3, 4}, {4, 6}}) {
		t.Fatal(got)
	}
	// A tensor above the limit gets its own shard instead of an empty one before it.
	if got := planShards([]uint64{500, 10}, 100, 0); !slices.Equal(got, []shardRange{{0, 1}, {1, 2}}) {
		t.Fatal(got)
	}
	if got := planShards(nil, 100, 3); !slices.Equal(got, []shardRange{{0, 0}}) {
		t.Fatal(got)
	}
}

func TestSplitAndRejoin(t *testing.T) {
	md := Metadata{
		{"general.architecture", String("llama")},
		{"general.name", String("split test")},
		{"llama.block_count", Uint32(2)},
		{"tokenizer.ggml.tokens", Array(makeStrings(100))},
	}
	tensors := makeTensors(3)
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.gguf")
	writeModel(t, whole, md, tensors, WriterOptions{})
	ref, err := Open(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()

	cases := []struct {
		name   string
		opts   WriterOptions
		shards int
	}{
		{"tensors4", WriterOptions{MaxShardTensors: 4}, 3},
		{"tensors1", WriterOptions{MaxShardTensors: 1}, len(tensors)},
		{"bytes", WriterOptions{MaxShardBytes: 600}, 0},
		{"bytes_align64", WriterOptions{MaxShardBytes: 700, Alignment: 64}, 0},
		{"one_shard", WriterOptions{MaxShardTensors: 100}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := filepath.Join(dir, c.name)
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			w := writeModel(t, filepath.Join(sub, "model.gguf"), md, tensors, c.opts)
			paths := w.Paths()
			if c.shards != 0 && len(paths) != c.shards {
				t.Fatalf("%d shards, want %d", len(paths), c.shards)
			}
			if c.shards == 0 && len(paths) < 2 {
				t.Fatalf("size limit produced %d shard(s)", len(paths))
			}
			ents, _ := os.ReadDir(sub)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if len(paths) == 1 {
				if !slices.Equal(names, []string{"model.gguf", "model.gguf.sha256"}) {
					t.Fatalf("files %v", names)
				}
			} else {
				want := []string{ManifestName}
				for i := range paths {
					want = append(want, filepath.Base(SplitPath("model", i, len(paths))))
				}
				slices.Sort(want)
				if !slices.Equal(names, want) {
					t.Fatalf("files %v, want %v", names, want)
				}
			}
			// Open from the first and from the last shard.
			for _, p := range []string{paths[0], paths[len(paths)-1]} {
				m, err := Open(p)
				if err != nil {
					t.Fatal(err)
				}
				assertTensorsEqual(t, m, tensors)
				files := m.Files()
				wantMD := md.Clone()
				if c.opts.Alignment > DefaultAlignment {
					wantMD = append(wantMD, KV{KeyAlignment, Uint32(c.opts.Alignment)})
				}
				if len(paths) > 1 {
					wantMD = append(wantMD, KV{KeySplitNo, Uint16(0)}, KV{KeySplitCount, Uint16(uint16(len(paths)))},
						KV{KeySplitTensorsCount, Int32(int32(len(tensors)))})
				}
				assertMetadataEqual(t, m.Metadata(), wantMD)
				for i, f := range files[1:] {
					want := Metadata{}
					if c.opts.Alignment > DefaultAlignment {
						want = append(want, KV{KeyAlignment, Uint32(c.opts.Alignment)})
					}
					want = append(want, KV{KeySplitNo, Uint16(uint16(i + 1))}, KV{KeySplitCount, Uint16(uint16(len(paths)))},
						KV{KeySplitTensorsCount, Int32(int32(len(tensors)))})
					assertMetadataEqual(t, f.Metadata, want)
					if len(f.Tensors) == 0 {
						t.Fatalf("shard %d has no tensors", i+2)
					}
				}
				// Shard data sizes respect the limit (each tensor padded; single oversized
				// tensors alone).
				if lim := c.opts.MaxShardBytes; lim > 0 {
					for _, f := range files {
						if f.DataSize() > lim && len(f.Tensors) > 1 {
							t.Fatalf("%s holds %d data bytes > %d", f.Path, f.DataSize(), lim)
						}
					}
				}
				for i, mt := range m.Tensors() {
					if mt.FileOffset != files[mt.Shard].DataOffset+mt.Offset || (i > 0 && mt.Shard < m.Tensors()[i-1].Shard) {
						t.Fatalf("tensor %s location %+v", mt.Name, mt)
					}
				}
				m.Close()
			}
			if probs, err := CheckModel(paths[0]); err != nil || len(probs) != 0 {
				t.Fatalf("CheckModel: %v %v", probs, err)
			}
			if res, err := VerifyManifest(sub); err != nil || len(res) != len(paths) {
				t.Fatalf("VerifyManifest: %v %v", res, err)
			}
		})
	}
}

func TestOpenSplitErrors(t *testing.T) {
	tensors := makeTensors(5)
	md := Metadata{{"general.architecture", String("llama")}}
	setup := func(t *testing.T) []string {
		dir := t.TempDir()
		w := writeModel(t, filepath.Join(dir, "m.gguf"), md, tensors, WriterOptions{MaxShardTensors: 4})
		return w.Paths()
	}
	t.Run("missing shard", func(t *testing.T) {
		paths := setup(t)
		os.Remove(paths[1])
		_, err := Open(paths[0])
		if err == nil || !strings.Contains(err.Error(), filepath.Base(paths[1])) {
			t.Fatalf("err %v", err)
		}
		probs, err := CheckModel(paths[0])
		if err != nil || len(probs) != 1 || !strings.Contains(probs[0].Error(), "shard 2 of 3") {
			t.Fatalf("CheckModel %v %v", probs, err)
		}
	})
	t.Run("swapped shards", func(t *testing.T) {
		paths := setup(t)
		tmp := paths[1] + ".x"
		os.Rename(paths[1], tmp)
		os.Rename(paths[2], paths[1])
		os.Rename(tmp, paths[2])
		_, err := Open(paths[0])
		if err == nil || !strings.Contains(err.Error(), "split.no: is 2, expected 1") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("renamed unsplit", func(t *testing.T) {
		paths := setup(t)
		plain := filepath.Join(filepath.Dir(paths[0]), "plain.gguf")
		os.Rename(paths[0], plain)
		_, err := Open(plain)
		if err == nil || !strings.Contains(err.Error(), "split.count: is 3") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("duplicate across shards", func(t *testing.T) {
		dir := t.TempDir()
		// Two hand-made shards that both hold tensor "x".
		for i := 0; i < 2; i++ {
			r := (&raw{}).header(3, 1, 3)
			r.str(KeySplitNo).u32(uint32(ValueUint16)).u8(byte(i)).u8(0)
			r.str(KeySplitCount).u32(uint32(ValueUint16)).u8(2).u8(0)
			r.str(KeySplitTensorsCount).u32(uint32(ValueInt32)).u32(2)
			r.tensor("x", []uint64{8}, TypeF32, 0).padTo(32).zeros(32)
			if err := os.WriteFile(filepath.Join(dir, SplitPath("d", i, 2)), r.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Open(filepath.Join(dir, SplitPath("d", 0, 2)))
		if err == nil || !strings.Contains(err.Error(), `tensor "x"`) {
			t.Fatalf("err %v", err)
		}
	})
}
