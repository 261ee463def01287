package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// studentT draws from a Student-t distribution with df degrees of freedom (integer).
func studentT(r *rand.Rand, df int) float64 {
	var c float64
	for i := 0; i < df; i++ {
		z := r.NormFloat64()
		c += z * z
	}
	return r.NormFloat64() / math.Sqrt(c/float64(df))
}

// encodeAs encodes float64 values in dtype d and also returns the float64 value each
// encoded element represents (the reference ReadFloat32 must reproduce).
func encodeAs(d DType, vals []float64) ([]byte, []float64) {
	out := make([]byte, 0, len(vals)*int(d.Size()))
	ref := make([]float64, len(vals))
	le := binary.LittleEndian
	for i, v := range vals {
		switch d {
		case F32:
			out = le.AppendUint32(out, math.Float32bits(float32(v)))
			ref[i] = float64(float32(v))
		case F64:
			out = le.AppendUint64(out, math.Float64bits(v))
			ref[i] = float64(float32(v))
		case F16:
			h := Float32ToF16(float32(v))
			out = le.AppendUint16(out, h)
			ref[i] = refF16(h)
		case BF16:
			h := Float32ToBF16(float32(v))
			out = le.AppendUint16(out, h)
			ref[i] = float64(math.Float32frombits(uint32(h) << 16))
		case F8E4M3:
			b := Float32ToF8E4M3(float32(v))
			out = append(out, b)
			ref[i] = refE4M3(b)
		case F8E5M2:
			b := uint8(Float32ToF16(float32(v)) >> 8) // truncation is a valid e5m2 code
			out = append(out, b)
			ref[i] = refE5M2(b)
		case I8:
			x := int8(math.Max(-128, math.Min(127, math.Round(v*10))))
			out = append(out, uint8(x))
			ref[i] = float64(x)
		case U8:
			x := uint8(math.Min(255, math.Abs(math.Round(v*10))))
			out = append(out, x)
			ref[i] = float64(x)
		case BOOL:
			x := uint8(0)
			if v > 0 {
				x = 1
			}
			out = append(out, x)
			ref[i] = float64(x)
		case I16:
			x := int16(math.Round(v * 100))
			out = le.AppendUint16(out, uint16(x))
			ref[i] = float64(x)
		case I32:
			x := int32(math.Round(v * 1000))
			out = le.AppendUint32(out, uint32(x))
			ref[i] = float64(x)
		case I64:
			x := int64(math.Round(v * 1e6))
			out = le.AppendUint64(out, uint64(x))
			ref[i] = float64(float32(x))
		default:
			panic(d)
		}
	}
	return out, ref
}

type testTensor struct {
	name  string
	dtype DType
	shape []int64
	data  []byte
	ref   []float64
}

func makeTensors(r *rand.Rand, dtypes []DType, prefix string) []testTensor {
	var ts []testTensor
	for i, d := range dtypes {
		shape := []int64{int64(3 + i%4), int64(5 + 2*i)}
		n := shape[0] * shape[1]
		vals := make([]float64, n)
		for j := range vals {
			vals[j] = studentT(r, 4) * 0.3
		}
		data, ref := encodeAs(d, vals)
		ts = append(ts, testTensor{fmt.Sprintf("%s%d.%v", prefix, i, d), d, shape, data, ref})
	}
	return ts
}

func writeTensors(t *testing.T, path string, ts []testTensor, meta map[string]string) {
	t.Helper()
	wts := make([]WriteTensor, len(ts))
	for i, tt := range ts {
		wts[i] = WriteTensor{Name: tt.name, DType: tt.dtype, Shape: tt.shape, Write: BytesWriter(tt.data)}
	}
	if err := WriteFile(path, wts, meta); err != nil {
		t.Fatal(err)
	}
}

var allDTypes = []DType{F32, F16, BF16, F64, I8, U8, I16, I32, I64, BOOL, F8E4M3, F8E5M2}

