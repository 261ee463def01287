package reflogits

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// studentT draws from a Student-t distribution with nu degrees of freedom (heavy tails).
func studentT(r *rand.Rand, nu float64) float64 {
	var chi2 float64
	for range int(nu) {
		g := r.NormFloat64()
		chi2 += g * g
	}
	return r.NormFloat64() / math.Sqrt(chi2/nu)
}

func logitsRow(r *rand.Rand, n int, heavy bool) []float32 {
	row := make([]float32, n)
	for i := range row {
		if heavy {
			row[i] = float32(3 * studentT(r, 3))
		} else {
			row[i] = float32(2 * r.NormFloat64())
		}
	}
	return row
}

func sampleFile(t testing.TB, heavy bool) *File {
	r := rand.New(rand.NewPCG(1, 2))
	h := Header{NCtx: 16, NVocab: 300, NWindows: 3, TopK: 10, AddBOS: true, BOS: 5,
		TokenizerHash: "abc", Reference: "ref", Extra: []byte(`{"x":[1,2]}`)}
	f := &File{Header: h}
	for range h.NWindows * h.NCtx {
		f.Tokens = append(f.Tokens, int32(r.IntN(h.NVocab)))
	}
	for w := range h.NWindows {
		for j := range h.Scored() {
			next := f.Tokens[w*h.NCtx+h.NCtx/2+j+1]
			f.Records = append(f.Records, NewRecord(logitsRow(r, h.NVocab, heavy), next, h.TopK))
		}
	}
	return f
}

// NewRecord against a float64 reference computed by full sorting.
func TestNewRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, heavy := range []bool{false, true} {
		for trial := range 50 {
			n := 2 + r.IntN(500)
			row := logitsRow(r, n, heavy)
			if trial%5 == 0 { // ties
				for i := range row {
					row[i] = float32(math.Round(float64(row[i])))
				}
			}
			k := 1 + r.IntN(min(n, 40))
			next := int32(r.IntN(n))
			rec := NewRecord(row, next, k)
			idx := make([]int32, n)
			for i := range idx {
				idx[i] = int32(i)
			}
			slices.SortStableFunc(idx, func(a, b int32) int {
				switch {
				case row[a] > row[b]:
					return -1
				case row[a] < row[b]:
					return 1
				}
				return 0
			})
			if !slices.Equal(rec.IDs, idx[:k]) {
				t.Fatalf("heavy=%v n=%d k=%d: ids %v, want %v", heavy, n, k, rec.IDs, idx[:k])
			}
			mx := float64(row[idx[0]])
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v) - mx)
			}
			var rest float64
			for _, id := range idx[k:] {
				rest += math.Exp(float64(row[id])-mx) / z
			}
			for j, id := range rec.IDs {
				want := float64(row[id]) - mx - math.Log(z)
				if math.Abs(float64(rec.LogP[j])-want) > 1e-5*math.Max(1, math.Abs(want)) {
					t.Fatalf("logp[%d] = %v, want %v", j, rec.LogP[j], want)
				}
			}
			wantTok := float64(row[next]) - mx - math.Log(z)
			if math.Abs(float64(rec.LogPTok)-wantTok) > 1e-5*math.Max(1, math.Abs(wantTok)) {
				t.Fatalf("logp_tok %v, want %v", rec.LogPTok, wantTok)
			}
			if k == n {
				if !math.IsInf(float64(rec.LogRest), -1) {
					t.Fatalf("rest %v with every token listed", rec.LogRest)
				}
			} else if math.Abs(float64(rec.LogRest)-math.Log(rest)) > 1e-5*math.Max(1, math.Abs(math.Log(rest))) {
				t.Fatalf("log_rest %v, want %v", rec.LogRest, math.Log(rest))
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, heavy := range []bool{false, true} {
		f := sampleFile(t, heavy)
		path := filepath.Join(t.TempDir(), "ref.tqlogits")
		if err := WriteFile(path, f); err != nil {
			t.Fatal(err)
		}
		g, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if g.Header.NCtx != f.Header.NCtx || g.Header.TopK != f.Header.TopK || !g.Header.AddBOS ||
			g.Header.BOS != 5 || string(g.Header.Extra) != `{"x":[1,2]}` || g.Header.TokenizerHash != "abc" {
			t.Fatalf("header %+v", g.Header)
		}
		if !slices.Equal(g.Tokens, f.Tokens) || len(g.Records) != len(f.Records) {
			t.Fatal("tokens or record count differ")
		}
		for i := range f.Records {
			a, b := f.Records[i], g.Records[i]
			if math.Float32bits(a.LogPTok) != math.Float32bits(b.LogPTok) || math.Float32bits(a.LogRest) != math.Float32bits(b.LogRest) ||
				!slices.Equal(a.IDs, b.IDs) || !slices.Equal(a.LogP, b.LogP) {
				t.Fatalf("record %d differs", i)
			}
		}
		if w := g.Window(1); !slices.Equal(w, f.Tokens[16:32]) {
			t.Fatal("Window(1)")
		}
		if g.Record(2, 3) != &g.Records[2*g.Header.Scored()+3] {
			t.Fatal("Record(2,3)")
		}
	}
}

