//go:build amd64 && !purego

#include "textflag.h"
#include "transpose_amd64.h"

// 6×16 SGEMM micro-kernel: C[6×16] (+)= Σ_p A[i][p] · Bp[p·16 + j]. A is read in place (six
// rows, lda apart); B is a packed panel (16 floats per step). Twelve YMM accumulators
// (row i in Y(2i), Y(2i+1)), two B vectors and one broadcast A value per step.
// Registers: AX = rows 0..2, R11 = rows 3..5 (both advance 4 bytes per step), R9 = lda·4.

#define STEP(aoff, boff) \
	VMOVUPS      (boff)(BX), Y12         \
	VMOVUPS      (boff+32)(BX), Y13      \
	VBROADCASTSS (aoff)(AX), Y14         \
	VFMADD231PS  Y12, Y14, Y0            \
	VFMADD231PS  Y13, Y14, Y1            \
	VBROADCASTSS (aoff)(AX)(R9*1), Y15   \
	VFMADD231PS  Y12, Y15, Y2            \
	VFMADD231PS  Y13, Y15, Y3            \
	VBROADCASTSS (aoff)(AX)(R9*2), Y14   \
	VFMADD231PS  Y12, Y14, Y4            \
	VFMADD231PS  Y13, Y14, Y5            \
	VBROADCASTSS (aoff)(R11), Y15        \
	VFMADD231PS  Y12, Y15, Y6            \
	VFMADD231PS  Y13, Y15, Y7            \
	VBROADCASTSS (aoff)(R11)(R9*1), Y14  \
	VFMADD231PS  Y12, Y14, Y8            \
	VFMADD231PS  Y13, Y14, Y9            \
	VBROADCASTSS (aoff)(R11)(R9*2), Y15  \
	VFMADD231PS  Y12, Y15, Y10           \
	VFMADD231PS  Y13, Y15, Y11

#define STORE_ROW(r0, r1) \
	VMOVUPS r0, 0(DI)  \
	VMOVUPS r1, 32(DI) \
	ADDQ    R8, DI

#define ADD_ROW(r0, r1) \
	VADDPS  0(DI), r0, r0  \
	VADDPS  32(DI), r1, r1 \
	VMOVUPS r0, 0(DI)      \
	VMOVUPS r1, 32(DI)     \
	ADDQ    R8, DI

// func sgemmKernel6x16AVX2(k int, a *float32, lda int, b, c *float32, ldc int, accumulate bool)
TEXT ·sgemmKernel6x16AVX2(SB), NOSPLIT, $0-49
	MOVQ   k+0(FP), CX
	MOVQ   a+8(FP), AX
	MOVQ   lda+16(FP), R9
	MOVQ   b+24(FP), BX
	MOVQ   c+32(FP), DI
	MOVQ   ldc+40(FP), R8
	SHLQ   $2, R8
	SHLQ   $2, R9
	LEAQ   (AX)(R9*2), R11
	ADDQ   R9, R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	CMPQ   CX, $4
	JLT    gtail

gloop4:
	STEP(0, 0)
	STEP(4, 64)
	STEP(8, 128)
	STEP(12, 192)
	ADDQ $16, AX
	ADDQ $16, R11
	ADDQ $256, BX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  gloop4

gtail:
	TESTQ CX, CX
	JZ    gstore

gloop1:
	STEP(0, 0)
	ADDQ $4, AX
	ADDQ $4, R11
	ADDQ $64, BX
	DECQ CX
	JNZ  gloop1

gstore:
	MOVBLZX accumulate+48(FP), DX
	TESTQ   DX, DX
	JNZ     gadd
	STORE_ROW(Y0, Y1)
	STORE_ROW(Y2, Y3)
	STORE_ROW(Y4, Y5)
	STORE_ROW(Y6, Y7)
	STORE_ROW(Y8, Y9)
	STORE_ROW(Y10, Y11)
	VZEROUPPER
	RET

gadd:
	ADD_ROW(Y0, Y1)
	ADD_ROW(Y2, Y3)
	ADD_ROW(Y4, Y5)
	ADD_ROW(Y6, Y7)
	ADD_ROW(Y8, Y9)
	ADD_ROW(Y10, Y11)
	VZEROUPPER
	RET

// func packB16AVX2(dst *float32, b *float32, ldb int, kc8 int)
// For 16 rows of B (ldb floats apart) and kc8·8 columns: dst[s·16 + t] = b[t·ldb + s].
TEXT ·packB16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R9
	MOVQ kc8+24(FP), CX
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R10 // 3·ldb
	TESTQ CX, CX
	JZ   pdone

ploop:
	// rows 0..7
	MOVQ    SI, AX
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(R9*1), Y1
	VMOVUPS (AX)(R9*2), Y2
	VMOVUPS (AX)(R10*1), Y3
	LEAQ    (AX)(R9*4), AX
	VMOVUPS (AX), Y4
	VMOVUPS (AX)(R9*1), Y5
	VMOVUPS (AX)(R9*2), Y6
	VMOVUPS (AX)(R10*1), Y7
	TRANSPOSE8
	STORE_T8(0)

	// rows 8..15
	LEAQ    (AX)(R9*4), AX
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(R9*1), Y1
	VMOVUPS (AX)(R9*2), Y2
	VMOVUPS (AX)(R10*1), Y3
	LEAQ    (AX)(R9*4), AX
	VMOVUPS (AX), Y4
	VMOVUPS (AX)(R9*1), Y5
	VMOVUPS (AX)(R9*2), Y6
	VMOVUPS (AX)(R10*1), Y7
	TRANSPOSE8
	STORE_T8(32)

	ADDQ $32, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  ploop

pdone:
	VZEROUPPER
	RET
