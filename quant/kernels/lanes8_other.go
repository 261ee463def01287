//go:build !amd64 || purego

package kernels

import "unsafe"

func dotLanes8AVX2(a, b *float32, n int) float32 { panic(noAsm) }
func lanes8Run3x4F32AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int) {
	panic(noAsm)
}
func lanes8Run3x4F16AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int) {
	panic(noAsm)
}
func lanes8Run3x4BF16AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int) {
	panic(noAsm)
}
