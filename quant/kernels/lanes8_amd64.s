//go:build amd64 && !purego

#include "textflag.h"

// tinyBLAS-order float kernels (see lanes8.go): every result is one 8-lane YMM FMA
// accumulator over k, reduced as w = hi128 + lo128, x0 = w0 + w2, x1 = w1 + w3, x0 + x1.

// func dotLanes8AVX2(a, b *float32, n int) float32
TEXT ·dotLanes8AVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	SHLQ   $2, CX
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0

dotloop:
	VMOVUPS     (SI)(AX*1), Y1
	VFMADD231PS (DI)(AX*1), Y1, Y0
	ADDQ        $32, AX
	CMPQ        AX, CX
	JLT         dotloop

	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0 // w[l] = v[l] + v[l+4]
	VMOVHLPS     X0, X0, X1
	VADDPS       X1, X0, X0 // x0 = w0 + w2, x1 = w1 + w3
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0 // x0 + x1
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET

// The 3×4 tile kernels keep the three A rows of a k step in Y12..Y14, one B row at a time
// in Y15, and the accumulator of (A row r, B row u) in Y(4r+u). AX counts k in units of
// 2 bytes (16 per step of 8), so float32 rows are addressed (reg)(AX*2) and 16-bit rows
// (reg)(AX*1).

#define LOADA(off) \
	VMOVUPS off(SI)(AX*2), Y12 \
	VMOVUPS off(R8)(AX*2), Y13 \
	VMOVUPS off(R9)(AX*2), Y14

#define FMA3(c0, c1, c2) \
	VFMADD231PS Y15, Y12, c0 \
	VFMADD231PS Y15, Y13, c1 \
	VFMADD231PS Y15, Y14, c2

// One k step (8 values) with float32 B rows at DI, R10, R11, R12 (off: byte offset in A).
#define STEP_F32(off) \
	LOADA(off)                      \
	VMOVUPS off(DI)(AX*2), Y15      \
	FMA3(Y0, Y4, Y8)                \
	VMOVUPS off(R10)(AX*2), Y15     \
	FMA3(Y1, Y5, Y9)                \
	VMOVUPS off(R11)(AX*2), Y15     \
	FMA3(Y2, Y6, Y10)               \
	VMOVUPS off(R12)(AX*2), Y15     \
	FMA3(Y3, Y7, Y11)

// The same with fp16 B rows, widened exactly by VCVTPH2PS (hoff = off/2).
#define STEP_F16(off, hoff) \
	LOADA(off)                      \
	VCVTPH2PS hoff(DI)(AX*1), Y15   \
	FMA3(Y0, Y4, Y8)                \
	VCVTPH2PS hoff(R10)(AX*1), Y15  \
	FMA3(Y1, Y5, Y9)                \
	VCVTPH2PS hoff(R11)(AX*1), Y15  \
	FMA3(Y2, Y6, Y10)               \
	VCVTPH2PS hoff(R12)(AX*1), Y15  \
	FMA3(Y3, Y7, Y11)

// The same with bfloat16 B rows, widened exactly by zero extension and a 16-bit shift.
#define STEP_BF16(off, hoff) \
	LOADA(off)                      \
	VPMOVZXWD hoff(DI)(AX*1), Y15   \
	VPSLLD    $16, Y15, Y15         \
	FMA3(Y0, Y4, Y8)                \
	VPMOVZXWD hoff(R10)(AX*1), Y15  \
	VPSLLD    $16, Y15, Y15         \
	FMA3(Y1, Y5, Y9)                \
	VPMOVZXWD hoff(R11)(AX*1), Y15  \
	VPSLLD    $16, Y15, Y15         \
	FMA3(Y2, Y6, Y10)               \
	VPMOVZXWD hoff(R12)(AX*1), Y15  \
	VPSLLD    $16, Y15, Y15         \
	FMA3(Y3, Y7, Y11)

#define ZERO12 \
	VXORPS Y0, Y0, Y0    \
	VXORPS Y1, Y1, Y1    \
	VXORPS Y2, Y2, Y2    \
	VXORPS Y3, Y3, Y3    \
	VXORPS Y4, Y4, Y4    \
	VXORPS Y5, Y5, Y5    \
	VXORPS Y6, Y6, Y6    \
	VXORPS Y7, Y7, Y7    \
	VXORPS Y8, Y8, Y8    \
	VXORPS Y9, Y9, Y9    \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

