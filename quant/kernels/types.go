package kernels

import "fmt"

// Type identifies a ggml tensor type. Its values are the ggml type ids (enum ggml_type), so a
// GGUF tensor's type field converts directly.
type Type uint32

// The ggml types the kernels support.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	BF16 Type = 30
)

// Block sizes (elements per block) and block byte sizes.
const (
	QK8_0 = 32  // elements per Q8_0/Q4_0 block
	QK_K  = 256 // elements per K-quant super-block

	BlockBytesQ8_0 = 34
	BlockBytesQ4_0 = 18
	BlockBytesQ4_K = 144
	BlockBytesQ5_K = 176
	BlockBytesQ6_K = 210
	BlockBytesQ8_K = 292
)

// String returns ggml's name for the type.
func (t Type) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q4_0:
		return "q4_0"
	case Q8_0:
		return "q8_0"
	case Q4_K:
		return "q4_K"
	case Q5_K:
		return "q5_K"
	case Q6_K:
		return "q6_K"
	case Q8_K:
		return "q8_K"
	case BF16:
		return "bf16"
	case Q4_1:
		return "q4_1"
	case Q5_0:
		return "q5_0"
	case Q5_1:
		return "q5_1"
	case Q2_K:
		return "q2_K"
	case Q3_K:
		return "q3_K"
	case IQ4_NL:
		return "iq4_nl"
	case IQ4_XS:
		return "iq4_xs"
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize returns the number of elements per block of t, or 0 for an unsupported type.
func BlockSize(t Type) int {
	switch t {
	case F32, F16, BF16:
		return 1
	case Q4_0, Q8_0:
		return QK8_0
	case Q4_K, Q5_K, Q6_K, Q8_K:
		return QK_K
	}
	return 0
}

// BlockBytes returns the number of bytes per block of t, or 0 for an unsupported type.
func BlockBytes(t Type) int {
	switch t {
	case F32:
		return 4
	case F16, BF16:
		return 2
	case Q4_0:
		return BlockBytesQ4_0
	case Q8_0:
		return BlockBytesQ8_0
	case Q4_K:
		return BlockBytesQ4_K
	case Q5_K:
		return BlockBytesQ5_K
	case Q6_K:
		return BlockBytesQ6_K
	case Q8_K:
		return BlockBytesQ8_K
	}
	return 0
}

// RowBytes returns the byte size of a row of n elements of type t, or an error when t is
// unsupported or n is not a positive multiple of its block size.
func RowBytes(t Type, n int) (int, error) {
	bs := BlockSize(t)
	if bs == 0 {
		return 0, fmt.Errorf("kernels: unsupported type %v", t)
	}
	if n <= 0 || n%bs != 0 {
		return 0, fmt.Errorf("kernels: row length %d is not a positive multiple of the %v block size %d", n, t, bs)
	}
	return n / bs * BlockBytes(t), nil
}

// ActivationType returns the type the activations must be quantized to before a dot
// product with weights of type t (ggml's vec_dot_type): Q8_0 for Q4_0/Q8_0, Q8_K for the
// K-quants, F32 for the float types (which take float32 activations directly).
func ActivationType(t Type) (Type, error) {
	switch t {
	case Q4_0, Q8_0:
		return Q8_0, nil
	case Q4_K, Q5_K, Q6_K:
		return Q8_K, nil
	case F32, F16, BF16:
		return F32, nil
	}
	return 0, fmt.Errorf("kernels: no dot kernel for weight type %v", t)
}
