//go:build amd64 && !purego

#include "textflag.h"

// K-quant · Q8_K dot products (Q4_K, Q5_K, Q6_K) in ggml's AVX2 vec_dot order, bit for bit.
// Per super-block the sub-block scales are applied in exact int32 arithmetic (VPMADDUBSW
// pairs, then VPMADDWD by the scale), the 8 int32 lanes are converted to float and
// FMA-accumulated with d·dx. The Q4_K/Q5_K minimum term Σ m_j·(bsum_2j + bsum_2j+1) comes
// from the Q8_K bsums and is accumulated as ggml does it: Q4_K in 4 float lanes (pairs of
// sub-blocks), Q5_K in one float; both with a negated-product FMA. The Q6_K offset
// 32·(sc_2k·bsum_2k + sc_2k+1·bsum_2k+1) is subtracted from int32 lane k before conversion.

DATA nib4<>+0(SB)/1, $0x0f
GLOBL nib4<>(SB), RODATA|NOPTR, $1

DATA bit4<>+0(SB)/1, $0x10
GLOBL bit4<>(SB), RODATA|NOPTR, $1

DATA hi2<>+0(SB)/1, $0x30
GLOBL hi2<>(SB), RODATA|NOPTR, $1

// kscale<>+32j: VPSHUFB mask that broadcasts int16 word j of each lane to all 8 words.
DATA kscale<>+0(SB)/8, $0x0100010001000100
DATA kscale<>+8(SB)/8, $0x0100010001000100
DATA kscale<>+16(SB)/8, $0x0100010001000100
DATA kscale<>+24(SB)/8, $0x0100010001000100
DATA kscale<>+32(SB)/8, $0x0302030203020302
DATA kscale<>+40(SB)/8, $0x0302030203020302
DATA kscale<>+48(SB)/8, $0x0302030203020302
DATA kscale<>+56(SB)/8, $0x0302030203020302
DATA kscale<>+64(SB)/8, $0x0504050405040504
DATA kscale<>+72(SB)/8, $0x0504050405040504
DATA kscale<>+80(SB)/8, $0x0504050405040504
DATA kscale<>+88(SB)/8, $0x0504050405040504
DATA kscale<>+96(SB)/8, $0x0706070607060706
DATA kscale<>+104(SB)/8, $0x0706070607060706
DATA kscale<>+112(SB)/8, $0x0706070607060706
DATA kscale<>+120(SB)/8, $0x0706070607060706
DATA kscale<>+128(SB)/8, $0x0908090809080908
DATA kscale<>+136(SB)/8, $0x0908090809080908
DATA kscale<>+144(SB)/8, $0x0908090809080908
DATA kscale<>+152(SB)/8, $0x0908090809080908
DATA kscale<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kscale<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kscale<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kscale<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kscale<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kscale<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kscale<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kscale<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kscale<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kscale<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kscale<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kscale<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL kscale<>(SB), RODATA|NOPTR, $256

// q6scale<>+32k: VPSHUFB mask that fills the low lane with int16 word 2k and the high lane
// with word 2k+1 of a register holding the same 8 scales in both lanes.
DATA q6scale<>+0(SB)/8, $0x0100010001000100
DATA q6scale<>+8(SB)/8, $0x0100010001000100
DATA q6scale<>+16(SB)/8, $0x0302030203020302
DATA q6scale<>+24(SB)/8, $0x0302030203020302
DATA q6scale<>+32(SB)/8, $0x0504050405040504
DATA q6scale<>+40(SB)/8, $0x0504050405040504
DATA q6scale<>+48(SB)/8, $0x0706070607060706
DATA q6scale<>+56(SB)/8, $0x0706070607060706
DATA q6scale<>+64(SB)/8, $0x0908090809080908
DATA q6scale<>+72(SB)/8, $0x0908090809080908
DATA q6scale<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q6scale<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q6scale<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q6scale<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q6scale<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q6scale<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q6scale<>(SB), RODATA|NOPTR, $128

// Horizontal sum of Y0 into X0[0] (clobbers X1).
#define HSUM0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVHLPS     X0, X0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVSHDUP    X0, X1     \
	VADDSS       X1, X0, X0

