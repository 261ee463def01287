//go:build amd64 && !purego

package kernels

import "unsafe"

// The lanes8 assembly kernels (lanes8_amd64.s). Callers guarantee the lengths.

// dotLanes8AVX2 returns DotLanes8 of n elements (n > 0, a multiple of 8) at a and b.
//
//go:noescape
func dotLanes8AVX2(a, b *float32, n int) float32

// lanes8Run3x4F32AVX2 runs ntiles ≥ 1 register tiles of 3 A rows × 4 B rows: tile t reads
// the float32 A rows a0..a2 advanced by t·astep floats and the B rows b0..b3 advanced by
// t·bstep elements (each k > 0 values, a multiple of 8; rows may repeat), and writes
// C[r·ldc+u] = DotLanes8(A_r, B_u) at c advanced by t·cstep floats. B is float32 here,
// fp16 in lanes8Run3x4F16AVX2 and bfloat16 in lanes8Run3x4BF16AVX2 (widened exactly).
//
//go:noescape
func lanes8Run3x4F32AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int)

//go:noescape
func lanes8Run3x4F16AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int)

//go:noescape
func lanes8Run3x4BF16AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int)
