//go:build amd64 && !purego

#include "textflag.h"

// Q8_0·Q8_0 and Q4_0·Q8_0 dot products in ggml's AVX2 vec_dot order. Integer sums per
// 32-element block are exact for every byte pattern; each block's 8 int32 lanes are converted
// to float and accumulated with an FMA against the broadcast product of the two fp16 block
// scales into ONE 8-lane accumulator (acc, loaded and stored, so that a long row can be
// processed in chunks); the caller sums the lanes with hsum8.

DATA nib4<>+0(SB)/1, $0x0f
GLOBL nib4<>(SB), RODATA|NOPTR, $1

DATA eight8<>+0(SB)/1, $0x08
GLOBL eight8<>(SB), RODATA|NOPTR, $1

DATA one16<>+0(SB)/2, $1
GLOBL one16<>(SB), RODATA|NOPTR, $2

// Per-qword shift counts: low 128-bit lane unshifted, high lane shifted right by 4.
DATA hishift<>+0(SB)/8, $0
DATA hishift<>+8(SB)/8, $0
DATA hishift<>+16(SB)/8, $4
DATA hishift<>+24(SB)/8, $4
GLOBL hishift<>(SB), RODATA|NOPTR, $32

// Index vectors for VPERMPS: broadcast lane 1, 2 or 3.
DATA lane1<>+0(SB)/4, $1
GLOBL lane1<>(SB), RODATA|NOPTR, $4
DATA lane2<>+0(SB)/4, $2
GLOBL lane2<>(SB), RODATA|NOPTR, $4
DATA lane3<>+0(SB)/4, $3
GLOBL lane3<>(SB), RODATA|NOPTR, $4

// Four block scales: the fp16 weight scales at 0, st, 2st, 3st (SI) times the float32
// activation scales at 0(DX), broadcast into Y3, Y4, Y5, Y6 (clobbers AX, BX, R8, X2).
// Y12/Y13/Y14 hold the lane-3/2/1 permutation indices.
#define SCALES4(st) \
	MOVWLZX      0(SI), AX          \
	MOVWLZX      (st)(SI), BX       \
	SHLL         $16, BX            \
	ORL          BX, AX             \
	MOVWLZX      (2*st)(SI), BX     \
	MOVWLZX      (3*st)(SI), R8     \
	SHLL         $16, R8            \
	ORL          R8, BX             \
	SHLQ         $32, BX            \
	ORQ          BX, AX             \
	VMOVQ        AX, X2             \
	VCVTPH2PS    X2, X2              \
	VMULPS       0(DX), X2, X2       \
	VBROADCASTSS X2, Y3              \
	VPERMPS      Y2, Y14, Y4         \
	VPERMPS      Y2, Y13, Y5         \
	VPERMPS      Y2, Y12, Y6

// One block scale into Y3 (clobbers AX, X2).
#define SCALE1 \
	MOVWLZX      0(SI), AX     \
	VMOVD        AX, X2        \
	VCVTPH2PS    X2, X2        \
	VMULSS       0(DX), X2, X2 \
	VBROADCASTSS X2, Y3

// Σ w·x of the Q8_0 blocks at woff(SI), xoff(DI) as 8 float lanes in a (b is a temporary).
// |w| (unsigned, ≤ 128) times sign(w)·x: exact for every weight byte as long as the
// activation quants are in [−127, 127]. Y15 = int16 ones.
#define Q8BLOCK(woff, xoff, a, b) \
	VMOVDQU    (woff+2)(SI), a    \
	VMOVDQU    (xoff+2)(DI), b    \
	VPSIGNB    a, b, b            \
	VPABSB     a, a               \
	VPMADDUBSW b, a, a            \
	VPMADDWD   Y15, a, a          \
	VCVTDQ2PS  a, a

#define LOADPERM \
	VPBROADCASTD lane1<>(SB), Y14 \
	VPBROADCASTD lane2<>(SB), Y13 \
	VPBROADCASTD lane3<>(SB), Y12

