// Package quant implements ggml's tensor storage formats: quantization and
// dequantization for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K…Q6_K,
// IQ4_NL and IQ4_XS, and the activation formats Q8_0, Q8_1 and Q8_K.
//
// Layouts and decoding are bit-identical to ggml (llama.cpp ggml-quants.c). Quantize
// has two modes: ModeReference reproduces ggml's quantizers byte for byte (with
// importance weights, llama-quantize's imatrix algorithms), and ModeImproved runs a
// more thorough search that minimises the importance-weighted squared error of the
// stored blocks and is never worse than ModeReference on that measure.
// See docs/quantization.md.
//
// The package does no I/O. SIMD dot-product kernels live in quant/kernels.
package quant
