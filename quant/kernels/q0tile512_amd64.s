//go:build amd64 && !purego

#include "textflag.h"
#include "zmm_amd64.h"

// Q8_0·Q8_0 tile of 4 weight rows × 6 activation rows with AVX-512 VNNI (q0tile512.go). Each
// output keeps the 8-lane accumulator of DotQ8_0Q8_0 (ggml's AVX2 vec_dot order, tinyBLAS's
// per element), two outputs per ZMM register: lanes 0..7 for activation row 2p, 8..15 for
// row 2p+1 of pair p. Lane l of a block is Σ w·x over bytes 4l..4l+3, as VPMADDUBSW+VPMADDWD
// give it; here VPDPBUSD of (x ⊕ 0x80) as unsigned bytes against w, minus 128·Σw (the same
// instruction on 0x80 bytes), both exact. Then, per lane, float32 conversion and one FMA with
// float32(f16(w.d)·x.d), and hsum8's reduction of each half at the end.

DATA q5x80<>+0(SB)/1, $0x80
GLOBL q5x80<>(SB), RODATA|NOPTR, $1

// Activation pair p (rows 2p, 2p+1 at a0, a1) as unsigned bytes into zx, and its scale
// vector for the block (xs[2p] ×8 | xs[2p+1] ×8) into zs.
#define XPAIR(a0, a1, so, zx, yx, zs, ys, yt) \
	VMOVDQU       a0, yx              \
	VINSERTI64X4  $1, a1, zx, zx      \
	VPXORD        Z17, zx, zx         \
	VBROADCASTSS  (so)(BX), ys        \
	VBROADCASTSS  (so+4)(BX), yt      \
	VINSERTF64X4  $1, yt, zs, zs

// Weight row r (its block's quants at wr) against the 3 pairs into acc0..acc2.
#define WROW(wr, dwo, acc0, acc1, acc2) \
	VBROADCASTI64X4 wr, Z15             \
	VPXORD          Z16, Z16, Z16       \
	VPDPBUSD        Z15, Z17, Z16       \
	VPSUBD          Z16, Z18, Z16       \
	VBROADCASTSS    (dwo)(R14), Z19     \
	VMOVDQA32       Z16, Z23            \
	VPDPBUSD        Z15, Z12, Z23       \
	VCVTDQ2PS       Z23, Z23            \
	VMULPS          Z20, Z19, Z24       \
	VFMADD231PS     Z24, Z23, acc0      \
	VMOVDQA32       Z16, Z25            \
	VPDPBUSD        Z15, Z13, Z25       \
	VCVTDQ2PS       Z25, Z25            \
	VMULPS          Z21, Z19, Z26       \
	VFMADD231PS     Z26, Z25, acc1      \
	VMOVDQA32       Z16, Z27            \
	VPDPBUSD        Z15, Z14, Z27       \
	VCVTDQ2PS       Z27, Z27            \
	VMULPS          Z22, Z19, Z28       \
	VFMADD231PS     Z28, Z27, acc2

// hsum8 of Y (low lane X) into the float at off(AX), as the AVX2 tiles reduce (clobbers X12–X14).
#define HSUM8(Y, X, off) \
	VEXTRACTF128 $1, Y, X13 \
	VADDPS       X, X13, X13 \
	VMOVHLPS     X13, X13, X14 \
	VADDPS       X14, X13, X14 \
	VMOVSHDUP    X14, X12 \
	VADDSS       X12, X14, X12 \
	VMOVSS       X12, off(AX)

// The two outputs of acc (rows r: offset 4r) for the pair's rows: the low half to AX, the
// high half to AX + ldy.
#define STPAIR(Z, Y, X, off) \
	HSUM8(Y, X, off)                 \
	VEXTRACTF64X4 $1, Z, Y15         \
	ADDQ          DX, AX             \
	HSUM8(Y15, X15, off)             \
	SUBQ          DX, AX

// func q0tQ8Z4x6(w *byte, rowBytes int, x *byte, xRowBytes int, xs *float32, xsStride int, dws *float32, nb int, y *float32, ldy int)
// xs: activation scales block-major (xs[b·xsStride/4 + k] for row k); dws: the 4 weight
// rows' block scales as float32, 4 per block.
TEXT ·q0tQ8Z4x6(SB), NOSPLIT, $0-80
	MOVQ   w+0(FP), SI
	MOVQ   rowBytes+8(FP), R9
	LEAQ   (R9)(R9*2), R10
	MOVQ   x+16(FP), DI
	MOVQ   xRowBytes+24(FP), R12
	LEAQ   (R12)(R12*2), R13
	LEAQ   (DI)(R12*4), R11
	MOVQ   xs+32(FP), BX
	MOVQ   xsStride+40(FP), R8
	MOVQ   dws+48(FP), R14
	MOVQ   nb+56(FP), CX
	VPBROADCASTB q5x80<>(SB), Z17
	VPXORD Z18, Z18, Z18
	ZERO_Z0_Z11

z6loop:
	XPAIR(2(DI), 2(DI)(R12*1), 0, Z12, Y12, Z20, Y20, Y29)
	XPAIR(2(DI)(R12*2), 2(DI)(R13*1), 8, Z13, Y13, Z21, Y21, Y29)
	XPAIR(2(R11), 2(R11)(R12*1), 16, Z14, Y14, Z22, Y22, Y29)
	WROW(2(SI), 0, Z0, Z1, Z2)
	WROW(2(SI)(R9*1), 4, Z3, Z4, Z5)
	WROW(2(SI)(R9*2), 8, Z6, Z7, Z8)
	WROW(2(SI)(R10*1), 12, Z9, Z10, Z11)
	ADDQ $34, SI
	ADDQ $34, DI
	ADDQ $34, R11
	ADDQ R8, BX
	ADDQ $16, R14
	DECQ CX
	JNZ  z6loop

	MOVQ y+64(FP), AX
	MOVQ ldy+72(FP), DX
	SHLQ $2, DX
	// pair 0: activation rows 0 (low halves) and 1 (high halves)
	STPAIR(Z0, Y0, X0, 0)
	STPAIR(Z3, Y3, X3, 4)
	STPAIR(Z6, Y6, X6, 8)
	STPAIR(Z9, Y9, X9, 12)
	LEAQ (AX)(DX*2), AX
	STPAIR(Z1, Y1, X1, 0)
	STPAIR(Z4, Y4, X4, 4)
	STPAIR(Z7, Y7, X7, 8)
	STPAIR(Z10, Y10, X10, 12)
	LEAQ (AX)(DX*2), AX
	STPAIR(Z2, Y2, X2, 0)
	STPAIR(Z5, Y5, X5, 4)
	STPAIR(Z8, Y8, X8, 8)
	STPAIR(Z11, Y11, X11, 12)
	VZEROUPPER
	RET
