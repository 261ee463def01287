//go:build !amd64 || purego

package kernels

func scaleMaxAVX2(x *float32, scale float32, n int) (float32, bool) { panic(noAsm) }
