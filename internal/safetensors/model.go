// Package safetensors reads and writes Hugging Face safetensors checkpoints.
//
// The reader parses only the JSON headers at Open time and maps each file lazily
// (read-only mmap) on the first access to one of its tensors, so opening a sharded
// 100 GB model costs a few small reads. Every header field is validated against the
// file size before it is used; see docs/safetensors.md.
package safetensors

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/mmap"
)

// TensorInfo describes one tensor of a checkpoint.
type TensorInfo struct {
	Name   string
	DType  DType
	Shape  []int64
	File   string // path of the file holding the tensor
	Offset int64  // absolute byte offset of the tensor data within File
	Size   int64  // data size in bytes (= elements * DType.Size())
}

// NumElements returns the number of elements (the product of Shape).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t TensorInfo) clone() TensorInfo {
	t.Shape = slices.Clone(t.Shape)
	return t
}

// Model is an opened checkpoint: one safetensors file or a set of shards. Its methods are
// safe for concurrent use.
type Model struct {
	shards  []*shard // sorted by path
	tensors []TensorInfo
	byName  map[string]int
	shardOf []int // tensor index -> shard index
	meta    map[string]string

	mu     sync.RWMutex
	closed bool
}

type shard struct {
	path string
	f    *os.File
	size int64

	mu   sync.Mutex
	data []byte // whole-file read-only mapping; nil until first use
}

// ErrClosed is returned by accessors called after Close.
var ErrClosed = errors.New("safetensors: model is closed")

// Open opens a checkpoint. path may be a .safetensors file, an index file
// (*.safetensors.index.json) or a folder; a folder is read through
// model.safetensors.index.json if present, else model.safetensors, else all *.safetensors
// files in it. Shards named by an index or found in a folder must resolve inside that
// folder (symlinks included; the blobs folder of a Hugging Face hub cache snapshot is also
// allowed).
func Open(path string) (*Model, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if fi.IsDir() {
		return openDir(path)
	}
	if strings.HasSuffix(path, ".index.json") {
		return openIndex(path, filepath.Dir(path))
	}
	return openFiles([]string{path}, nil)
}

func openDir(dir string) (*Model, error) {
	idx := filepath.Join(dir, IndexFileName)
	if _, err := os.Stat(idx); err == nil {
		return openIndex(idx, dir)
	}
	var names []string
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		names = []string{"model.safetensors"}
	} else {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("safetensors: %w", err)
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".safetensors") && !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("safetensors: %s: no %s and no *.safetensors files", dir, IndexFileName)
		}
	}
	paths := make([]string, len(names))
	for i, n := range names {
		p, err := confine(dir, n)
		if err != nil {
			return nil, fmt.Errorf("safetensors: %s: %v", filepath.Join(dir, n), err)
		}
		paths[i] = p
	}
	return openFiles(paths, nil)
}

