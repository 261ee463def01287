package convert

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/imatrix"
)

func datBytes(entries map[string][]float32, ncall int32, dataset string) []byte {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	w(int32(len(entries)))
	for _, name := range sortedKeys(entries) {
		w(int32(len(name)))
		b.WriteString(name)
		w(ncall)
		w(int32(len(entries[name])))
		w(entries[name])
	}
	w(int32(7))
	w(int32(len(dataset)))
	b.WriteString(dataset)
	return b.Bytes()
}

func sortedKeys(m map[string][]float32) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func TestIMatrixDat(t *testing.T) {
	vals := []float32{2, 4, 6, 8, 10, 12}
	b := datBytes(map[string][]float32{"blk.0.attn_q.weight": vals, "blk.0.ffn_down_exps.weight": vals}, 2, "calib.txt")
	im, err := imatrix.ParseDatMeans("x.dat", b)
	if err != nil {
		t.Fatal(err)
	}
	if im.Len() != 2 || im.ChunkCount != 7 || len(im.Datasets) != 1 || im.Datasets[0] != "calib.txt" {
		t.Fatalf("parsed %+v", im)
	}
	v, ok, err := im.ImportanceFor("blk.0.attn_q.weight", 0, 6)
	if err != nil || !ok || v[0] != 1 || v[5] != 6 {
		t.Fatalf("values %v %v %v", v, ok, err)
	}
	// the same entry seen as 3 matrices of 2 columns (experts)
	v, ok, err = im.ImportanceFor("blk.0.ffn_down_exps.weight", 2, 2)
	if err != nil || !ok || v[0] != 5 || v[1] != 6 {
		t.Fatalf("expert slice %v %v %v", v, ok, err)
	}
	if _, _, err := im.ImportanceFor("blk.0.attn_q.weight", 0, 4); err == nil {
		t.Error("size mismatch accepted")
	}
	im.Filter(nil, []string{"ffn_down"})
	if im.Len() != 1 {
		t.Errorf("filter left %v", im.Names())
	}
	// hostile inputs: truncations and bad counts never panic and always error
	for i := 0; i < len(b)-16; i++ {
		if _, err := imatrix.ParseDatMeans("x.dat", b[:i]); err == nil && i < 60 {
			t.Errorf("truncated at %d accepted", i)
		}
	}
	nan := datBytes(map[string][]float32{"a": {float32(math.NaN())}}, 1, "")
	if _, err := imatrix.ParseDatMeans("x.dat", nan); err == nil || !strings.Contains(err.Error(), "non-finite") {
		t.Errorf("NaN accepted: %v", err)
	}
}

func TestIMatrixGGUF(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "imatrix.gguf")
	w, err := gguf.Create(path, gguf.WriterOptions{NoManifest: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata.Set("general.type", gguf.String("imatrix"))
	w.Metadata.Set("imatrix.datasets", gguf.Array([]string{"wiki.txt"}))
	w.Metadata.Set("imatrix.chunk_count", gguf.Uint32(10))
	w.Metadata.Set("imatrix.chunk_size", gguf.Uint32(512))
	f32 := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	// 2 experts of 2 columns; expert 1 never routed (count 0 -> 1.0)
	must(t, w.AddTensor("blk.0.ffn_up_exps.weight.counts", []uint64{1, 2}, gguf.TypeF32))
	must(t, w.AddTensor("blk.0.ffn_up_exps.weight.in_sum2", []uint64{2, 2}, gguf.TypeF32))
	must(t, w.WriteTensorData("blk.0.ffn_up_exps.weight.counts", f32(4, 0)))
	must(t, w.WriteTensorData("blk.0.ffn_up_exps.weight.in_sum2", f32(8, 12, 5, 5)))
	must(t, w.Close())
	im, err := imatrix.LoadMeans(path)
	if err != nil {
		t.Fatal(err)
	}
	v0, ok0 := im.Importance("blk.0.ffn_up_exps.weight", 0)
	v1, ok1 := im.Importance("blk.0.ffn_up_exps.weight", 1)
	if !ok0 || !ok1 || v0[0] != 2 || v0[1] != 3 || v1[0] != 1 || v1[1] != 1 {
		t.Fatalf("got %v %v", v0, v1)
	}
	md := imatrixProvenance(im)
	if s, _ := md.GetString("quantize.imatrix.dataset"); s != "wiki.txt" {
		t.Errorf("dataset %q", s)
	}
	if n, _ := md.GetUint("quantize.imatrix.chunks_count"); n != 10 {
		t.Errorf("chunks %d", n)
	}
	// not an imatrix
	os.WriteFile(filepath.Join(dir, "junk"), []byte("not an imatrix at all"), 0o644)
	if _, err := imatrix.LoadMeans(filepath.Join(dir, "junk")); err == nil {
		t.Error("junk accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzParseIMatrixDat(f *testing.F) {
	f.Add(datBytes(map[string][]float32{"blk.0.attn_q.weight": {1, 2, 3, 4}}, 3, "d"))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 127})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := imatrix.ParseDatMeans("fuzz.dat", b)
		if err != nil {
			return
		}
		for _, n := range im.Names() {
			for cols := 1; cols < 5; cols++ {
				im.ImportanceFor(n, 0, cols)
			}
		}
	})
}
