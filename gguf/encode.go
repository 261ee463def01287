package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// encoder writes GGUF primitives to a buffered writer, remembering the first error.
type encoder struct {
	w   *bufio.Writer
	b   [8]byte
	err error
}

func (e *encoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.b[:4], v)
	e.raw(e.b[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.b[:8], v)
	e.raw(e.b[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

// validateMetadata checks keys (non-empty, UTF-8, unique) and values (constructed, nested
// arrays well formed) before anything is written.
func validateMetadata(md Metadata) error {
	seen := make(map[string]bool, len(md))
	for i, kv := range md {
		switch {
		case kv.Key == "":
			return fmt.Errorf("gguf: metadata entry %d has an empty key", i)
		case !utf8.ValidString(kv.Key):
			return fmt.Errorf("gguf: metadata key %q is not valid UTF-8", kv.Key)
		case seen[kv.Key]:
			return fmt.Errorf("gguf: duplicate metadata key %q", kv.Key)
		}
		seen[kv.Key] = true
		if err := validateValue(kv.Value, 0); err != nil {
			return fmt.Errorf("gguf: metadata key %q: %v", kv.Key, err)
		}
	}
	return nil
}

func validateValue(v Value, depth int) error {
	if !v.Valid() {
		return fmt.Errorf("invalid (zero) Value")
	}
	if v.Type() != ValueArray {
		return nil
	}
	if depth >= maxNesting {
		return fmt.Errorf("arrays nested deeper than %d levels", maxNesting)
	}
	if sub, ok := v.arr.([]Value); ok {
		for i, e := range sub {
			if !e.Valid() || e.Type() != ValueArray {
				return fmt.Errorf("element %d of a nested array is not an array", i)
			}
			if err := validateValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %v", i, err)
			}
		}
	}
	return nil
}

func (e *encoder) value(v Value) {
	switch v.typ {
	case ValueString:
		e.str(v.str)
		return
	case ValueArray:
		e.u32(uint32(v.elem))
		e.u64(uint64(arrayLen(v.arr)))
		e.arrayBody(v)
		return
	}
	switch v.typ.scalarSize() {
	case 1:
		e.b[0] = byte(v.num)
		e.raw(e.b[:1])
	case 2:
		binary.LittleEndian.PutUint16(e.b[:2], uint16(v.num))
		e.raw(e.b[:2])
	case 4:
		e.u32(uint32(v.num))
	case 8:
		e.u64(v.num)
	}
}

func (e *encoder) arrayBody(v Value) {
	switch s := v.arr.(type) {
	case []uint8:
		e.raw(s)
	case []int8:
		for _, x := range s {
			e.b[0] = byte(x)
			e.raw(e.b[:1])
		}
	case []bool:
		for _, x := range s {
			e.b[0] = 0
			if x {
				e.b[0] = 1
			}
			e.raw(e.b[:1])
		}
	case []uint16:
		for _, x := range s {
			binary.LittleEndian.PutUint16(e.b[:2], x)
			e.raw(e.b[:2])
		}
	case []int16:
		for _, x := range s {
			binary.LittleEndian.PutUint16(e.b[:2], uint16(x))
			e.raw(e.b[:2])
		}
	case []uint32:
		for _, x := range s {
			e.u32(x)
		}
	case []int32:
		for _, x := range s {
			e.u32(uint32(x))
		}
	case []float32:
		for _, x := range s {
			e.u32(math.Float32bits(x))
		}
	case []uint64:
		for _, x := range s {
			e.u64(x)
		}
	case []int64:
		for _, x := range s {
			e.u64(uint64(x))
		}
	case []float64:
		for _, x := range s {
			e.u64(math.Float64bits(x))
		}
	case []string:
		for _, x := range s {
			e.str(x)
		}
	case []Value:
		for _, x := range s {
			e.value(x)
		}
	}
}

// writeHeader encodes magic, version, counts, metadata and tensor infos (no padding).
// Metadata must have passed validateMetadata; tensor dims are written as given.
func writeHeader(w *bufio.Writer, md Metadata, tensors []TensorInfo) error {
	e := &encoder{w: w}
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(md)))
	for _, kv := range md {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	for _, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	return e.err
}
