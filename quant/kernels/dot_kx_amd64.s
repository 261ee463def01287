//go:build amd64 && !purego

#include "textflag.h"

// Q2_K, Q3_K and IQ4_XS · Q8_K dot products in ggml's AVX2 vec_dot order, bit for bit (see
// dot_kx.go). Per super-block the quants are multiplied with VPMADDUBSW into int16 pairs,
// scaled per sub-block with VPMADDWD into 8 int32 lanes (exact), converted to float and
// FMA-accumulated with d·dx; Q2_K first FMAs its min term (−dmin·dx)·Σ m·bsum per lane pair.

DATA kxm3<>+0(SB)/1, $0x03
GLOBL kxm3<>(SB), RODATA|NOPTR, $1

DATA kxm4<>+0(SB)/1, $0x0f
GLOBL kxm4<>(SB), RODATA|NOPTR, $1

DATA kx04<>+0(SB)/1, $0x04
GLOBL kx04<>(SB), RODATA|NOPTR, $1

DATA kx30<>+0(SB)/1, $0x30
GLOBL kx30<>(SB), RODATA|NOPTR, $1

DATA kx32<>+0(SB)/1, $0x20
GLOBL kx32<>(SB), RODATA|NOPTR, $1

DATA kx32w<>+0(SB)/2, $0x0020
GLOBL kx32w<>(SB), RODATA|NOPTR, $2

// kxq3shuf<>+32p: VPSHUFB mask filling the low lane with int16 word 2p and the high lane
// with word 2p+1 of a register holding 8 scales in both lanes (ggml's get_scale_shuffle_q3k).
DATA kxq3shuf<>+0(SB)/8, $0x0100010001000100
DATA kxq3shuf<>+8(SB)/8, $0x0100010001000100
DATA kxq3shuf<>+16(SB)/8, $0x0302030203020302
DATA kxq3shuf<>+24(SB)/8, $0x0302030203020302
DATA kxq3shuf<>+32(SB)/8, $0x0504050405040504
DATA kxq3shuf<>+40(SB)/8, $0x0504050405040504
DATA kxq3shuf<>+48(SB)/8, $0x0706070607060706
DATA kxq3shuf<>+56(SB)/8, $0x0706070607060706
DATA kxq3shuf<>+64(SB)/8, $0x0908090809080908
DATA kxq3shuf<>+72(SB)/8, $0x0908090809080908
DATA kxq3shuf<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxq3shuf<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxq3shuf<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxq3shuf<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxq3shuf<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxq3shuf<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL kxq3shuf<>(SB), RODATA|NOPTR, $128

// kxbcast<>+32j: VPSHUFB mask broadcasting int16 word j of each lane to all 8 words.
DATA kxbcast<>+0(SB)/8, $0x0100010001000100
DATA kxbcast<>+8(SB)/8, $0x0100010001000100
DATA kxbcast<>+16(SB)/8, $0x0100010001000100
DATA kxbcast<>+24(SB)/8, $0x0100010001000100
DATA kxbcast<>+32(SB)/8, $0x0302030203020302
DATA kxbcast<>+40(SB)/8, $0x0302030203020302
DATA kxbcast<>+48(SB)/8, $0x0302030203020302
DATA kxbcast<>+56(SB)/8, $0x0302030203020302
DATA kxbcast<>+64(SB)/8, $0x0504050405040504
DATA kxbcast<>+72(SB)/8, $0x0504050405040504
DATA kxbcast<>+80(SB)/8, $0x0504050405040504
DATA kxbcast<>+88(SB)/8, $0x0504050405040504
DATA kxbcast<>+96(SB)/8, $0x0706070607060706
DATA kxbcast<>+104(SB)/8, $0x0706070607060706
DATA kxbcast<>+112(SB)/8, $0x0706070607060706
DATA kxbcast<>+120(SB)/8, $0x0706070607060706
DATA kxbcast<>+128(SB)/8, $0x0908090809080908
DATA kxbcast<>+136(SB)/8, $0x0908090809080908
DATA kxbcast<>+144(SB)/8, $0x0908090809080908
DATA kxbcast<>+152(SB)/8, $0x0908090809080908
DATA kxbcast<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxbcast<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxbcast<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxbcast<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxbcast<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxbcast<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxbcast<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxbcast<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxbcast<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxbcast<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxbcast<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxbcast<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL kxbcast<>(SB), RODATA|NOPTR, $256

