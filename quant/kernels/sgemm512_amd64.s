//go:build amd64 && !purego

#include "textflag.h"
#include "zmm_amd64.h"

// 6×32 SGEMM micro-kernel for AVX-512F: the 6×16 kernel of sgemm_amd64.s widened to two
// adjacent packed B panels (panel 1 starts pstride bytes after panel 0). Every C element is
// the same sequential FMA chain over p as in the 6×16 kernel, so the two kernels give the
// same bits. Accumulators: row i in Z(2i) (columns 0..15) and Z(2i+1) (16..31).

#define STEP512(aoff, boff) \
	VMOVUPS      (boff)(BX), Z12          \
	VMOVUPS      (boff)(BX)(R12*1), Z13   \
	VBROADCASTSS (aoff)(AX), Z14          \
	VBROADCASTSS (aoff)(AX)(R9*1), Z15    \
	VBROADCASTSS (aoff)(AX)(R9*2), Z16    \
	VBROADCASTSS (aoff)(R11), Z17         \
	VBROADCASTSS (aoff)(R11)(R9*1), Z18   \
	VBROADCASTSS (aoff)(R11)(R9*2), Z19   \
	VFMADD231PS  Z12, Z14, Z0             \
	VFMADD231PS  Z13, Z14, Z1             \
	VFMADD231PS  Z12, Z15, Z2             \
	VFMADD231PS  Z13, Z15, Z3             \
	VFMADD231PS  Z12, Z16, Z4             \
	VFMADD231PS  Z13, Z16, Z5             \
	VFMADD231PS  Z12, Z17, Z6             \
	VFMADD231PS  Z13, Z17, Z7             \
	VFMADD231PS  Z12, Z18, Z8             \
	VFMADD231PS  Z13, Z18, Z9             \
	VFMADD231PS  Z12, Z19, Z10            \
	VFMADD231PS  Z13, Z19, Z11

#define STORE_ROW512(r0, r1) \
	VMOVUPS r0, 0(DI)  \
	VMOVUPS r1, 64(DI) \
	ADDQ    R8, DI

#define ADD_ROW512(r0, r1) \
	VADDPS  0(DI), r0, r0  \
	VADDPS  64(DI), r1, r1 \
	VMOVUPS r0, 0(DI)      \
	VMOVUPS r1, 64(DI)     \
	ADDQ    R8, DI

// func sgemmKernel6x32AVX512(k int, a *float32, lda int, b *float32, pstride int, c *float32, ldc int, accumulate bool)
TEXT ·sgemmKernel6x32AVX512(SB), NOSPLIT, $0-57
	MOVQ   k+0(FP), CX
	MOVQ   a+8(FP), AX
	MOVQ   lda+16(FP), R9
	MOVQ   b+24(FP), BX
	MOVQ   pstride+32(FP), R12
	SHLQ   $2, R12
	MOVQ   c+40(FP), DI
	MOVQ   ldc+48(FP), R8
	SHLQ   $2, R8
	SHLQ   $2, R9
	LEAQ   (AX)(R9*2), R11
	ADDQ   R9, R11
	ZERO_Z0_Z11
	CMPQ   CX, $4
	JLT    g5tail

g5loop4:
	STEP512(0, 0)
	STEP512(4, 64)
	STEP512(8, 128)
	STEP512(12, 192)
	ADDQ $16, AX
	ADDQ $16, R11
	ADDQ $256, BX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  g5loop4

g5tail:
	TESTQ CX, CX
	JZ    g5store

g5loop1:
	STEP512(0, 0)
	ADDQ $4, AX
	ADDQ $4, R11
	ADDQ $64, BX
	DECQ CX
	JNZ  g5loop1

g5store:
	MOVBLZX accumulate+56(FP), DX
	TESTQ   DX, DX
	JNZ     g5add
	STORE_ROW512(Z0, Z1)
	STORE_ROW512(Z2, Z3)
	STORE_ROW512(Z4, Z5)
	STORE_ROW512(Z6, Z7)
	STORE_ROW512(Z8, Z9)
	STORE_ROW512(Z10, Z11)
	VZEROUPPER
	RET

g5add:
	ADD_ROW512(Z0, Z1)
	ADD_ROW512(Z2, Z3)
	ADD_ROW512(Z4, Z5)
	ADD_ROW512(Z6, Z7)
	ADD_ROW512(Z8, Z9)
	ADD_ROW512(Z10, Z11)
	VZEROUPPER
	RET

// 12×32 variant: twelve A rows (rows 0-2 from AX, 3-5 from R11, 6-8 from SI, 9-11 from R10,
// lda apart) against the same two packed B panels, 24 accumulators (row i in Z(2i), Z(2i+1)),
// the broadcasts rotating through Z26..Z29. Two B loads serve 24 FMAs instead of 12, and
// every C element is still the same sequential FMA chain over p (the same bits as the 6×32
// and 6×16 kernels).
// Row i of a step: its broadcast A value times both B vectors into Z(2i), Z(2i+1).
#define ROW12x32(a, c0, c1) \
	VFMADD231PS Z24, a, c0 \
	VFMADD231PS Z25, a, c1

