// Package imatrix reads llama.cpp importance-matrix files, as llama-imatrix writes them: the
// GGUF format (general.type "imatrix", tensors NAME.in_sum2 and NAME.counts) and the legacy
// .dat format. Load returns the stored numbers as they are (the calibration stage reads its
// statistics from them); LoadMeans turns them into the per-column means llama-quantize uses as
// importance (the converter and verify). Files are untrusted: every size is checked against
// the data present before anything is allocated, and every error names the file, offset or
// entry.
package imatrix

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/boundedread"
)

// Entry is one tensor's statistics as stored.
type Entry struct {
	Name string
	// GGUF files: Sums is in_sum2 (Σx² per column, the matrices of a stacked expert tensor
	// one after another) and Counts the rows accumulated per matrix; len(Sums) is a multiple
	// of len(Counts). Legacy .dat files: Sums holds the stored values (mean·ncall per column),
	// Counts is nil and NCall is the number of calls.
	Sums   []float32
	Counts []float32
	NCall  int32
}

// File is a parsed imatrix file.
type File struct {
	// Legacy is true for the .dat format.
	Legacy bool
	// Entries in file order; names are unique.
	Entries []Entry
	// Datasets is imatrix.datasets (GGUF) or the trailing dataset name (.dat), if present.
	Datasets    []string
	HasDatasets bool
	// ChunkCount is imatrix.chunk_count (GGUF) or the .dat trailer's last_chunk; ChunkSize is
	// imatrix.chunk_size (GGUF only). Has* say whether the file carries them.
	ChunkCount, ChunkSize       uint64
	HasChunkCount, HasChunkSize bool
}

// Limits on untrusted files.
const (
	MaxEntries  = 1 << 22
	MaxNameLen  = 4096
	MaxDatBytes = 4 << 30 // a legacy file is read into memory
	maxCount    = 1e18
)

// Load reads path: a GGUF imatrix, or the legacy format when the file is not GGUF. path must
// be a regular file (or a symlink to one): a FIFO or a device is refused without blocking.
// A GGUF imatrix is mapped; a legacy one is read whole, at most MaxDatBytes.
func Load(path string) (*File, error) {
	f, st, err := boundedread.Open(path, "imatrix")
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err == nil && string(magic[:]) == gguf.Magic {
		return ReadGGUF(path)
	}
	if st.Size() > MaxDatBytes {
		return nil, fmt.Errorf("imatrix %s: %d bytes is too large for a legacy imatrix (limit %s)", path, st.Size(), boundedread.FormatSize(MaxDatBytes))
	}
	b, err := boundedread.ReadFile(path, "imatrix", MaxDatBytes)
	if err != nil {
		return nil, err
	}
	im, err := ParseDat(b)
	if err != nil {
		return nil, fmt.Errorf("imatrix %s: %w", path, err)
	}
	return im, nil
}

// checkSums rejects a sum of squares that is not a finite non-negative number.
func checkSums(name string, vals []float32) error {
	for i, v := range vals {
		if !(v >= 0) || math.IsInf(float64(v), 1) {
			return fmt.Errorf("entry %s: value %d is %v, a non-finite or negative sum of squares", name, i, v)
		}
	}
	return nil
}

