//go:build amd64 && !purego

#include "textflag.h"

DATA sqAbsMask<>+0(SB)/4, $0x7fffffff
GLOBL sqAbsMask<>(SB), RODATA|NOPTR, $4

// func sumSqMaxAbsAVX2(sum *float64, mx *float32, x *float32, n int)
// n a multiple of 8. Per element: sum += float64(x)*float64(x) (VMULPD then VADDPD, as
// the Go code rounds); a = |x|; mx = a where a > mx or a is NaN: VMAXPS(a, mx) returns mx
// when either is NaN or they are equal, then a is blended in where a is NaN.
TEXT ·sumSqMaxAbsAVX2(SB), NOSPLIT, $0-32
	MOVQ         sum+0(FP), DI
	MOVQ         mx+8(FP), DX
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX
	VBROADCASTSS sqAbsMask<>(SB), Y15
	TESTQ        CX, CX
	JZ           done

loop:
	VMOVUPS   0(SI), Y0
	VANDPS    Y15, Y0, Y1      // a = |x|
	VMOVUPS   0(DX), Y2
	VMAXPS    Y2, Y1, Y3       // a > mx ? a : mx (mx when unordered)
	VCMPPS    $3, Y1, Y1, Y4   // a is NaN
	VBLENDVPS Y4, Y1, Y3, Y3   // NaN a replaces
	VMOVUPS   Y3, 0(DX)
	VCVTPS2PD X0, Y5           // low four as float64
	VEXTRACTF128 $1, Y0, X6
	VCVTPS2PD X6, Y6           // high four
	VMULPD    Y5, Y5, Y5
	VMULPD    Y6, Y6, Y6
	VADDPD    0(DI), Y5, Y5
	VADDPD    32(DI), Y6, Y6
	VMOVUPD   Y5, 0(DI)
	VMOVUPD   Y6, 32(DI)
	ADDQ      $32, SI
	ADDQ      $32, DX
	ADDQ      $64, DI
	SUBQ      $8, CX
	JNZ       loop

done:
	VZEROUPPER
	RET