// kvalues_iq4nl: -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113.
DATA kxiq4<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA kxiq4<>+8(SB)/8, $0x7159453526190d01
GLOBL kxiq4<>(SB), RODATA|NOPTR, $16

// VPSRLVQ counts: low lane unshifted (low nibbles), high lane >> 4 (high nibbles).
DATA kxnibshift<>+0(SB)/8, $0
DATA kxnibshift<>+8(SB)/8, $0
DATA kxnibshift<>+16(SB)/8, $4
DATA kxnibshift<>+24(SB)/8, $4
GLOBL kxnibshift<>(SB), RODATA|NOPTR, $32

// VPSRLVD counts selecting the 2-bit field of Q3_K scale dword k (scales 4k..4k+3).
DATA kxq3hshift<>+0(SB)/4, $0
DATA kxq3hshift<>+4(SB)/4, $2
DATA kxq3hshift<>+8(SB)/4, $4
DATA kxq3hshift<>+12(SB)/4, $6
GLOBL kxq3hshift<>(SB), RODATA|NOPTR, $16

// VPMULLW factors moving bits 2i..2i+1 of IQ4_XS scales_h to bits 14..15 of word i.
DATA kxiq4hmul<>+0(SB)/8, $0x0100040010004000
DATA kxiq4hmul<>+8(SB)/8, $0x0001000400100040
GLOBL kxiq4hmul<>(SB), RODATA|NOPTR, $16

// ggml's hsum_float_8 of Y0 into X0[0] (clobbers X1).
#define KXHSUM \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVHLPS     X0, X0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVSHDUP    X0, X1     \
	VADDSS       X1, X0, X0

// One 32-element group p of a Q2_K/Q3_K half: q holds its 32 unsigned weight values and
// Y8 collects sc_(2p)·(low 16) | sc_(2p+1)·(high 16) from the half's scales sc (8 int16 in
// both lanes).
#define Q2GROUP(p, q, sc, xoff) \
	VPMADDUBSW (xoff)(DI), q, q                  \
	VPSHUFB    kxq3shuf<>+(32*(p))(SB), sc, Y10 \
	VPMADDWD   Y10, q, q                         \
	VPADDD     q, Y8, Y8

// Half j of a Q2_K super-block (qs at 16+32j, activations at 4+128j).
#define Q2HALF(j, sc) \
	VMOVDQU (16+32*j)(SI), Y9       \
	VPAND   Y15, Y9, Y11            \
	Q2GROUP(0, Y11, sc, 4+128*j)    \
	VPSRLW  $2, Y9, Y12             \
	VPAND   Y15, Y12, Y12           \
	Q2GROUP(1, Y12, sc, 36+128*j)   \
	VPSRLW  $4, Y9, Y13             \
	VPAND   Y15, Y13, Y13           \
	Q2GROUP(2, Y13, sc, 68+128*j)   \
	VPSRLW  $6, Y9, Y11             \
	VPAND   Y15, Y11, Y11           \
	Q2GROUP(3, Y11, sc, 100+128*j)

// func dotQ2KQ8KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ2KQ8KAVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTB kxm3<>(SB), Y15
	VPBROADCASTB kxm4<>(SB), Y14
	VXORPS       Y0, Y0, Y0

