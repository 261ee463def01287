//go:build amd64 && !purego

package kernels

//go:noescape
func packB16BF16AVX2(dst *float32, b *byte, ldb int, kc8 int)

//go:noescape
func packB16F16AVX2(dst *float32, b *byte, ldb int, kc8 int)