func openIndex(indexPath, dir string) (*Model, error) {
	data, err := boundedread.ReadFile(indexPath, "safetensors index", MaxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	wm, err := parseIndex(indexPath, data)
	if err != nil {
		return nil, err
	}
	// One representative tensor per shard, for error messages.
	firstTensor := map[string]string{}
	for name, sh := range wm {
		if cur, ok := firstTensor[sh]; !ok || name < cur {
			firstTensor[sh] = name
		}
	}
	shardNames := make([]string, 0, len(firstTensor))
	for sh := range firstTensor {
		shardNames = append(shardNames, sh)
	}
	sort.Strings(shardNames)
	paths := make([]string, len(shardNames))
	for i, sh := range shardNames {
		p, err := confine(dir, sh)
		if err != nil {
			return nil, &IndexError{File: indexPath, Tensor: firstTensor[sh], Msg: fmt.Sprintf("shard %q: %v", sh, err)}
		}
		paths[i] = p
	}
	return openFiles(paths, &indexCheck{path: indexPath, weightMap: wm, shardNames: shardNames})
}

type indexCheck struct {
	path       string
	weightMap  map[string]string
	shardNames []string // parallel to the paths given to openFiles
}

// Confine joins dir and name, a relative path read from a file in dir (an index's shard
// names, quantize_config.json's imatrix), and checks that the result stays inside dir: name
// must be a clean relative path without "..", and the joined path, after resolving symlinks,
// must lie inside dir (or inside the blobs folder of a Hugging Face hub cache snapshot). The
// path must exist. Errors speak of "the model folder".
func Confine(dir, name string) (string, error) { return confine(dir, name) }

// confine is Confine.
func confine(dir, name string) (string, error) {
	if err := checkShardName(name); err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("file not found")
		}
		return "", err
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if within(realDir, real) {
		return p, nil
	}
	// huggingface_hub cache: <repo>/snapshots/<rev>/file -> <repo>/blobs/<sha>.
	if abs, err := filepath.Abs(dir); err == nil {
		snapshots := filepath.Dir(abs)
		if filepath.Base(snapshots) == "snapshots" {
			if blobs, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(snapshots), "blobs")); err == nil && within(blobs, real) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("resolves to %s, outside the model folder", real)
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil || filepath.IsAbs(rel) {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func openFiles(paths []string, idx *indexCheck) (*Model, error) {
	m := &Model{byName: map[string]int{}}
	if err := m.load(paths, idx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Model) load(paths []string, idx *indexCheck) error {
	// Keep the index's shard names alongside paths while sorting.
	order := make([]int, len(paths))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return paths[order[a]] < paths[order[b]] })
	for si, oi := range order {
		path := paths[oi]
		f, fi, err := boundedread.Open(path, "safetensors file")
		if err != nil {
			return fmt.Errorf("safetensors: %w", err)
		}
		sh := &shard{path: path, f: f, size: fi.Size()}
		m.shards = append(m.shards, sh)
		h, dataStart, err := readHeader(path, f, fi.Size())
		if err != nil {
			return err
		}
		for k, v := range h.meta {
			if m.meta == nil {
				m.meta = map[string]string{}
			}
			if _, ok := m.meta[k]; !ok {
				m.meta[k] = v
			}
		}
		for _, t := range h.tensors {
			if idx != nil {
				want, listed := idx.weightMap[t.Name]
				if !listed {
					return &IndexError{File: idx.path, Tensor: t.Name, Msg: fmt.Sprintf("present in shard %q but missing from weight_map", idx.shardNames[oi])}
				}
				if want != idx.shardNames[oi] {
					return &IndexError{File: idx.path, Tensor: t.Name, Msg: fmt.Sprintf("weight_map says shard %q but the tensor is in shard %q", want, idx.shardNames[oi])}
				}
			}
			if prev, dup := m.byName[t.Name]; dup {
				return fmt.Errorf("safetensors: tensor %q is in both %s and %s", t.Name, m.tensors[prev].File, path)
			}
			t.File = path
			t.Offset += dataStart
			m.byName[t.Name] = len(m.tensors)
			m.tensors = append(m.tensors, t)
			m.shardOf = append(m.shardOf, si)
		}
	}
	if idx != nil {
		for name, sh := range idx.weightMap {
			if _, ok := m.byName[name]; !ok {
				return &IndexError{File: idx.path, Tensor: name, Msg: fmt.Sprintf("listed in weight_map but absent from shard %q", sh)}
			}
		}
	}
	return nil
}

// Tensors returns every tensor, ordered by file and then by offset.
func (m *Model) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(m.tensors))
	for i, t := range m.tensors {
		out[i] = t.clone()
	}
	return out
}

// Len returns the number of tensors.
func (m *Model) Len() int { return len(m.tensors) }

// Lookup returns the tensor with the given name.
func (m *Model) Lookup(name string) (TensorInfo, bool) {
	i, ok := m.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return m.tensors[i].clone(), true
}

// Files returns the paths of the files making up the checkpoint, sorted.
func (m *Model) Files() []string {
	out := make([]string, len(m.shards))
	for i, s := range m.shards {
		out[i] = s.path
	}
	return out
}

