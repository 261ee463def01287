//go:build amd64 && !purego

#include "textflag.h"

// Q5_0·Q8_0, IQ4_NL·Q8_0, Q4_1·Q8_1 and Q5_1·Q8_1 dot products in ggml's AVX2 vec_dot order
// (see dot_q0x.go). Each 32-element block gives 8 exact int32 lanes (lane k: elements
// 4k..4k+3) from VPMADDUBSW+VPMADDWD, converted to float and accumulated with one FMA against
// the broadcast float32 product of the two fp16 block scales. Signed weights (Q5_0, IQ4_NL)
// are multiplied as |x|·(sign(x)·q), which is exact for every activation byte, −128 included
// (|x| ≤ 128 unsigned, |q| ≤ 127, pair sums < 2^15). The caller sums the lanes with hsum8.

DATA q0xnib<>+0(SB)/1, $0x0f
GLOBL q0xnib<>(SB), RODATA|NOPTR, $1

DATA q0xf0<>+0(SB)/1, $0xf0
GLOBL q0xf0<>(SB), RODATA|NOPTR, $1

DATA q0x10<>+0(SB)/1, $0x10
GLOBL q0x10<>(SB), RODATA|NOPTR, $1

DATA q0xone16<>+0(SB)/2, $1
GLOBL q0xone16<>(SB), RODATA|NOPTR, $2

// Per-qword shift counts: low 128-bit lane unshifted (low nibbles), high lane shifted by 4.
DATA q0xhishift<>+0(SB)/8, $0
DATA q0xhishift<>+8(SB)/8, $0
DATA q0xhishift<>+16(SB)/8, $4
DATA q0xhishift<>+24(SB)/8, $4
GLOBL q0xhishift<>(SB), RODATA|NOPTR, $32

// VPSHUFB mask spreading the 4 bytes of a broadcast dword: byte i takes byte i/8.
DATA q0xbshuf<>+0(SB)/8, $0x0000000000000000
DATA q0xbshuf<>+8(SB)/8, $0x0101010101010101
DATA q0xbshuf<>+16(SB)/8, $0x0202020202020202
DATA q0xbshuf<>+24(SB)/8, $0x0303030303030303
GLOBL q0xbshuf<>(SB), RODATA|NOPTR, $32

// Byte i: 1 << (i mod 8).
DATA q0xbit<>+0(SB)/8, $0x8040201008040201
GLOBL q0xbit<>(SB), RODATA|NOPTR, $8

// ggml's IQ4_NL codebook (kvalues_iq4nl) as 16 int8.
DATA q0xiq4nl<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA q0xiq4nl<>+8(SB)/8, $0x7159453526190d01
GLOBL q0xiq4nl<>(SB), RODATA|NOPTR, $16

// Constant registers: Y15 int16 ones, Y14 0x0f bytes, Y13 hishift, Y12 byte-spread mask,
// Y11 bit masks, Y10 0xf0 (Q5_0) / 0x10 (Q5_1) bytes, Y9 IQ4_NL table in both lanes.
#define CONSTS \
	VPBROADCASTW q0xone16<>(SB), Y15 \
	VPBROADCASTB q0xnib<>(SB), Y14   \
	VMOVDQU      q0xhishift<>(SB), Y13

#define BITCONSTS \
	VMOVDQU      q0xbshuf<>(SB), Y12 \
	VPBROADCASTQ q0xbit<>(SB), Y11

// The 16 nibble bytes at off(SI) as 32 bytes (low nibbles, then high nibbles) in r.
#define NIBBLES(off, r) \
	VBROADCASTI128 off(SI), r \
	VPSRLVQ        Y13, r, r  \
	VPAND          Y14, r, r

// 0xff in byte i of r where bit i of the uint32 at off(SI) is set, else 0.
#define HBITS(off, r) \
	VPBROADCASTD off(SI), r \
	VPSHUFB      Y12, r, r  \
	VPAND        Y11, r, r  \
	VPCMPEQB     Y11, r, r

// Scale product fp16(0(SI))·fp16(0(DI)) broadcast into Y3 (clobbers AX, BX, X2, X4).
#define DSCALE \
	MOVWLZX      0(SI), AX     \
	MOVWLZX      0(DI), BX     \
	SHLL         $16, BX       \
	ORL          BX, AX        \
	VMOVD        AX, X2        \
	VCVTPH2PS    X2, X2        \
	VMOVSHDUP    X2, X4        \
	VMULSS       X4, X2, X2    \
	VBROADCASTSS X2, Y3

// Signed int8 weights in q times the 32 activation quants at 2(DI), as 8 float lanes in q
// (clobbers t): |x|·(sign(x)·q) pairwise, then pairs of pairs.
#define SDOT(q, t) \
	VMOVDQU    2(DI), t   \
	VPSIGNB    t, q, q    \
	VPABSB     t, t       \
	VPMADDUBSW q, t, q    \
	VPMADDWD   Y15, q, q  \
	VCVTDQ2PS  q, q

// Unsigned weights (≤ 31) in q times the activation quants at 4(DI) (Q8_1), as 8 float lanes.
#define UDOT(q) \
	VMOVDQU    4(DI), Y6 \
	VPMADDUBSW Y6, q, q  \
	VPMADDWD   Y15, q, q \
	VCVTDQ2PS  q, q

