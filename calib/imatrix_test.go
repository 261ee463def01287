package calib

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	parser "github.com/gpustack/gguf-parser-go"

	"github.com/tq-project/tq/internal/imatrix"
)

// ggufLayout is a minimal GGUF v3 reader written from the spec (facts doc §1) for the
// structural check of our imatrix files, independent of package gguf.
type ggufLayout struct {
	kvs     []ggufKV
	tensors []ggufTI
	data    []byte
}

type ggufKV struct {
	key  string
	typ  uint32
	elem uint32 // arrays
	val  any
}

type ggufTI struct {
	name string
	dims []uint64
	typ  uint32
	off  uint64
}

func parseLayout(t *testing.T, b []byte) *ggufLayout {
	t.Helper()
	r := bytes.NewReader(b)
	le := binary.LittleEndian
	u32 := func() uint32 { var v uint32; binary.Read(r, le, &v); return v }
	u64 := func() uint64 { var v uint64; binary.Read(r, le, &v); return v }
	str := func() string { n := u64(); s := make([]byte, n); r.Read(s); return string(s) }
	var magic [4]byte
	r.Read(magic[:])
	if string(magic[:]) != "GGUF" || u32() != 3 {
		t.Fatalf("not a GGUF v3 file")
	}
	nt, nkv := u64(), u64()
	g := &ggufLayout{}
	for i := uint64(0); i < nkv; i++ {
		kv := ggufKV{key: str(), typ: u32()}
		switch kv.typ {
		case 4: // UINT32
			kv.val = u32()
		case 8: // STRING
			kv.val = str()
		case 9: // ARRAY
			kv.elem = u32()
			n := u64()
			if kv.elem != 8 {
				t.Fatalf("key %s: array of type %d", kv.key, kv.elem)
			}
			var ss []string
			for j := uint64(0); j < n; j++ {
				ss = append(ss, str())
			}
			kv.val = ss
		default:
			t.Fatalf("key %s: unexpected type %d", kv.key, kv.typ)
		}
		g.kvs = append(g.kvs, kv)
	}
	for i := uint64(0); i < nt; i++ {
		ti := ggufTI{name: str()}
		nd := u32()
		for j := uint32(0); j < nd; j++ {
			ti.dims = append(ti.dims, u64())
		}
		ti.typ = u32()
		ti.off = u64()
		g.tensors = append(g.tensors, ti)
	}
	pos := int64(len(b)) - int64(r.Len())
	start := (pos + 31) / 32 * 32
	g.data = b[start:]
	return g
}

func f32At(b []byte, off uint64, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[off+4*uint64(i):]))
}