func checkTensors(t *testing.T, m *Model, ts []testTensor) {
	t.Helper()
	for _, tt := range ts {
		info, ok := m.Lookup(tt.name)
		if !ok {
			t.Fatalf("missing %s", tt.name)
		}
		if info.DType != tt.dtype || fmt.Sprint(info.Shape) != fmt.Sprint(tt.shape) || info.Size != int64(len(tt.data)) {
			t.Fatalf("%s: info %+v", tt.name, info)
		}
		raw, err := m.Raw(tt.name)
		if err != nil || !bytes.Equal(raw, tt.data) {
			t.Fatalf("%s: raw bytes differ (%v)", tt.name, err)
		}
		sec, err := m.Section(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(sec); err != nil || !bytes.Equal(b, tt.data) {
			t.Fatalf("%s: section bytes differ (%v)", tt.name, err)
		}
		got := make([]float32, len(tt.ref))
		if err := m.ReadFloat32(tt.name, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if float64(got[i]) != tt.ref[i] { // conversions are exact, so equality is required
				t.Fatalf("%s[%d] = %g, want %g", tt.name, i, got[i], tt.ref[i])
			}
		}
		if len(got) < 8 {
			continue
		}
		// A partial read in the middle.
		part := make([]float32, len(got)/2)
		if err := m.ReadFloat32At(tt.name, 3, part); err != nil {
			t.Fatal(err)
		}
		for i := range part {
			if part[i] != got[3+i] {
				t.Fatalf("%s: ReadFloat32At differs at %d", tt.name, i)
			}
		}
	}
}

func TestWriteReadSingleFile(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ts := makeTensors(r, allDTypes, "t")
	p := filepath.Join(t.TempDir(), "model.safetensors")
	writeTensors(t, p, ts, map[string]string{"format": "pt", "b<&>": "ü"})
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != len(ts) {
		t.Fatalf("%d tensors, want %d", m.Len(), len(ts))
	}
	checkTensors(t, m, ts)
	all := m.Tensors()
	for i := 1; i < len(all); i++ {
		if all[i].Offset < all[i-1].Offset+all[i-1].Size {
			t.Fatal("Tensors not ordered by offset")
		}
	}
	if md := m.FileMetadata(); md["format"] != "pt" || md["b<&>"] != "ü" {
		t.Errorf("metadata %v", md)
	}
	if err := m.ReadFloat32(ts[0].name, make([]float32, 1)); err == nil {
		t.Error("ReadFloat32 with a short destination succeeded")
	}
	if err := m.ReadFloat32At(ts[0].name, 1, make([]float32, len(ts[0].ref))); err == nil {
		t.Error("ReadFloat32At past the end succeeded")
	}
	if _, err := m.Raw("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Raw of a missing tensor: %v", err)
	}
	if err := m.ReleaseFile(p); err != nil {
		t.Fatal(err)
	}
	checkTensors(t, m, ts[:2]) // mapped again on demand
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Raw(ts[0].name); !errors.Is(err, ErrClosed) {
		t.Errorf("Raw after Close: %v", err)
	}
	// The data section starts 8-byte aligned.
	f, _ := os.ReadFile(p)
	if n := binary.LittleEndian.Uint64(f); (8+n)%8 != 0 {
		t.Errorf("header length %d leaves the data unaligned", n)
	}
}

func TestWriterRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.safetensors")
	four := BytesWriter(make([]byte, 4))
	cases := map[string][]WriteTensor{
		"short data":     {{Name: "a", DType: F32, Shape: []int64{2}, Write: four}},
		"long data":      {{Name: "a", DType: F32, Shape: []int64{0}, Write: four}},
		"duplicate":      {{Name: "a", DType: U8, Shape: []int64{4}, Write: four}, {Name: "a", DType: U8, Shape: []int64{4}, Write: four}},
		"bad dtype":      {{Name: "a", DType: Invalid, Shape: []int64{4}, Write: four}},
		"negative dim":   {{Name: "a", DType: U8, Shape: []int64{-4}, Write: four}},
		"reserved name":  {{Name: "__metadata__", DType: U8, Shape: []int64{4}, Write: four}},
		"nil write":      {{Name: "a", DType: U8, Shape: []int64{4}}},
		"producer error": {{Name: "a", DType: U8, Shape: []int64{4}, Write: func(io.Writer) error { return errors.New("boom") }}},
	}
	for name, ts := range cases {
		if err := WriteFile(p, ts, nil); err == nil {
			t.Errorf("%s: WriteFile succeeded", name)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("failed writes left files behind: %v", ents)
	}
}

