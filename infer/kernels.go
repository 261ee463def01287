package infer

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// The numeric kernels come from package quant/kernels (AVX2 assembly where the CPU has it,
// pure Go elsewhere): activation quantizers bit-exact with ggml's x86 CPU backend, integer
// block dot products with ggml's semantics, float dots and the f32 GEMM.

const (
	blockQ8_0 = 34
	blockQ8_1 = 36
	blockQ4_0 = 18
	blockQ4_1 = 20
	blockQ5_1 = 24
	blockQ8_K = 292
)

var (
	kDotF32     = kernels.DotF32
	kDotF16F32  = kernels.DotF16F32
	kDotBF16F32 = kernels.DotBF16F32
	kQuantQ8_0  = kernels.QuantizeRowQ8_0
	kQuantQ8_K  = kernels.QuantizeRowQ8K
)

// KernelImplementation names the kernel implementation in use (AVX2 assembly or pure Go).
func KernelImplementation() string { return kernels.Implementation() }

// kDequant dequantizes src (exactly the bytes of len(dst) elements of type t) into dst.
func kDequant(t gguf.GGMLType, src []byte, dst []float32) error {
	return quant.Dequantize(t, dst, src)
}

// sgemm computes C[i][j] = A[i]·B[j] for an m×k A and n×k B (row-major) into C (row stride
// ldc).
func sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if err := kernels.Sgemm(m, n, k, a, lda, b, ldb, c, ldc, false); err != nil {
		panic(err) // shapes are ours: an error here is a bug
	}
}