q2kloop:
	// X5 = [d·dx, dmin·dx]; Y6, Y7 their broadcasts
	VMOVD        80(SI), X5
	VCVTPH2PS    X5, X5
	VBROADCASTSS 0(DI), X4
	VMULPS       X4, X5, X5
	VBROADCASTSS X5, Y6
	VMOVSHDUP    X5, X5
	VBROADCASTSS X5, Y7

	// mins: lane k = m_2k·bsum_2k + m_2k+1·bsum_2k+1; acc += (−dmin·dx)·lanes
	VMOVDQU      0(SI), X1
	VPSRLW       $4, X1, X2
	VPAND        X14, X2, X2
	VPMOVZXBW    X2, Y2
	VPMADDWD     260(DI), Y2, Y2
	VCVTDQ2PS    Y2, Y2
	VFNMADD231PS Y7, Y2, Y0

	// scales 0..7 (Y2) and 8..15 (Y3), int16 in both lanes
	VPAND     X14, X1, X1
	VPMOVZXBW X1, Y1
	VPERMQ    $0x44, Y1, Y2
	VPERMQ    $0xee, Y1, Y3

	VPXOR       Y8, Y8, Y8
	Q2HALF(0, Y2)
	Q2HALF(1, Y3)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y6, Y8, Y0
	ADDQ        $84, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q2kloop

	KXHSUM
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// One Q3_K group p: lo (low 2 bits) and hi (4 where the hmask bit is clear) are unsigned
// bytes; Y8 += scales · (maddubs(lo, q8) − maddubs(hi, q8)), as ggml computes it.
#define Q3GROUP(p, lo, hi, sc, xoff) \
	VMOVDQU    (xoff)(DI), Y10               \
	VPMADDUBSW Y10, lo, lo                   \
	VPMADDUBSW Y10, hi, hi                   \
	VPSUBW     hi, lo, lo                    \
	VPSHUFB    kxq3shuf<>+(32*(p))(SB), sc, Y10 \
	VPMADDWD   Y10, lo, lo                   \
	VPADDD     lo, Y8, Y8

// Half j of a Q3_K super-block: Y9 = its 32 qs bytes, Y12 = hmask; hmask bit 4j+p is moved
// to bit 2 (shl/shr by the given count) and inverted into 4 or 0 by VPANDN with Y14 = 0x04.
#define Q3HALF(j, sc, s0, n0, s1, n1, s2, n2, s3, n3) \
	VMOVDQU (32+32*j)(SI), Y9          \
	VPAND   Y15, Y9, Y4                \
	s0      $n0, Y12, Y5               \
	VPANDN  Y14, Y5, Y5                \
	Q3GROUP(0, Y4, Y5, sc, 4+128*j)    \
	VPSRLW  $2, Y9, Y1                 \
	VPAND   Y15, Y1, Y1                \
	s1      $n1, Y12, Y7               \
	VPANDN  Y14, Y7, Y7                \
	Q3GROUP(1, Y1, Y7, sc, 36+128*j)   \
	VPSRLW  $4, Y9, Y4                 \
	VPAND   Y15, Y4, Y4                \
	s2      $n2, Y12, Y5               \
	VPANDN  Y14, Y5, Y5                \
	Q3GROUP(2, Y4, Y5, sc, 68+128*j)   \
	VPSRLW  $6, Y9, Y1                 \
	VPAND   Y15, Y1, Y1                \
	s3      $n3, Y12, Y7               \
	VPANDN  Y14, Y7, Y7                \
	Q3GROUP(3, Y1, Y7, sc, 100+128*j)

// func dotQ3KQ8KAVX2(w, x *byte, nb int) float32
TEXT ·dotQ3KQ8KAVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTB kxm3<>(SB), Y15
	VPBROADCASTB kx04<>(SB), Y14
	VPBROADCASTB kxm4<>(SB), X13
	VPBROADCASTB kx30<>(SB), X11
	VXORPS       Y0, Y0, Y0

