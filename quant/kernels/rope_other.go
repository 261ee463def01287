//go:build !amd64 || purego

package kernels

func ropeNeoxAVX2(x0, x1, cs *float32, n int) { panic(noAsm) }

func ropeNormAVX2(x, cs *float32, n int) { panic(noAsm) }
