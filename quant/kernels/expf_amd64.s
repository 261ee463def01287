//go:build amd64 && !purego

#include "textflag.h"

// ggml_v_expf (AVX2) lane for lane, and the two loops that use it in ggml: the softmax
// exponentials with their per-8 sums (ggml_vec_soft_max_f32) and SwiGLU (ggml_vec_swiglu_f32).
// Constants are stored as full 8-lane vectors so that they can be memory operands.

DATA expR<>+0(SB)/4, $0x4b400000
DATA expR<>+4(SB)/4, $0x4b400000
DATA expR<>+8(SB)/4, $0x4b400000
DATA expR<>+12(SB)/4, $0x4b400000
DATA expR<>+16(SB)/4, $0x4b400000
DATA expR<>+20(SB)/4, $0x4b400000
DATA expR<>+24(SB)/4, $0x4b400000
DATA expR<>+28(SB)/4, $0x4b400000
GLOBL expR<>(SB), RODATA|NOPTR, $32

DATA expLog2e<>+0(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+4(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+8(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+12(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+16(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+20(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+24(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL expLog2e<>(SB), RODATA|NOPTR, $32

DATA expC1<>+0(SB)/4, $0x3f317200
DATA expC1<>+4(SB)/4, $0x3f317200
DATA expC1<>+8(SB)/4, $0x3f317200
DATA expC1<>+12(SB)/4, $0x3f317200
DATA expC1<>+16(SB)/4, $0x3f317200
DATA expC1<>+20(SB)/4, $0x3f317200
DATA expC1<>+24(SB)/4, $0x3f317200
DATA expC1<>+28(SB)/4, $0x3f317200
GLOBL expC1<>(SB), RODATA|NOPTR, $32

DATA expC2<>+0(SB)/4, $0x35bfbe8e
DATA expC2<>+4(SB)/4, $0x35bfbe8e
DATA expC2<>+8(SB)/4, $0x35bfbe8e
DATA expC2<>+12(SB)/4, $0x35bfbe8e
DATA expC2<>+16(SB)/4, $0x35bfbe8e
DATA expC2<>+20(SB)/4, $0x35bfbe8e
DATA expC2<>+24(SB)/4, $0x35bfbe8e
DATA expC2<>+28(SB)/4, $0x35bfbe8e
GLOBL expC2<>(SB), RODATA|NOPTR, $32

DATA expP0<>+0(SB)/4, $0x3c072010
DATA expP0<>+4(SB)/4, $0x3c072010
DATA expP0<>+8(SB)/4, $0x3c072010
DATA expP0<>+12(SB)/4, $0x3c072010
DATA expP0<>+16(SB)/4, $0x3c072010
DATA expP0<>+20(SB)/4, $0x3c072010
DATA expP0<>+24(SB)/4, $0x3c072010
DATA expP0<>+28(SB)/4, $0x3c072010
GLOBL expP0<>(SB), RODATA|NOPTR, $32

DATA expP1<>+0(SB)/4, $0x3d2b9f17
DATA expP1<>+4(SB)/4, $0x3d2b9f17
DATA expP1<>+8(SB)/4, $0x3d2b9f17
DATA expP1<>+12(SB)/4, $0x3d2b9f17
DATA expP1<>+16(SB)/4, $0x3d2b9f17
DATA expP1<>+20(SB)/4, $0x3d2b9f17
DATA expP1<>+24(SB)/4, $0x3d2b9f17
DATA expP1<>+28(SB)/4, $0x3d2b9f17
GLOBL expP1<>(SB), RODATA|NOPTR, $32

DATA expP2<>+0(SB)/4, $0x3e2aaf33
DATA expP2<>+4(SB)/4, $0x3e2aaf33
DATA expP2<>+8(SB)/4, $0x3e2aaf33
DATA expP2<>+12(SB)/4, $0x3e2aaf33
DATA expP2<>+16(SB)/4, $0x3e2aaf33
DATA expP2<>+20(SB)/4, $0x3e2aaf33
DATA expP2<>+24(SB)/4, $0x3e2aaf33
DATA expP2<>+28(SB)/4, $0x3e2aaf33
GLOBL expP2<>(SB), RODATA|NOPTR, $32

DATA expP3<>+0(SB)/4, $0x3efffedb
DATA expP3<>+4(SB)/4, $0x3efffedb
DATA expP3<>+8(SB)/4, $0x3efffedb
DATA expP3<>+12(SB)/4, $0x3efffedb
DATA expP3<>+16(SB)/4, $0x3efffedb
DATA expP3<>+20(SB)/4, $0x3efffedb
DATA expP3<>+24(SB)/4, $0x3efffedb
DATA expP3<>+28(SB)/4, $0x3efffedb
GLOBL expP3<>(SB), RODATA|NOPTR, $32

DATA expP4<>+0(SB)/4, $0x3f7ffff6
DATA expP4<>+4(SB)/4, $0x3f7ffff6
DATA expP4<>+8(SB)/4, $0x3f7ffff6
DATA expP4<>+12(SB)/4, $0x3f7ffff6
DATA expP4<>+16(SB)/4, $0x3f7ffff6
DATA expP4<>+20(SB)/4, $0x3f7ffff6
DATA expP4<>+24(SB)/4, $0x3f7ffff6
DATA expP4<>+28(SB)/4, $0x3f7ffff6
GLOBL expP4<>(SB), RODATA|NOPTR, $32

DATA exp126<>+0(SB)/4, $0x42fc0000
DATA exp126<>+4(SB)/4, $0x42fc0000
DATA exp126<>+8(SB)/4, $0x42fc0000
DATA exp126<>+12(SB)/4, $0x42fc0000
DATA exp126<>+16(SB)/4, $0x42fc0000
DATA exp126<>+20(SB)/4, $0x42fc0000
DATA exp126<>+24(SB)/4, $0x42fc0000
DATA exp126<>+28(SB)/4, $0x42fc0000
GLOBL exp126<>(SB), RODATA|NOPTR, $32

DATA exp192<>+0(SB)/4, $0x43400000
DATA exp192<>+4(SB)/4, $0x43400000
DATA exp192<>+8(SB)/4, $0x43400000
DATA exp192<>+12(SB)/4, $0x43400000
DATA exp192<>+16(SB)/4, $0x43400000
DATA exp192<>+20(SB)/4, $0x43400000
DATA exp192<>+24(SB)/4, $0x43400000
DATA exp192<>+28(SB)/4, $0x43400000
GLOBL exp192<>(SB), RODATA|NOPTR, $32

DATA expOne<>+0(SB)/4, $0x3f800000
DATA expOne<>+4(SB)/4, $0x3f800000
DATA expOne<>+8(SB)/4, $0x3f800000
DATA expOne<>+12(SB)/4, $0x3f800000
DATA expOne<>+16(SB)/4, $0x3f800000
DATA expOne<>+20(SB)/4, $0x3f800000
DATA expOne<>+24(SB)/4, $0x3f800000
DATA expOne<>+28(SB)/4, $0x3f800000
GLOBL expOne<>(SB), RODATA|NOPTR, $32

DATA expAbs<>+0(SB)/4, $0x7fffffff
DATA expAbs<>+4(SB)/4, $0x7fffffff
DATA expAbs<>+8(SB)/4, $0x7fffffff
DATA expAbs<>+12(SB)/4, $0x7fffffff
DATA expAbs<>+16(SB)/4, $0x7fffffff
DATA expAbs<>+20(SB)/4, $0x7fffffff
DATA expAbs<>+24(SB)/4, $0x7fffffff
DATA expAbs<>+28(SB)/4, $0x7fffffff
GLOBL expAbs<>(SB), RODATA|NOPTR, $32

DATA exp82<>+0(SB)/4, $0x82000000
DATA exp82<>+4(SB)/4, $0x82000000
DATA exp82<>+8(SB)/4, $0x82000000
DATA exp82<>+12(SB)/4, $0x82000000
DATA exp82<>+16(SB)/4, $0x82000000
DATA exp82<>+20(SB)/4, $0x82000000
DATA exp82<>+24(SB)/4, $0x82000000
DATA exp82<>+28(SB)/4, $0x82000000
GLOBL exp82<>(SB), RODATA|NOPTR, $32

DATA exp7f<>+0(SB)/4, $0x7f000000
DATA exp7f<>+4(SB)/4, $0x7f000000
DATA exp7f<>+8(SB)/4, $0x7f000000
DATA exp7f<>+12(SB)/4, $0x7f000000
DATA exp7f<>+16(SB)/4, $0x7f000000
DATA exp7f<>+20(SB)/4, $0x7f000000
DATA exp7f<>+24(SB)/4, $0x7f000000
DATA exp7f<>+28(SB)/4, $0x7f000000
GLOBL exp7f<>(SB), RODATA|NOPTR, $32

// VEXPF: Y0 = ggml_v_expf(Y0). Clobbers Y1-Y11 and AX.
#define VEXPF(done) \
	VMOVUPS      expR<>(SB), Y1             \
	VFMADD231PS  expLog2e<>(SB), Y0, Y1     \
	VSUBPS       expR<>(SB), Y1, Y2         \
	VMOVAPS      Y0, Y3                     \
	VFNMADD231PS expC1<>(SB), Y2, Y3        \
	VFNMADD231PS expC2<>(SB), Y2, Y3        \
	VPSLLD       $23, Y1, Y4                \
	VPADDD       expOne<>(SB), Y4, Y5       \
	VANDPS       expAbs<>(SB), Y2, Y6       \
	VCMPPS       $0x1e, exp126<>(SB), Y6, Y7 \
	VMULPS       Y3, Y3, Y8                 \
	VMOVUPS      expP1<>(SB), Y9            \
	VFMADD231PS  expP0<>(SB), Y3, Y9        \
	VMOVUPS      expP3<>(SB), Y10           \
	VFMADD231PS  expP2<>(SB), Y3, Y10       \
	VFMADD231PS  Y8, Y9, Y10                \
	VMULPS       expP4<>(SB), Y3, Y11       \
	VFMADD231PS  Y8, Y10, Y11               \
	VMOVAPS      Y5, Y0                     \
	VFMADD231PS  Y11, Y5, Y0                \
	VMOVMSKPS    Y7, AX                     \
	TESTL        AX, AX                     \
	JZ           done                       \
	VXORPS       Y1, Y1, Y1                 \
	VCMPPS       $0x12, Y1, Y2, Y9          \
	VANDPS       exp82<>(SB), Y9, Y9        \
	VPADDD       exp7f<>(SB), Y9, Y10       \
	VPSUBD       Y9, Y4, Y1                 \
	VCMPPS       $0x1e, exp192<>(SB), Y6, Y2 \
	VMULPS       Y10, Y10, Y3               \
	VMOVAPS      Y1, Y4                     \
	VFMADD231PS  Y11, Y1, Y4                \
	VMULPS       Y10, Y4, Y4                \
	VBLENDVPS    Y7, Y4, Y0, Y0             \
	VBLENDVPS    Y2, Y3, Y0, Y0             \
done:

// func softmaxExpAVX2(y, x *float32, n int, max float32) float64
TEXT ·softmaxExpAVX2(SB), NOSPLIT, $0-40
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS max+24(FP), Y12
	VXORPD       X13, X13, X13

smloop:
	VMOVUPS      (SI), Y0
	VSUBPS       Y12, Y0, Y0
	VEXPF(smexp)
	VMOVUPS      Y0, (DI)
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X0, X1, X1
	VMOVHLPS     X1, X1, X2
	VADDPS       X2, X1, X1
	VMOVSHDUP    X1, X2
	VADDSS       X2, X1, X1
	VCVTSS2SD    X1, X1, X1
	VADDSD       X1, X13, X13
	ADDQ         $32, SI
	ADDQ         $32, DI
	SUBQ         $8, CX
	JNZ          smloop

	VMOVSD     X13, ret+32(FP)
	VZEROUPPER
	RET

// func swigluAVX2(y, x, gt *float32, n int)
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gt+16(FP), DX
	MOVQ n+24(FP), CX

swloop:
	VMOVUPS (SI), Y14
	VXORPS  Y0, Y0, Y0
	VSUBPS  Y14, Y0, Y0
	VEXPF(swexp)
	VADDPS  expOne<>(SB), Y0, Y0
	VDIVPS  Y0, Y14, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     swloop

	VZEROUPPER
	RET