// writeSharded writes ts split over n shards plus an index and returns the shard names.
func writeSharded(t *testing.T, dir string, ts []testTensor, n int) []string {
	t.Helper()
	wm := map[string]string{}
	var names []string
	var total int64
	for s := 0; s < n; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, n)
		names = append(names, name)
		var part []testTensor
		for i := s; i < len(ts); i += n {
			part = append(part, ts[i])
			wm[ts[i].name] = name
			total += int64(len(ts[i].data))
		}
		writeTensors(t, filepath.Join(dir, name), part, map[string]string{"format": "pt"})
	}
	if err := WriteIndex(filepath.Join(dir, IndexFileName), wm, total); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestShardedModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ts := makeTensors(r, allDTypes, "layers.")
	dir := t.TempDir()
	shards := writeSharded(t, dir, ts, 3)
	for _, path := range []string{dir, filepath.Join(dir, IndexFileName)} {
		m, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		checkTensors(t, m, ts)
		if got := len(m.Files()); got != 3 {
			t.Fatalf("%d files", got)
		}
		all := m.Tensors()
		for i := 1; i < len(all); i++ {
			a, b := all[i-1], all[i]
			if a.File > b.File || (a.File == b.File && a.Offset >= b.Offset) {
				t.Fatalf("Tensors not ordered by (file, offset): %s@%d before %s@%d", a.File, a.Offset, b.File, b.Offset)
			}
		}
		if filepath.Base(all[0].File) != shards[0] {
			t.Errorf("first tensor in %s", all[0].File)
		}
		if err := m.ReleaseFile(filepath.Join(dir, shards[1])); err != nil {
			t.Fatal(err)
		}
		checkTensors(t, m, ts)
		m.Close()
	}
	// Without the index, all *.safetensors files are read.
	os.Remove(filepath.Join(dir, IndexFileName))
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, m, ts)
	m.Close()
}

func TestFolderModes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ts := makeTensors(r, []DType{BF16, F32}, "w")
	dir := t.TempDir()
	writeTensors(t, filepath.Join(dir, "model.safetensors"), ts, nil)
	writeTensors(t, filepath.Join(dir, "other.safetensors"), ts, nil) // ignored: model.safetensors wins
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, m, ts)
	m.Close()

	dup := t.TempDir()
	writeTensors(t, filepath.Join(dup, "a.safetensors"), ts, nil)
	writeTensors(t, filepath.Join(dup, "b.safetensors"), ts[:1], nil)
	if _, err := Open(dup); err == nil || !strings.Contains(err.Error(), "in both") {
		t.Errorf("duplicate tensors across files: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no ") {
		t.Errorf("empty folder: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing path opened")
	}
}

func TestHostileIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	ts := makeTensors(r, []DType{BF16, F32}, "w")
	outside := t.TempDir()
	writeTensors(t, filepath.Join(outside, "evil.safetensors"), ts, nil)

	setup := func(t *testing.T, index string) string {
		dir := t.TempDir()
		writeTensors(t, filepath.Join(dir, "a.safetensors"), ts[:1], nil)
		writeTensors(t, filepath.Join(dir, "b.safetensors"), ts[1:], nil)
		writeTensors(t, filepath.Join(dir, "c.safetensors"), ts, nil)
		writeTemp(t, dir, IndexFileName, []byte(index))
		return dir
	}
	good := fmt.Sprintf(`{"metadata":{"total_size":1},"weight_map":{%q:"a.safetensors",%q:"b.safetensors"}}`, ts[0].name, ts[1].name)
	if m, err := Open(setup(t, good)); err != nil {
		t.Fatalf("good index: %v", err)
	} else {
		m.Close()
	}
	wm := func(entries string) string { return `{"weight_map":{` + entries + `}}` }
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	cases := []struct {
		name, index string
		want        []string
	}{
		{"dotdot", wm(q(ts[0].name) + `:"../../etc/passwd"`), []string{q(ts[0].name), "escapes"}},
		{"absolute", wm(q(ts[0].name) + `:"/etc/passwd"`), []string{"absolute"}},
		{"missing shard", wm(q(ts[0].name) + `:"a.safetensors",` + q(ts[1].name) + `:"d.safetensors"`), []string{q(ts[1].name), `"d.safetensors"`, "not found"}},
		{"absent in shard", wm(q(ts[0].name) + `:"a.safetensors",` + q(ts[1].name) + `:"b.safetensors","ghost":"a.safetensors"`), []string{`"ghost"`, "absent"}},
		{"unlisted in index", wm(q(ts[0].name) + `:"c.safetensors"`), []string{q(ts[1].name), "missing from weight_map"}},
		{"wrong shard", wm(q(ts[0].name) + `:"b.safetensors",` + q(ts[1].name) + `:"a.safetensors"`), []string{"weight_map says"}},
		{"tensor in unlisted file", wm(q(ts[1].name) + `:"b.safetensors",` + q(ts[0].name) + `:"b.safetensors"`), []string{q(ts[0].name), `absent from shard "b.safetensors"`}},
		{"invalid json", `{"weight_map":{`, []string{"invalid JSON"}},
		{"missing weight_map", `{"metadata":{}}`, []string{`missing field "weight_map"`}},
		{"empty weight_map", `{"weight_map":{}}`, []string{"empty"}},
		{"non-string shard", wm(q(ts[0].name) + `:3`), []string{"must be a string"}},
		{"duplicate key", wm(q(ts[0].name) + `:"a.safetensors",` + q(ts[0].name) + `:"a.safetensors"`), []string{"duplicate"}},
		{"not an object", `[]`, []string{"not a JSON object"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := setup(t, c.index)
			m, err := Open(dir)
			if err == nil {
				m.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, IndexFileName) {
				t.Errorf("error %q does not name the index", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %s", msg, w)
				}
			}
		})
	}
	t.Run("symlink escaping", func(t *testing.T) {
		dir := setup(t, wm(q(ts[0].name)+`:"link.safetensors",`+q(ts[1].name)+`:"link.safetensors"`))
		if err := os.Symlink(filepath.Join(outside, "evil.safetensors"), filepath.Join(dir, "link.safetensors")); err != nil {
			t.Skip("symlinks unsupported:", err)
		}
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "outside the model folder") {
			t.Errorf("symlink escape: %v", err)
		}
		// The same escape is refused when the folder is read without an index.
		os.Remove(filepath.Join(dir, IndexFileName))
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "outside the model folder") {
			t.Errorf("symlink escape without index: %v", err)
		}
	})
	t.Run("hub cache layout", func(t *testing.T) {
		repo := t.TempDir()
		blobs := filepath.Join(repo, "blobs")
		snap := filepath.Join(repo, "snapshots", "0123abcd")
		os.MkdirAll(blobs, 0o755)
		os.MkdirAll(snap, 0o755)
		writeTensors(t, filepath.Join(blobs, "5f1e"), ts, nil)
		if err := os.Symlink("../../blobs/5f1e", filepath.Join(snap, "model.safetensors")); err != nil {
			t.Skip("symlinks unsupported:", err)
		}
		m, err := Open(snap)
		if err != nil {
			t.Fatalf("hub snapshot: %v", err)
		}
		checkTensors(t, m, ts)
		m.Close()
		os.Remove(filepath.Join(snap, "model.safetensors"))
		os.Symlink(filepath.Join(outside, "evil.safetensors"), filepath.Join(snap, "model.safetensors"))
		if _, err := Open(snap); err == nil {
			t.Error("hub snapshot symlink outside blobs accepted")
		}
	})
}

