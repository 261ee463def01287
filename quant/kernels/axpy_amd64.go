//go:build amd64 && !purego

package kernels

//go:noescape
func axpyFMAAVX2(y *float32, a float32, x *float32, n int)

//go:noescape
func scaleF32AVX2(y *float32, a float32, n int)