// rawPayload returns the decompressed bytes of a valid file.
func rawPayload(t testing.TB) []byte {
	var buf bytes.Buffer
	if err := Write(&buf, sampleFile(t, false)); err != nil {
		t.Fatal(err)
	}
	zr, err := zstd.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func compress(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestHostile(t *testing.T) {
	raw := rawPayload(t)
	hlen := int(binary.LittleEndian.Uint32(raw[12:]))
	tokOff := 16 + hlen
	recOff := tokOff + 4*3*16
	mut := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), raw...))
	}
	setHeader := func(js string) []byte {
		out := append([]byte(nil), raw[:12]...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(js)))
		out = append(out, js...)
		return append(out, raw[16+hlen:]...)
	}
	cases := []struct {
		name, want string
		data       []byte
		plain      bool // not zstd
	}{
		{"not zstd", "decompressing", []byte("hello world, not a zstd stream"), true},
		{"empty", "truncated", nil, false},
		{"bad magic", "magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), false},
		{"bad version", "version", mut(func(b []byte) []byte { b[8] = 9; return b }), false},
		{"huge header", "header", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<30); return b }), false},
		{"header truncated", "truncated", raw[:20], false},
		{"bad json", "invalid JSON", setHeader(`{"n_ctx":`), false},
		{"huge windows", "n_windows", setHeader(`{"n_ctx":1024,"n_vocab":300,"n_windows":100000000,"top_k":10}`), false},
		{"topk > vocab", "top_k", setHeader(`{"n_ctx":16,"n_vocab":5,"n_windows":3,"top_k":10}`), false},
		{"small ctx", "n_ctx", setHeader(`{"n_ctx":2,"n_vocab":300,"n_windows":3,"top_k":10}`), false},
		{"lying windows", "truncated", setHeader(`{"n_ctx":16,"n_vocab":300,"n_windows":5000,"top_k":10}`), false},
		{"token range", "out of range", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[tokOff:], 300); return b }), false},
		{"id range", "out of range", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[recOff+8:], 1<<31); return b }), false},
		{"dup id", "twice", mut(func(b []byte) []byte { copy(b[recOff+12:recOff+16], b[recOff+8:recOff+12]); return b }), false},
		{"nan logp", "log-prob", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[recOff+8+40:], math.Float32bits(float32(math.NaN())))
			return b
		}), false},
		{"unsorted", "not sorted", mut(func(b []byte) []byte {
			copy(b[recOff+8+40+4:recOff+8+40+8], []byte{0, 0, 0, 0}) // logp[1] = 0 > logp[0]
			return b
		}), false},
		{"mass", "sum", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[recOff+4:], math.Float32bits(-0.01))
			return b
		}), false},
		{"truncated record", "truncated", raw[:len(raw)-3], false},
		{"trailing", "unexpected data", append(append([]byte(nil), raw...), 1), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := c.data
			if !c.plain {
				data = compress(t, data)
			}
			_, err := Read(bytes.NewReader(data), "x.tqlogits")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x.tqlogits") {
				t.Fatalf("error %q does not mention %q and the file name", err, c.want)
			}
		})
	}
	// the unmodified payload is accepted (the mutations above are what fail)
	if _, err := Read(bytes.NewReader(compress(t, raw)), "ok"); err != nil {
		t.Fatal(err)
	}
}

func FuzzRead(f *testing.F) {
	raw := rawPayload(f)
	f.Add(compress(f, raw))
	f.Add(compress(f, raw[:100]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Read(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		// whatever is accepted is self-consistent and writes back identically
		if len(g.Tokens) != g.Header.NWindows*g.Header.NCtx || len(g.Records) != g.Header.NWindows*g.Header.Scored() {
			t.Fatal("inconsistent file accepted")
		}
		var buf bytes.Buffer
		if err := Write(&buf, g); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(&buf, "again"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOutputSafety: a symbolic link output is written through (the link stays) and a
// read-only file is refused untouched (internal/safeout).
func TestOutputSafety(t *testing.T) {
	f := sampleFile(t, false)
	dir := t.TempDir()
	target := filepath.Join(dir, "real.tqlogits")
	os.WriteFile(target, []byte("old"), 0o640)
	link := filepath.Join(dir, "link.tqlogits")
	if err := os.Symlink("real.tqlogits", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, f); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link replaced (%v)", err)
	}
	if _, err := ReadFile(target); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o640 {
		t.Fatalf("target mode %v", fi.Mode())
	}
	ro := filepath.Join(dir, "ro.tqlogits")
	os.WriteFile(ro, []byte("keep"), 0o444)
	os.Chmod(ro, 0o444)
	if err := WriteFile(ro, f); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only output: %v", err)
	}
	if b, _ := os.ReadFile(ro); string(b) != "keep" {
		t.Fatalf("read-only file changed: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("left behind: %v", ents)
	}
}
