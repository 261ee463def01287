package gguf

import (
	"errors"
	"fmt"
)

// Well-known metadata keys the package itself interprets.
const (
	KeyAlignment         = "general.alignment"
	KeySplitNo           = "split.no"
	KeySplitCount        = "split.count"
	KeySplitTensorsCount = "split.tensors.count"
)

// DefaultAlignment is the data alignment used when general.alignment is absent.
const DefaultAlignment = 32

// ErrKeyNotFound is returned (wrapped) by the Metadata getters when the key is absent.
var ErrKeyNotFound = errors.New("metadata key not found")

// KV is one metadata key/value pair.
type KV struct {
	Key   string
	Value Value
}

// Metadata is the ordered list of key/value pairs of a GGUF file, in file order.
type Metadata []KV

// Index returns the position of key, or -1.
func (m Metadata) Index(key string) int {
	for i := range m {
		if m[i].Key == key {
			return i
		}
	}
	return -1
}

// Get returns the value stored under key.
func (m Metadata) Get(key string) (Value, bool) {
	if i := m.Index(key); i >= 0 {
		return m[i].Value, true
	}
	return Value{}, false
}

// Has reports whether key is present.
func (m Metadata) Has(key string) bool { return m.Index(key) >= 0 }

// Keys returns the keys in order.
func (m Metadata) Keys() []string {
	out := make([]string, len(m))
	for i := range m {
		out[i] = m[i].Key
	}
	return out
}

// Set replaces the value of key in place, or appends the pair when key is absent.
func (m *Metadata) Set(key string, v Value) {
	if i := m.Index(key); i >= 0 {
		(*m)[i].Value = v
		return
	}
	*m = append(*m, KV{key, v})
}

// Delete removes key and reports whether it was present. The order of the others is kept.
func (m *Metadata) Delete(key string) bool {
	i := m.Index(key)
	if i < 0 {
		return false
	}
	*m = append((*m)[:i], (*m)[i+1:]...)
	return true
}

// Clone returns a copy of the list (values share array storage, which is immutable by
// convention).
func (m Metadata) Clone() Metadata { return append(Metadata(nil), m...) }

func (m Metadata) lookup(key string, want string) (Value, error) {
	v, ok := m.Get(key)
	if !ok {
		return Value{}, fmt.Errorf("gguf: metadata key %q (%s): %w", key, want, ErrKeyNotFound)
	}
	return v, nil
}

func typeErr(key string, v Value, want string) error {
	t := v.Type().String()
	if v.Type() == ValueArray {
		t = "array of " + v.ElemType().String()
	}
	return fmt.Errorf("gguf: metadata key %q has type %s, want %s", key, t, want)
}

// GetString returns a STRING value.
func (m Metadata) GetString(key string) (string, error) {
	v, err := m.lookup(key, "string")
	if err != nil {
		return "", err
	}
	s, ok := v.AsString()
	if !ok {
		return "", typeErr(key, v, "string")
	}
	return s, nil
}

// GetUint returns an integer value of any width as uint64 (negative values are an error).
// Use Get and Value.Type when the exact stored type matters (llama.cpp is type-strict).
func (m Metadata) GetUint(key string) (uint64, error) {
	v, err := m.lookup(key, "unsigned integer")
	if err != nil {
		return 0, err
	}
	u, ok := v.AsUint()
	if !ok {
		if v.Type().isSigned() {
			return 0, fmt.Errorf("gguf: metadata key %q has negative value %s", key, v)
		}
		return 0, typeErr(key, v, "unsigned integer")
	}
	return u, nil
}

// GetInt returns an integer value of any width as int64.
func (m Metadata) GetInt(key string) (int64, error) {
	v, err := m.lookup(key, "integer")
	if err != nil {
		return 0, err
	}
	i, ok := v.AsInt()
	if !ok {
		if v.Type() == ValueUint64 {
			return 0, fmt.Errorf("gguf: metadata key %q value %s overflows int64", key, v)
		}
		return 0, typeErr(key, v, "integer")
	}
	return i, nil
}

// GetFloat returns a FLOAT32 or FLOAT64 value as float64.
func (m Metadata) GetFloat(key string) (float64, error) {
	v, err := m.lookup(key, "float")
	if err != nil {
		return 0, err
	}
	f, ok := v.AsFloat()
	if !ok {
		return 0, typeErr(key, v, "float32 or float64")
	}
	return f, nil
}

// GetBool returns a BOOL value.
func (m Metadata) GetBool(key string) (bool, error) {
	v, err := m.lookup(key, "bool")
	if err != nil {
		return false, err
	}
	b, ok := v.AsBool()
	if !ok {
		return false, typeErr(key, v, "bool")
	}
	return b, nil
}

// GetStringArray returns the elements of a STRING array (shared, not copied).
func (m Metadata) GetStringArray(key string) ([]string, error) {
	v, err := m.lookup(key, "array of string")
	if err != nil {
		return nil, err
	}
	s, ok := v.AsStrings()
	if !ok {
		return nil, typeErr(key, v, "array of string")
	}
	return s, nil
}

// GetArray returns an ARRAY value of any element type; use ArrayOf or Value.Index on it.
func (m Metadata) GetArray(key string) (Value, error) {
	v, err := m.lookup(key, "array")
	if err != nil {
		return Value{}, err
	}
	if v.Type() != ValueArray {
		return Value{}, typeErr(key, v, "array")
	}
	return v, nil
}
