//go:build !amd64 || purego

package kernels

func packB16BF16AVX2(dst *float32, b *byte, ldb int, kc8 int) { panic(noAsm) }

func packB16F16AVX2(dst *float32, b *byte, ldb int, kc8 int) { panic(noAsm) }
