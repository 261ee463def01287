//go:build amd64 && !purego

package kernels

// softmaxExpAVX2: y[i] = ggml_v_expf(x[i]−max) for n (a multiple of 8) elements; returns the
// float64 sum of the per-8 float32 sums.
//
//go:noescape
func softmaxExpAVX2(y, x *float32, n int, max float32) float64

// swigluAVX2: y[i] = x[i]/(1+ggml_v_expf(0−x[i]))·g[i] for n (a multiple of 8) elements.
//
//go:noescape
func swigluAVX2(y, x, gt *float32, n int)