// Decode the Q4_K/Q5_K 12-byte scales at 4(SI): Y2 = the 8 scales as int16 words in both
// lanes; Y3 = int32 m_j·(bsum_2j + bsum_2j+1) from the Q8_K bsums at 260(DI).
// Then Y6 = broadcast d·dx and Y7 = broadcast dmin·dx.
// Clobbers AX, BX, DX, R8-R12, Y4, X5.
#define KSCALES \
	MOVL         4(SI), AX            \
	MOVL         8(SI), BX            \
	MOVL         12(SI), DX           \
	MOVL         AX, R8               \
	ANDL         $0x3f3f3f3f, R8      \
	MOVL         BX, R10              \
	ANDL         $0x3f3f3f3f, R10     \
	MOVL         DX, R9               \
	ANDL         $0x0f0f0f0f, R9      \
	MOVL         AX, R12              \
	SHRL         $2, R12              \
	ANDL         $0x30303030, R12     \
	ORL          R12, R9              \
	MOVL         DX, R11              \
	SHRL         $4, R11              \
	ANDL         $0x0f0f0f0f, R11     \
	MOVL         BX, R12              \
	SHRL         $2, R12              \
	ANDL         $0x30303030, R12     \
	ORL          R12, R11             \
	SHLQ         $32, R9              \
	ORQ          R8, R9               \
	SHLQ         $32, R11             \
	ORQ          R10, R11             \
	VMOVQ        R9, X2               \
	VPMOVZXBW    X2, X2               \
	VINSERTI128  $1, X2, Y2, Y2       \
	VMOVQ        R11, X3              \
	VPUNPCKLBW   X3, X3, X3           \
	VPMOVZXBW    X3, Y3               \
	VPMADDWD     260(DI), Y3, Y3      \
	VMOVD        0(SI), X5            \
	VCVTPH2PS    X5, X5               \
	VBROADCASTSS 0(DI), X4            \
	VMULPS       X4, X5, X5           \
	VBROADCASTSS X5, Y6               \
	VMOVSHDUP    X5, X5               \
	VBROADCASTSS X5, Y7

// Sub-block pair c of a Q4_K/Q5_K super-block: Y9/Y10 hold the 32 low/high 4- or 5-bit
// values (unsigned bytes); multiply with the Q8_K quants, apply scales 2c and 2c+1, add to Y8.
#define KPAIR(c, xoff) \
	VPMADDUBSW (xoff)(DI), Y9, Y9       \
	VPMADDUBSW (xoff+32)(DI), Y10, Y10  \
	VPSHUFB    kscale<>+(64*(c))(SB), Y2, Y11    \
	VPMADDWD   Y11, Y9, Y9              \
	VPSHUFB    kscale<>+(64*(c)+32)(SB), Y2, Y12 \
	VPMADDWD   Y12, Y10, Y10            \
	VPADDD     Y9, Y8, Y8               \
	VPADDD     Y10, Y8, Y8

// Split 32 bytes of Q4_K/Q5_K low bits at off(SI) into Y9 (low nibbles) and Y10 (high).
#define NIBBLES(off) \
	VMOVDQU (off)(SI), Y9 \
	VPSRLW  $4, Y9, Y10   \
	VPAND   Y15, Y9, Y9   \
	VPAND   Y15, Y10, Y10

// func dotQ4KQ8KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ4KQ8KAVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTB nib4<>(SB), Y15
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1

q4kloop:
	KSCALES
	// ggml: 4 lanes (m_2k·s_2k + m_2k+1·s_2k+1), acc_m += (−dmin·dx)·lanes
	VEXTRACTI128 $1, Y3, X4
	VPHADDD      X4, X3, X3
	VCVTDQ2PS    X3, X3
	VFNMADD231PS X7, X3, X1
	VPXOR       Y8, Y8, Y8
	NIBBLES(16)
	KPAIR(0, 4)
	NIBBLES(48)
	KPAIR(1, 68)
	NIBBLES(80)
	KPAIR(2, 132)
	NIBBLES(112)
	KPAIR(3, 196)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y6, Y8, Y0
	ADDQ        $144, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q4kloop

	VMOVHLPS  X1, X1, X2
	VADDPS    X2, X1, X2
	VMOVSHDUP X2, X3
	VADDSS    X3, X2, X2
	HSUM0
	VADDSS    X2, X0, X0
	VMOVSS    X0, ret+24(FP)
	VZEROUPPER
	RET

// Add the fifth bit (from Y13 = qh) to Y9 and Y10: shlo/shhi shift bit 2c / 2c+1 of each qh
// byte to bit 4, Y14 = 0x10 bytes.
#define HIBITS(shlo, nlo, shhi, nhi) \
	shlo  $nlo, Y13, Y11 \
	VPAND Y14, Y11, Y11  \
	VPOR  Y11, Y9, Y9    \
	shhi  $nhi, Y13, Y12 \
	VPAND Y14, Y12, Y12  \
	VPOR  Y12, Y10, Y10

