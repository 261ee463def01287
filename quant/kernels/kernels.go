package kernels

import (
	"fmt"
	"unsafe"
)

// LengthError is the panic value of an exported kernel whose length precondition fails
// (n not a multiple of the block size, or a buffer shorter than n elements need).
type LengthError struct {
	Kernel string // exported function name
	Msg    string
}

func (e *LengthError) Error() string { return "kernels: " + e.Kernel + ": " + e.Msg }

func lengthPanic(kernel, format string, args ...any) {
	panic(&LengthError{Kernel: kernel, Msg: fmt.Sprintf(format, args...)})
}

// checkBlocks validates n against the block size and the byte buffers against n, returning
// the block count.
func checkBlocks(kernel string, n, blockSize, wBlock, xBlock int, w, x []byte) int {
	if n < 0 || n%blockSize != 0 {
		lengthPanic(kernel, "n = %d is not a non-negative multiple of %d", n, blockSize)
	}
	nb := n / blockSize
	// Compare by division: nb·blockBytes could overflow for an absurd n.
	if nb > len(w)/wBlock {
		lengthPanic(kernel, "weight row has %d bytes, too few for n = %d (%d blocks of %d bytes)", len(w), n, nb, wBlock)
	}
	if nb > len(x)/xBlock {
		lengthPanic(kernel, "activation row has %d bytes, too few for n = %d (%d blocks of %d bytes)", len(x), n, nb, xBlock)
	}
	return nb
}

// QuantizeRowQ8_0 quantizes x (len(x) a multiple of 32) into len(x)/32 Q8_0 blocks at the
// start of dst, bit-exact with ggml's x86 CPU from_float (q = round-half-even(x·127/amax),
// d = fp16(amax/127)). It panics with a *LengthError if len(x)%32 != 0 or dst is too short.
func QuantizeRowQ8_0(dst []byte, x []float32) {
	if len(x)%QK8_0 != 0 {
		lengthPanic("QuantizeRowQ8_0", "len(x) = %d is not a multiple of %d", len(x), QK8_0)
	}
	nb := len(x) / QK8_0
	if len(dst) < nb*BlockBytesQ8_0 {
		lengthPanic("QuantizeRowQ8_0", "dst has %d bytes, %d elements need %d", len(dst), len(x), nb*BlockBytesQ8_0)
	}
	if nb == 0 {
		return
	}
	if useAsm() {
		quantizeQ8_0AVX2(&dst[0], &x[0], nb)
		return
	}
	quantizeQ8_0Go(dst, x, nb)
}

// QuantizeRowQ8K quantizes x (len(x) a multiple of 256) into len(x)/256 Q8_K blocks at the
// start of dst, bit-exact with ggml's quantize_row_q8_K (all-zero blocks get zero bsums).
// It panics with a *LengthError if len(x)%256 != 0 or dst is too short.
func QuantizeRowQ8K(dst []byte, x []float32) {
	if len(x)%QK_K != 0 {
		lengthPanic("QuantizeRowQ8K", "len(x) = %d is not a multiple of %d", len(x), QK_K)
	}
	nb := len(x) / QK_K
	if len(dst) < nb*BlockBytesQ8_K {
		lengthPanic("QuantizeRowQ8K", "dst has %d bytes, %d elements need %d", len(dst), len(x), nb*BlockBytesQ8_K)
	}
	if nb == 0 {
		return
	}
	if useAsm() {
		quantizeQ8KAVX2(&dst[0], &x[0], nb)
		return
	}
	quantizeQ8KGo(dst, x, nb)
}

// QuantizeActivations quantizes x to the activation type that weights of type wt need
// (see ActivationType) and returns the bytes, allocating when dst is too small. For float
// weight types it returns nil: those kernels take x directly.
func QuantizeActivations(wt Type, dst []byte, x []float32) ([]byte, error) {
	at, err := ActivationType(wt)
	if err != nil {
		return nil, err
	}
	if at == F32 {
		return nil, nil
	}
	nbytes, err := RowBytes(at, len(x))
	if err != nil {
		return nil, err
	}
	if cap(dst) < nbytes {
		dst = make([]byte, nbytes)
	}
	dst = dst[:nbytes]
	if at == Q8_0 {
		QuantizeRowQ8_0(dst, x)
	} else {
		QuantizeRowQ8K(dst, x)
	}
	return dst, nil
}

// dotQ8Asm runs the Q8_0-activation assembly kernel for weights of type t (Q8_0 or Q4_0),
// widening the activation scales in chunks of 256 blocks on the stack. (The kernels are
// called directly, not through a func value, so xs does not escape.)
func dotQ8Asm(t Type, nb int, w, x []byte) float32 {
	var xs [256]float32
	var acc [8]float32
	for b0 := 0; b0 < nb; b0 += len(xs) {
		c := min(len(xs), nb-b0)
		q8ScalesAVX2(&x[b0*BlockBytesQ8_0], c, &xs[0])
		if t == Q4_0 {
			dotQ4_0Q8_0AVX2(&w[b0*BlockBytesQ4_0], &x[b0*BlockBytesQ8_0], &xs[0], c, &acc)
		} else {
			dotQ8_0Q8_0AVX2(&w[b0*BlockBytesQ8_0], &x[b0*BlockBytesQ8_0], &xs[0], c, &acc)
		}
	}
	return hsum8(&acc)
}

