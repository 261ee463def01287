package calib

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/gguf"
)

// llama.cpp importance-matrix interchange (facts doc §3.2; tools/imatrix/imatrix.cpp,
// common/imatrix-loader.cpp). Both formats carry, per weight, the sums of squared input
// activations per column; the GGUF format also the per-matrix token counts. tq's statistics map
// onto them directly: in_sum2 = float32(SumSq), counts = float32(Counts).

// IMatrixOptions control the export of statistics as a llama.cpp importance matrix.
type IMatrixOptions struct {
	// Datasets are written as imatrix.datasets (GGUF) / the trailing dataset name (.dat);
	// empty uses Meta.Datasets.
	Datasets []string
	// ChunkSize is imatrix.chunk_size (tokens per chunk, llama-imatrix's n_ctx); 0 uses 512.
	// The chunk count is ceil(max token count / ChunkSize), as llama-imatrix computes it.
	ChunkSize int
	// SkipSynthetic leaves the statistics of never-routed experts (the uncovered-expert
	// fallback) out: their counts are written as 0, as llama-imatrix would have them.
	SkipSynthetic bool
}

func (o *IMatrixOptions) chunkSize() int {
	if o == nil || o.ChunkSize <= 0 {
		return 512
	}
	return o.ChunkSize
}

func (o *IMatrixOptions) datasets(s *Stats) []string {
	if o != nil && len(o.Datasets) > 0 {
		return o.Datasets
	}
	if len(s.Meta.Datasets) > 0 {
		return s.Meta.Datasets
	}
	return []string{"tq-calibrate"}
}

// exportCounts returns the counts written for t (synthetic matrices zeroed when asked).
func exportCounts(t *TensorStats, o *IMatrixOptions) []int64 {
	c := append([]int64(nil), t.Counts...)
	if o != nil && o.SkipSynthetic {
		for e, syn := range t.Synthetic {
			if syn {
				c[e] = 0
			}
		}
	}
	return c
}

func chunkCount(s *Stats, o *IMatrixOptions) uint32 {
	var mx int64
	for _, t := range s.Tensors {
		for _, c := range exportCounts(t, o) {
			mx = max(mx, c)
		}
	}
	cs := int64(o.chunkSize())
	return uint32(min((mx+cs-1)/cs, math.MaxInt32))
}

