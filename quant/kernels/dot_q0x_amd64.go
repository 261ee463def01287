//go:build amd64 && !purego

package kernels

// Assembly kernels of dot_q0x_amd64.s (callers guarantee nb ≥ 1 and the lengths). Each adds
// its blocks into the 8 float32 lanes of acc in ggml's order; hsum8 (and the caller's final
// steps) turn them into the dot product.

//go:noescape
func q0xDotQ5_0AVX2(w, x *byte, nb int, acc *[8]float32)

// q0xDotIQ4NLPairsAVX2 processes 2·npairs blocks: even blocks into acc[0:8], odd into acc[8:16].
//
//go:noescape
func q0xDotIQ4NLPairsAVX2(w, x *byte, npairs int, acc *[16]float32)

// q0xDotIQ4NLAVX2 accumulates all nb blocks into one accumulator (tinyBLAS's order).
//
//go:noescape
func q0xDotIQ4NLAVX2(w, x *byte, nb int, acc *[8]float32)

// q0xDotQ4_1AVX2 and q0xDotQ5_1AVX2 also return summs, the FMA chain of m_w·s_x over the
// blocks (from +0).
//
//go:noescape
func q0xDotQ4_1AVX2(w, x *byte, nb int, acc *[8]float32) float32

//go:noescape
func q0xDotQ5_1AVX2(w, x *byte, nb int, acc *[8]float32) float32