// func dotQ5KQ8KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ5KQ8KAVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTB nib4<>(SB), Y15
	VPBROADCASTB bit4<>(SB), Y14
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1

q5kloop:
	KSCALES
	// ggml: summs += (−dmin·dx)·Σ_j m_j·s_j, one float
	VEXTRACTI128 $1, Y3, X4
	VPADDD       X4, X3, X3
	VPHADDD      X3, X3, X3
	VPHADDD      X3, X3, X3
	VCVTDQ2PS    X3, X3
	VFNMADD231SS X7, X3, X1
	VPXOR       Y8, Y8, Y8
	VMOVDQU     16(SI), Y13
	NIBBLES(48)
	HIBITS(VPSLLW, 4, VPSLLW, 3)
	KPAIR(0, 4)
	NIBBLES(80)
	HIBITS(VPSLLW, 2, VPSLLW, 1)
	KPAIR(1, 68)
	NIBBLES(112)
	HIBITS(VPSLLW, 0, VPSRLW, 1)
	KPAIR(2, 132)
	NIBBLES(144)
	HIBITS(VPSRLW, 2, VPSRLW, 3)
	KPAIR(3, 196)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y6, Y8, Y0
	ADDQ        $176, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q5kloop

	VMOVAPS X1, X2
	HSUM0
	VADDSS  X2, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// One 32-element group k of a Q6_K half: q (unsigned 6-bit values in bytes) times the Q8_K
// quants at xoff(DI), scaled by the half's sub-blocks 2k (low lane) and 2k+1 (high lane),
// whose int16 scales sc holds in both lanes; added to Y8.
#define Q6GROUP(q, sc, k, xoff) \
	VPMADDUBSW (xoff)(DI), q, q               \
	VPSHUFB    q6scale<>+(32*(k))(SB), sc, Y13 \
	VPMADDWD   Y13, q, q                      \
	VPADDD     q, Y8, Y8

// One 128-element half n of a Q6_K super-block (ql at 64n, qh at 128+32n); sc holds the
// half's 8 scales as int16 in both lanes.
#define Q6HALF(n, sc) \
	VMOVDQU (64*n)(SI), Y9      \
	VMOVDQU (64*n+32)(SI), Y10  \
	VMOVDQU (128+32*n)(SI), Y11 \
	VPSLLW  $4, Y11, Y12        \
	VPAND   Y14, Y12, Y12       \
	VPAND   Y15, Y9, Y13        \
	VPOR    Y13, Y12, Y12       \
	Q6GROUP(Y12, sc, 0, 4+128*n)  \
	VPSLLW  $2, Y11, Y12        \
	VPAND   Y14, Y12, Y12       \
	VPAND   Y15, Y10, Y13       \
	VPOR    Y13, Y12, Y12       \
	Q6GROUP(Y12, sc, 1, 36+128*n) \
	VPSRLW  $4, Y9, Y9          \
	VPAND   Y15, Y9, Y9         \
	VPAND   Y14, Y11, Y12       \
	VPOR    Y9, Y12, Y12        \
	Q6GROUP(Y12, sc, 2, 68+128*n) \
	VPSRLW  $4, Y10, Y10        \
	VPAND   Y15, Y10, Y10       \
	VPSRLW  $2, Y11, Y12        \
	VPAND   Y14, Y12, Y12       \
	VPOR    Y10, Y12, Y12       \
	Q6GROUP(Y12, sc, 3, 100+128*n)

// func dotQ6KQ8KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ6KQ8KAVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTB nib4<>(SB), Y15
	VPBROADCASTB hi2<>(SB), Y14
	VXORPS       Y0, Y0, Y0

q6kloop:
	// d·dx
	MOVWLZX      208(SI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VMULSS       0(DI), X5, X5
	VBROADCASTSS X5, Y6

	// scales and the offset term 32·Σ sc_s·bsum_s (int32 lanes)
	VMOVDQU      192(SI), X2
	VPMOVSXBW    X2, Y3
	VPERMQ       $0x44, Y3, Y2 // scales 0..7 in both lanes
	VPERMQ       $0xee, Y3, Y7 // scales 8..15 in both lanes
	VPMADDWD     260(DI), Y3, Y3
	VPSLLD       $5, Y3, Y3

	VPXOR Y8, Y8, Y8
	Q6HALF(0, Y2)
	Q6HALF(1, Y7)
	VPSUBD      Y3, Y8, Y8
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y6, Y8, Y0
	ADDQ        $210, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q6kloop

	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET
