//go:build amd64 && !purego

#include "textflag.h"

// func weightedSqErrAVX2(acc *[16]float64, x, y, w *float32, n int)
// n a multiple of 8. acc[0:8] are the partial sums of w·(x−y)², acc[8:16] those of w·x²;
// element i goes to lane i mod 8. Per element, in float64: e = x − y, (w·e)·e and (w·x)·x,
// each product rounded (VMULPD, then VADDPD into the lane), as the Go loop computes them.
TEXT ·weightedSqErrAVX2(SB), NOSPLIT, $0-40
	MOVQ    acc+0(FP), DI
	MOVQ    x+8(FP), SI
	MOVQ    y+16(FP), DX
	MOVQ    w+24(FP), BX
	MOVQ    n+32(FP), CX
	VMOVUPD 0(DI), Y8
	VMOVUPD 32(DI), Y9
	VMOVUPD 64(DI), Y10
	VMOVUPD 96(DI), Y11
	TESTQ   CX, CX
	JZ      wsq_done

wsq_loop:
	VCVTPS2PD 0(SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 0(DX), Y2
	VCVTPS2PD 16(DX), Y3
	VCVTPS2PD 0(BX), Y4
	VCVTPS2PD 16(BX), Y5
	VSUBPD    Y2, Y0, Y2   // e = x − y
	VSUBPD    Y3, Y1, Y3
	VMULPD    Y4, Y2, Y6   // w·e
	VMULPD    Y5, Y3, Y7
	VMULPD    Y2, Y6, Y6   // (w·e)·e
	VMULPD    Y3, Y7, Y7
	VADDPD    Y6, Y8, Y8
	VADDPD    Y7, Y9, Y9
	VMULPD    Y4, Y0, Y6   // w·x
	VMULPD    Y5, Y1, Y7
	VMULPD    Y0, Y6, Y6   // (w·x)·x
	VMULPD    Y1, Y7, Y7
	VADDPD    Y6, Y10, Y10
	VADDPD    Y7, Y11, Y11
	ADDQ      $32, SI
	ADDQ      $32, DX
	ADDQ      $32, BX
	SUBQ      $8, CX
	JNZ       wsq_loop

wsq_done:
	VMOVUPD Y8, 0(DI)
	VMOVUPD Y9, 32(DI)
	VMOVUPD Y10, 64(DI)
	VMOVUPD Y11, 96(DI)
	VZEROUPPER
	RET

// func lerpAVX2(y, x *float32, t float32, n int)
// n a multiple of 8: y = x + t·(y − x), VSUBPS, VMULPS, VADDPS (each rounded).
TEXT ·lerpAVX2(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	VBROADCASTSS t+16(FP), Y15
	MOVQ         n+24(FP), CX
	TESTQ        CX, CX
	JZ           lerp_done

lerp_loop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 0(DI), Y1
	VSUBPS  Y0, Y1, Y1     // y − x
	VMULPS  Y15, Y1, Y1    // t·(y − x)
	VADDPS  Y0, Y1, Y1     // x + t·(y − x)
	VMOVUPS Y1, 0(DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     lerp_loop

lerp_done:
	VZEROUPPER
	RET

// func imatrixWeightsAVX2(w, x, qw *float32, sigma2 float32, n int)
// n a multiple of 8: w = qw·sqrt(sigma2 + x·x), each operation rounded (VSQRTPS is correctly
// rounded, as the Go path's float64 square root rounded to float32 is).
TEXT ·imatrixWeightsAVX2(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         qw+16(FP), DX
	VBROADCASTSS sigma2+24(FP), Y15
	MOVQ         n+32(FP), CX
	TESTQ        CX, CX
	JZ           imw_done

imw_loop:
	VMOVUPS 0(SI), Y0
	VMULPS  Y0, Y0, Y0     // x·x
	VADDPS  Y15, Y0, Y0    // sigma2 + x·x
	VSQRTPS Y0, Y0
	VMULPS  0(DX), Y0, Y0  // qw·sqrt(…)
	VMOVUPS Y0, 0(DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     imw_loop

imw_done:
	VZEROUPPER
	RET

DATA nibMask<>+0(SB)/4, $0x0000000f
GLOBL nibMask<>(SB), RODATA|NOPTR, $4

// func dequantNibblesAVX2(y *float32, q *byte, dlo, mlo, dhi, mhi float32)
// Eight bytes at a time: zero-extended to dwords, low = v & 15, high = v >> 4, converted
// exactly to float32, multiplied by the scale (rounded) and the min subtracted.
TEXT ·dequantNibblesAVX2(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	MOVQ         q+8(FP), SI
	VBROADCASTSS dlo+16(FP), Y12
	VBROADCASTSS mlo+20(FP), Y13
	VBROADCASTSS dhi+24(FP), Y14
	VBROADCASTSS mhi+28(FP), Y15
	VPBROADCASTD nibMask<>(SB), Y11
	MOVQ         $4, CX

nib_loop:
	VPMOVZXBD (SI), Y0
	VPAND     Y11, Y0, Y1
	VPSRLD    $4, Y0, Y2
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y2, Y2
	VMULPS    Y12, Y1, Y1
	VMULPS    Y14, Y2, Y2
	VSUBPS    Y13, Y1, Y1
	VSUBPS    Y15, Y2, Y2
	VMOVUPS   Y1, 0(DI)
	VMOVUPS   Y2, 128(DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       nib_loop
	VZEROUPPER
	RET

DATA rqMagic<>+0(SB)/4, $0x4b400000   // 12582912.0 = 1.5·2²³
GLOBL rqMagic<>(SB), RODATA|NOPTR, $4
DATA rqMant<>+0(SB)/4, $0x007fffff
GLOBL rqMant<>(SB), RODATA|NOPTR, $4
DATA rqHalf<>+0(SB)/4, $0x00400000
GLOBL rqHalf<>(SB), RODATA|NOPTR, $4

// func requantAsymAVX2(L *uint8, x *float32, ds, dm float32, nmax int32, n int)
// n a multiple of 8: l = clamp(nearest_int((x + dm)/ds), 0, nmax), VADDPS, VDIVPS (correctly
// rounded, as the Go division), VADDPS of the magic constant, the mantissa bits less 2²², then
// VPMAXSD/VPMINSD and a saturating pack of the eight dwords to bytes (they are in 0..nmax).
TEXT ·requantAsymAVX2(SB), NOSPLIT, $0-40
	MOVQ         L+0(FP), DI
	MOVQ         x+8(FP), SI
	VBROADCASTSS ds+16(FP), Y14
	VBROADCASTSS dm+20(FP), Y13
	MOVL         nmax+24(FP), AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8
	MOVQ         n+32(FP), CX
	VBROADCASTSS rqMagic<>(SB), Y12
	VPBROADCASTD rqMant<>(SB), Y11
	VPBROADCASTD rqHalf<>(SB), Y10
	VPXOR        Y9, Y9, Y9
	TESTQ        CX, CX
	JZ           rq_done

rq_loop:
	VMOVUPS      (SI), Y0
	VADDPS       Y13, Y0, Y0   // x + dm
	VDIVPS       Y14, Y0, Y0   // (x + dm)/ds
	VADDPS       Y12, Y0, Y0   // + 1.5·2²³
	VPAND        Y11, Y0, Y0
	VPSUBD       Y10, Y0, Y0
	VPMAXSD      Y9, Y0, Y0
	VPMINSD      Y8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSDW    X1, X0, X0    // eight words
	VPACKUSWB    X0, X0, X0    // eight bytes (twice)
	MOVQ         X0, (DI)
	ADDQ         $32, SI
	ADDQ         $8, DI
	SUBQ         $8, CX
	JNZ          rq_loop

rq_done:
	VZEROUPPER
	RET