// axpyF32 computes y += a*x.
func axpyF32(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// quantizeQ4_0 is ggml's quantize_row_q4_0_ref, the CPU conversion of a q4_0 KV cache row:
// d = (signed value of largest magnitude)/-8, q = min(15, trunc(x/d + 8.5)).
func quantizeQ4_0(dst []byte, x []float32) {
	for i := 0; i < len(x)/32; i++ {
		blk := x[i*32 : i*32+32]
		var amax, mx float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, mx = a, v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		o := dst[i*blockQ4_0 : i*blockQ4_0+blockQ4_0]
		binary.LittleEndian.PutUint16(o, f2h(d))
		for j := 0; j < 16; j++ {
			q0 := min(int8(15), int8(blk[j]*id+8.5))
			q1 := min(int8(15), int8(blk[j+16]*id+8.5))
			o[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

// actType is the form an activation row takes before a dot product with a weight row: ggml's
// "vec_dot_type" of the weight type.
type actType int

const (
	actF32     actType = iota // plain f32
	actF16                    // f32 rounded to binary16 (weights f16)
	actBF16                   // f32 rounded to bfloat16 (weights bf16)
	actQ8_0                   // q8_0 blocks
	actQ8_K                   // q8_K blocks
	actQ8_1                   // q8_1 blocks (q4_1, q5_1 weights)
	actQ8_0Deq                // f32 values of the q8_0 round trip (weights without an integer kernel)
	actQ8_KDeq                // f32 values of the q8_K round trip (weights without an integer kernel)
)

// rowBytes is the size of a prepared activation row of n elements.
func (a actType) rowBytes(n int) int {
	switch a {
	case actQ8_0:
		return n / 32 * blockQ8_0
	case actQ8_K:
		return n / 256 * blockQ8_K
	case actQ8_1:
		return n / 32 * blockQ8_1
	}
	return n * 4
}

var quantBufPool = sync.Pool{New: func() any { return new([]byte) }}

// roundTrip writes into dst the f32 values of x after conversion to the activation type a.
func (a actType) roundTrip(dst, x []float32) {
	switch a {
	case actF32:
		copy(dst, x)
	case actF16:
		copy(dst, x)
		roundTo(gguf.TypeF16, dst[:len(x)])
	case actBF16:
		copy(dst, x)
		roundTo(gguf.TypeBF16, dst[:len(x)])
	case actQ8_0, actQ8_0Deq, actQ8_1, actQ8_K, actQ8_KDeq:
		qt, bs, quantize := gguf.TypeQ8_0, blockQ8_0*len(x)/32, kQuantQ8_0
		if a == actQ8_K || a == actQ8_KDeq {
			qt, bs, quantize = gguf.TypeQ8_K, blockQ8_K*len(x)/256, kQuantQ8_K
		}
		bp := quantBufPool.Get().(*[]byte)
		if cap(*bp) < bs {
			*bp = make([]byte, bs)
		}
		buf := (*bp)[:bs]
		quantize(buf, x)
		if err := kDequant(qt, buf, dst[:len(x)]); err != nil {
			panic(err)
		}
		quantBufPool.Put(bp)
	}
}

// prep converts x into the prepared activation row dst.
func (a actType) prep(dst []byte, x []float32) {
	switch a {
	case actQ8_0:
		kQuantQ8_0(dst, x)
	case actQ8_K:
		kQuantQ8_K(dst, x)
	case actQ8_1:
		quant.QuantizeRowQ8_1(dst, x)
	default:
		a.roundTrip(bytesF32(dst)[:len(x)], x)
	}
}

// kernel is the dot product of one weight row of type wt with a prepared activation row.
type kernel struct {
	wt  gguf.GGMLType
	act actType
	// dot returns w·a for rows of n elements; tmp is per-worker scratch of at least n floats.
	dot func(w, a []byte, n int, tmp []float32) float32
	// repack is the quant/kernels type of a repack-order kernel (MatMulRepack), 0 otherwise.
	repack kernels.Type
	// batchDot, when set, replaces dot for a 2-D matrix times two or more activation rows:
	// llama.cpp hands those to llamafile's tinyBLAS, whose per-element order differs from
	// vec_dot's for some types (iq4_nl).
	batchDot func(w, a []byte, n int, tmp []float32) float32
}

// vecDotType returns the ggml vec_dot type of weight type t (what activations are converted to).
func vecDotType(t gguf.GGMLType) (actType, error) {
	switch t {
	case gguf.TypeF32:
		return actF32, nil
	case gguf.TypeF16:
		return actF16, nil
	case gguf.TypeBF16:
		return actBF16, nil
	case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeIQ4_NL, gguf.TypeMXFP4, gguf.TypeNVFP4,
		gguf.TypeQ1_0, gguf.TypeQ2_0:
		return actQ8_0, nil
	case gguf.TypeQ4_1, gguf.TypeQ5_1:
		return actQ8_1, nil
	case gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K,
		gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ3_XXS, gguf.TypeIQ1_S, gguf.TypeIQ3_S,
		gguf.TypeIQ2_S, gguf.TypeIQ4_XS, gguf.TypeIQ1_M, gguf.TypeTQ1_0, gguf.TypeTQ2_0:
		return actQ8_K, nil
	}
	return 0, fmt.Errorf("type %s cannot be used as a weight", t)
}

// kernelFor returns the kernel for weight type t.
func kernelFor(t gguf.GGMLType) (*kernel, error) {
	act, err := vecDotType(t)
	if err != nil {
		return nil, err
	}
	switch t {
	case gguf.TypeF32:
		return &kernel{t, actF32, func(w, a []byte, n int, _ []float32) float32 {
			return kDotF32(bytesF32(w)[:n], bytesF32(a)[:n])
		}, 0, nil}, nil
	case gguf.TypeF16:
		return &kernel{t, actF16, func(w, a []byte, n int, _ []float32) float32 {
			return kDotF16F32(w[:2*n], bytesF32(a)[:n])
		}, 0, nil}, nil
	case gguf.TypeBF16:
		return &kernel{t, actBF16, func(w, a []byte, n int, _ []float32) float32 {
			return kDotBF16F32(w[:2*n], bytesF32(a)[:n])
		}, 0, nil}, nil
	case gguf.TypeQ8_0:
		return &kernel{t, actQ8_0, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ8_0Q8_0(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ4_0:
		return &kernel{t, actQ8_0, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ4_0Q8_0(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ4_K:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ4_KQ8K(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ5_K:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ5_KQ8K(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ6_K:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ6_KQ8K(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ4_1:
		return &kernel{t, actQ8_1, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ4_1Q8_1(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ5_1:
		return &kernel{t, actQ8_1, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ5_1Q8_1(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ2_K:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ2_KQ8K(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ3_K:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ3_KQ8K(n, w, a) }, 0, nil}, nil
	case gguf.TypeIQ4_XS:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotIQ4_XSQ8K(n, w, a) }, 0, nil}, nil
	case gguf.TypeQ5_0:
		return &kernel{t, actQ8_0, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ5_0Q8_0(n, w, a) }, 0, nil}, nil
	case gguf.TypeIQ4_NL:
		return &kernel{t, actQ8_0, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotIQ4_NLQ8_0(n, w, a) }, 0,
			func(w, a []byte, n int, _ []float32) float32 { return kernels.DotIQ4_NLQ8_0Tiny(n, w, a) }}, nil
	}
	// No integer kernel: dequantize the weight row and dot it with the f32 values of the
	// activation's round trip through its vec_dot type (same products, float order differs).
	if err := kDequant(t, nil, nil); err != nil {
		return nil, fmt.Errorf("type %s is not supported", t)
	}
	deq := actQ8_0Deq
	if act == actQ8_K {
		deq = actQ8_KDeq
	}
	return &kernel{t, deq, func(w, a []byte, n int, tmp []float32) float32 {
		tmp = tmp[:n]
		if err := kDequant(t, w, tmp); err != nil {
			panic(err) // checked at load time
		}
		return kDotF32(tmp, bytesF32(a)[:n])
	}, 0, nil}, nil
}

// repackKernelFor returns the kernel llama.cpp's AVX2 CPU backend effectively uses for a weight
// matrix of type t whose row count is a multiple of 8: it repacks Q4_0, IQ4_NL and Q4_K
// matrices into 8-row interleaved blocks ("CPU_REPACK") and multiplies them with gemv/gemm
// kernels whose float accumulation order differs from vec_dot's (one FMA per block, see
// quant/kernels.DotQ4_KQ8KRepack). The integer sums are the same; only the rounding differs,
// but that is what decides whether greedy decoding stays token-for-token with llama.cpp.
// It returns nil for other types.
func repackKernelFor(t gguf.GGMLType) *kernel {
	switch t {
	case gguf.TypeQ4_K:
		return &kernel{t, actQ8_K, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ4_KQ8KRepack(n, w, a) }, kernels.Q4_K, nil}
	case gguf.TypeQ4_0:
		return &kernel{t, actQ8_0, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotQ4_0Q8_0Repack(n, w, a) }, kernels.Q4_0, nil}
	case gguf.TypeIQ4_NL:
		return &kernel{t, actQ8_0, func(w, a []byte, n int, _ []float32) float32 { return kernels.DotIQ4_NLQ8_0Repack(n, w, a) }, kernels.IQ4_NL, nil}
	}
	return nil
}
