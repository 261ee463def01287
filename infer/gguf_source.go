package infer

import (
	"fmt"

	"github.com/tq-project/tq/gguf"
)

// GGUFSource serves a GGUF model's metadata and tensors (zero-copy slices of the file's memory
// map) as a [Source].
type GGUFSource struct {
	m       *gguf.Model
	path    string
	tensors map[string]*Tensor
	names   []string
}

// OpenGGUF opens a GGUF file (or the first shard of a split model) as a Source.
func OpenGGUF(path string) (*GGUFSource, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	s, err := NewGGUFSource(m)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.path = path
	return s, nil
}

// NewGGUFSource wraps an opened GGUF model. The model must stay open while the source is used.
func NewGGUFSource(m *gguf.Model) (*GGUFSource, error) {
	s := &GGUFSource{m: m, tensors: map[string]*Tensor{}}
	for _, ti := range m.Tensors() {
		data, err := m.TensorData(ti.Name)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
		dims := make([]int64, len(ti.Dims))
		for i, d := range ti.Dims {
			if d > 1<<40 {
				return nil, fmt.Errorf("tensor %q: dimension %d too large", ti.Name, d)
			}
			dims[i] = int64(d)
		}
		s.tensors[ti.Name] = &Tensor{Name: ti.Name, Type: ti.Type, Dims: dims, Data: data}
		s.names = append(s.names, ti.Name)
	}
	return s, nil
}

// GGUF returns the underlying model.
func (s *GGUFSource) GGUF() *gguf.Model { return s.m }

// Path is the file the source was opened from ("" when wrapped with NewGGUFSource).
func (s *GGUFSource) Path() string { return s.path }

// Close unmaps the file. Models loaded from the source must not be used afterwards.
func (s *GGUFSource) Close() error { return s.m.Close() }

// Tensor implements [Source].
func (s *GGUFSource) Tensor(name string) (*Tensor, bool) { t, ok := s.tensors[name]; return t, ok }

// TensorNames implements [Source] (file order).
func (s *GGUFSource) TensorNames() []string { return s.names }

// Meta implements [Source], converting GGUF values to Go values (arrays to typed slices).
func (s *GGUFSource) Meta(key string) (any, bool) {
	v, ok := s.m.Metadata().Get(key)
	if !ok {
		return nil, false
	}
	return MetaValue(v), true
}

// MetaValue converts a GGUF metadata value to the Go value a [Source]'s Meta returns: strings,
// bools, float64, uint64 or int64 for scalars, typed slices for arrays (nil for an array of
// arrays). Callers that build a [MapSource] from GGUF metadata use it so that every source
// presents metadata the same way.
func MetaValue(v gguf.Value) any {
	if v.Type() == gguf.ValueArray {
		return arrayToGo(v)
	}
	switch v.Type() {
	case gguf.ValueString:
		s, _ := v.AsString()
		return s
	case gguf.ValueBool:
		b, _ := v.AsBool()
		return b
	case gguf.ValueFloat32, gguf.ValueFloat64:
		f, _ := v.AsFloat()
		return f
	case gguf.ValueUint8, gguf.ValueUint16, gguf.ValueUint32, gguf.ValueUint64:
		u, _ := v.AsUint()
		return u
	default:
		i, _ := v.AsInt()
		return i
	}
}

func arrayToGo(v gguf.Value) any {
	if a, ok := gguf.ArrayOf[string](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[int32](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[uint32](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[int64](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[uint64](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[float32](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[float64](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[bool](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[int8](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[uint8](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[int16](v); ok {
		return a
	}
	if a, ok := gguf.ArrayOf[uint16](v); ok {
		return a
	}
	return nil
}
