package infer

import (
	"fmt"
	"math"
	"sort"

	"github.com/tq-project/tq/gguf"
)

// Tensor is one weight as the model reads it: a GGUF tensor name, its ggml element type, its
// ggml dimensions (Dims[0] is the row length, the fastest-varying axis) and its bytes in the ggml
// block layout of Type. Data is used in place (for a GGUF file it points into the mmap).
type Tensor struct {
	Name string
	Type gguf.GGMLType
	Dims []int64
	Data []byte
}

// Elements returns the product of the dimensions.
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Source supplies a model's hyperparameters and weights under GGUF names. The GGUF adapter
// ([GGUFSource]) serves them from a file; another stage can serve Hugging Face weights upcast to
// f32 under the same names.
type Source interface {
	// Meta returns the metadata value stored under key (GGUF key names, e.g.
	// "qwen3.block_count"). Values are bool, string, any Go integer or float type, or a slice of
	// those.
	Meta(key string) (any, bool)
	// Tensor returns the tensor with the given GGUF name.
	Tensor(name string) (*Tensor, bool)
	// TensorNames lists every tensor the source holds.
	TensorNames() []string
}

// MapSource is an in-memory [Source], used by tests and by adapters that build weights on the fly.
type MapSource struct {
	Metadata map[string]any
	Tensors  map[string]*Tensor
}

// NewMapSource returns an empty MapSource.
func NewMapSource() *MapSource {
	return &MapSource{Metadata: map[string]any{}, Tensors: map[string]*Tensor{}}
}

// Meta implements [Source].
func (m *MapSource) Meta(key string) (any, bool) { v, ok := m.Metadata[key]; return v, ok }

// Tensor implements [Source].
func (m *MapSource) Tensor(name string) (*Tensor, bool) { t, ok := m.Tensors[name]; return t, ok }

// TensorNames implements [Source]; names are sorted.
func (m *MapSource) TensorNames() []string {
	out := make([]string, 0, len(m.Tensors))
	for k := range m.Tensors {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Add stores a tensor under its name.
func (m *MapSource) Add(t *Tensor) { m.Tensors[t.Name] = t }

// metaReader reads typed metadata with one clear error per bad key.
type metaReader struct{ src Source }

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		if uint64(x) > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

func toFloat64(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := toInt64(v); ok {
		return float64(i), true
	}
	return 0, false
}

// intArray converts an array of integers of any width to []int64.
func intArray(v any) ([]int64, bool) {
	switch x := v.(type) {
	case []int32:
		out := make([]int64, len(x))
		for i, e := range x {
			out[i] = int64(e)
		}
		return out, true
	case []uint32:
		out := make([]int64, len(x))
		for i, e := range x {
			out[i] = int64(e)
		}
		return out, true
	case []int64:
		return append([]int64(nil), x...), true
	case []uint64:
		out := make([]int64, len(x))
		for i, e := range x {
			if e > math.MaxInt64 {
				return nil, false
			}
			out[i] = int64(e)
		}
		return out, true
	case []int:
		out := make([]int64, len(x))
		for i, e := range x {
			out[i] = int64(e)
		}
		return out, true
	case []any:
		out := make([]int64, len(x))
		for i, e := range x {
			n, ok := toInt64(e)
			if !ok {
				return nil, false
			}
			out[i] = n
		}
		return out, true
	}
	return nil, false
}

// int returns an integer key. A per-layer array is accepted when all its entries are equal.
// Missing keys return def when required is false.
func (r metaReader) int(key string, required bool, def int64) (int64, error) {
	v, ok := r.src.Meta(key)
	if !ok {
		if required {
			return 0, fmt.Errorf("metadata key %q is missing", key)
		}
		return def, nil
	}
	if n, ok := toInt64(v); ok {
		return n, nil
	}
	if arr, ok := intArray(v); ok {
		if len(arr) == 0 {
			return 0, fmt.Errorf("metadata key %q is an empty array", key)
		}
		for _, e := range arr[1:] {
			if e != arr[0] {
				return 0, fmt.Errorf("metadata key %q: per-layer values differ (%v); not supported", key, arr)
			}
		}
		return arr[0], nil
	}
	return 0, fmt.Errorf("metadata key %q has type %T, want an integer", key, v)
}

func (r metaReader) float(key string, required bool, def float64) (float64, error) {
	v, ok := r.src.Meta(key)
	if !ok {
		if required {
			return 0, fmt.Errorf("metadata key %q is missing", key)
		}
		return def, nil
	}
	f, ok := toFloat64(v)
	if !ok {
		return 0, fmt.Errorf("metadata key %q has type %T, want a number", key, v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("metadata key %q is not finite (%v)", key, f)
	}
	return f, nil
}

func (r metaReader) str(key string, required bool, def string) (string, error) {
	v, ok := r.src.Meta(key)
	if !ok {
		if required {
			return "", fmt.Errorf("metadata key %q is missing", key)
		}
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("metadata key %q has type %T, want a string", key, v)
	}
	return s, nil
}
