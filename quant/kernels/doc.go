// Package kernels holds the hot numeric kernels of tq: activation quantization (Q8_0, Q8_K),
// dot products between ggml weight blocks and quantized activations, float dot products, a
// single-threaded mat-vec over a row range, and a packed SGEMM.
//
// # Data layout
//
// Every quantized kernel works on raw ggml block bytes exactly as they are stored in a GGUF
// file (little-endian, see the llama.cpp facts doc §2.4–2.5), so weights can be used in place
// from an mmap. Blocks need no alignment.
//
//	Q8_0  34 bytes / 32 elements: fp16 d, int8 qs[32]
//	Q4_0  18 bytes / 32 elements: fp16 d, qs[16] (element j low nibble, j+16 high nibble)
//	Q4_K 144 bytes / 256:  fp16 d, fp16 dmin, scales[12], qs[128]
//	Q5_K 176 bytes / 256:  fp16 d, fp16 dmin, scales[12], qh[32], qs[128]
//	Q6_K 210 bytes / 256:  ql[128], qh[64], int8 scales[16], fp16 d
//	Q8_K 292 bytes / 256:  float32 d, int8 qs[256], int16 bsums[16]
//
// # Semantics
//
// The quantized dot products follow ggml's vec_dot: an exact integer sum inside each block
// (or super-block, with its 6/8-bit sub-block scales applied in integer arithmetic), then one
// float32 multiply by the product of the block scales and a float32 accumulation. The K-quant
// dots read the Q8_K bsums for the minimum (Q4_K, Q5_K) and the −32 offset (Q6_K) terms, as
// ggml does, so the activation row must carry the bsums QuantizeRowQ8K writes. The integer
// parts are exact for every weight byte pattern in both the assembly and the pure-Go paths;
// on the activation side the Q8_0 quants must lie in [−127, 127] (QuantizeRowQ8_0 never
// writes −128; the assembly uses ggml's sign trick, which needs that range), while Q8_K
// quants may take any value. Only the float32 summation order differs between the paths, so
// results agree to within float rounding: |asm − purego| ≤ 2·(blocks+16)·2⁻²⁴·S, and each
// path is within (blocks+8)·2⁻²²·S of a float64 reference, where S = Σ|wᵢxᵢ| with the scale
// and minimum parts of K-quant weights counted separately (tested).

// The float kernels DotF16F32 and DotBF16F32 widen the 16-bit weights exactly and multiply
// by float32 activations. (ggml rounds the activations to fp16/bf16 first; callers that need
// that exact behaviour can round x before the call.)
//
// # Preconditions
//
// The exported kernels check lengths and panic with a message naming the kernel when a
// buffer is too short or n is not a multiple of the block size; that is their only failure
// mode. Any byte content is accepted: non-finite fp16 scales simply propagate through the
// float arithmetic. MatVec, MatVecFloat and the Sgemm entry points return errors instead.
// The activation quantizers expect finite inputs (as ggml does); non-finite inputs give
// unspecified, but memory-safe, output.
//
// # Implementations
//
// On amd64 with AVX2, FMA and F16C (detected at start with golang.org/x/sys/cpu) the kernels
// run hand-written Go assembly. Everywhere else, under the build tag purego, or after
// SetPureGo(true), they run pure-Go twins, which are also the reference the tests compare the
// assembly against.
package kernels
