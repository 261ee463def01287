package quant

import (
	"fmt"

	"github.com/tq-project/tq/gguf"
)

// QK_K is the super-block size of the K-quants, IQ4_XS and Q8_K.
const QK_K = 256

// Block byte sizes of the formats implemented here (ggml-common.h).
const (
	sizeQ4_0   = 18
	sizeQ4_1   = 20
	sizeQ5_0   = 22
	sizeQ5_1   = 24
	sizeQ8_0   = 34
	sizeQ8_1   = 36
	sizeQ2_K   = 84
	sizeQ3_K   = 110
	sizeQ4_K   = 144
	sizeQ5_K   = 176
	sizeQ6_K   = 210
	sizeQ8_K   = 292
	sizeIQ4_NL = 18
	sizeIQ4_XS = 136
)

// supported lists the types this package can quantize and dequantize.
var supported = map[gguf.GGMLType]bool{
	gguf.TypeF32: true, gguf.TypeF16: true, gguf.TypeBF16: true,
	gguf.TypeQ4_0: true, gguf.TypeQ4_1: true, gguf.TypeQ5_0: true, gguf.TypeQ5_1: true,
	gguf.TypeQ8_0: true, gguf.TypeQ8_1: true,
	gguf.TypeQ2_K: true, gguf.TypeQ3_K: true, gguf.TypeQ4_K: true, gguf.TypeQ5_K: true,
	gguf.TypeQ6_K: true, gguf.TypeQ8_K: true,
	gguf.TypeIQ4_NL: true, gguf.TypeIQ4_XS: true,
}

// Supported reports whether this package implements quantization and dequantization
// for t. Q8_1 and Q8_K are activation formats: they are supported for completeness
// but never appear in model files.
func Supported(t gguf.GGMLType) bool { return supported[t] }

// SupportedTypes lists the supported types in ascending id order.
func SupportedTypes() []gguf.GGMLType {
	var out []gguf.GGMLType
	for _, t := range gguf.AllTypes() {
		if supported[t] {
			out = append(out, t)
		}
	}
	return out
}

// BlockSize returns the number of elements per block of t (1 for float types), or 0
// when t is unknown.
func BlockSize(t gguf.GGMLType) int {
	tr, ok := t.Traits()
	if !ok {
		return 0
	}
	return tr.BlockSize
}

// RowSize returns the byte size of one row of ncols elements of type t. It fails
// when t is not supported by this package, ncols is not positive, or ncols is not a
// multiple of the type's block size (for example 256 for the K-quants).
func RowSize(t gguf.GGMLType, ncols int) (int, error) {
	rs, err := rowSize(t, ncols)
	if err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	return rs, nil
}

func rowSize(t gguf.GGMLType, ncols int) (int, error) {
	tr, ok := t.Traits()
	if !ok || !supported[t] {
		return 0, fmt.Errorf("type %v is not supported", t)
	}
	if ncols <= 0 {
		return 0, fmt.Errorf("%v: row length must be positive, got %d", t, ncols)
	}
	if ncols%tr.BlockSize != 0 {
		return 0, fmt.Errorf("%v needs a row length that is a multiple of %d, got %d (see FallbackType)", t, tr.BlockSize, ncols)
	}
	return ncols / tr.BlockSize * tr.TypeSize, nil
}

// FallbackType returns the type llama-quantize stores a tensor in when its rows of
// ncols elements cannot be split into blocks of the requested type t
// (src/llama-quant.cpp tensor_type_fallback):
//
//	IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS -> IQ4_NL
//	Q2_0, Q2_K, Q3_K, TQ1_0, TQ2_0                                -> Q4_0
//	Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0
//	a type whose block is <= 32 elements                          -> itself
//
// and if the result still does not divide ncols, F16. When ncols already fits t,
// t is returned unchanged. For types where llama.cpp has no fallback and aborts
// (block > 32 and not listed above), FallbackType returns F16; use
// FallbackTypeChecked to get llama.cpp's error instead.
func FallbackType(t gguf.GGMLType, ncols int) gguf.GGMLType {
	r, err := FallbackTypeChecked(t, ncols)
	if err != nil {
		return gguf.TypeF16
	}
	return r
}

// FallbackTypeChecked is FallbackType, but returns an error where llama-quantize
// throws "no tensor type fallback is defined".
func FallbackTypeChecked(t gguf.GGMLType, ncols int) (gguf.GGMLType, error) {
	qk := BlockSize(t)
	if qk == 0 {
		return 0, fmt.Errorf("quant: unknown ggml type id %d", uint32(t))
	}
	if ncols%qk == 0 {
		return t, nil
	}
	var r gguf.GGMLType
	switch t {
	case gguf.TypeIQ1_S, gguf.TypeIQ1_M, gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ2_S,
		gguf.TypeIQ3_XXS, gguf.TypeIQ3_S, gguf.TypeIQ4_XS:
		r = gguf.TypeIQ4_NL
	case gguf.TypeQ2_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeTQ1_0, gguf.TypeTQ2_0:
		r = gguf.TypeQ4_0
	case gguf.TypeQ4_K:
		r = gguf.TypeQ5_0
	case gguf.TypeQ5_K:
		r = gguf.TypeQ5_1
	case gguf.TypeQ6_K:
		r = gguf.TypeQ8_0
	default:
		if qk > 32 {
			return 0, fmt.Errorf("quant: no tensor type fallback is defined for type %v (row length %d)", t, ncols)
		}
		r = t
	}
	if ncols%BlockSize(r) != 0 {
		r = gguf.TypeF16
	}
	return r, nil
}