// Scales of a Q4_1/Q5_1 block at SI with a Q8_1 block at DI: X2 = (d_w, m_w, d_x, s_x);
// X1 lane 1 (summs) = fma(m_w, s_x, X1 lane 1) (the other lanes of X1 are scratch);
// Y3 = broadcast d_w·d_x.
#define MSCALE \
	VMOVD        0(SI), X2         \
	VPINSRD      $1, 0(DI), X2, X2 \
	VCVTPH2PS    X2, X2            \
	VMOVHLPS     X2, X2, X4        \
	VFMADD231PS  X4, X2, X1        \
	VMULSS       X4, X2, X2        \
	VBROADCASTSS X2, Y3

// func q0xDotQ5_0AVX2(w, x *byte, nb int, acc *[8]float32)
TEXT ·q0xDotQ5_0AVX2(SB), NOSPLIT, $0-32
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	MOVQ         acc+24(FP), R9
	CONSTS
	BITCONSTS
	VPBROADCASTB q0xf0<>(SB), Y10
	VMOVUPS      0(R9), Y0

q50loop:
	DSCALE
	NIBBLES(6, Y7)
	HBITS(2, Y5)
	VPANDN      Y10, Y5, Y5 // 0xf0 where the high bit is clear: (nibble | h·16) − 16
	VPOR        Y5, Y7, Y7
	SDOT(Y7, Y6)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $22, SI
	ADDQ        $34, DI
	DECQ        CX
	JNZ         q50loop

	VMOVUPS Y0, 0(R9)
	VZEROUPPER
	RET

// IQ4_NL weights of the block at SI as signed bytes in r.
#define IQ4W(r) \
	NIBBLES(2, r)   \
	VPSHUFB r, Y9, r

// func q0xDotIQ4NLPairsAVX2(w, x *byte, npairs int, acc *[16]float32)
// Blocks 2i accumulate into acc[0:8], blocks 2i+1 into acc[8:16] (ggml's accum1, accum2).
TEXT ·q0xDotIQ4NLPairsAVX2(SB), NOSPLIT, $0-32
	MOVQ           w+0(FP), SI
	MOVQ           x+8(FP), DI
	MOVQ           npairs+16(FP), CX
	MOVQ           acc+24(FP), R9
	CONSTS
	VBROADCASTI128 q0xiq4nl<>(SB), Y9
	VMOVUPS        0(R9), Y0
	VMOVUPS        32(R9), Y1

iq4ploop:
	DSCALE
	IQ4W(Y7)
	SDOT(Y7, Y6)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $18, SI
	ADDQ        $34, DI
	DSCALE
	IQ4W(Y7)
	SDOT(Y7, Y6)
	VFMADD231PS Y3, Y7, Y1
	ADDQ        $18, SI
	ADDQ        $34, DI
	DECQ        CX
	JNZ         iq4ploop

	VMOVUPS Y0, 0(R9)
	VMOVUPS Y1, 32(R9)
	VZEROUPPER
	RET

// func q0xDotIQ4NLAVX2(w, x *byte, nb int, acc *[8]float32)
// One accumulator for all blocks (tinyBLAS_Q0_AVX's order).
TEXT ·q0xDotIQ4NLAVX2(SB), NOSPLIT, $0-32
	MOVQ           w+0(FP), SI
	MOVQ           x+8(FP), DI
	MOVQ           nb+16(FP), CX
	MOVQ           acc+24(FP), R9
	CONSTS
	VBROADCASTI128 q0xiq4nl<>(SB), Y9
	VMOVUPS        0(R9), Y0

iq4loop:
	DSCALE
	IQ4W(Y7)
	SDOT(Y7, Y6)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $18, SI
	ADDQ        $34, DI
	DECQ        CX
	JNZ         iq4loop

	VMOVUPS Y0, 0(R9)
	VZEROUPPER
	RET

// func q0xDotQ4_1AVX2(w, x *byte, nb int, acc *[8]float32) float32
// Returns summs = Σ fma-accumulated m_w·s_x; acc gets the lanes.
TEXT ·q0xDotQ4_1AVX2(SB), NOSPLIT, $0-36
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	MOVQ    acc+24(FP), R9
	CONSTS
	VMOVUPS 0(R9), Y0
	VXORPS  X1, X1, X1

q41loop:
	MSCALE
	NIBBLES(4, Y7)
	UDOT(Y7)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $20, SI
	ADDQ        $36, DI
	DECQ        CX
	JNZ         q41loop

	VMOVUPS   Y0, 0(R9)
	VMOVSHDUP X1, X1
	VMOVSS    X1, ret+32(FP)
	VZEROUPPER
	RET

// func q0xDotQ5_1AVX2(w, x *byte, nb int, acc *[8]float32) float32
TEXT ·q0xDotQ5_1AVX2(SB), NOSPLIT, $0-36
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	MOVQ         acc+24(FP), R9
	CONSTS
	BITCONSTS
	VPBROADCASTB q0x10<>(SB), Y10
	VMOVUPS      0(R9), Y0
	VXORPS       X1, X1, X1

q51loop:
	MSCALE
	NIBBLES(8, Y7)
	HBITS(4, Y5)
	VPAND       Y10, Y5, Y5
	VPOR        Y5, Y7, Y7
	UDOT(Y7)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $24, SI
	ADDQ        $36, DI
	DECQ        CX
	JNZ         q51loop

	VMOVUPS   Y0, 0(R9)
	VMOVSHDUP X1, X1
	VMOVSS    X1, ret+32(FP)
	VZEROUPPER
	RET
