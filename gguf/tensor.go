package gguf

import (
	"fmt"
	"math"
	"math/bits"
	"unicode/utf8"
)

// MaxDims is GGML_MAX_DIMS: the most dimensions a tensor may have.
const MaxDims = 4

// MaxNameLen is the longest tensor name llama.cpp accepts (GGML_MAX_NAME 64 incl. NUL).
const MaxNameLen = 63

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name string
	// Dims are the ggml dimensions, fastest-varying first (ne0 = row length first). A
	// PyTorch shape (A, B) is Dims {B, A}.
	Dims []uint64
	Type GGMLType
	// Offset is the byte offset of the tensor's data relative to the start of the data
	// section of the file that holds it.
	Offset uint64
}

// NumElements returns the product of Dims (1 for zero dims). It saturates at
// math.MaxUint64 on overflow; tensors from a parsed file never overflow.
func (t TensorInfo) NumElements() uint64 {
	n, ok := numElements(t.Dims)
	if !ok {
		return math.MaxUint64
	}
	return n
}

// NBytes returns the size of the tensor data in bytes, or 0 when the type is unknown or
// the size does not fit (see Size for the error).
func (t TensorInfo) NBytes() uint64 {
	n, err := t.Size()
	if err != nil {
		return 0
	}
	return n
}

// Size returns the size of the tensor data in bytes, checking that the type is known,
// that ne0 is a multiple of the type's block size and that the size fits in an int64.
func (t TensorInfo) Size() (uint64, error) { return tensorBytes(t.Dims, t.Type) }

func numElements(dims []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// tensorBytes computes the byte size of a tensor of the given dims and type.
func tensorBytes(dims []uint64, typ GGMLType) (uint64, error) {
	tr, ok := typ.Traits()
	if !ok {
		return 0, fmt.Errorf("unknown ggml type id %d", uint32(typ))
	}
	for i, d := range dims {
		if d > math.MaxInt64 {
			return 0, fmt.Errorf("dimension %d is %d, above the int64 range", i, d)
		}
	}
	n, ok := numElements(dims)
	if !ok {
		return 0, fmt.Errorf("element count of dims %v overflows int64", dims)
	}
	ne0 := uint64(1)
	if len(dims) > 0 {
		ne0 = dims[0]
	}
	if ne0%uint64(tr.BlockSize) != 0 {
		return 0, fmt.Errorf("ne0 = %d is not a multiple of the %s block size %d", ne0, tr.Name, tr.BlockSize)
	}
	hi, lo := bits.Mul64(n/uint64(tr.BlockSize), uint64(tr.TypeSize))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("byte size of dims %v as %s overflows int64", dims, tr.Name)
	}
	return lo, nil
}

// validateTensorDecl checks a tensor declaration for the writer.
func validateTensorDecl(name string, dims []uint64, typ GGMLType) (uint64, error) {
	if name == "" {
		return 0, fmt.Errorf("gguf: tensor name is empty")
	}
	if !utf8.ValidString(name) {
		return 0, fmt.Errorf("gguf: tensor name %q is not valid UTF-8", name)
	}
	if len(name) > MaxNameLen {
		return 0, fmt.Errorf("gguf: tensor name %q is %d bytes; llama.cpp allows at most %d", name, len(name), MaxNameLen)
	}
	if len(dims) < 1 || len(dims) > MaxDims {
		return 0, fmt.Errorf("gguf: tensor %q has %d dims, want 1..%d", name, len(dims), MaxDims)
	}
	n, err := tensorBytes(dims, typ)
	if err != nil {
		return 0, fmt.Errorf("gguf: tensor %q: %v", name, err)
	}
	return n, nil
}

// alignUp rounds x up to a multiple of a (a power of two); ok is false on overflow.
func alignUp(x, a uint64) (uint64, bool) {
	r := (x + a - 1) &^ (a - 1)
	return r, r >= x
}
