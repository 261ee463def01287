//go:build amd64 && !purego

package kernels

//go:noescape
func axpyFMAAVX2(y *float32, a float32, x *float32, n int)

//go:noescape
func scaleF32AVX2(y *float32, a float32, n int)

//go:noescape
func addF32ToF64AVX2(dst *float64, src *float32, n int)
