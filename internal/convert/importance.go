package convert

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/tq-project/tq/gguf"
)

// ImportanceSource supplies per-column importance weights (the mean squared input activation
// of every input column, as llama.cpp's imatrix holds them) for a GGUF tensor. expert is the
// index of the matrix inside a stacked 3-D tensor (ffn_*_exps), 0 for ordinary 2-D weights.
// The calibration stage implements it; IMatrix adapts llama.cpp imatrix files.
type ImportanceSource interface {
	Importance(ggufTensorName string, expert int) ([]float32, bool)
}

// IMatrix is a llama.cpp importance matrix (GGUF imatrix or legacy .dat), ready for the
// quantizer: per tensor, per matrix, the mean of squared activations of each column.
type IMatrix struct {
	// Path is the file it was read from.
	Path string
	// Datasets lists imatrix.datasets (GGUF) or the trailing dataset name (.dat).
	Datasets []string
	// ChunkCount is imatrix.chunk_count (GGUF) or the trailing last_chunk (.dat), 0 if absent.
	ChunkCount uint32
	// ChunkSize is imatrix.chunk_size (GGUF), 0 if absent.
	ChunkSize uint32
	entries   map[string]*imEntry
}

type imEntry struct {
	values []float32 // nmat * ne0 (mean squared activations)
	nmat   int       // number of matrices (experts), 0 when unknown (.dat)
}

const maxImatrixEntries = 1 << 20

// Len is the number of tensors with importance data.
func (m *IMatrix) Len() int { return len(m.entries) }

// Names lists the tensors with importance data, sorted.
func (m *IMatrix) Names() []string {
	out := make([]string, 0, len(m.entries))
	for k := range m.entries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Importance implements ImportanceSource for GGUF imatrix files, whose entries know their
// number of matrices. For .dat entries use ImportanceFor.
func (m *IMatrix) Importance(name string, expert int) ([]float32, bool) {
	e := m.entries[name]
	if e == nil || e.nmat == 0 || expert < 0 || expert >= e.nmat {
		return nil, false
	}
	n := len(e.values) / e.nmat
	return e.values[expert*n : (expert+1)*n], true
}

// ImportanceFor returns the weights of matrix expert of a tensor whose rows have cols
// elements. ok is false when the tensor has no entry; an error is returned when the entry's
// size does not match the tensor (llama-quantize treats that as fatal).
func (m *IMatrix) ImportanceFor(name string, expert, cols int) ([]float32, bool, error) {
	e := m.entries[name]
	if e == nil {
		return nil, false, nil
	}
	if cols <= 0 || len(e.values)%cols != 0 || (e.nmat != 0 && len(e.values) != e.nmat*cols) {
		return nil, false, fmt.Errorf("imatrix %s: entry %s has %d values, not a multiple of the tensor's row length %d", m.Path, name, len(e.values), cols)
	}
	nmat := len(e.values) / cols
	if expert < 0 || expert >= nmat {
		return nil, false, fmt.Errorf("imatrix %s: entry %s has %d matrices, tensor needs matrix %d", m.Path, name, nmat, expert)
	}
	return e.values[expert*cols : (expert+1)*cols], true, nil
}

// Filter keeps only the entries whose names contain include (if not empty) and drops those
// containing exclude (if not empty), like llama-quantize --include-weights/--exclude-weights.
func (m *IMatrix) Filter(include, exclude []string) {
	for name := range m.entries {
		keep := len(include) == 0
		for _, s := range include {
			if strings.Contains(name, s) {
				keep = true
			}
		}
		for _, s := range exclude {
			if strings.Contains(name, s) {
				keep = false
			}
		}
		if !keep {
			delete(m.entries, name)
		}
	}
}

// LoadIMatrix reads a llama.cpp importance matrix: a GGUF imatrix (general.type "imatrix",
// tensors NAME.in_sum2 and NAME.counts) or, when the file is not GGUF, the legacy .dat format.
func LoadIMatrix(path string) (*IMatrix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err == nil && string(magic[:]) == gguf.Magic {
		return loadIMatrixGGUF(path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	if fi.Size() > 4<<30 {
		return nil, fmt.Errorf("imatrix %s: %d bytes is too large for a legacy .dat imatrix", path, fi.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	return ParseIMatrixDat(path, b)
}

func loadIMatrixGGUF(path string) (*IMatrix, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer m.Close()
	md := m.Metadata()
	im := &IMatrix{Path: path, entries: map[string]*imEntry{}}
	if t, err := md.GetString("general.type"); err == nil && t != "imatrix" {
		return nil, fmt.Errorf("imatrix %s: general.type is %q, not \"imatrix\"", path, t)
	}
	// llama-quantize requires these three keys
	ds, err := md.GetStringArray("imatrix.datasets")
	if err != nil {
		return nil, fmt.Errorf("imatrix %s: missing imatrix metadata: %w", path, err)
	}
	im.Datasets = ds
	cc, err := md.GetUint("imatrix.chunk_count")
	if err != nil || cc > math.MaxUint32 {
		return nil, fmt.Errorf("imatrix %s: missing or bad imatrix.chunk_count", path)
	}
	cs, err := md.GetUint("imatrix.chunk_size")
	if err != nil || cs > math.MaxUint32 {
		return nil, fmt.Errorf("imatrix %s: missing or bad imatrix.chunk_size", path)
	}
	im.ChunkCount, im.ChunkSize = uint32(cc), uint32(cs)

	readF32 := func(t gguf.ModelTensor) ([]float32, error) {
		if t.Type != gguf.TypeF32 {
			return nil, fmt.Errorf("imatrix %s: tensor %s has type %s, want f32", path, t.Name, t.Type)
		}
		b, err := m.TensorData(t.Name)
		if err != nil {
			return nil, fmt.Errorf("imatrix %s: %w", path, err)
		}
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	}
	tensors := m.Tensors()
	byName := map[string]gguf.ModelTensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	for _, t := range tensors {
		name, ok := strings.CutSuffix(t.Name, ".in_sum2")
		if !ok {
			continue
		}
		ct, ok := byName[name+".counts"]
		if !ok {
			return nil, fmt.Errorf("imatrix %s: %s has no matching %s.counts", path, t.Name, name)
		}
		sums, err := readF32(t)
		if err != nil {
			return nil, err
		}
		counts, err := readF32(ct)
		if err != nil {
			return nil, err
		}
		if len(counts) == 0 || len(sums)%len(counts) != 0 || len(sums) == 0 {
			return nil, fmt.Errorf("imatrix %s: %s has %d sums for %d counts", path, name, len(sums), len(counts))
		}
		ne0 := len(sums) / len(counts)
		vals := make([]float32, len(sums))
		for j, c := range counts {
			if math.IsNaN(float64(c)) || c < 0 {
				return nil, fmt.Errorf("imatrix %s: %s has a bad count %v", path, name, c)
			}
			n := math.Round(float64(c))
			for i := 0; i < ne0; i++ {
				if n == 0 {
					vals[j*ne0+i] = 1
				} else {
					vals[j*ne0+i] = float32(float64(sums[j*ne0+i]) / n)
				}
			}
		}
		if err := checkFinite(path, name, vals); err != nil {
			return nil, err
		}
		im.entries[name] = &imEntry{values: vals, nmat: len(counts)}
	}
	if len(im.entries) == 0 {
		return nil, fmt.Errorf("imatrix %s: no *.in_sum2 tensors", path)
	}
	return im, nil
}

func checkFinite(path, name string, vals []float32) error {
	for i, v := range vals {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v < 0 {
			return fmt.Errorf("imatrix %s: entry %s has a non-finite or negative value %v at %d", path, name, v, i)
		}
	}
	return nil
}

// ParseIMatrixDat parses the legacy llama.cpp imatrix format (little-endian):
// int32 n_entries; per entry int32 name_len, name, int32 ncall, int32 nval, nval float32
// (mean·ncall); optional trailer int32 last_chunk, int32 dataset_len, dataset bytes.
func ParseIMatrixDat(path string, b []byte) (*IMatrix, error) {
	r := bytes.NewReader(b)
	bad := func(format string, a ...any) error {
		off := len(b) - r.Len()
		return fmt.Errorf("imatrix %s: offset %d: %s", path, off, fmt.Sprintf(format, a...))
	}
	readI32 := func(what string) (int32, error) {
		var v int32
		if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
			return 0, bad("truncated %s", what)
		}
		return v, nil
	}
	n, err := readI32("entry count")
	if err != nil {
		return nil, err
	}
	if n < 0 || n > maxImatrixEntries {
		return nil, bad("entry count %d out of range", n)
	}
	im := &IMatrix{Path: path, entries: map[string]*imEntry{}}
	for i := int32(0); i < n; i++ {
		nl, err := readI32("name length")
		if err != nil {
			return nil, err
		}
		if nl <= 0 || nl > 4096 || int(nl) > r.Len() {
			return nil, bad("entry %d: name length %d out of range", i, nl)
		}
		nb := make([]byte, nl)
		io.ReadFull(r, nb)
		name := string(nb)
		ncall, err := readI32("ncall of " + name)
		if err != nil {
			return nil, err
		}
		nval, err := readI32("nval of " + name)
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
		if ncall < 0 {
			return nil, bad("entry %s: negative ncall %d", name, ncall)
		}
		if ncall > 0 {
			for j := range vals {
				vals[j] /= float32(ncall)
			}
		}
		if err := checkFinite(path, name, vals); err != nil {
			return nil, err
		}
		if _, dup := im.entries[name]; dup {
			return nil, bad("duplicate entry %s", name)
		}
		im.entries[name] = &imEntry{values: vals}
	}
	if r.Len() >= 4 {
		lc, _ := readI32("last chunk")
		if lc > 0 {
			im.ChunkCount = uint32(lc)
		}
		if r.Len() >= 4 {
			dl, _ := readI32("dataset length")
			if dl < 0 || int(dl) > r.Len() {
				return nil, bad("dataset name length %d out of range", dl)
			}
			db := make([]byte, dl)
			io.ReadFull(r, db)
			if dl > 0 {
				im.Datasets = []string{string(db)}
			}
		}
	}
	if len(im.entries) == 0 {
		return nil, errors.New("imatrix " + path + ": no entries")
	}
	return im, nil
}

// imatrixProvenance returns the quantize.imatrix.* keys llama-quantize writes.
func imatrixProvenance(im *IMatrix) gguf.Metadata {
	var md gguf.Metadata
	trunc := func(s string) string {
		if len(s) > 127 {
			return s[:127]
		}
		return s
	}
	md.Set("quantize.imatrix.file", gguf.String(trunc(im.Path)))
	if len(im.Datasets) > 0 {
		md.Set("quantize.imatrix.dataset", gguf.String(trunc(im.Datasets[0])))
	}
	md.Set("quantize.imatrix.entries_count", gguf.Uint32(uint32(im.Len())))
	if im.ChunkCount > 0 {
		md.Set("quantize.imatrix.chunks_count", gguf.Uint32(im.ChunkCount))
	}
	return md
}
