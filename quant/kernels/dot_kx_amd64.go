//go:build amd64 && !purego

package kernels

// The assembly kernels of dot_kx_amd64.s (Q2_K, Q3_K, IQ4_XS weights · Q8_K activations in
// ggml's AVX2 vec_dot order). Callers guarantee nb ≥ 1 and the buffer lengths.

//go:noescape
func dotQ2KQ8KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ3KQ8KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotIQ4XSQ8KAVX2(w, x *byte, nb int) float32