// WriteIMatrixGGUF writes s as a llama.cpp GGUF imatrix (the default format of llama-imatrix):
// general.type "imatrix", imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size, and
// per weight W (sorted by name) the F32 tensors W.in_sum2 {cols, nmat} and W.counts {1, nmat}
// (1-D when nmat is 1, as ggml writes them). The file is written atomically.
func WriteIMatrixGGUF(path string, s *Stats, o *IMatrixOptions) error {
	w, err := gguf.Create(path, gguf.WriterOptions{NoManifest: true})
	if err != nil {
		return fmt.Errorf("calib: imatrix: %w", err)
	}
	w.Metadata.Set("general.type", gguf.String("imatrix"))
	w.Metadata.Set("imatrix.datasets", gguf.Array(o.datasets(s)))
	w.Metadata.Set("imatrix.chunk_count", gguf.Uint32(chunkCount(s, o)))
	w.Metadata.Set("imatrix.chunk_size", gguf.Uint32(uint32(o.chunkSize())))
	names := s.Names()
	for _, name := range names {
		t := s.Tensors[name]
		if len(name)+len(".in_sum2") > gguf.MaxNameLen {
			w.Abort()
			return fmt.Errorf("calib: imatrix: tensor name %q is too long for llama.cpp (%d bytes max with the .in_sum2 suffix)", name, gguf.MaxNameLen)
		}
		sd, cd := []uint64{uint64(t.Cols)}, []uint64{1}
		if t.NMat > 1 {
			sd = append(sd, uint64(t.NMat))
			cd = append(cd, uint64(t.NMat))
		}
		if err := w.AddTensor(name+".in_sum2", sd, gguf.TypeF32); err != nil {
			w.Abort()
			return fmt.Errorf("calib: imatrix: %w", err)
		}
		if err := w.AddTensor(name+".counts", cd, gguf.TypeF32); err != nil {
			w.Abort()
			return fmt.Errorf("calib: imatrix: %w", err)
		}
	}
	for _, name := range names {
		t := s.Tensors[name]
		counts := exportCounts(t, o)
		b := make([]byte, 4*len(t.SumSq))
		for i, v := range t.SumSq {
			if counts[i/t.Cols] == 0 {
				v = 0
			}
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
		if err := w.WriteTensorData(name+".in_sum2", b); err != nil {
			w.Abort()
			return fmt.Errorf("calib: imatrix: %w", err)
		}
		cb := make([]byte, 4*len(counts))
		for i, c := range counts {
			binary.LittleEndian.PutUint32(cb[4*i:], math.Float32bits(float32(c)))
		}
		if err := w.WriteTensorData(name+".counts", cb); err != nil {
			w.Abort()
			return fmt.Errorf("calib: imatrix: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("calib: imatrix: %w", err)
	}
	return nil
}

// WriteIMatrixDat writes s in llama.cpp's legacy imatrix format (llama-imatrix
// --output-format dat), little-endian: int32 n_entries; per entry (sorted by name, entries
// without any rows skipped) int32 name_len, name, int32 ncall = ceil(max count / chunk size),
// int32 nval, nval float32 values (sum/count)·ncall computed in float32 as llama.cpp does
// (matrices with count 0 store 1·ncall); then int32 chunk count, int32 dataset length, dataset.
func WriteIMatrixDat(w io.Writer, s *Stats, o *IMatrixOptions) error {
	le := binary.LittleEndian
	var buf bytes.Buffer
	i32 := func(v int32) { binary.Write(&buf, le, v) }
	var names []string
	for _, name := range s.Names() {
		for _, c := range exportCounts(s.Tensors[name], o) {
			if c > 0 {
				names = append(names, name)
				break
			}
		}
	}
	cs := int64(o.chunkSize())
	i32(int32(len(names)))
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	for _, name := range names {
		buf.Reset()
		t := s.Tensors[name]
		counts := exportCounts(t, o)
		var mx int64
		for _, c := range counts {
			mx = max(mx, c)
		}
		ncall := int32(min((mx+cs-1)/cs, math.MaxInt32))
		nval := t.Cols * t.NMat
		if nval > math.MaxInt32 {
			return fmt.Errorf("calib: imatrix: tensor %s has too many values for the .dat format", name)
		}
		i32(int32(len(name)))
		buf.WriteString(name)
		i32(ncall)
		i32(int32(nval))
		for i, v := range t.SumSq {
			count := float32(counts[i/t.Cols])
			value := float32(v)
			if count == 0 {
				value, count = 1, 1
			}
			binary.Write(&buf, le, math.Float32bits((value/count)*float32(ncall)))
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	buf.Reset()
	i32(int32(chunkCount(s, o)))
	ds := o.datasets(s)[0]
	i32(int32(len(ds)))
	buf.WriteString(ds)
	_, err := w.Write(buf.Bytes())
	return err
}

// SaveIMatrix writes s as a llama.cpp imatrix: the legacy format when path ends in ".dat",
// else GGUF.
func SaveIMatrix(path string, s *Stats, o *IMatrixOptions) error {
	if strings.EqualFold(filepath.Ext(path), ".dat") {
		return writeAtomic(path, func(w io.Writer) error { return WriteIMatrixDat(w, s, o) })
	}
	return WriteIMatrixGGUF(path, s, o)
}

// ImportOptions control reading a llama.cpp imatrix.
type ImportOptions struct {
	// ChunkSize converts the legacy format's per-entry call counts into token counts
	// (count = ncall · ChunkSize, as llama-imatrix does when it loads a .dat); 0 uses the
	// file's trailing chunk information when possible, else 512.
	ChunkSize int
	// Shape, when set, returns the row length and matrix count of a weight so that legacy
	// entries of stacked expert tensors (which carry only nval = cols·nmat) can be split per
	// expert. Without it such an entry becomes one matrix of nval columns.
	Shape func(name string) (cols, nmat int, ok bool)
}

// LoadIMatrix reads a llama.cpp importance matrix (GGUF, or legacy .dat when the file is not
// GGUF) into statistics: SumSq from in_sum2 (or mean·count for .dat), Counts from counts,
// MaxAbs unknown (NaN).
func LoadIMatrix(path string, o *ImportOptions) (*Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("calib: imatrix: %w", err)
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	var s *Stats
	if err == nil && string(magic[:]) == gguf.Magic {
		s, err = loadIMatrixGGUF(path)
	} else {
		var b []byte
		fi, serr := os.Stat(path)
		if serr != nil {
			return nil, fmt.Errorf("calib: imatrix: %w", serr)
		}
		if fi.Size() > 4<<30 {
			return nil, fmt.Errorf("calib: imatrix %s: %d bytes is too large for a legacy imatrix", path, fi.Size())
		}
		if b, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("calib: imatrix: %w", err)
		}
		s, err = ParseIMatrixDat(b, o)
	}
	if err != nil {
		return nil, fmt.Errorf("calib: imatrix %s: %w", path, err)
	}
	s.Meta.Imported = path
	return s, nil
}

func unknownMax(n int) []float32 {
	m := make([]float32, n)
	for i := range m {
		m[i] = float32(math.NaN())
	}
	return m
}

func loadIMatrixGGUF(path string) (*Stats, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	md := m.Metadata()
	if t, err := md.GetString("general.type"); err == nil && t != "imatrix" {
		return nil, fmt.Errorf("general.type is %q, not \"imatrix\"", t)
	}
	s := NewStats()
	if ds, err := md.GetStringArray("imatrix.datasets"); err == nil {
		s.Meta.Datasets = append([]string(nil), ds...)
	}
	readF32 := func(t gguf.ModelTensor) ([]float32, error) {
		if t.Type != gguf.TypeF32 {
			return nil, fmt.Errorf("tensor %s has type %s, want f32", t.Name, t.Type)
		}
		b, err := m.TensorData(t.Name)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	}
	byName := map[string]gguf.ModelTensor{}
	for _, t := range m.Tensors() {
		byName[t.Name] = t
	}
	for _, t := range m.Tensors() {
		name, ok := strings.CutSuffix(t.Name, ".in_sum2")
		if !ok {
			if base, ok := strings.CutSuffix(t.Name, ".counts"); ok {
				if _, ok := byName[base+".in_sum2"]; !ok {
					return nil, fmt.Errorf("%s has no matching %s.in_sum2", t.Name, base)
				}
			}
			continue
		}
		ct, ok := byName[name+".counts"]
		if !ok {
			return nil, fmt.Errorf("%s has no matching %s.counts", t.Name, name)
		}
		sums, err := readF32(t)
		if err != nil {
			return nil, err
		}
		counts, err := readF32(ct)
		if err != nil {
			return nil, err
		}
		if len(counts) == 0 || len(sums) == 0 || len(sums)%len(counts) != 0 || len(counts) > maxStatsMat {
			return nil, fmt.Errorf("entry %s: %d sums do not split into %d matrices", name, len(sums), len(counts))
		}
		ts := &TensorStats{Name: name, NMat: len(counts), Cols: len(sums) / len(counts),
			Counts: make([]int64, len(counts)), SumSq: make([]float64, len(sums)),
			MaxAbs: unknownMax(len(sums)), Synthetic: make([]bool, len(counts))}
		for j, c := range counts {
			if !(c >= 0) || c > 1e18 {
				return nil, fmt.Errorf("entry %s: bad count %v for matrix %d", name, c, j)
			}
			ts.Counts[j] = int64(math.Round(float64(c)))
		}
		for i, v := range sums {
			if !(v >= 0) || math.IsInf(float64(v), 1) {
				return nil, fmt.Errorf("entry %s: sum of squares %d is %v", name, i, v)
			}
			ts.SumSq[i] = float64(v)
		}
		s.Tensors[name] = ts
	}
	if len(s.Tensors) == 0 {
		return nil, fmt.Errorf("no *.in_sum2 tensors")
	}
	return s, nil
}

// ParseIMatrixDat parses llama.cpp's legacy imatrix format (see WriteIMatrixDat). Token counts
// are ncall · chunk size and sums of squares value · chunk size (value = mean · ncall), so
// means are preserved exactly as llama-quantize computes them (value / ncall).
func ParseIMatrixDat(b []byte, o *ImportOptions) (*Stats, error) {
	r := bytes.NewReader(b)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("offset %d: %s", len(b)-r.Len(), fmt.Sprintf(format, a...))
	}
	i32 := func(what string) (int32, error) {
		var v int32
		if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
			return 0, bad("truncated %s", what)
		}
		return v, nil
	}
	n, err := i32("entry count")
	if err != nil {
		return nil, err
	}
	if n < 1 || n > maxStatsTensors {
		return nil, bad("entry count %d out of range", n)
	}
	type raw struct {
		name  string
		ncall int32
		vals  []float32
	}
	var entries []raw
	for i := int32(0); i < n; i++ {
		nl, err := i32("name length")
		if err != nil {
			return nil, err
		}
		if nl <= 0 || nl > maxStatsNameLen || int(nl) > r.Len() {
			return nil, bad("entry %d: name length %d out of range", i, nl)
		}
		nb := make([]byte, nl)
		io.ReadFull(r, nb)
		name := string(nb)
		ncall, err := i32("ncall of " + name)
		if err != nil {
			return nil, err
		}
		if ncall < 0 {
			return nil, bad("entry %s: negative ncall %d", name, ncall)
		}
		nval, err := i32("nval of " + name)
		if err != nil {
			return nil, err
		}
		if nval <= 0 || int64(nval)*4 > int64(r.Len()) {
			return nil, bad("entry %s: %d values do not fit the file", name, nval)
		}
		vals := make([]float32, nval)
		if err := binary.Read(r, binary.LittleEndian, vals); err != nil {
			return nil, bad("entry %s: truncated values", name)
		}
		for j, v := range vals {
			if !(v >= 0) || math.IsInf(float64(v), 1) {
				return nil, bad("entry %s: value %d is %v", name, j, v)
			}
		}
		entries = append(entries, raw{name, ncall, vals})
	}
	s := NewStats()
	if r.Len() >= 4 {
		lc, _ := i32("chunk count")
		_ = lc
		if r.Len() >= 4 {
			dl, _ := i32("dataset length")
			if dl < 0 || int(dl) > r.Len() {
				return nil, bad("dataset name length %d out of range", dl)
			}
			db := make([]byte, dl)
			io.ReadFull(r, db)
			if dl > 0 {
				s.Meta.Datasets = []string{string(db)}
			}
		}
	}
	cs := 512
	if o != nil && o.ChunkSize > 0 {
		cs = o.ChunkSize
	}
	for _, e := range entries {
		if _, dup := s.Tensors[e.name]; dup {
			return nil, fmt.Errorf("duplicate entry %s", e.name)
		}
		cols, nmat := len(e.vals), 1
		if o != nil && o.Shape != nil {
			if c, m, ok := o.Shape(e.name); ok && c > 0 && m > 0 && c*m == len(e.vals) {
				cols, nmat = c, m
			}
		}
		ts := &TensorStats{Name: e.name, Cols: cols, NMat: nmat, Counts: make([]int64, nmat),
			SumSq: make([]float64, len(e.vals)), MaxAbs: unknownMax(len(e.vals)), Synthetic: make([]bool, nmat)}
		count := int64(e.ncall) * int64(cs)
		for j := range ts.Counts {
			ts.Counts[j] = count
		}
		for j, v := range e.vals {
			ts.SumSq[j] = float64(v) * float64(cs)
		}
		if e.ncall == 0 {
			// no calls recorded: keep the values as means over one pseudo-row
			for j := range ts.Counts {
				ts.Counts[j] = 1
			}
			for j, v := range e.vals {
				ts.SumSq[j] = float64(v)
			}
		}
		s.Tensors[e.name] = ts
	}
	return s, nil
}