// Reduce the four accumulators V0..V3 of one C row into X12 = [r0, r1, r2, r3], each r_u
// with exactly the additions of dotLanes8AVX2 (clobbers Y13..Y15):
//   Y12 = [w(V0) | w(V1)], Y14 = [w(V2) | w(V3)]                (w = lo + hi)
//   Y13 = [x0(0) x0(2) x1(0) x1(2) | x0(1) x0(3) x1(1) x1(3)]   (unpack, add)
//   X12 = [x0(0..3)] + [x1(0..3)]                               (unpack the halves, add)
#define REDUCE4(V0, V1, V2, V3) \
	VPERM2F128   $0x20, V1, V0, Y12 \
	VPERM2F128   $0x31, V1, V0, Y13 \
	VADDPS       Y13, Y12, Y12      \
	VPERM2F128   $0x20, V3, V2, Y14 \
	VPERM2F128   $0x31, V3, V2, Y15 \
	VADDPS       Y15, Y14, Y14      \
	VUNPCKLPS    Y14, Y12, Y13      \
	VUNPCKHPS    Y14, Y12, Y15      \
	VADDPS       Y15, Y13, Y13      \
	VEXTRACTF128 $1, Y13, X14       \
	VUNPCKLPS    X14, X13, X12      \
	VUNPCKHPS    X14, X13, X15      \
	VADDPS       X15, X12, X12

// Reduce the tile and store its three C rows of 4 floats at BX, BX+AX, BX+2·AX.
#define REDUCESTORE \
	REDUCE4(Y0, Y1, Y2, Y3)   \
	VMOVUPS X12, (BX)         \
	REDUCE4(Y4, Y5, Y6, Y7)   \
	VMOVUPS X12, (BX)(AX*1)   \
	REDUCE4(Y8, Y9, Y10, Y11) \
	VMOVUPS X12, (BX)(AX*2)

// func lanes8Run3x4F32AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int)
// Runs ntiles ≥ 1 3×4 tiles: tile t reads the float32 A rows a0..a2 advanced by t·astep
// floats and the B rows b0..b3 advanced by t·bstep elements (k > 0 values each, a multiple
// of 8; rows may repeat), and writes C[r·ldc+u] = DotLanes8(A_r, B_u) at c + t·cstep floats.
// Here B is float32.
TEXT ·lanes8Run3x4F32AVX2(SB), NOSPLIT, $32-112
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ b0+24(FP), DI
	MOVQ b1+32(FP), R10
	MOVQ b2+40(FP), R11
	MOVQ b3+48(FP), R12
	MOVQ k+56(FP), CX
	SHLQ $1, CX                  // k in AX units
	MOVQ CX, DX
	ANDQ $-32, DX                // covered by the 2-step loop
	MOVQ c+64(FP), BX
	MOVQ ldc+72(FP), R13
	SHLQ $2, R13
	MOVQ ntiles+80(FP), AX
	MOVQ AX, left-8(SP)
	MOVQ astep+88(FP), AX
	SHLQ $2, AX
	MOVQ AX, astepb-16(SP)
	MOVQ bstep+96(FP), AX
	SHLQ $2, AX
	MOVQ AX, bstepb-24(SP)
	MOVQ cstep+104(FP), AX
	SHLQ $2, AX
	MOVQ AX, cstepb-32(SP)

tile:
	ZERO12
	XORQ  AX, AX
	TESTQ DX, DX
	JZ    one

loop2:
	STEP_F32(0)
	STEP_F32(32)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT  loop2
	CMPQ AX, CX
	JGE  reduce

one:
	STEP_F32(0)

reduce:
	MOVQ R13, AX
	REDUCESTORE
	MOVQ astepb-16(SP), AX
	ADDQ AX, SI
	ADDQ AX, R8
	ADDQ AX, R9
	MOVQ bstepb-24(SP), AX
	ADDQ AX, DI
	ADDQ AX, R10
	ADDQ AX, R11
	ADDQ AX, R12
	ADDQ cstepb-32(SP), BX
	DECQ left-8(SP)
	JNZ  tile
	VZEROUPPER
	RET

