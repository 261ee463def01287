package safetensors

import (
	"fmt"
	"math/bits"
	"strings"
)

// DType is the element type of a tensor as named in a safetensors header.
type DType uint8

// Element types recognised by the reader. The zero value is Invalid.
const (
	Invalid DType = iota
	BOOL
	U8
	I8
	I16
	U16
	F16
	BF16
	I32
	U32
	F32
	F64
	I64
	U64
	// F8E4M3 is float8 e4m3fn ("F8_E4M3"): 1 sign, 4 exponent (bias 7), 3 mantissa bits,
	// no infinities, 0x7F/0xFF are NaN, largest finite value 448.
	F8E4M3
	// F8E5M2 is float8 e5m2 ("F8_E5M2"): the top byte of an IEEE binary16.
	F8E5M2
	numDTypes
)

var dtypeNames = [numDTypes]string{
	Invalid: "INVALID",
	BOOL:    "BOOL",
	U8:      "U8",
	I8:      "I8",
	I16:     "I16",
	U16:     "U16",
	F16:     "F16",
	BF16:    "BF16",
	I32:     "I32",
	U32:     "U32",
	F32:     "F32",
	F64:     "F64",
	I64:     "I64",
	U64:     "U64",
	F8E4M3:  "F8_E4M3",
	F8E5M2:  "F8_E5M2",
}

var dtypeSizes = [numDTypes]int64{
	BOOL: 1, U8: 1, I8: 1, I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4, F64: 8, I64: 8, U64: 8, F8E4M3: 1, F8E5M2: 1,
}

// String returns the safetensors name of the dtype ("BF16", "F8_E4M3", ...).
func (d DType) String() string {
	if d < numDTypes {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the size of one element in bytes, or 0 for an invalid dtype.
func (d DType) Size() int64 {
	if d < numDTypes {
		return dtypeSizes[d]
	}
	return 0
}

// Valid reports whether d is one of the recognised dtypes.
func (d DType) Valid() bool { return d > Invalid && d < numDTypes }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case F16, BF16, F32, F64, F8E4M3, F8E5M2:
		return true
	}
	return false
}

// ParseDType returns the dtype with the given safetensors name. The error lists the
// supported names.
func ParseDType(s string) (DType, error) {
	for d := BOOL; d < numDTypes; d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (supported: %s)", s, supportedDTypes())
}

func supportedDTypes() string {
	names := make([]string, 0, numDTypes-1)
	for d := BOOL; d < numDTypes; d++ {
		names = append(names, dtypeNames[d])
	}
	return strings.Join(names, ", ")
}

// MaxRank is the largest number of dimensions accepted for one tensor.
const MaxRank = 32

// NumElements returns the product of shape, rejecting negative dimensions, more than
// MaxRank dimensions and products that overflow int64.
func NumElements(shape []int64) (int64, error) {
	if len(shape) > MaxRank {
		return 0, fmt.Errorf("rank %d exceeds the maximum of %d", len(shape), MaxRank)
	}
	n := uint64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative (%d)", i, d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return 0, fmt.Errorf("shape %v overflows int64 elements", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// ByteSize returns the number of bytes a tensor of this dtype and shape occupies.
func ByteSize(d DType, shape []int64) (int64, error) {
	if !d.Valid() {
		return 0, fmt.Errorf("invalid dtype %v", d)
	}
	n, err := NumElements(shape)
	if err != nil {
		return 0, err
	}
	hi, lo := bits.Mul64(uint64(n), uint64(d.Size()))
	if hi != 0 || lo > 1<<63-1 {
		return 0, fmt.Errorf("shape %v of %v overflows int64 bytes", shape, d)
	}
	return int64(lo), nil
}
