package gguf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ValueType is a GGUF metadata value type id (gguf.h: enum gguf_type). The ids are part of
// the file format.
type ValueType uint32

// Metadata value types.
const (
	ValueUint8   ValueType = 0
	ValueInt8    ValueType = 1
	ValueUint16  ValueType = 2
	ValueInt16   ValueType = 3
	ValueUint32  ValueType = 4
	ValueInt32   ValueType = 5
	ValueFloat32 ValueType = 6
	ValueBool    ValueType = 7
	ValueString  ValueType = 8
	ValueArray   ValueType = 9
	ValueUint64  ValueType = 10
	ValueInt64   ValueType = 11
	ValueFloat64 ValueType = 12
	// valueTypeCount is one past the last defined id.
	valueTypeCount ValueType = 13
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

// String returns the GGUF name of the type ("uint32", "string", "array", ...).
func (t ValueType) String() string {
	if t < valueTypeCount {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("value_type(%d)", uint32(t))
}

// Valid reports whether t is a defined value type id.
func (t ValueType) Valid() bool { return t < valueTypeCount }

// scalarSize is the encoded size of a fixed-size scalar type, 0 for string/array/invalid.
func (t ValueType) scalarSize() int {
	switch t {
	case ValueUint8, ValueInt8, ValueBool:
		return 1
	case ValueUint16, ValueInt16:
		return 2
	case ValueUint32, ValueInt32, ValueFloat32:
		return 4
	case ValueUint64, ValueInt64, ValueFloat64:
		return 8
	}
	return 0
}

func (t ValueType) isUnsigned() bool {
	return t == ValueUint8 || t == ValueUint16 || t == ValueUint32 || t == ValueUint64
}

func (t ValueType) isSigned() bool {
	return t == ValueInt8 || t == ValueInt16 || t == ValueInt32 || t == ValueInt64
}

// Value is one GGUF metadata value: a scalar, a string or an array. The zero Value is
// invalid (Type() reports ValueUint8 but Valid() is false); build values with the
// constructors (Uint32, String, Array, ...) or get them from a parsed file.
//
// Arrays keep their elements in a typed Go slice ([]uint32, []string, []Value for nested
// arrays, ...). Constructors do not copy the slice they are given and accessors return the
// stored slice: callers must not modify either afterwards.
type Value struct {
	typ   ValueType
	elem  ValueType // element type, arrays only
	valid bool
	num   uint64 // bit pattern of numeric scalars; 0/1 for bool
	str   string
	arr   any // typed slice, arrays only
}

func scalar(t ValueType, bits uint64) Value { return Value{typ: t, valid: true, num: bits} }

// Uint8 returns a UINT8 value.
func Uint8(v uint8) Value { return scalar(ValueUint8, uint64(v)) }

// Int8 returns an INT8 value.
func Int8(v int8) Value { return scalar(ValueInt8, uint64(int64(v))) }

// Uint16 returns a UINT16 value.
func Uint16(v uint16) Value { return scalar(ValueUint16, uint64(v)) }

// Int16 returns an INT16 value.
func Int16(v int16) Value { return scalar(ValueInt16, uint64(int64(v))) }

// Uint32 returns a UINT32 value.
func Uint32(v uint32) Value { return scalar(ValueUint32, uint64(v)) }

// Int32 returns an INT32 value.
func Int32(v int32) Value { return scalar(ValueInt32, uint64(int64(v))) }

// Uint64 returns a UINT64 value.
func Uint64(v uint64) Value { return scalar(ValueUint64, v) }

// Int64 returns an INT64 value.
func Int64(v int64) Value { return scalar(ValueInt64, uint64(v)) }

// Float32 returns a FLOAT32 value.
func Float32(v float32) Value { return scalar(ValueFloat32, uint64(math.Float32bits(v))) }

// Float64 returns a FLOAT64 value.
func Float64(v float64) Value { return scalar(ValueFloat64, math.Float64bits(v)) }

// Bool returns a BOOL value.
func Bool(v bool) Value {
	if v {
		return scalar(ValueBool, 1)
	}
	return scalar(ValueBool, 0)
}

// String returns a STRING value. GGUF strings are byte strings; UTF-8 is expected but not
// enforced for values.
func String(s string) Value { return Value{typ: ValueString, valid: true, str: s} }

// ArrayElem lists the Go element types an array Value can hold. []Value makes a nested
// array (element type ARRAY): every element must itself be an array value. Note that
// llama.cpp's reader rejects nested arrays.
type ArrayElem interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | uint64 | int64 |
		float32 | float64 | bool | string | Value
}

// Array returns an ARRAY value holding elems (not copied).
func Array[T ArrayElem](elems []T) Value {
	if elems == nil {
		elems = []T{}
	}
	return Value{typ: ValueArray, elem: elemTypeOf(elems), valid: true, arr: elems}
}

func elemTypeOf(s any) ValueType {
	switch s.(type) {
	case []uint8:
		return ValueUint8
	case []int8:
		return ValueInt8
	case []uint16:
		return ValueUint16
	case []int16:
		return ValueInt16
	case []uint32:
		return ValueUint32
	case []int32:
		return ValueInt32
	case []uint64:
		return ValueUint64
	case []int64:
		return ValueInt64
	case []float32:
		return ValueFloat32
	case []float64:
		return ValueFloat64
	case []bool:
		return ValueBool
	case []string:
		return ValueString
	case []Value:
		return ValueArray
	}
	panic("gguf: unsupported array element type") // unreachable: ArrayElem constrains callers
}

// ArrayOf returns the elements of v when v is an array whose element type is exactly T's
// GGUF type (e.g. ArrayOf[int32] for an INT32 array). The slice is shared, not copied.
func ArrayOf[T ArrayElem](v Value) ([]T, bool) {
	if !v.valid || v.typ != ValueArray {
		return nil, false
	}
	s, ok := v.arr.([]T)
	return s, ok
}

// Valid reports whether v was built by a constructor or a reader (the zero Value is not).
func (v Value) Valid() bool { return v.valid }

// Type returns the value type.
func (v Value) Type() ValueType { return v.typ }

// ElemType returns the element type of an array (ValueArray for nested arrays); for
// non-arrays it returns the value's own type.
func (v Value) ElemType() ValueType {
	if v.typ == ValueArray {
		return v.elem
	}
	return v.typ
}

// Len returns the number of elements of an array, the byte length of a string, and 1 for
// other scalars.
func (v Value) Len() int {
	switch v.typ {
	case ValueArray:
		return arrayLen(v.arr)
	case ValueString:
		return len(v.str)
	}
	return 1
}

func arrayLen(a any) int {
	switch s := a.(type) {
	case []uint8:
		return len(s)
	case []int8:
		return len(s)
	case []uint16:
		return len(s)
	case []int16:
		return len(s)
	case []uint32:
		return len(s)
	case []int32:
		return len(s)
	case []uint64:
		return len(s)
	case []int64:
		return len(s)
	case []float32:
		return len(s)
	case []float64:
		return len(s)
	case []bool:
		return len(s)
	case []string:
		return len(s)
	case []Value:
		return len(s)
	}
	return 0
}

// signedBits sign-extends the stored bits of a signed scalar.
func (v Value) signed() int64 {
	switch v.typ {
	case ValueInt8:
		return int64(int8(v.num))
	case ValueInt16:
		return int64(int16(v.num))
	case ValueInt32:
		return int64(int32(v.num))
	}
	return int64(v.num)
}

// AsUint returns an integer value (any signed or unsigned width) as uint64. It fails for
// non-integers and negative values.
func (v Value) AsUint() (uint64, bool) {
	if !v.valid {
		return 0, false
	}
	switch {
	case v.typ.isUnsigned():
		return v.num, true
	case v.typ.isSigned():
		if s := v.signed(); s >= 0 {
			return uint64(s), true
		}
	}
	return 0, false
}

// AsInt returns an integer value (any width) as int64. It fails for non-integers and for
// uint64 values above math.MaxInt64.
func (v Value) AsInt() (int64, bool) {
	if !v.valid {
		return 0, false
	}
	switch {
	case v.typ.isSigned():
		return v.signed(), true
	case v.typ.isUnsigned():
		if v.num <= math.MaxInt64 {
			return int64(v.num), true
		}
	}
	return 0, false
}

// AsFloat returns a FLOAT32 or FLOAT64 value as float64.
func (v Value) AsFloat() (float64, bool) {
	if !v.valid {
		return 0, false
	}
	switch v.typ {
	case ValueFloat32:
		return float64(math.Float32frombits(uint32(v.num))), true
	case ValueFloat64:
		return math.Float64frombits(v.num), true
	}
	return 0, false
}

// AsBool returns a BOOL value.
func (v Value) AsBool() (bool, bool) {
	if !v.valid || v.typ != ValueBool {
		return false, false
	}
	return v.num != 0, true
}

// AsString returns a STRING value.
func (v Value) AsString() (string, bool) {
	if !v.valid || v.typ != ValueString {
		return "", false
	}
	return v.str, true
}

// AsStrings returns the elements of a STRING array (shared, not copied).
func (v Value) AsStrings() ([]string, bool) { return ArrayOf[string](v) }

// Index returns element i of an array as a Value. It panics when v is not an array or i is
// out of range, like slice indexing.
func (v Value) Index(i int) Value {
	if v.typ != ValueArray {
		panic("gguf: Index on non-array value")
	}
	switch s := v.arr.(type) {
	case []uint8:
		return Uint8(s[i])
	case []int8:
		return Int8(s[i])
	case []uint16:
		return Uint16(s[i])
	case []int16:
		return Int16(s[i])
	case []uint32:
		return Uint32(s[i])
	case []int32:
		return Int32(s[i])
	case []uint64:
		return Uint64(s[i])
	case []int64:
		return Int64(s[i])
	case []float32:
		return Float32(s[i])
	case []float64:
		return Float64(s[i])
	case []bool:
		return Bool(s[i])
	case []string:
		return String(s[i])
	case []Value:
		return s[i]
	}
	panic("gguf: corrupt array value")
}

// Equal reports whether v and o have the same type and contents. Floats compare by bit
// pattern (so NaN equals an identical NaN and -0 differs from +0).
func (v Value) Equal(o Value) bool {
	if v.valid != o.valid || v.typ != o.typ {
		return false
	}
	switch v.typ {
	case ValueString:
		return v.str == o.str
	case ValueArray:
		if v.elem != o.elem {
			return false
		}
		n := arrayLen(v.arr)
		if n != arrayLen(o.arr) {
			return false
		}
		if a, ok := v.arr.([]string); ok {
			b := o.arr.([]string)
			for i := range a {
				if a[i] != b[i] {
					return false
				}
			}
			return true
		}
		for i := 0; i < n; i++ {
			if !v.Index(i).Equal(o.Index(i)) {
				return false
			}
		}
		return true
	}
	return v.num == o.num
}

// String formats the value for display: numbers and bools plainly, strings quoted (long
// strings shortened), arrays as "[N×type] [e0, e1, ...]" with at most 8 elements shown.
func (v Value) String() string {
	if !v.valid {
		return "<invalid>"
	}
	switch v.typ {
	case ValueString:
		return quoteShort(v.str, 120)
	case ValueArray:
		n := arrayLen(v.arr)
		var b strings.Builder
		fmt.Fprintf(&b, "[%d×%s] [", n, v.elem)
		for i := 0; i < n && i < 8; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(v.Index(i).String())
		}
		if n > 8 {
			b.WriteString(", ...")
		}
		b.WriteString("]")
		return b.String()
	case ValueBool:
		return strconv.FormatBool(v.num != 0)
	case ValueFloat32:
		return strconv.FormatFloat(float64(math.Float32frombits(uint32(v.num))), 'g', -1, 32)
	case ValueFloat64:
		return strconv.FormatFloat(math.Float64frombits(v.num), 'g', -1, 64)
	}
	if v.typ.isSigned() {
		return strconv.FormatInt(v.signed(), 10)
	}
	return strconv.FormatUint(v.num, 10)
}

func quoteShort(s string, max int) string {
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("…(%d bytes)", len(s))
}
