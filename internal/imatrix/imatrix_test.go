package imatrix

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dat builds a legacy imatrix: entries (name, ncall, values), then an optional trailer.
func dat(entries []Entry, trailer bool) []byte {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	w(int32(len(entries)))
	for _, e := range entries {
		w(int32(len(e.Name)))
		b.WriteString(e.Name)
		w(e.NCall)
		w(int32(len(e.Sums)))
		w(e.Sums)
	}
	if trailer {
		w(int32(7))
		w(int32(len("wiki")))
		b.WriteString("wiki")
	}
	return b.Bytes()
}

func TestParseDat(t *testing.T) {
	in := []Entry{{Name: "blk.0.attn_q.weight", NCall: 3, Sums: []float32{1, 2.5, 0}},
		{Name: "blk.0.ffn_up.weight", NCall: 0, Sums: []float32{4}}}
	f, err := ParseDat(dat(in, true))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Legacy || len(f.Entries) != 2 || f.Entries[0].Name != in[0].Name || f.Entries[0].NCall != 3 ||
		f.Entries[0].Sums[1] != 2.5 || f.Entries[1].Sums[0] != 4 {
		t.Fatalf("parsed %+v", f)
	}
	if !f.HasChunkCount || f.ChunkCount != 7 || !f.HasDatasets || f.Datasets[0] != "wiki" {
		t.Fatalf("trailer: %+v", f)
	}
	g, err := ParseDat(dat(in, false))
	if err != nil || g.HasChunkCount || g.HasDatasets {
		t.Fatalf("without trailer: %+v, %v", g, err)
	}
	// every truncation inside the entries is an error naming an offset
	b := dat(in, false)
	for i := 0; i < len(b); i++ {
		if _, err := ParseDat(b[:i]); err == nil || !strings.Contains(err.Error(), "offset") {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	for _, bad := range [][]Entry{
		{{Name: "a", NCall: 1, Sums: []float32{float32(math.NaN())}}},
		{{Name: "a", NCall: 1, Sums: []float32{-1}}},
		{{Name: "a", NCall: 1, Sums: []float32{float32(math.Inf(1))}}},
		{{Name: "a", NCall: -1, Sums: []float32{1}}},
		{{Name: "a", NCall: 1, Sums: []float32{1}}, {Name: "a", NCall: 1, Sums: []float32{1}}},
	} {
		if _, err := ParseDat(dat(bad, false)); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

func TestLoadDetectsFormat(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.dat")
	if err := os.WriteFile(p, dat([]Entry{{Name: "x", NCall: 1, Sums: []float32{2}}}, true), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(p)
	if err != nil || !f.Legacy || len(f.Entries) != 1 {
		t.Fatalf("%+v, %v", f, err)
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("GGUFxx"), 0o644)
	if _, err := Load(junk); err == nil || !strings.Contains(err.Error(), "imatrix") {
		t.Fatalf("junk GGUF: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}

// FuzzParseDat: arbitrary bytes never panic, and what parses is consistent.
func FuzzParseDat(f *testing.F) {
	f.Add(dat([]Entry{{Name: "blk.0.attn_q.weight", NCall: 3, Sums: []float32{1, 2.5, 0}}}, true))
	f.Add(dat([]Entry{{Name: "a", NCall: 0, Sums: []float32{1}}, {Name: "b", NCall: 9, Sums: []float32{0, 0}}}, false))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := ParseDat(b)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, e := range im.Entries {
			if seen[e.Name] || len(e.Name) == 0 || len(e.Name) > MaxNameLen || e.NCall < 0 || len(e.Sums) == 0 {
				t.Fatalf("bad entry %+v", e)
			}
			seen[e.Name] = true
			for _, v := range e.Sums {
				if !(v >= 0) || math.IsInf(float64(v), 1) {
					t.Fatalf("entry %s: value %v", e.Name, v)
				}
			}
		}
	})
}
