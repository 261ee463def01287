//go:build amd64 && !purego

#include "textflag.h"

// func axpyFMAAVX2(y *float32, a float32, x *float32, n int)
// y[i] = fma(x[i], a, y[i]): 32 elements per iteration, then 8, then one at a time.
TEXT ·axpyFMAAVX2(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX
	CMPQ         CX, $32
	JLT          ax8

ax32:
	VMOVUPS     0(DI), Y0
	VMOVUPS     32(DI), Y1
	VMOVUPS     64(DI), Y2
	VMOVUPS     96(DI), Y3
	VFMADD231PS 0(SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VFMADD231PS 64(SI), Y15, Y2
	VFMADD231PS 96(SI), Y15, Y3
	VMOVUPS     Y0, 0(DI)
	VMOVUPS     Y1, 32(DI)
	VMOVUPS     Y2, 64(DI)
	VMOVUPS     Y3, 96(DI)
	ADDQ        $128, DI
	ADDQ        $128, SI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         ax32

ax8:
	CMPQ CX, $8
	JLT  ax1

ax8loop:
	VMOVUPS     0(DI), Y0
	VFMADD231PS 0(SI), Y15, Y0
	VMOVUPS     Y0, 0(DI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	SUBQ        $8, CX
	CMPQ        CX, $8
	JGE         ax8loop

ax1:
	TESTQ CX, CX
	JZ    axdone

ax1loop:
	VMOVSS      0(DI), X0
	VFMADD231SS 0(SI), X15, X0
	VMOVSS      X0, 0(DI)
	ADDQ        $4, DI
	ADDQ        $4, SI
	DECQ        CX
	JNZ         ax1loop

axdone:
	VZEROUPPER
	RET

// func scaleF32AVX2(y *float32, a float32, n int)
TEXT ·scaleF32AVX2(SB), NOSPLIT, $0-24
	MOVQ         y+0(FP), DI
	VBROADCASTSS a+8(FP), Y15
	MOVQ         n+16(FP), CX
	CMPQ         CX, $8
	JLT          sc1

sc8loop:
	VMULPS  0(DI), Y15, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ    $32, DI
	SUBQ    $8, CX
	CMPQ    CX, $8
	JGE     sc8loop

sc1:
	TESTQ CX, CX
	JZ    scdone

sc1loop:
	VMULSS 0(DI), X15, X0
	VMOVSS X0, 0(DI)
	ADDQ   $4, DI
	DECQ   CX
	JNZ    sc1loop

scdone:
	VZEROUPPER
	RET
