package tokfile

import (
	"bytes"
	"crypto/sha256"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testHeader() Header {
	return Header{VocabHash: sha256.Sum256([]byte("vocab")), PadID: 151643, PadMultiple: 64, MaxLen: 4096}
}

func randomSeqs(r *rand.Rand, h Header, n int) []Sequence {
	var seqs []Sequence
	for i := 0; i < n; i++ {
		ids := make([]int32, r.Intn(5000))
		for j := range ids {
			ids[j] = int32(r.Intn(151000))
		}
		p, a := Pad(ids, int(h.PadMultiple), int(h.MaxLen), h.PadID)
		seqs = append(seqs, Sequence{IDs: p, AttnLen: a})
	}
	return seqs
}

func TestPad(t *testing.T) {
	cases := []struct {
		n, multiple, maxLen int
		wantLen, wantAttn   int
	}{
		{0, 64, 4096, 0, 0},
		{1, 64, 4096, 64, 1},
		{64, 64, 4096, 64, 64},
		{65, 64, 4096, 128, 65},
		{5000, 64, 4096, 4096, 4096},
		{90, 64, 100, 100, 90}, // the last bucket is maxLen when it is not a multiple
		{100, 64, 100, 100, 100},
		{7, 1, 0, 7, 7},
		{7, 0, 0, 7, 7},
		{7, 8, 0, 8, 7},
		{7, 8, 5, 5, 5},
	}
	for _, c := range cases {
		ids := make([]int32, c.n)
		for i := range ids {
			ids[i] = int32(i + 1)
		}
		p, a := Pad(ids, c.multiple, c.maxLen, -1)
		if len(p) != c.wantLen || a != c.wantAttn {
			t.Errorf("Pad(%d ids, %d, %d) = %d ids, attn %d; want %d, %d", c.n, c.multiple, c.maxLen, len(p), a, c.wantLen, c.wantAttn)
			continue
		}
		for i := 0; i < a; i++ {
			if p[i] != int32(i+1) {
				t.Fatalf("token %d changed", i)
			}
		}
		for i := a; i < len(p); i++ {
			if p[i] != -1 {
				t.Fatalf("padding %d is %d", i, p[i])
			}
		}
	}
	ids := []int32{1, 2, 3}
	p, _ := Pad(ids, 4, 0, 0)
	p[0] = 99
	if ids[0] != 1 {
		t.Error("Pad aliases its input")
	}
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	h := testHeader()
	seqs := randomSeqs(r, h, 20)
	dir := t.TempDir()
	path := filepath.Join(dir, "calib.tok")
	if err := WriteFile(path, h, seqs); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header != h || !reflect.DeepEqual(f.Seqs, seqs) {
		t.Fatal("round trip changed the data")
	}
	data, _ := os.ReadFile(path)
	enc, err := Encode(h, seqs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, enc) {
		t.Fatal("streaming Writer and Encode disagree")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	// Empty file.
	if err := WriteFile(path, h, nil); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadFile(path); err != nil || len(f.Seqs) != 0 {
		t.Fatalf("empty file: %v %v", f, err)
	}
}

func TestLayout(t *testing.T) {
	h := Header{PadID: -2, PadMultiple: 2, MaxLen: 0}
	h.VocabHash[0] = 0xAB
	data, err := Encode(h, []Sequence{{IDs: []int32{7, -2}, AttnLen: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("TQTOK\x00")
	want = append(want, 1, 0, 0, 0, 1, 0, 0, 0, 0xAB)
	want = append(want, make([]byte, 31)...)
	want = append(want, 0xFE, 0xFF, 0xFF, 0xFF, 2, 0, 0, 0, 0, 0, 0, 0)
	want = append(want, 2, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0xFE, 0xFF, 0xFF, 0xFF)
	sum := sha256.Sum256(want)
	want = append(want, sum[:]...)
	if !bytes.Equal(data, want) {
		t.Fatalf("layout:\n got %x\nwant %x", data, want)
	}
}

func TestWriterRejectsInvalid(t *testing.T) {
	h := testHeader()
	dir := t.TempDir()
	path := filepath.Join(dir, "x.tok")
	bad := []Sequence{
		{IDs: make([]int32, 65), AttnLen: 65},            // not a multiple of 64
		{IDs: make([]int32, 8192), AttnLen: 8192},        // over MaxLen
		{IDs: []int32{1, 2}, AttnLen: 3},                 // attn > len
		{IDs: append(make([]int32, 63), 5), AttnLen: 10}, // padding is not the pad id
	}
	for i, s := range bad {
		if err := WriteFile(path, h, []Sequence{s}); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("failed writes left %s behind", path)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestParseRejectsHostileInput(t *testing.T) {
	h := testHeader()
	good, err := Encode(h, randomSeqs(rand.New(rand.NewSource(2)), h, 3))
	if err != nil {
		t.Fatal(err)
	}
	rehash := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		sum := sha256.Sum256(b[:len(b)-32])
		copy(b[len(b)-32:], sum[:])
		return b
	}
	mutate := func(off int, v ...byte) []byte {
		b := append([]byte(nil), good...)
		copy(b[off:], v)
		return rehash(b)
	}
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":           {nil, "shorter"},
		"truncated":       {good[:len(good)-1], "checksum"},
		"flipped bit":     {func() []byte { b := append([]byte(nil), good...); b[100] ^= 1; return b }(), "checksum"},
		"bad magic":       {mutate(0, 'X'), "magic"},
		"bad version":     {mutate(6, 2), "version"},
		"huge count":      {mutate(10, 0xFF, 0xFF, 0xFF, 0xFF), "count"},
		"huge length":     {mutate(58, 0xFF, 0xFF, 0xFF, 0x7F), "needs"},
		"attn > length":   {mutate(62, 0xFF, 0xFF, 0, 0), "attention"},
		"trailing bytes":  {rehash(append(append([]byte(nil), good[:len(good)-32]...), append([]byte{0, 0, 0, 0}, make([]byte, 32)...)...)), "unexpected bytes"},
		"fewer sequences": {mutate(10, 2, 0, 0, 0), "unexpected bytes"},
	}
	for name, c := range cases {
		_, err := Parse(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse feeds arbitrary bytes to the parser; valid inputs must
// re-encode to the same bytes.
func FuzzParse(f *testing.F) {
	h := testHeader()
	for i, n := range []int{0, 1, 3} {
		data, err := Encode(h, randomSeqs(rand.New(rand.NewSource(int64(i))), h, n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	small, _ := Encode(Header{PadID: 0}, []Sequence{{IDs: []int32{1, 2, 0}, AttnLen: 2}})
	f.Add(small)
	f.Add([]byte("TQTOK\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Encode(fl.Header, fl.Seqs)
		if err != nil {
			t.Fatalf("parsed file does not re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatal("re-encoding differs")
		}
	})
}

func BenchmarkParse(b *testing.B) {
	h := testHeader()
	data, _ := Encode(h, randomSeqs(rand.New(rand.NewSource(3)), h, 32))
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSHA256Baseline hashes the same bytes as BenchmarkParse: the
// floor for Parse, which must verify the checksum.
func BenchmarkSHA256Baseline(b *testing.B) {
	h := testHeader()
	data, _ := Encode(h, randomSeqs(rand.New(rand.NewSource(3)), h, 32))
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		sha256.Sum256(data)
	}
}

// TestOutputSafety: a symbolic link output is written through (the link stays, the target
// keeps its mode) and a read-only file is refused untouched (internal/safeout).
func TestOutputSafety(t *testing.T) {
	h := testHeader()
	seqs := randomSeqs(rand.New(rand.NewSource(2)), h, 3)
	dir := t.TempDir()
	target := filepath.Join(dir, "real.tok")
	os.WriteFile(target, []byte("old"), 0o600)
	link := filepath.Join(dir, "link.tok")
	if err := os.Symlink("real.tok", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, h, seqs); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link replaced (%v)", err)
	}
	if f, err := ReadFile(target); err != nil || len(f.Seqs) != 3 {
		t.Fatalf("target: %v", err)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o600 {
		t.Fatalf("target mode %v", fi.Mode())
	}
	ro := filepath.Join(dir, "ro.tok")
	os.WriteFile(ro, []byte("keep"), 0o444)
	os.Chmod(ro, 0o444)
	if err := WriteFile(ro, h, seqs); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only output: %v", err)
	}
	if b, _ := os.ReadFile(ro); string(b) != "keep" {
		t.Fatalf("read-only file changed: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("left behind: %v", ents)
	}
}