// FileMetadata returns the "__metadata__" string map of the header(s). For several
// shards the maps are merged; on conflicting values the first shard (by path) wins.
func (m *Model) FileMetadata() map[string]string {
	out := make(map[string]string, len(m.meta))
	for k, v := range m.meta {
		out[k] = v
	}
	return out
}

func (m *Model) lookup(name string) (int, error) {
	i, ok := m.byName[name]
	if !ok {
		return 0, fmt.Errorf("safetensors: no tensor %q", name)
	}
	return i, nil
}

// Raw returns the tensor's bytes as a zero-copy view of the read-only file mapping. The
// slice must not be written to and is valid until Close (or ReleaseFile of its file).
func (m *Model) Raw(name string) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rawLocked(name)
}

func (m *Model) rawLocked(name string) ([]byte, error) {
	if m.closed {
		return nil, ErrClosed
	}
	i, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	t := &m.tensors[i]
	data, err := m.shards[m.shardOf[i]].mapped()
	if err != nil {
		return nil, err
	}
	return data[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
}

// Section returns a reader over the tensor's bytes that uses pread instead of the mapping.
func (m *Model) Section(name string) (*io.SectionReader, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	i, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	t := &m.tensors[i]
	return io.NewSectionReader(m.shards[m.shardOf[i]].f, t.Offset, t.Size), nil
}

// ReadFloat32 converts the whole tensor to float32 into dst, which must have exactly
// NumElements entries. Every numeric dtype and BOOL are accepted; FP8 values are decoded
// exactly (block scales such as weight_scale_inv are not applied here).
func (m *Model) ReadFloat32(name string, dst []float32) error {
	t, ok := m.Lookup(name)
	if !ok {
		return fmt.Errorf("safetensors: no tensor %q", name)
	}
	if n := t.NumElements(); int64(len(dst)) != n {
		return fmt.Errorf("safetensors: tensor %q: destination holds %d values, tensor has %d", name, len(dst), n)
	}
	return m.ReadFloat32At(name, 0, dst)
}

// ReadFloat32At converts len(dst) consecutive elements starting at element index start
// (row-major) to float32, so large tensors can be streamed row by row.
func (m *Model) ReadFloat32At(name string, start int64, dst []float32) error {
	m.mu.RLock() // held while decoding so that Close/ReleaseFile cannot unmap underneath
	defer m.mu.RUnlock()
	raw, err := m.rawLocked(name)
	if err != nil {
		return err
	}
	i := m.byName[name]
	t := &m.tensors[i]
	n := t.NumElements()
	if start < 0 || start > n || int64(len(dst)) > n-start {
		return fmt.Errorf("safetensors: tensor %q: elements [%d, %d) out of range (%d elements)", name, start, start+int64(len(dst)), n)
	}
	es := t.DType.Size()
	if err := decodeFloat32(t.DType, raw[start*es:(start+int64(len(dst)))*es], dst); err != nil {
		return fmt.Errorf("safetensors: tensor %q: %v", name, err)
	}
	return nil
}

// ReleaseFile unmaps one file of the checkpoint (it is mapped again on the next access),
// bounding resident memory while streaming through shards. Slices previously returned by
// Raw for tensors of that file become invalid and must not be used.
func (m *Model) ReleaseFile(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, s := range m.shards {
		if s.path == path {
			return s.unmap()
		}
	}
	return fmt.Errorf("safetensors: %s is not part of this model", path)
}

// Close unmaps and closes every file. Slices returned by Raw become invalid.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var first error
	for _, s := range m.shards {
		if err := s.unmap(); err != nil && first == nil {
			first = err
		}
		if err := s.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *shard) mapped() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data != nil {
		return s.data, nil
	}
	fi, err := s.f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if fi.Size() != s.size {
		return nil, fmt.Errorf("safetensors: %s changed size since it was opened (%d -> %d bytes)", s.path, s.size, fi.Size())
	}
	data, err := mmap.Map(s.f, s.size)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	s.data = data
	return data, nil
}

func (s *shard) unmap() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return nil
	}
	err := mmap.Unmap(s.data)
	s.data = nil
	if err != nil {
		return fmt.Errorf("safetensors: munmap %s: %w", s.path, err)
	}
	return nil
}