q3kloop:
	// d·dx
	MOVWLZX      108(SI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VMULSS       0(DI), X5, X5
	VBROADCASTSS X5, Y6

	// 16 scales − 32: low nibbles from bytes 0..7 (scales 0..7) and their high nibbles
	// (8..15); bits 4..5 from bytes 8..11, field k (bits 2k..2k+1) for scales 4k..4k+3.
	VMOVQ        96(SI), X1
	VPSRLW       $4, X1, X2
	VPUNPCKLQDQ  X2, X1, X1
	VPAND        X13, X1, X1
	VPBROADCASTD 104(SI), X2
	VPSRLVD      kxq3hshift<>(SB), X2, X2
	VPSLLD       $4, X2, X2
	VPAND        X11, X2, X2
	VPOR         X2, X1, X1
	VPBROADCASTB kx32<>(SB), X2
	VPSUBB       X2, X1, X1
	VPMOVSXBW    X1, Y1
	VPERMQ       $0x44, Y1, Y2
	VPERMQ       $0xee, Y1, Y3

	VMOVDQU 0(SI), Y12
	VPXOR   Y8, Y8, Y8
	Q3HALF(0, Y2, VPSLLW, 2, VPSLLW, 1, VPSRLW, 0, VPSRLW, 1)
	Q3HALF(1, Y3, VPSRLW, 2, VPSRLW, 3, VPSRLW, 4, VPSRLW, 5)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y6, Y8, Y0
	ADDQ        $110, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q3kloop

	KXHSUM
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Sub-block ib of an IQ4_XS super-block: its 16 quant bytes in both lanes, low nibbles in
// the low lane and high nibbles in the high lane, looked up in kvalues (Y15); multiplied with
// the activations as ggml's mul_add_epi8 (|v|·sign(q8, v)); scaled by word ib of Y1; into Y8.
#define IQ4SUB(ib) \
	VBROADCASTI128 (8+16*ib)(SI), Y2          \
	VPSRLVQ        Y13, Y2, Y2                \
	VPAND          Y14, Y2, Y2                \
	VPSHUFB        Y2, Y15, Y2                \
	VMOVDQU        (4+32*ib)(DI), Y3          \
	VPSIGNB        Y2, Y3, Y3                 \
	VPABSB         Y2, Y2                     \
	VPMADDUBSW     Y3, Y2, Y2                 \
	VPSHUFB        kxbcast<>+(32*(ib))(SB), Y1, Y4 \
	VPMADDWD       Y4, Y2, Y2                 \
	VPADDD         Y2, Y8, Y8

// func dotIQ4XSQ8KAVX2(w, x *byte, nb int) float32
TEXT ·dotIQ4XSQ8KAVX2(SB), NOSPLIT, $0-28
	MOVQ           w+0(FP), SI
	MOVQ           x+8(FP), DI
	MOVQ           nb+16(FP), CX
	VBROADCASTI128 kxiq4<>(SB), Y15
	VPBROADCASTB   kxm4<>(SB), Y14
	VMOVDQU        kxnibshift<>(SB), Y13
	VPBROADCASTW   kx32w<>(SB), X12
	VMOVDQU        kxiq4hmul<>(SB), X11
	VXORPS         Y0, Y0, Y0

iq4xsloop:
	// d·dx
	MOVWLZX      0(SI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VMULSS       0(DI), X5, X5
	VBROADCASTSS X5, Y6

	// Y1 = the 8 sub-block scales − 32 as int16 in both lanes: word ib = nibble ib%2 of
	// scales_l[ib/2] | bits 2ib..2ib+1 of scales_h << 4.
	VMOVD        4(SI), X1
	VPSRLW       $4, X1, X2
	VPUNPCKLBW   X2, X1, X1
	VPAND        X14, X1, X1
	VPMOVZXBW    X1, X1
	VPBROADCASTW 2(SI), X2
	VPMULLW      X11, X2, X2
	VPSRLW       $14, X2, X2
	VPSLLW       $4, X2, X2
	VPOR         X2, X1, X1
	VPSUBW       X12, X1, X1
	VPERMQ       $0x44, Y1, Y1

	VPXOR Y8, Y8, Y8
	IQ4SUB(0)
	IQ4SUB(1)
	IQ4SUB(2)
	IQ4SUB(3)
	IQ4SUB(4)
	IQ4SUB(5)
	IQ4SUB(6)
	IQ4SUB(7)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y6, Y8, Y0
	ADDQ        $136, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         iq4xsloop

	KXHSUM
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET
