package imatrix

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Means is a llama.cpp importance matrix (GGUF imatrix or legacy .dat) as llama-quantize uses
// it, ready for the quantizer: per tensor, per matrix, the mean of squared activations of each
// column. internal/convert takes its importance weights from it; verify its output-error
// estimate.
type Means struct {
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

// Len is the number of tensors with importance data.
func (m *Means) Len() int { return len(m.entries) }

// Names lists the tensors with importance data, sorted.
func (m *Means) Names() []string {
	out := make([]string, 0, len(m.entries))
	for k := range m.entries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Importance returns the weights of matrix expert of a tensor (internal/convert's
// ImportanceSource) for GGUF imatrix files, whose entries know their number of matrices. For
// .dat entries use ImportanceFor.
func (m *Means) Importance(name string, expert int) ([]float32, bool) {
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
func (m *Means) ImportanceFor(name string, expert, cols int) ([]float32, bool, error) {
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
func (m *Means) Filter(include, exclude []string) {
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

// LoadMeans reads a llama.cpp importance matrix with Load (a GGUF imatrix, or the legacy .dat
// format when the file is not GGUF) and turns the sums into means. A GGUF imatrix must carry
// imatrix.datasets, chunk_count and chunk_size, as llama-quantize requires.
func LoadMeans(path string) (*Means, error) {
	f, err := Load(path)
	if err != nil {
		return nil, err
	}
	if f.Legacy {
		return fromDat(path, f)
	}
	if !f.HasDatasets || !f.HasChunkCount || !f.HasChunkSize {
		return nil, fmt.Errorf("imatrix %s: missing imatrix metadata (imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size are required)", path)
	}
	if f.ChunkCount > math.MaxUint32 || f.ChunkSize > math.MaxUint32 {
		return nil, fmt.Errorf("imatrix %s: bad imatrix.chunk_count %d or chunk_size %d", path, f.ChunkCount, f.ChunkSize)
	}
	im := &Means{Path: path, Datasets: f.Datasets, ChunkCount: uint32(f.ChunkCount), ChunkSize: uint32(f.ChunkSize),
		entries: make(map[string]*imEntry, len(f.Entries))}
	for _, e := range f.Entries {
		ne0 := len(e.Sums) / len(e.Counts)
		vals := make([]float32, len(e.Sums))
		for j, c := range e.Counts {
			n := math.Round(float64(c))
			for i := 0; i < ne0; i++ {
				if n == 0 {
					vals[j*ne0+i] = 1
				} else {
					vals[j*ne0+i] = float32(float64(e.Sums[j*ne0+i]) / n)
				}
			}
		}
		if err := checkFinite(path, e.Name, vals); err != nil {
			return nil, err
		}
		im.entries[e.Name] = &imEntry{values: vals, nmat: len(e.Counts)}
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

// ParseDatMeans parses the legacy llama.cpp imatrix format (ParseDat) into per-column means
// (value / ncall).
func ParseDatMeans(path string, b []byte) (*Means, error) {
	f, err := ParseDat(b)
	if err != nil {
		return nil, fmt.Errorf("imatrix %s: %w", path, err)
	}
	return fromDat(path, f)
}

func fromDat(path string, f *File) (*Means, error) {
	im := &Means{Path: path, entries: make(map[string]*imEntry, len(f.Entries))}
	if f.HasDatasets {
		im.Datasets = f.Datasets
	}
	if f.HasChunkCount && f.ChunkCount <= math.MaxUint32 {
		im.ChunkCount = uint32(f.ChunkCount)
	}
	for _, e := range f.Entries {
		vals := append([]float32(nil), e.Sums...)
		if e.NCall > 0 {
			for j := range vals {
				vals[j] /= float32(e.NCall)
			}
		}
		if err := checkFinite(path, e.Name, vals); err != nil {
			return nil, err
		}
		im.entries[e.Name] = &imEntry{values: vals}
	}
	return im, nil
}
