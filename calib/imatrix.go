package calib

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/imatrix"
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
// GGUF; parsed by internal/imatrix) into statistics: SumSq from in_sum2 (or mean·count for
// .dat), Counts from counts, MaxAbs unknown (NaN).
func LoadIMatrix(path string, o *ImportOptions) (*Stats, error) {
	f, err := imatrix.Load(path)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	var s *Stats
	if f.Legacy {
		s, err = statsFromDat(f, o)
	} else {
		s, err = statsFromGGUF(f)
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

// checkName applies the statistics file's name limit to an imported entry.
func checkName(name string) error {
	if len(name) > maxStatsNameLen {
		return fmt.Errorf("entry name of %d bytes is longer than %d", len(name), maxStatsNameLen)
	}
	return nil
}

func statsFromGGUF(f *imatrix.File) (*Stats, error) {
	s := NewStats()
	if f.HasDatasets {
		s.Meta.Datasets = f.Datasets
	}
	if len(f.Entries) > maxStatsTensors {
		return nil, fmt.Errorf("%d entries is too many", len(f.Entries))
	}
	for _, e := range f.Entries {
		if err := checkName(e.Name); err != nil {
			return nil, err
		}
		if len(e.Counts) > maxStatsMat {
			return nil, fmt.Errorf("entry %s: %d matrices is too many", e.Name, len(e.Counts))
		}
		ts := &TensorStats{Name: e.Name, NMat: len(e.Counts), Cols: len(e.Sums) / len(e.Counts),
			Counts: make([]int64, len(e.Counts)), SumSq: make([]float64, len(e.Sums)),
			MaxAbs: unknownMax(len(e.Sums)), Synthetic: make([]bool, len(e.Counts))}
		for j, c := range e.Counts {
			ts.Counts[j] = int64(math.Round(float64(c)))
		}
		for i, v := range e.Sums {
			ts.SumSq[i] = float64(v)
		}
		s.Tensors[e.Name] = ts
	}
	return s, nil
}

// ParseIMatrixDat parses llama.cpp's legacy imatrix format (see WriteIMatrixDat). Token counts
// are ncall · chunk size and sums of squares value · chunk size (value = mean · ncall), so
// means are preserved exactly as llama-quantize computes them (value / ncall).
func ParseIMatrixDat(b []byte, o *ImportOptions) (*Stats, error) {
	f, err := imatrix.ParseDat(b)
	if err != nil {
		return nil, err
	}
	return statsFromDat(f, o)
}

func statsFromDat(f *imatrix.File, o *ImportOptions) (*Stats, error) {
	s := NewStats()
	if f.HasDatasets {
		s.Meta.Datasets = f.Datasets
	}
	cs := 512
	if o != nil && o.ChunkSize > 0 {
		cs = o.ChunkSize
	}
	for _, e := range f.Entries {
		if err := checkName(e.Name); err != nil {
			return nil, err
		}
		cols, nmat := len(e.Sums), 1
		if o != nil && o.Shape != nil {
			if c, m, ok := o.Shape(e.Name); ok && c > 0 && m > 0 && c*m == len(e.Sums) {
				cols, nmat = c, m
			}
		}
		ts := &TensorStats{Name: e.Name, Cols: cols, NMat: nmat, Counts: make([]int64, nmat),
			SumSq: make([]float64, len(e.Sums)), MaxAbs: unknownMax(len(e.Sums)), Synthetic: make([]bool, nmat)}
		count := int64(e.NCall) * int64(cs)
		scale := float64(cs)
		if e.NCall == 0 {
			// no calls recorded: keep the values as means over one pseudo-row
			count, scale = 1, 1
		}
		for j := range ts.Counts {
			ts.Counts[j] = count
		}
		for j, v := range e.Sums {
			ts.SumSq[j] = float64(v) * scale
		}
		s.Tensors[e.Name] = ts
	}
	return s, nil
}
