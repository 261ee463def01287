//go:build amd64 && !purego

#include "textflag.h"

// Activation quantizers: Q8_0 (ggml x86 from_float) and Q8_K (quantize_row_q8_K).

DATA absmask<>+0(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $4

DATA f127<>+0(SB)/4, $0x42fe0000 // 127.0
GLOBL f127<>(SB), RODATA|NOPTR, $4

DATA fm127<>+0(SB)/4, $0xc2fe0000 // -127.0
GLOBL fm127<>(SB), RODATA|NOPTR, $4

DATA fone<>+0(SB)/4, $0x3f800000 // 1.0
GLOBL fone<>(SB), RODATA|NOPTR, $4

DATA fhalf<>+0(SB)/4, $0x3f000000 // 0.5
GLOBL fhalf<>(SB), RODATA|NOPTR, $4

// Dword permutation that undoes the lane interleave of VPACKSSDW+VPACKSSWB.
DATA packperm<>+0(SB)/4, $0
DATA packperm<>+4(SB)/4, $4
DATA packperm<>+8(SB)/4, $1
DATA packperm<>+12(SB)/4, $5
DATA packperm<>+16(SB)/4, $2
DATA packperm<>+20(SB)/4, $6
DATA packperm<>+24(SB)/4, $3
DATA packperm<>+28(SB)/4, $7
GLOBL packperm<>(SB), RODATA|NOPTR, $32

DATA ones8<>+0(SB)/1, $1
GLOBL ones8<>(SB), RODATA|NOPTR, $1

DATA ones16<>+0(SB)/2, $1
GLOBL ones16<>(SB), RODATA|NOPTR, $2

// Horizontal max of Y4 into X4[0] (clobbers X5).
#define HMAX4 \
	VEXTRACTF128 $1, Y4, X5 \
	VMAXPS       X5, X4, X4 \
	VMOVHLPS     X4, X4, X5 \
	VMAXPS       X5, X4, X4 \
	VMOVSHDUP    X4, X5     \
	VMAXSS       X5, X4, X4

// Round Y0..Y3 (already scaled) to int8 and leave the 32 bytes in Y0, in order.
#define PACK32 \
	VROUNDPS  $0, Y0, Y0 \
	VROUNDPS  $0, Y1, Y1 \
	VROUNDPS  $0, Y2, Y2 \
	VROUNDPS  $0, Y3, Y3 \
	PACKINT32

// Round r half away from zero, exactly as C's roundf: t = trunc(r); t += sign(r) when
// |r − t| ≥ 0.5 (r − t is exact). Needs Y15 = abs mask, Y11 = 0.5, Y10 = 1.0; clobbers t1, t2.
#define ROUNDAWAY(r, t1, t2) \
	VROUNDPS $3, r, t1     \
	VSUBPS   t1, r, t2     \
	VANDPS   Y15, t2, t2   \
	VCMPPS   $0x1d, Y11, t2, t2 \
	VANDNPS  r, Y15, r     \
	VORPS    Y10, r, r     \
	VANDPS   t2, r, r      \
	VADDPS   t1, r, r

// The packing half of PACK32 (Y0..Y3 hold integral floats).
#define PACKINT32 \
	VCVTPS2DQ Y0, Y0     \
	VCVTPS2DQ Y1, Y1     \
	VCVTPS2DQ Y2, Y2     \
	VCVTPS2DQ Y3, Y3     \
	VPACKSSDW Y1, Y0, Y0 \
	VPACKSSDW Y3, Y2, Y2 \
	VPACKSSWB Y2, Y0, Y0 \
	VPERMD    Y0, Y13, Y0

// Load a 32-float block at SI into Y0..Y3 and its max |x| into X4[0] (clobbers Y5).
#define AMAX32 \
	VMOVUPS 0(SI), Y0   \
	VMOVUPS 32(SI), Y1  \
	VMOVUPS 64(SI), Y2  \
	VMOVUPS 96(SI), Y3  \
	VANDPS  Y15, Y0, Y4 \
	VANDPS  Y15, Y1, Y5 \
	VMAXPS  Y5, Y4, Y4  \
	VANDPS  Y15, Y2, Y5 \
	VMAXPS  Y5, Y4, Y4  \
	VANDPS  Y15, Y3, Y5 \
	VMAXPS  Y5, Y4, Y4  \
	HMAX4

// The arguments of the Q8_0 quantizers (dst, x, nb) and their constants: Y15 abs mask,
// X14 127.0, Y13 the pack permutation, X12 zero.
#define Q80ENTER \
	MOVQ dst+0(FP), DI              \
	MOVQ x+8(FP), SI                \
	MOVQ nb+16(FP), CX              \
	VBROADCASTSS absmask<>(SB), Y15 \
	VMOVSS       f127<>(SB), X14    \
	VMOVDQU      packperm<>(SB), Y13 \
	VXORPS       X12, X12, X12

// d = amax/127 (X5, from X4) stored as fp16 (round to nearest even) at 0(DI).
#define Q80STORED \
	VDIVSS    X14, X4, X5 \
	VCVTPS2PH $0, X5, X6  \
	VMOVD     X6, AX      \
	MOVW      AX, 0(DI)

// Y0..Y3 ·= Y6.
#define SCALE32 \
	VMULPS Y6, Y0, Y0 \
	VMULPS Y6, Y1, Y1 \
	VMULPS Y6, Y2, Y2 \
	VMULPS Y6, Y3, Y3

// func quantizeQ8_0RefAVX2(dst *byte, x *float32, nb int)
// quantize_row_q8_0_ref: d = amax/127 (stored as fp16), id = d != 0 ? 1/d : 0 from the
// float32 d, q = roundf(x·id) (half away from zero). The caller guarantees finite input.
TEXT ·quantizeQ8_0RefAVX2(SB), NOSPLIT, $0-24
	Q80ENTER
	VBROADCASTSS fone<>(SB), Y10
	VBROADCASTSS fhalf<>(SB), Y11

q80rloop:
	AMAX32
	Q80STORED
	VDIVSS       X5, X10, X6          // id = 1/d
	VCMPSS       $4, X12, X5, X7      // d != 0
	VANDPS       X7, X6, X6
	VBROADCASTSS X6, Y6
	SCALE32
	ROUNDAWAY(Y0, Y7, Y8)
	ROUNDAWAY(Y1, Y7, Y8)
	ROUNDAWAY(Y2, Y7, Y8)
	ROUNDAWAY(Y3, Y7, Y8)
	PACKINT32
	VMOVDQU      Y0, 2(DI)
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JNZ          q80rloop
	VZEROUPPER
	RET

// func quantizeQ8_0AVX2(dst *byte, x *float32, nb int)
TEXT ·quantizeQ8_0AVX2(SB), NOSPLIT, $0-24
	Q80ENTER

q80loop:
	AMAX32
	Q80STORED

	// id = amax != 0 ? 127/amax : 0
	VDIVSS       X4, X14, X6
	VCMPSS       $4, X12, X4, X7
	VANDPS       X7, X6, X6
	VBROADCASTSS X6, Y6

	SCALE32
	PACK32
	VMOVDQU Y0, 2(DI)

	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  q80loop
	VZEROUPPER
	RET

// One 32-element chunk of a Q8_K block: scale by Y11, round, clamp at 127, pack, store at
// qoff(DI), and leave its partial bsums (4 int32 per 16-element group) in dst.
#define Q8K_CHUNK(xoff, qoff, dst) \
	VMULPS     (xoff)(SI), Y11, Y0    \
	VMULPS     (xoff+32)(SI), Y11, Y1 \
	VMULPS     (xoff+64)(SI), Y11, Y2 \
	VMULPS     (xoff+96)(SI), Y11, Y3 \
	VMINPS     Y12, Y0, Y0            \
	VMINPS     Y12, Y1, Y1            \
	VMINPS     Y12, Y2, Y2            \
	VMINPS     Y12, Y3, Y3            \
	PACK32                            \
	VMOVDQU    Y0, (qoff)(DI)         \
	VPMADDUBSW Y0, Y14, Y0            \
	VPMADDWD   Y15, Y0, dst

// func quantizeQ8KAVX2(dst *byte, x *float32, nb int)
TEXT ·quantizeQ8KAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX

q8kblock:
	// amax over 256 floats.
	VBROADCASTSS absmask<>(SB), Y15
	VXORPS       Y4, Y4, Y4
	VXORPS       Y6, Y6, Y6
	MOVQ         SI, AX
	MOVQ         $8, DX

q8kmax:
	VANDPS  0(AX), Y15, Y0
	VANDPS  32(AX), Y15, Y1
	VANDPS  64(AX), Y15, Y2
	VANDPS  96(AX), Y15, Y3
	VMAXPS  Y0, Y4, Y4
	VMAXPS  Y1, Y6, Y6
	VMAXPS  Y2, Y4, Y4
	VMAXPS  Y3, Y6, Y6
	ADDQ    $128, AX
	DECQ    DX
	JNZ     q8kmax
	VMAXPS  Y6, Y4, Y4
	HMAX4

	VXORPS   X5, X5, X5
	VUCOMISS X5, X4
	JEQ      q8kzero
	JPS      q8kzero

	// max = the first x with |x| == amax.
	VBROADCASTSS X4, Y8
	XORQ         AX, AX

q8kfind:
	VANDPS    (SI)(AX*4), Y15, Y0
	VCMPPS    $0, Y8, Y0, Y0
	VMOVMSKPS Y0, DX
	TESTL     DX, DX
	JNZ       q8kfound
	ADDQ      $8, AX
	CMPQ      AX, $256
	JLT       q8kfind
	JMP       q8kzero // unreachable for finite input

q8kfound:
	BSFL   DX, DX
	ADDQ   DX, AX
	VMOVSS (SI)(AX*4), X9

	// iscale = -127/max, d = 1/iscale
	VMOVSS       fm127<>(SB), X10
	VDIVSS       X9, X10, X10
	VMOVSS       fone<>(SB), X5
	VDIVSS       X10, X5, X5
	VMOVSS       X5, 0(DI)
	VBROADCASTSS X10, Y11

	VBROADCASTSS f127<>(SB), Y12
	VMOVDQU      packperm<>(SB), Y13
	VPBROADCASTB ones8<>(SB), Y14
	VPBROADCASTW ones16<>(SB), Y15

	Q8K_CHUNK(0, 4, Y4)
	Q8K_CHUNK(128, 36, Y5)
	VPHADDD Y5, Y4, Y4
	Q8K_CHUNK(256, 68, Y5)
	Q8K_CHUNK(384, 100, Y6)
	VPHADDD Y6, Y5, Y5
	VPHADDD Y5, Y4, Y4
	Q8K_CHUNK(512, 132, Y5)
	Q8K_CHUNK(640, 164, Y6)
	VPHADDD Y6, Y5, Y5
	Q8K_CHUNK(768, 196, Y6)
	Q8K_CHUNK(896, 228, Y7)
	VPHADDD Y7, Y6, Y6
	VPHADDD Y6, Y5, Y5

	// Y4 lanes: [g0 g2 g4 g6 | g1 g3 g5 g7], Y5: [g8 .. g14 | g9 .. g15].
	VPACKSSDW    Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X6
	VPUNPCKLWD   X6, X4, X7
	VPUNPCKHWD   X6, X4, X8
	VMOVDQU      X7, 260(DI)
	VMOVDQU      X8, 276(DI)
	JMP          q8knext

q8kzero:
	VPXOR   Y0, Y0, Y0
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, 256(DI)
	VMOVDQU Y0, 260(DI)

q8knext:
	ADDQ $1024, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q8kblock
	VZEROUPPER
	RET
