package testenv

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// encodeGolden writes g in the version-1 layout of testdata/golden/README.md, written here
// from the README independently of ParseGolden.
func encodeGolden(g *GoldenFile) []byte {
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	str := func(s string) { u32(uint32(len(s))); b = append(b, s...) }
	f32s := func(x []float32) {
		for _, v := range x {
			u32(math.Float32bits(v))
		}
	}
	b = append(b, "TQGV"...)
	u32(1)
	u32(g.TypeID)
	str(g.TypeName)
	str(g.Commit)
	u32(g.Producer)
	u32(uint32(g.BlockSize))
	u32(uint32(g.TypeSize))
	u32(g.Flags)
	u32(uint32(len(g.Cases)))
	for _, c := range g.Cases {
		str(c.Name)
		u32(uint32(c.Rows))
		u32(uint32(c.Cols))
		f32s(c.X)
		if c.Imatrix != nil {
			u32(1)
			f32s(c.Imatrix)
		} else {
			u32(0)
		}
		u32(uint32(len(c.Q)))
		b = append(b, c.Q...)
		f32s(c.Y)
		if c.Imatrix != nil {
			u32(uint32(len(c.QIm)))
			b = append(b, c.QIm...)
			f32s(c.YIm)
		}
	}
	return b
}

// smallGolden is a two-case file with both runs and dequantized values (block 2, 3 bytes).
func smallGolden() *GoldenFile {
	mk := func(name string, rows, cols int, seed byte) GoldenCase {
		c := GoldenCase{Name: name, Rows: rows, Cols: cols, RowBytes: cols / 2 * 3}
		for i := 0; i < rows*cols; i++ {
			c.X = append(c.X, float32(i)-1.5)
			c.Y = append(c.Y, float32(i))
			c.YIm = append(c.YIm, -float32(i))
		}
		for i := 0; i < cols; i++ {
			c.Imatrix = append(c.Imatrix, float32(i)+0.25)
		}
		for i := 0; i < rows*c.RowBytes; i++ {
			c.Q = append(c.Q, seed+byte(i))
			c.QIm = append(c.QIm, seed^byte(i))
		}
		return c
	}
	return &GoldenFile{TypeID: 12, TypeName: "q4_K", Commit: strings.Repeat("ab", 20), Producer: 2,
		BlockSize: 2, TypeSize: 3, Flags: GoldenImatrix | GoldenDequant,
		Cases: []GoldenCase{mk("a", 2, 4, 7), mk("edge", 1, 2, 200)}}
}

func TestParseGoldenRoundTrip(t *testing.T) {
	want := smallGolden()
	b := encodeGolden(want)
	g, err := ParseGolden(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encodeGolden(g), b) {
		t.Fatal("parse + encode changed the file")
	}
	c := g.Cases[0]
	if g.TypeName != "q4_K" || g.BlockSize != 2 || g.TypeSize != 3 || len(g.Cases) != 2 ||
		c.Name != "a" || c.Rows != 2 || c.Cols != 4 || c.RowBytes != 6 || !c.HasImatrixRun() ||
		c.X[5] != 3.5 || c.Imatrix[3] != 3.25 || c.Q[11] != 18 || c.YIm[7] != -7 {
		t.Fatalf("parsed %+v", g)
	}
}

func TestParseGoldenRejects(t *testing.T) {
	good := encodeGolden(smallGolden())
	edit := func(f func(g *GoldenFile)) []byte {
		g := smallGolden()
		f(g)
		return encodeGolden(g)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"bad magic", append([]byte("TQGX"), good[4:]...), "magic"},
		{"version", append(append([]byte("TQGV"), 2, 0, 0, 0), good[8:]...), "unknown version 2"},
		{"trailing", append(append([]byte{}, good...), 0), "1 trailing bytes"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"truncated header", good[:20], "truncated"},
		{"zero block", edit(func(g *GoldenFile) { g.BlockSize = 0 }), "block_size 0"},
		{"huge type size", edit(func(g *GoldenFile) { g.TypeSize = 1 << 20 }), "type_size"},
		{"too many cases", func() []byte {
			b := encodeGolden(&GoldenFile{BlockSize: 1, TypeSize: 1})
			binary.LittleEndian.PutUint32(b[len(b)-4:], 65)
			return b
		}(), "65 cases"},
		{"cols not blocks", edit(func(g *GoldenFile) { g.BlockSize = 3 }), "bad shape"},
		{"zero rows", edit(func(g *GoldenFile) { g.Cases[1].Rows = 0 }), `case 1 "edge": bad shape`},
		{"imatrix flag", edit(func(g *GoldenFile) { g.Flags = GoldenDequant }), "imatrix_flag 1 disagrees"},
		{"nbytes", edit(func(g *GoldenFile) { g.Cases[0].Q = g.Cases[0].Q[:5] }), "nbytes 5, want"},
		{"nbytes_im", edit(func(g *GoldenFile) { g.Cases[1].QIm = append(g.Cases[1].QIm, 1) }), "nbytes_im 4, want 3"},
		{"huge string", func() []byte {
			b := append([]byte("TQGV"), 1, 0, 0, 0, 9, 0, 0, 0)
			return binary.LittleEndian.AppendUint32(b, 0xffffffff)
		}(), "type_name: truncated"},
	}
	for _, c := range cases {
		_, err := ParseGolden(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// TestGoldenFiles parses every committed golden file through LoadGolden.
func TestGoldenFiles(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(RepoRoot(t), "testdata", "golden", "*.bin"))
	if err != nil || len(paths) < 18 {
		t.Fatalf("%d golden files (%v), want 18", len(paths), err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".bin")
		g := LoadGolden(t, name)
		if len(g.Cases) < 5 || len(g.Commit) != 40 || g.TypeName == "" {
			t.Errorf("%s: %d cases, commit %q, type %q", name, len(g.Cases), g.Commit, g.TypeName)
		}
		if LoadGolden(t, name) != g {
			t.Errorf("%s: parsed twice", name)
		}
	}
}

// FuzzParseGolden: arbitrary bytes never panic, and whatever is accepted re-encodes to exactly
// the input (nothing is skipped or invented).
func FuzzParseGolden(f *testing.F) {
	f.Add(encodeGolden(smallGolden()))
	g := smallGolden()
	g.Flags = 0
	for i := range g.Cases {
		g.Cases[i].Imatrix, g.Cases[i].QIm, g.Cases[i].Y, g.Cases[i].YIm = nil, nil, nil, nil
	}
	f.Add(encodeGolden(g))
	f.Add([]byte("TQGV\x01\x00\x00\x00"))
	if b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "Q8_1.cpu_from_float.bin")); err == nil {
		f.Add(b[:4096]) // a real header, truncated inside the first case
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGolden(data)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeGolden(g), data) {
			t.Fatal("accepted file does not re-encode to its input")
		}
	})
}