func TestFileChangedAfterOpen(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	ts := makeTensors(r, []DType{F32}, "w")
	p := filepath.Join(t.TempDir(), "m.safetensors")
	writeTensors(t, p, ts, nil)
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(p, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Raw(ts[0].name); err == nil || !strings.Contains(err.Error(), "changed size") {
		t.Errorf("truncated file: %v", err)
	}
}

func TestConcurrentReads(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	ts := makeTensors(r, allDTypes, "c")
	dir := t.TempDir()
	writeSharded(t, dir, ts, 2)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				tt := ts[(g+k)%len(ts)]
				got := make([]float32, len(tt.ref))
				if err := m.ReadFloat32(tt.name, got); err != nil {
					errs <- err
					return
				}
				for i := range got {
					if float64(got[i]) != tt.ref[i] {
						errs <- fmt.Errorf("%s[%d] differs", tt.name, i)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestUnalignedTensors(t *testing.T) {
	// A 1-byte tensor first leaves every following tensor at an odd offset, which takes
	// the byte-wise decoding paths.
	r := rand.New(rand.NewPCG(15, 16))
	ts := makeTensors(r, []DType{F16, BF16, F32, F8E4M3, I32}, "u")
	one := testTensor{name: "pad", dtype: U8, shape: []int64{1}, data: []byte{9}, ref: []float64{9}}
	ts = append([]testTensor{one}, ts...)
	p := filepath.Join(t.TempDir(), "u.safetensors")
	writeTensors(t, p, ts, nil)
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, ti := range m.Tensors()[1:] {
		if ti.Offset%2 != 1 {
			t.Fatalf("%s at even offset %d", ti.Name, ti.Offset)
		}
	}
	checkTensors(t, m, ts)
}

// TestWriteOutputSafety: WriteIndex through a symbolic link writes the target and keeps the
// link; a read-only file is refused untouched (internal/safeout).
func TestWriteOutputSafety(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	os.WriteFile(target, []byte("old"), 0o600)
	link := filepath.Join(dir, IndexFileName)
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	wm := map[string]string{"a": "model-00001-of-00001.safetensors"}
	if err := WriteIndex(link, wm, 4); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link replaced (%v)", err)
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "weight_map") {
		t.Fatalf("target: %q", b)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o600 {
		t.Fatalf("target mode %v", fi.Mode())
	}
	ro := filepath.Join(dir, "ro.json")
	os.WriteFile(ro, []byte("keep"), 0o444)
	os.Chmod(ro, 0o444)
	if err := WriteIndex(ro, wm, 4); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only output: %v", err)
	}
	if b, _ := os.ReadFile(ro); string(b) != "keep" {
		t.Fatalf("read-only file changed: %q", b)
	}
}