// ReadGGUF reads a GGUF imatrix.
func ReadGGUF(path string) (*File, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer m.Close()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("imatrix %s: %s", path, fmt.Sprintf(format, a...))
	}
	md := m.Metadata()
	if t, err := md.GetString("general.type"); err == nil && t != "imatrix" {
		return nil, bad("general.type is %q, not \"imatrix\"", t)
	}
	im := &File{}
	if ds, err := md.GetStringArray("imatrix.datasets"); err == nil {
		im.Datasets, im.HasDatasets = append([]string(nil), ds...), true
	}
	if v, ok := md.Get("imatrix.chunk_count"); ok {
		c, ok := v.AsUint()
		if !ok {
			return nil, bad("imatrix.chunk_count is not an unsigned integer")
		}
		im.ChunkCount, im.HasChunkCount = c, true
	}
	if v, ok := md.Get("imatrix.chunk_size"); ok {
		c, ok := v.AsUint()
		if !ok {
			return nil, bad("imatrix.chunk_size is not an unsigned integer")
		}
		im.ChunkSize, im.HasChunkSize = c, true
	}
	readF32 := func(t gguf.ModelTensor) ([]float32, error) {
		if t.Type != gguf.TypeF32 {
			return nil, bad("tensor %s has type %s, want f32", t.Name, t.Type)
		}
		b, err := m.TensorData(t.Name)
		if err != nil {
			return nil, bad("%v", err)
		}
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	}
	tensors := m.Tensors()
	if len(tensors) > 2*MaxEntries {
		return nil, bad("%d tensors is too many", len(tensors))
	}
	byName := make(map[string]gguf.ModelTensor, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t
	}
	for _, t := range tensors {
		name, ok := strings.CutSuffix(t.Name, ".in_sum2")
		if !ok {
			if base, ok := strings.CutSuffix(t.Name, ".counts"); ok {
				if _, ok := byName[base+".in_sum2"]; !ok {
					return nil, bad("%s has no matching %s.in_sum2", t.Name, base)
				}
			}
			continue
		}
		ct, ok := byName[name+".counts"]
		if !ok {
			return nil, bad("%s has no matching %s.counts", t.Name, name)
		}
		sums, err := readF32(t)
		if err != nil {
			return nil, err
		}
		counts, err := readF32(ct)
		if err != nil {
			return nil, err
		}
		if len(counts) == 0 || len(sums) == 0 || len(sums)%len(counts) != 0 {
			return nil, bad("entry %s: %d sums do not split into %d matrices", name, len(sums), len(counts))
		}
		for j, c := range counts {
			if !(c >= 0) || c > maxCount {
				return nil, bad("entry %s: bad count %v for matrix %d", name, c, j)
			}
		}
		if err := checkSums(name, sums); err != nil {
			return nil, bad("%v", err)
		}
		im.Entries = append(im.Entries, Entry{Name: name, Sums: sums, Counts: counts})
	}
	if len(im.Entries) == 0 {
		return nil, bad("no *.in_sum2 tensors")
	}
	return im, nil
}

// ParseDat parses the legacy format (little-endian): int32 n_entries; per entry int32
// name_len, name, int32 ncall, int32 nval, nval float32 (mean·ncall); an optional trailer
// int32 last_chunk, int32 dataset_len, dataset bytes. Errors name the byte offset.
func ParseDat(b []byte) (*File, error) {
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
	if n < 1 || n > MaxEntries {
		return nil, bad("entry count %d out of range", n)
	}
	im := &File{Legacy: true}
	seen := map[string]bool{}
	for i := int32(0); i < n; i++ {
		nl, err := i32("name length")
		if err != nil {
			return nil, err
		}
		if nl <= 0 || nl > MaxNameLen || int(nl) > r.Len() {
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
		if err := checkSums(name, vals); err != nil {
			return nil, bad("%v", err)
		}
		if seen[name] {
			return nil, bad("duplicate entry %s", name)
		}
		seen[name] = true
		im.Entries = append(im.Entries, Entry{Name: name, Sums: vals, NCall: ncall})
	}
	if r.Len() >= 4 {
		lc, _ := i32("last chunk")
		if lc > 0 {
			im.ChunkCount, im.HasChunkCount = uint64(lc), true
		}
		if r.Len() >= 4 {
			dl, _ := i32("dataset length")
			if dl < 0 || int(dl) > r.Len() {
				return nil, bad("dataset name length %d out of range", dl)
			}
			db := make([]byte, dl)
			io.ReadFull(r, db)
			if dl > 0 {
				im.Datasets, im.HasDatasets = []string{string(db)}, true
			}
		}
	}
	return im, nil
}