// func lanes8Run3x4F16AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int)
// lanes8Run3x4F32AVX2 with little-endian fp16 B rows.
TEXT ·lanes8Run3x4F16AVX2(SB), NOSPLIT, $32-112
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ b0+24(FP), DI
	MOVQ b1+32(FP), R10
	MOVQ b2+40(FP), R11
	MOVQ b3+48(FP), R12
	MOVQ k+56(FP), CX
	SHLQ $1, CX                  // k in AX units
	MOVQ CX, DX
	ANDQ $-32, DX                // covered by the 2-step loop
	MOVQ c+64(FP), BX
	MOVQ ldc+72(FP), R13
	SHLQ $2, R13
	MOVQ ntiles+80(FP), AX
	MOVQ AX, left-8(SP)
	MOVQ astep+88(FP), AX
	SHLQ $2, AX
	MOVQ AX, astepb-16(SP)
	MOVQ bstep+96(FP), AX
	SHLQ $1, AX
	MOVQ AX, bstepb-24(SP)
	MOVQ cstep+104(FP), AX
	SHLQ $2, AX
	MOVQ AX, cstepb-32(SP)

tile:
	ZERO12
	XORQ  AX, AX
	TESTQ DX, DX
	JZ    one

loop2:
	STEP_F16(0, 0)
	STEP_F16(32, 16)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT  loop2
	CMPQ AX, CX
	JGE  reduce

one:
	STEP_F16(0, 0)

reduce:
	MOVQ R13, AX
	REDUCESTORE
	MOVQ astepb-16(SP), AX
	ADDQ AX, SI
	ADDQ AX, R8
	ADDQ AX, R9
	MOVQ bstepb-24(SP), AX
	ADDQ AX, DI
	ADDQ AX, R10
	ADDQ AX, R11
	ADDQ AX, R12
	ADDQ cstepb-32(SP), BX
	DECQ left-8(SP)
	JNZ  tile
	VZEROUPPER
	RET

// func lanes8Run3x4BF16AVX2(a0, a1, a2 *float32, b0, b1, b2, b3 unsafe.Pointer, k int, c *float32, ldc, ntiles, astep, bstep, cstep int)
// lanes8Run3x4F32AVX2 with little-endian bfloat16 B rows.
TEXT ·lanes8Run3x4BF16AVX2(SB), NOSPLIT, $32-112
	MOVQ a0+0(FP), SI
	MOVQ a1+8(FP), R8
	MOVQ a2+16(FP), R9
	MOVQ b0+24(FP), DI
	MOVQ b1+32(FP), R10
	MOVQ b2+40(FP), R11
	MOVQ b3+48(FP), R12
	MOVQ k+56(FP), CX
	SHLQ $1, CX                  // k in AX units
	MOVQ CX, DX
	ANDQ $-32, DX                // covered by the 2-step loop
	MOVQ c+64(FP), BX
	MOVQ ldc+72(FP), R13
	SHLQ $2, R13
	MOVQ ntiles+80(FP), AX
	MOVQ AX, left-8(SP)
	MOVQ astep+88(FP), AX
	SHLQ $2, AX
	MOVQ AX, astepb-16(SP)
	MOVQ bstep+96(FP), AX
	SHLQ $1, AX
	MOVQ AX, bstepb-24(SP)
	MOVQ cstep+104(FP), AX
	SHLQ $2, AX
	MOVQ AX, cstepb-32(SP)

tile:
	ZERO12
	XORQ  AX, AX
	TESTQ DX, DX
	JZ    one

loop2:
	STEP_BF16(0, 0)
	STEP_BF16(32, 16)
	ADDQ $32, AX
	CMPQ AX, DX
	JLT  loop2
	CMPQ AX, CX
	JGE  reduce

one:
	STEP_BF16(0, 0)

reduce:
	MOVQ R13, AX
	REDUCESTORE
	MOVQ astepb-16(SP), AX
	ADDQ AX, SI
	ADDQ AX, R8
	ADDQ AX, R9
	MOVQ bstepb-24(SP), AX
	ADDQ AX, DI
	ADDQ AX, R10
	ADDQ AX, R11
	ADDQ AX, R12
	ADDQ cstepb-32(SP), BX
	DECQ left-8(SP)
	JNZ  tile
	VZEROUPPER
	RET