// DotQ8_0Q8_0 returns the dot product of n elements (a multiple of 32) of a Q8_0 weight row
// w and a Q8_0 activation row x. Any weight bytes are accepted; the activation quants must be
// in [−127, 127], as QuantizeRowQ8_0 (and ggml) produce them — an activation byte of −128
// gives an unspecified (memory-safe) result on the assembly path. It panics with a
// *LengthError on a length violation.
func DotQ8_0Q8_0(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ8_0Q8_0", n, QK8_0, BlockBytesQ8_0, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ8Asm(Q8_0, nb, w, x)
	}
	return dotQ8_0Q8_0Go(nb, w, x)
}

// DotQ4_0Q8_0 returns the dot product of n elements (a multiple of 32) of a Q4_0 weight row
// w and a Q8_0 activation row x. It panics with a *LengthError on a length violation.
func DotQ4_0Q8_0(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ4_0Q8_0", n, QK8_0, BlockBytesQ4_0, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ8Asm(Q4_0, nb, w, x)
	}
	return dotQ4_0Q8_0Go(nb, w, x)
}

// DotQ4_KQ8K returns the dot product of n elements (a multiple of 256) of a Q4_K weight row
// w and a Q8_K activation row x. It panics with a *LengthError on a length violation.
func DotQ4_KQ8K(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ4_KQ8K", n, QK_K, BlockBytesQ4_K, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ4KQ8KAVX2(&w[0], &x[0], nb)
	}
	return dotQ4KQ8KGo(nb, w, x)
}

// DotQ5_KQ8K returns the dot product of n elements (a multiple of 256) of a Q5_K weight row
// w and a Q8_K activation row x. It panics with a *LengthError on a length violation.
func DotQ5_KQ8K(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ5_KQ8K", n, QK_K, BlockBytesQ5_K, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ5KQ8KAVX2(&w[0], &x[0], nb)
	}
	return dotQ5KQ8KGo(nb, w, x)
}

// DotQ6_KQ8K returns the dot product of n elements (a multiple of 256) of a Q6_K weight row
// w and a Q8_K activation row x. It panics with a *LengthError on a length violation.
func DotQ6_KQ8K(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ6_KQ8K", n, QK_K, BlockBytesQ6_K, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ6KQ8KAVX2(&w[0], &x[0], nb)
	}
	return dotQ6KQ8KGo(nb, w, x)
}

// DotF32 returns Σ a[i]·b[i] over len(a) elements. It panics with a *LengthError if
// len(b) < len(a).
func DotF32(a, b []float32) float32 {
	n := len(a)
	if len(b) < n {
		lengthPanic("DotF32", "len(b) = %d < len(a) = %d", len(b), n)
	}
	if n == 0 {
		return 0
	}
	if useAsm() {
		return dotF32AVX2(&a[0], &b[0], n)
	}
	return dotF32Go(a, b[:n])
}

// DotF16F32 returns Σ h2f(w[i])·x[i] over len(x) elements, where w holds little-endian
// fp16 values. It panics with a *LengthError if len(w) < 2·len(x).
func DotF16F32(w []byte, x []float32) float32 {
	n := len(x)
	if len(w) < 2*n {
		lengthPanic("DotF16F32", "weight row has %d bytes, %d elements need %d", len(w), n, 2*n)
	}
	if n == 0 {
		return 0
	}
	if useAsm() {
		return dotF16F32AVX2(&w[0], &x[0], n)
	}
	return dotF16F32Go(w, x)
}

// DotF16F32Rows sets out[r] = DotF16F32(w[r·stride:], x) for r < len(out), bit for bit
// (one call for many rows: the decode attention's key positions). It panics with a
// *LengthError if a row is outside w.
func DotF16F32Rows(out []float32, w []byte, stride int, x []float32) {
	n, rows := len(x), len(out)
	if rows == 0 {
		return
	}
	if stride < 0 || len(w) < (rows-1)*stride+2*n {
		lengthPanic("DotF16F32Rows", "%d rows of %d bytes at stride %d do not fit in %d bytes", rows, 2*n, stride, len(w))
	}
	if useAsm() && n > 0 && n%32 == 0 {
		dotF16F32RowsAVX2(&w[0], stride, &x[0], n, rows, &out[0])
		return
	}
	for r := range out {
		out[r] = DotF16F32(w[r*stride:r*stride+2*n], x)
	}
}

// DotBF16F32 returns Σ bf16(w[i])·x[i] over len(x) elements, where w holds little-endian
// bfloat16 values. It panics with a *LengthError if len(w) < 2·len(x).
func DotBF16F32(w []byte, x []float32) float32 {
	n := len(x)
	if len(w) < 2*n {
		lengthPanic("DotBF16F32", "weight row has %d bytes, %d elements need %d", len(w), n, 2*n)
	}
	if n == 0 {
		return 0
	}
	if useAsm() {
		return dotBF16F32AVX2(&w[0], &x[0], n)
	}
	return dotBF16F32Go(w, x)
}

// dotF32BytesGo is the F32-weights-as-bytes twin used by MatVecFloat's pure-Go path.
func dotF32BytesGo(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:4*n]
	var s0, s1 float32
	i := 0
	for ; i+2 <= n; i += 2 {
		s0 += f32le(w[4*i:]) * x[i]
		s1 += f32le(w[4*i+4:]) * x[i+1]
	}
	if i < n {
		s0 += f32le(w[4*i:]) * x[i]
	}
	return s0 + s1
}

func bytesAsFloat32(b []byte) *float32 { return (*float32)(unsafe.Pointer(&b[0])) }
