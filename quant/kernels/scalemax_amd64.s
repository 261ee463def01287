//go:build amd64 && !purego

#include "textflag.h"

DATA smNegInf<>+0(SB)/4, $0xff800000
GLOBL smNegInf<>(SB), RODATA|NOPTR, $4

// func scaleMaxAVX2(x *float32, scale float32, n int) (mx float32, nan bool)
// n a multiple of 8. Y0..Y3 hold running maxima (from −Inf), Y4..Y7 OR the unordered masks.
TEXT ·scaleMaxAVX2(SB), NOSPLIT, $0-29
	MOVQ         x+0(FP), DI
	VBROADCASTSS scale+8(FP), Y15
	MOVQ         n+16(FP), CX
	VBROADCASTSS smNegInf<>(SB), Y0
	VMOVAPS      Y0, Y1
	VMOVAPS      Y0, Y2
	VMOVAPS      Y0, Y3
	VXORPS       Y4, Y4, Y4
	VXORPS       Y5, Y5, Y5
	VXORPS       Y6, Y6, Y6
	VXORPS       Y7, Y7, Y7
	CMPQ         CX, $32
	JLT          sm8

sm32:
	VMULPS  0(DI), Y15, Y8
	VMULPS  32(DI), Y15, Y9
	VMULPS  64(DI), Y15, Y10
	VMULPS  96(DI), Y15, Y11
	VMOVUPS Y8, 0(DI)
	VMOVUPS Y9, 32(DI)
	VMOVUPS Y10, 64(DI)
	VMOVUPS Y11, 96(DI)
	VCMPPS  $3, Y8, Y8, Y12
	VORPS   Y12, Y4, Y4
	VCMPPS  $3, Y9, Y9, Y12
	VORPS   Y12, Y5, Y5
	VCMPPS  $3, Y10, Y10, Y12
	VORPS   Y12, Y6, Y6
	VCMPPS  $3, Y11, Y11, Y12
	VORPS   Y12, Y7, Y7
	VMAXPS  Y0, Y8, Y0
	VMAXPS  Y1, Y9, Y1
	VMAXPS  Y2, Y10, Y2
	VMAXPS  Y3, Y11, Y3
	ADDQ    $128, DI
	SUBQ    $32, CX
	CMPQ    CX, $32
	JGE     sm32

sm8:
	TESTQ CX, CX
	JZ    smreduce

sm8loop:
	VMULPS  0(DI), Y15, Y8
	VMOVUPS Y8, 0(DI)
	VCMPPS  $3, Y8, Y8, Y12
	VORPS   Y12, Y4, Y4
	VMAXPS  Y0, Y8, Y0
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     sm8loop

smreduce:
	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, mx+24(FP)
	VORPS        Y5, Y4, Y4
	VORPS        Y7, Y6, Y6
	VORPS        Y6, Y4, Y4
	VMOVMSKPS    Y4, AX
	TESTL        AX, AX
	SETNE        nan+28(FP)
	VZEROUPPER
	RET
