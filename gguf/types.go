package gguf

import "fmt"

// GGMLType is a ggml tensor element type id as stored in GGUF tensor infos
// (ggml.h: enum ggml_type). The ids are part of the file format.
type GGMLType uint32

const (
	TypeF32     GGMLType = 0
	TypeF16     GGMLType = 1
	TypeQ4_0    GGMLType = 2
	TypeQ4_1    GGMLType = 3
	TypeQ5_0    GGMLType = 6
	TypeQ5_1    GGMLType = 7
	TypeQ8_0    GGMLType = 8
	TypeQ8_1    GGMLType = 9
	TypeQ2_K    GGMLType = 10
	TypeQ3_K    GGMLType = 11
	TypeQ4_K    GGMLType = 12
	TypeQ5_K    GGMLType = 13
	TypeQ6_K    GGMLType = 14
	TypeQ8_K    GGMLType = 15
	TypeIQ2_XXS GGMLType = 16
	TypeIQ2_XS  GGMLType = 17
	TypeIQ3_XXS GGMLType = 18
	TypeIQ1_S   GGMLType = 19
	TypeIQ4_NL  GGMLType = 20
	TypeIQ3_S   GGMLType = 21
	TypeIQ2_S   GGMLType = 22
	TypeIQ4_XS  GGMLType = 23
	TypeI8      GGMLType = 24
	TypeI16     GGMLType = 25
	TypeI32     GGMLType = 26
	TypeI64     GGMLType = 27
	TypeF64     GGMLType = 28
	TypeIQ1_M   GGMLType = 29
	TypeBF16    GGMLType = 30
	TypeTQ1_0   GGMLType = 34
	TypeTQ2_0   GGMLType = 35
	TypeMXFP4   GGMLType = 39
	TypeNVFP4   GGMLType = 40
	TypeQ1_0    GGMLType = 41
	TypeQ2_0    GGMLType = 42
	// TypeCount is GGML_TYPE_COUNT: ids >= TypeCount are unknown.
	TypeCount GGMLType = 43
)

// TypeTraits describes the storage of one ggml type.
type TypeTraits struct {
	Name      string // ggml_type_name, e.g. "q4_K"
	BlockSize int    // elements per block
	TypeSize  int    // bytes per block
	// Quantized reports whether the type is a block-quantized type.
	Quantized bool
	// ActivationOnly marks types that never appear in model files (q8_1, q8_K).
	ActivationOnly bool
}

// BitsPerWeight is the storage cost of one element.
func (t TypeTraits) BitsPerWeight() float64 {
	return float64(t.TypeSize*8) / float64(t.BlockSize)
}

var typeTable = map[GGMLType]TypeTraits{
	TypeF32:     {"f32", 1, 4, false, false},
	TypeF16:     {"f16", 1, 2, false, false},
	TypeQ4_0:    {"q4_0", 32, 18, true, false},
	TypeQ4_1:    {"q4_1", 32, 20, true, false},
	TypeQ5_0:    {"q5_0", 32, 22, true, false},
	TypeQ5_1:    {"q5_1", 32, 24, true, false},
	TypeQ8_0:    {"q8_0", 32, 34, true, false},
	TypeQ8_1:    {"q8_1", 32, 36, true, true},
	TypeQ2_K:    {"q2_K", 256, 84, true, false},
	TypeQ3_K:    {"q3_K", 256, 110, true, false},
	TypeQ4_K:    {"q4_K", 256, 144, true, false},
	TypeQ5_K:    {"q5_K", 256, 176, true, false},
	TypeQ6_K:    {"q6_K", 256, 210, true, false},
	TypeQ8_K:    {"q8_K", 256, 292, true, true},
	TypeIQ2_XXS: {"iq2_xxs", 256, 66, true, false},
	TypeIQ2_XS:  {"iq2_xs", 256, 74, true, false},
	TypeIQ3_XXS: {"iq3_xxs", 256, 98, true, false},
	TypeIQ1_S:   {"iq1_s", 256, 50, true, false},
	TypeIQ4_NL:  {"iq4_nl", 32, 18, true, false},
	TypeIQ3_S:   {"iq3_s", 256, 110, true, false},
	TypeIQ2_S:   {"iq2_s", 256, 82, true, false},
	TypeIQ4_XS:  {"iq4_xs", 256, 136, true, false},
	TypeI8:      {"i8", 1, 1, false, false},
	TypeI16:     {"i16", 1, 2, false, false},
	TypeI32:     {"i32", 1, 4, false, false},
	TypeI64:     {"i64", 1, 8, false, false},
	TypeF64:     {"f64", 1, 8, false, false},
	TypeIQ1_M:   {"iq1_m", 256, 56, true, false},
	TypeBF16:    {"bf16", 1, 2, false, false},
	TypeTQ1_0:   {"tq1_0", 256, 54, true, false},
	TypeTQ2_0:   {"tq2_0", 256, 66, true, false},
	TypeMXFP4:   {"mxfp4", 32, 17, true, false},
	TypeNVFP4:   {"nvfp4", 64, 36, true, false},
	TypeQ1_0:    {"q1_0", 128, 18, true, false},
	TypeQ2_0:    {"q2_0", 64, 18, true, false},
}

// Traits returns the storage traits of t and whether t is a known type.
func (t GGMLType) Traits() (TypeTraits, bool) {
	tr, ok := typeTable[t]
	return tr, ok
}

// Known reports whether t is a type id llama.cpp defines.
func (t GGMLType) Known() bool { _, ok := typeTable[t]; return ok }

func (t GGMLType) String() string {
	if tr, ok := typeTable[t]; ok {
		return tr.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType maps a ggml type name (case-insensitive, e.g. "Q4_K", "q8_0", "bf16") to its id.
func ParseType(name string) (GGMLType, error) {
	for id, tr := range typeTable {
		if equalFold(tr.Name, name) {
			return id, nil
		}
	}
	return 0, fmt.Errorf("unknown ggml type %q", name)
}

// AllTypes lists every known type id in ascending order.
func AllTypes() []GGMLType {
	out := make([]GGMLType, 0, len(typeTable))
	for id := GGMLType(0); id < TypeCount; id++ {
		if _, ok := typeTable[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// RowBytes returns the byte size of a row of n elements, or an error when n is not a
// multiple of the block size or the type is unknown.
func (t GGMLType) RowBytes(n int64) (int64, error) {
	tr, ok := typeTable[t]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type id %d", uint32(t))
	}
	if n < 0 || n%int64(tr.BlockSize) != 0 {
		return 0, fmt.Errorf("row length %d is not a multiple of %s block size %d", n, tr.Name, tr.BlockSize)
	}
	return n / int64(tr.BlockSize) * int64(tr.TypeSize), nil
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