// func dotQ8_0Q8_0AVX2(w, x *byte, xs *float32, nb int, acc *[8]float32)
// xs[b] is the float32 value of activation block b's fp16 scale.
TEXT ·dotQ8_0Q8_0AVX2(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         xs+16(FP), DX
	MOVQ         nb+24(FP), CX
	VPBROADCASTW one16<>(SB), Y15
	LOADPERM
	MOVQ         acc+32(FP), R9
	VMOVUPS      0(R9), Y0
	CMPQ         CX, $4
	JLT          q8tail

q8loop4:
	SCALES4(34)
	Q8BLOCK(0, 0, Y7, Y8)
	VFMADD231PS Y3, Y7, Y0
	Q8BLOCK(34, 34, Y9, Y10)
	VFMADD231PS Y4, Y9, Y0
	Q8BLOCK(68, 68, Y7, Y8)
	VFMADD231PS Y5, Y7, Y0
	Q8BLOCK(102, 102, Y9, Y10)
	VFMADD231PS Y6, Y9, Y0
	ADDQ        $136, SI
	ADDQ        $136, DI
	ADDQ        $16, DX
	SUBQ        $4, CX
	CMPQ        CX, $4
	JGE         q8loop4

q8tail:
	TESTQ CX, CX
	JZ    q8done

q8loop1:
	SCALE1
	Q8BLOCK(0, 0, Y7, Y8)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $34, SI
	ADDQ        $34, DI
	ADDQ        $4, DX
	DECQ        CX
	JNZ         q8loop1

q8done:
	VMOVUPS Y0, 0(R9)
	VZEROUPPER
	RET

// Q4_0 block at woff(SI) with the Q8_0 block at xoff(DI): Σ (q−8)·x as 8 float lanes in a,
// exact for every byte (nibble·x pairs minus 8·x pairs, both far from int16 saturation).
// Uses Y15 = int16 ones, Y11 = 0x0f bytes, Y10 = hishift, Y9 = 0x08 bytes.
#define Q4BLOCK(woff, xoff, a, b, c) \
	VBROADCASTI128 (woff+2)(SI), a \
	VPSRLVQ        Y10, a, a       \
	VPAND          Y11, a, a       \
	VMOVDQU        (xoff+2)(DI), b \
	VPMADDUBSW     b, a, a         \
	VPMADDUBSW     b, Y9, c        \
	VPSUBW         c, a, a         \
	VPMADDWD       Y15, a, a       \
	VCVTDQ2PS      a, a

// func dotQ4_0Q8_0AVX2(w, x *byte, xs *float32, nb int, acc *[8]float32)
TEXT ·dotQ4_0Q8_0AVX2(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         xs+16(FP), DX
	MOVQ         nb+24(FP), CX
	VPBROADCASTW one16<>(SB), Y15
	VPBROADCASTB nib4<>(SB), Y11
	VMOVDQU      hishift<>(SB), Y10
	VPBROADCASTB eight8<>(SB), Y9
	LOADPERM
	MOVQ         acc+32(FP), R9
	VMOVUPS      0(R9), Y0
	CMPQ         CX, $4
	JLT          q4tail

q4loop4:
	SCALES4(18)
	Q4BLOCK(0, 0, Y7, Y8, Y2)
	VFMADD231PS Y3, Y7, Y0
	Q4BLOCK(18, 34, Y7, Y8, Y2)
	VFMADD231PS Y4, Y7, Y0
	Q4BLOCK(36, 68, Y7, Y8, Y2)
	VFMADD231PS Y5, Y7, Y0
	Q4BLOCK(54, 102, Y7, Y8, Y2)
	VFMADD231PS Y6, Y7, Y0
	ADDQ        $72, SI
	ADDQ        $136, DI
	ADDQ        $16, DX
	SUBQ        $4, CX
	CMPQ        CX, $4
	JGE         q4loop4

q4tail:
	TESTQ CX, CX
	JZ    q4done

q4loop1:
	SCALE1
	Q4BLOCK(0, 0, Y7, Y8, Y2)
	VFMADD231PS Y3, Y7, Y0
	ADDQ        $18, SI
	ADDQ        $34, DI
	ADDQ        $4, DX
	DECQ        CX
	JNZ         q4loop1

q4done:
	VMOVUPS Y0, 0(R9)
	VZEROUPPER
	RET

// func q8ScalesAVX2(x *byte, nb int, dst *float32)
// dst[b] = float32(fp16 scale of the Q8_0 block b at x + 34b).
TEXT ·q8ScalesAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ dst+16(FP), DI
	CMPQ CX, $8
	JLT  sctail

scloop8:
	VMOVD     0(SI), X0
	VPINSRW   $1, 34(SI), X0, X0
	VPINSRW   $2, 68(SI), X0, X0
	VPINSRW   $3, 102(SI), X0, X0
	VPINSRW   $4, 136(SI), X0, X0
	VPINSRW   $5, 170(SI), X0, X0
	VPINSRW   $6, 204(SI), X0, X0
	VPINSRW   $7, 238(SI), X0, X0
	VCVTPH2PS X0, Y0
	VMOVUPS   Y0, 0(DI)
	ADDQ      $272, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	CMPQ      CX, $8
	JGE       scloop8

sctail:
	TESTQ CX, CX
	JZ    scdone

scloop1:
	MOVWLZX   0(SI), AX
	VMOVD     AX, X0
	VCVTPH2PS X0, X0
	VMOVSS    X0, 0(DI)
	ADDQ      $34, SI
	ADDQ      $4, DI
	DECQ      CX
	JNZ       scloop1

scdone:
	VZEROUPPER
	RET