#define STEP12x32(aoff, boff) \
	VMOVUPS      (boff)(BX), Z24 \
	VMOVUPS      (boff)(BX)(R12*1), Z25 \
	VBROADCASTSS (aoff)(AX), Z26 \
	VBROADCASTSS (aoff)(AX)(R9*1), Z27 \
	VBROADCASTSS (aoff)(AX)(R9*2), Z28 \
	ROW12x32(Z26, Z0, Z1) \
	VBROADCASTSS (aoff)(R11), Z29 \
	ROW12x32(Z27, Z2, Z3) \
	VBROADCASTSS (aoff)(R11)(R9*1), Z26 \
	ROW12x32(Z28, Z4, Z5) \
	VBROADCASTSS (aoff)(R11)(R9*2), Z27 \
	ROW12x32(Z29, Z6, Z7) \
	VBROADCASTSS (aoff)(SI), Z28 \
	ROW12x32(Z26, Z8, Z9) \
	VBROADCASTSS (aoff)(SI)(R9*1), Z29 \
	ROW12x32(Z27, Z10, Z11) \
	VBROADCASTSS (aoff)(SI)(R9*2), Z26 \
	ROW12x32(Z28, Z12, Z13) \
	VBROADCASTSS (aoff)(R10), Z27 \
	ROW12x32(Z29, Z14, Z15) \
	VBROADCASTSS (aoff)(R10)(R9*1), Z28 \
	ROW12x32(Z26, Z16, Z17) \
	VBROADCASTSS (aoff)(R10)(R9*2), Z29 \
	ROW12x32(Z27, Z18, Z19) \
	ROW12x32(Z28, Z20, Z21) \
	ROW12x32(Z29, Z22, Z23)

// func sgemmKernel12x32AVX512(k int, a *float32, lda int, b *float32, pstride int, c *float32, ldc int, accumulate bool)
TEXT ·sgemmKernel12x32AVX512(SB), NOSPLIT, $0-57
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R9
	MOVQ b+24(FP), BX
	MOVQ pstride+32(FP), R12
	SHLQ $2, R12
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), R8
	SHLQ $2, R8
	SHLQ $2, R9
	LEAQ (AX)(R9*2), R11
	ADDQ R9, R11          // row 3
	LEAQ (R11)(R9*2), SI
	ADDQ R9, SI           // row 6
	LEAQ (SI)(R9*2), R10
	ADDQ R9, R10          // row 9
	ZERO_Z0_Z11
	ZERO_Z12_Z23
	CMPQ CX, $4
	JLT  g12tail

g12loop4:
	STEP12x32(0, 0)
	STEP12x32(4, 64)
	STEP12x32(8, 128)
	STEP12x32(12, 192)
	ADDQ $16, AX
	ADDQ $16, R11
	ADDQ $16, SI
	ADDQ $16, R10
	ADDQ $256, BX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  g12loop4

g12tail:
	TESTQ CX, CX
	JZ    g12store

g12loop1:
	STEP12x32(0, 0)
	ADDQ $4, AX
	ADDQ $4, R11
	ADDQ $4, SI
	ADDQ $4, R10
	ADDQ $64, BX
	DECQ CX
	JNZ  g12loop1

g12store:
	MOVBLZX accumulate+56(FP), DX
	TESTQ   DX, DX
	JNZ     g12add
	STORE_ROW512(Z0, Z1)
	STORE_ROW512(Z2, Z3)
	STORE_ROW512(Z4, Z5)
	STORE_ROW512(Z6, Z7)
	STORE_ROW512(Z8, Z9)
	STORE_ROW512(Z10, Z11)
	STORE_ROW512(Z12, Z13)
	STORE_ROW512(Z14, Z15)
	STORE_ROW512(Z16, Z17)
	STORE_ROW512(Z18, Z19)
	STORE_ROW512(Z20, Z21)
	STORE_ROW512(Z22, Z23)
	VZEROUPPER
	RET

g12add:
	ADD_ROW512(Z0, Z1)
	ADD_ROW512(Z2, Z3)
	ADD_ROW512(Z4, Z5)
	ADD_ROW512(Z6, Z7)
	ADD_ROW512(Z8, Z9)
	ADD_ROW512(Z10, Z11)
	ADD_ROW512(Z12, Z13)
	ADD_ROW512(Z14, Z15)
	ADD_ROW512(Z16, Z17)
	ADD_ROW512(Z18, Z19)
	ADD_ROW512(Z20, Z21)
	ADD_ROW512(Z22, Z23)
	VZEROUPPER
	RET