// TestIMatrixGGUFLayout checks our GGUF imatrix against the layout llama-imatrix writes
// (tools/imatrix/imatrix.cpp save_imatrix; facts doc §3.2) with an independent reader, then
// with gguf-parser-go, internal/convert's importer (which feeds the quantizer) and our own
// importer. llama.cpp itself is not run: node-llama-cpp has no imatrix API, so this is a
// structural check against the documented layout.
func TestIMatrixGGUFLayout(t *testing.T) {
	s := randomStats(7)
	path := filepath.Join(t.TempDir(), "imatrix.gguf")
	if err := WriteIMatrixGGUF(path, s, &IMatrixOptions{ChunkSize: 4, Datasets: []string{"calib.txt"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := parseLayout(t, b)
	wantKeys := []struct {
		key string
		typ uint32
	}{{"general.type", 8}, {"imatrix.datasets", 9}, {"imatrix.chunk_count", 4}, {"imatrix.chunk_size", 4}}
	if len(g.kvs) != len(wantKeys) {
		t.Fatalf("%d metadata keys, want %d", len(g.kvs), len(wantKeys))
	}
	for i, w := range wantKeys {
		if g.kvs[i].key != w.key || g.kvs[i].typ != w.typ {
			t.Fatalf("key %d: %s type %d, want %s type %d", i, g.kvs[i].key, g.kvs[i].typ, w.key, w.typ)
		}
	}
	if g.kvs[0].val != "imatrix" || !slices.Equal(g.kvs[1].val.([]string), []string{"calib.txt"}) || g.kvs[3].val != uint32(4) {
		t.Fatalf("metadata values %v", g.kvs)
	}
	// chunk_count = ceil(max count / chunk size)
	var mx int64
	for _, ts := range s.Tensors {
		for _, c := range ts.Counts {
			mx = max(mx, c)
		}
	}
	if g.kvs[2].val != uint32((mx+3)/4) {
		t.Fatalf("chunk_count %v, want %d", g.kvs[2].val, (mx+3)/4)
	}
	names := s.Names()
	if len(g.tensors) != 2*len(names) {
		t.Fatalf("%d tensors, want %d", len(g.tensors), 2*len(names))
	}
	var off uint64
	for i, name := range names {
		ts := s.Tensors[name]
		sum, cnt := g.tensors[2*i], g.tensors[2*i+1]
		wantSum, wantCnt := []uint64{uint64(ts.Cols)}, []uint64{1}
		if ts.NMat > 1 {
			wantSum = append(wantSum, uint64(ts.NMat))
			wantCnt = append(wantCnt, uint64(ts.NMat))
		}
		if sum.name != name+".in_sum2" || cnt.name != name+".counts" || sum.typ != 0 || cnt.typ != 0 ||
			!slices.Equal(sum.dims, wantSum) || !slices.Equal(cnt.dims, wantCnt) {
			t.Fatalf("entry %s: tensors %+v %+v", name, sum, cnt)
		}
		if sum.off != off {
			t.Fatalf("%s: offset %d, want %d", sum.name, sum.off, off)
		}
		off += (uint64(4*ts.Cols*ts.NMat) + 31) / 32 * 32
		if cnt.off != off {
			t.Fatalf("%s: offset %d, want %d", cnt.name, cnt.off, off)
		}
		off += (uint64(4*ts.NMat) + 31) / 32 * 32
		for j, v := range ts.SumSq {
			if f32At(g.data, sum.off, j) != float32(v) {
				t.Fatalf("%s[%d] = %v, want %v", sum.name, j, f32At(g.data, sum.off, j), float32(v))
			}
		}
		for e, c := range ts.Counts {
			if f32At(g.data, cnt.off, e) != float32(c) {
				t.Fatalf("%s[%d] = %v, want %d", cnt.name, e, f32At(g.data, cnt.off, e), c)
			}
		}
	}

	// gguf-parser-go sees the same tensors
	pf, err := parser.ParseGGUFFile(path)
	if err != nil {
		t.Fatalf("gguf-parser-go: %v", err)
	}
	if len(pf.TensorInfos) != len(g.tensors) {
		t.Fatalf("gguf-parser-go: %d tensors", len(pf.TensorInfos))
	}
	for i, ti := range pf.TensorInfos {
		if ti.Name != g.tensors[i].name || !slices.Equal(ti.Dimensions, g.tensors[i].dims) {
			t.Fatalf("gguf-parser-go tensor %d: %s %v", i, ti.Name, ti.Dimensions)
		}
	}

	// internal/convert's importer yields the means the quantizer will use
	im, err := imatrix.LoadMeans(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		ts := s.Tensors[name]
		for e := 0; e < ts.NMat; e++ {
			got, ok := im.Importance(name, e)
			want, wok := ts.Importance(e)
			if !ok {
				t.Fatalf("convert sees no importance for %s[%d]", name, e)
			}
			for c := range got {
				w := float32(1) // llama.cpp's rule for matrices without data
				if wok {
					w = want[c]
				}
				if math.Abs(float64(got[c]-w)) > 1e-6*math.Abs(float64(w)) {
					t.Fatalf("%s[%d][%d]: convert %v, ours %v", name, e, c, got[c], w)
				}
			}
		}
	}

	// and our importer round-trips sums (float32) and counts
	back, err := LoadIMatrix(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		a, bb := s.Tensors[name], back.Tensors[name]
		if !slices.Equal(a.Counts, bb.Counts) || a.Cols != bb.Cols || a.NMat != bb.NMat {
			t.Fatalf("%s: counts/shape differ after import", name)
		}
		for j := range a.SumSq {
			if bb.SumSq[j] != float64(float32(a.SumSq[j])) {
				t.Fatalf("%s: sum %d %v vs %v", name, j, bb.SumSq[j], a.SumSq[j])
			}
			if !math.IsNaN(float64(bb.MaxAbs[j])) {
				t.Fatal("imported max|x| should be unknown (NaN)")
			}
		}
	}
	if !slices.Equal(back.Meta.Datasets, []string{"calib.txt"}) {
		t.Errorf("datasets %v", back.Meta.Datasets)
	}
}

// TestIMatrixDatLayout checks the legacy format byte by byte (llama-imatrix
// save_imatrix_legacy) and its round trips through convert's and our parser.
func TestIMatrixDatLayout(t *testing.T) {
	s := randomStats(8)
	var buf bytes.Buffer
	const cs = 4
	if err := WriteIMatrixDat(&buf, s, &IMatrixOptions{ChunkSize: cs, Datasets: []string{"wiki.txt"}}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	r := bytes.NewReader(b)
	i32 := func() int32 { var v int32; binary.Read(r, binary.LittleEndian, &v); return v }
	names := s.Names()
	if n := i32(); int(n) != len(names) {
		t.Fatalf("n_entries %d, want %d", n, len(names))
	}
	var mx int64
	for _, name := range names {
		ts := s.Tensors[name]
		if l := i32(); int(l) != len(name) {
			t.Fatalf("name length %d", l)
		}
		nb := make([]byte, len(name))
		r.Read(nb)
		if string(nb) != name {
			t.Fatalf("name %q, want %q", nb, name)
		}
		var m int64
		for _, c := range ts.Counts {
			m = max(m, c)
		}
		mx = max(mx, m)
		ncall := int32((m + cs - 1) / cs)
		if got := i32(); got != ncall {
			t.Fatalf("%s: ncall %d, want %d", name, got, ncall)
		}
		if got := i32(); int(got) != ts.Cols*ts.NMat {
			t.Fatalf("%s: nval %d", name, got)
		}
		for j, v := range ts.SumSq {
			var f float32
			binary.Read(r, binary.LittleEndian, &f)
			count, value := float32(ts.Counts[j/ts.Cols]), float32(v)
			if count == 0 {
				count, value = 1, 1
			}
			if want := value / count * float32(ncall); f != want {
				t.Fatalf("%s[%d] = %v, want %v", name, j, f, want)
			}
		}
	}
	if got := i32(); int64(got) != (mx+cs-1)/cs {
		t.Fatalf("chunk count %d", got)
	}
	if l := i32(); l != 8 {
		t.Fatalf("dataset length %d", l)
	}
	ds := make([]byte, 8)
	r.Read(ds)
	if string(ds) != "wiki.txt" || r.Len() != 0 {
		t.Fatalf("trailer %q, %d bytes left", ds, r.Len())
	}

	// convert's parser (what llama-quantize computes: value/ncall) and ours agree on means
	im, err := imatrix.ParseDatMeans("x.dat", b)
	if err != nil {
		t.Fatal(err)
	}
	shape := func(name string) (int, int, bool) {
		ts := s.Tensors[name]
		return ts.Cols, ts.NMat, ts != nil
	}
	back, err := ParseIMatrixDat(b, &ImportOptions{ChunkSize: cs, Shape: shape})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		ts := s.Tensors[name]
		bt := back.Tensors[name]
		if bt.NMat != ts.NMat {
			t.Fatalf("%s: imported %d matrices, want %d", name, bt.NMat, ts.NMat)
		}
		for e := 0; e < ts.NMat; e++ {
			cv, _, err := im.ImportanceFor(name, e, ts.Cols)
			if err != nil {
				t.Fatal(err)
			}
			ov, _ := bt.Importance(e)
			want, ok := ts.Importance(e)
			for c := range cv {
				w := float32(1)
				if ok {
					w = want[c]
				}
				if math.Abs(float64(cv[c]-w)) > 1e-5*float64(w) || math.Abs(float64(ov[c]-w)) > 1e-5*float64(w) {
					t.Fatalf("%s[%d][%d]: convert %v, ours %v, original %v", name, e, c, cv[c], ov[c], w)
				}
			}
		}
	}
}
