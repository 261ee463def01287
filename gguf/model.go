package gguf

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/mmap"
)

// ModelTensor is a tensor of a Model with its location.
type ModelTensor struct {
	TensorInfo
	// Shard is the index in Model.Files of the file holding the tensor.
	Shard int
	// FileOffset is the absolute byte offset of the data in that file
	// (File.DataOffset + Offset).
	FileOffset uint64
	// Bytes is the data size in bytes.
	Bytes uint64
}

// Model is an opened GGUF model: one file or all shards of a split model, with the tensor
// data memory-mapped (nothing is read until used).
type Model struct {
	files   []*File
	osFiles []*os.File
	maps    [][]byte
	tensors []ModelTensor
	byName  map[string]int
	closed  bool
}

// Open opens a GGUF model. When path is named like a shard ("x-00001-of-00003.gguf"; any
// shard of the set may be given) all shards are opened as one model and checked the way
// llama.cpp checks them: every shard's split.no matches its file number, split.count
// matches the name, the tensor total matches split.tensors.count and no tensor name
// repeats. A file whose split.count is above 1 but whose name is not a shard name is an
// error. Headers are parsed strictly (see ReadFile); tensor data is mapped, not read.
func Open(path string) (*Model, error) {
	paths := []string{path}
	if prefix, _, count, ok := ParseSplitPath(path); ok {
		paths = paths[:0]
		for i := 0; i < count; i++ {
			paths = append(paths, SplitPath(prefix, i, count))
		}
	}
	m := &Model{byName: map[string]int{}}
	for _, p := range paths {
		if err := m.openShard(p); err != nil {
			m.Close()
			return nil, err
		}
	}
	if probs := splitProblems(m.files, len(paths)); len(probs) > 0 {
		m.Close()
		return nil, &probs[0]
	}
	for si, f := range m.files {
		for _, t := range f.Tensors {
			m.byName[t.Name] = len(m.tensors)
			m.tensors = append(m.tensors, ModelTensor{TensorInfo: t, Shard: si,
				FileOffset: f.DataOffset + t.Offset, Bytes: t.NBytes()})
		}
	}
	return m, nil
}

func (m *Model) openShard(path string) error {
	f, st, err := boundedread.Open(path, "GGUF file")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	hdr, err := ReadFile(f, st.Size(), path)
	if err != nil {
		f.Close()
		return err
	}
	data, err := mmap.Map(f, st.Size())
	if err != nil {
		f.Close()
		return fmt.Errorf("gguf: %w", err)
	}
	m.files = append(m.files, hdr)
	m.osFiles = append(m.osFiles, f)
	m.maps = append(m.maps, data)
	return nil
}

// Files returns the parsed header of each file, in shard order (one entry when unsplit).
func (m *Model) Files() []*File { return m.files }

// Metadata returns the metadata of the (first) file, in file order. For split models it
// includes the split.* keys.
func (m *Model) Metadata() Metadata { return m.files[0].Metadata }

// Version returns the GGUF version of the (first) file.
func (m *Model) Version() uint32 { return m.files[0].Version }

// Alignment returns the data alignment of the (first) file.
func (m *Model) Alignment() uint64 { return m.files[0].Alignment }

// Tensors returns all tensors in file order across shards.
func (m *Model) Tensors() []ModelTensor { return m.tensors }

// Tensor returns the named tensor.
func (m *Model) Tensor(name string) (ModelTensor, bool) {
	i, ok := m.byName[name]
	if !ok {
		return ModelTensor{}, false
	}
	return m.tensors[i], true
}

// ErrClosed is returned for tensor access after Model.Close.
var ErrClosed = errors.New("gguf: model is closed")

func (m *Model) lookup(name string) (ModelTensor, error) {
	if m.closed {
		return ModelTensor{}, ErrClosed
	}
	t, ok := m.Tensor(name)
	if !ok {
		return ModelTensor{}, fmt.Errorf("gguf: %s: no tensor named %q", m.files[0].Path, name)
	}
	return t, nil
}

// TensorData returns the raw bytes of the named tensor as a read-only slice of the memory
// map (zero-copy; nothing is read until the slice is touched). Writing to the slice
// faults. The slice must not be used after Close.
func (m *Model) TensorData(name string) ([]byte, error) {
	t, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	b := m.maps[t.Shard]
	return b[t.FileOffset : t.FileOffset+t.Bytes : t.FileOffset+t.Bytes], nil
}

// TensorReader returns a reader over the named tensor's bytes that uses pread instead of
// the memory map.
func (m *Model) TensorReader(name string) (*io.SectionReader, error) {
	t, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(m.osFiles[t.Shard], int64(t.FileOffset), int64(t.Bytes)), nil
}

// Close unmaps and closes all files. Slices from TensorData become invalid.
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	var first error
	for _, b := range m.maps {
		if err := mmap.Unmap(b); err != nil && first == nil {
			first = err
		}
	}
	for _, f := range m.osFiles {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	m.maps, m.osFiles = nil, nil
	return first
}
