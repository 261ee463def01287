//go:build amd64 && !purego

#include "textflag.h"

// T16 transposes the 16×16 block of 32-bit values in Z0..Z15 (row r in Zr) in place, with
// Z16..Z31 as scratch: unpack pairs of rows, shuffle 64-bit pairs within 128-bit lanes, then
// exchange 128-bit lanes twice.
#define T16 \
	VUNPCKLPS Z1, Z0, Z16; \
	VUNPCKHPS Z1, Z0, Z17; \
	VUNPCKLPS Z3, Z2, Z18; \
	VUNPCKHPS Z3, Z2, Z19; \
	VUNPCKLPS Z5, Z4, Z20; \
	VUNPCKHPS Z5, Z4, Z21; \
	VUNPCKLPS Z7, Z6, Z22; \
	VUNPCKHPS Z7, Z6, Z23; \
	VUNPCKLPS Z9, Z8, Z24; \
	VUNPCKHPS Z9, Z8, Z25; \
	VUNPCKLPS Z11, Z10, Z26; \
	VUNPCKHPS Z11, Z10, Z27; \
	VUNPCKLPS Z13, Z12, Z28; \
	VUNPCKHPS Z13, Z12, Z29; \
	VUNPCKLPS Z15, Z14, Z30; \
	VUNPCKHPS Z15, Z14, Z31; \
	VSHUFPS $0x44, Z18, Z16, Z0; \
	VSHUFPS $0xEE, Z18, Z16, Z1; \
	VSHUFPS $0x44, Z19, Z17, Z2; \
	VSHUFPS $0xEE, Z19, Z17, Z3; \
	VSHUFPS $0x44, Z22, Z20, Z4; \
	VSHUFPS $0xEE, Z22, Z20, Z5; \
	VSHUFPS $0x44, Z23, Z21, Z6; \
	VSHUFPS $0xEE, Z23, Z21, Z7; \
	VSHUFPS $0x44, Z26, Z24, Z8; \
	VSHUFPS $0xEE, Z26, Z24, Z9; \
	VSHUFPS $0x44, Z27, Z25, Z10; \
	VSHUFPS $0xEE, Z27, Z25, Z11; \
	VSHUFPS $0x44, Z30, Z28, Z12; \
	VSHUFPS $0xEE, Z30, Z28, Z13; \
	VSHUFPS $0x44, Z31, Z29, Z14; \
	VSHUFPS $0xEE, Z31, Z29, Z15; \
	VSHUFF32X4 $0x88, Z4, Z0, Z16; \
	VSHUFF32X4 $0x88, Z5, Z1, Z17; \
	VSHUFF32X4 $0x88, Z6, Z2, Z18; \
	VSHUFF32X4 $0x88, Z7, Z3, Z19; \
	VSHUFF32X4 $0xDD, Z4, Z0, Z20; \
	VSHUFF32X4 $0xDD, Z5, Z1, Z21; \
	VSHUFF32X4 $0xDD, Z6, Z2, Z22; \
	VSHUFF32X4 $0xDD, Z7, Z3, Z23; \
	VSHUFF32X4 $0x88, Z12, Z8, Z24; \
	VSHUFF32X4 $0x88, Z13, Z9, Z25; \
	VSHUFF32X4 $0x88, Z14, Z10, Z26; \
	VSHUFF32X4 $0x88, Z15, Z11, Z27; \
	VSHUFF32X4 $0xDD, Z12, Z8, Z28; \
	VSHUFF32X4 $0xDD, Z13, Z9, Z29; \
	VSHUFF32X4 $0xDD, Z14, Z10, Z30; \
	VSHUFF32X4 $0xDD, Z15, Z11, Z31; \
	VSHUFF32X4 $0x88, Z24, Z16, Z0; \
	VSHUFF32X4 $0x88, Z25, Z17, Z1; \
	VSHUFF32X4 $0x88, Z26, Z18, Z2; \
	VSHUFF32X4 $0x88, Z27, Z19, Z3; \
	VSHUFF32X4 $0x88, Z28, Z20, Z4; \
	VSHUFF32X4 $0x88, Z29, Z21, Z5; \
	VSHUFF32X4 $0x88, Z30, Z22, Z6; \
	VSHUFF32X4 $0x88, Z31, Z23, Z7; \
	VSHUFF32X4 $0xDD, Z24, Z16, Z8; \
	VSHUFF32X4 $0xDD, Z25, Z17, Z9; \
	VSHUFF32X4 $0xDD, Z26, Z18, Z10; \
	VSHUFF32X4 $0xDD, Z27, Z19, Z11; \
	VSHUFF32X4 $0xDD, Z28, Z20, Z12; \
	VSHUFF32X4 $0xDD, Z29, Z21, Z13; \
	VSHUFF32X4 $0xDD, Z30, Z22, Z14; \
	VSHUFF32X4 $0xDD, Z31, Z23, Z15

// LOAD16 loads sixteen rows of 64 bytes, DX bytes apart, from AX into Z0..Z15 (AX advances).
#define LOAD16 \
	VMOVUPS (AX), Z0; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z1; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z2; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z3; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z4; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z5; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z6; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z7; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z8; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z9; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z10; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z11; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z12; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z13; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z14; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Z15

// STORE16 stores Z0..Z15 as sixteen consecutive rows of 64 bytes at BX.
#define STORE16 \
	VMOVUPS Z0, 0(BX); \
	VMOVUPS Z1, 64(BX); \
	VMOVUPS Z2, 128(BX); \
	VMOVUPS Z3, 192(BX); \
	VMOVUPS Z4, 256(BX); \
	VMOVUPS Z5, 320(BX); \
	VMOVUPS Z6, 384(BX); \
	VMOVUPS Z7, 448(BX); \
	VMOVUPS Z8, 512(BX); \
	VMOVUPS Z9, 576(BX); \
	VMOVUPS Z10, 640(BX); \
	VMOVUPS Z11, 704(BX); \
	VMOVUPS Z12, 768(BX); \
	VMOVUPS Z13, 832(BX); \
	VMOVUPS Z14, 896(BX); \
	VMOVUPS Z15, 960(BX)

// SQUARE16 squares Z0..Z15 in place (VMULPS: v·v rounded, as the Go path computes it).
#define SQUARE16 \
	VMULPS Z0, Z0, Z0; \
	VMULPS Z1, Z1, Z1; \
	VMULPS Z2, Z2, Z2; \
	VMULPS Z3, Z3, Z3; \
	VMULPS Z4, Z4, Z4; \
	VMULPS Z5, Z5, Z5; \
	VMULPS Z6, Z6, Z6; \
	VMULPS Z7, Z7, Z7; \
	VMULPS Z8, Z8, Z8; \
	VMULPS Z9, Z9, Z9; \
	VMULPS Z10, Z10, Z10; \
	VMULPS Z11, Z11, Z11; \
	VMULPS Z12, Z12, Z12; \
	VMULPS Z13, Z13, Z13; \
	VMULPS Z14, Z14, Z14; \
	VMULPS Z15, Z15, Z15

// func toLanes16AVX512(X, W, x, qw *float32, n int)
// n a multiple of 16. Block b (columns 16b..16b+15 of the 16 sub-blocks, rows n floats apart)
// becomes lanes 16b..16b+15: X + 1024·b bytes, W likewise.
TEXT ·toLanes16AVX512(SB), NOSPLIT, $0-40
	MOVQ X+0(FP), DI
	MOVQ W+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ qw+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ CX, DX
	SHLQ $2, DX      // a sub-block's bytes
	XORQ R10, R10    // the block's byte offset within a sub-block

tl_loop:
	LEAQ (SI)(R10*1), AX
	LOAD16
	T16
	MOVQ DI, BX
	STORE16
	TESTQ R9, R9
	JNZ  tl_qw
	SQUARE16
	JMP  tl_w

tl_qw:
	LEAQ (R9)(R10*1), AX
	LOAD16
	T16

tl_w:
	MOVQ R8, BX
	STORE16
	ADDQ $1024, DI
	ADDQ $1024, R8
	ADDQ $64, R10
	CMPQ R10, DX
	JB   tl_loop
	VZEROUPPER
	RET

// func fromLanes16AVX512(L *uint8, src *int32, n int)
// n a multiple of 16. Lanes 16b..16b+15 (1024 bytes at src + 1024·b) transposed, each value
// truncated to a byte (VPMOVDB), give bytes 16b..16b+15 of each sub-block, n bytes apart.
TEXT ·fromLanes16AVX512(SB), NOSPLIT, $0-24
	MOVQ L+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ $64, DX     // lanes rows are 64 bytes apart
	XORQ R10, R10    // the block's byte offset within a sub-block

fl_loop:
	MOVQ SI, AX
	LOAD16
	T16
	LEAQ (DI)(R10*1), BX
	VPMOVDB Z0, (BX)
	ADDQ CX, BX
	VPMOVDB Z1, (BX)
	ADDQ CX, BX
	VPMOVDB Z2, (BX)
	ADDQ CX, BX
	VPMOVDB Z3, (BX)
	ADDQ CX, BX
	VPMOVDB Z4, (BX)
	ADDQ CX, BX
	VPMOVDB Z5, (BX)
	ADDQ CX, BX
	VPMOVDB Z6, (BX)
	ADDQ CX, BX
	VPMOVDB Z7, (BX)
	ADDQ CX, BX
	VPMOVDB Z8, (BX)
	ADDQ CX, BX
	VPMOVDB Z9, (BX)
	ADDQ CX, BX
	VPMOVDB Z10, (BX)
	ADDQ CX, BX
	VPMOVDB Z11, (BX)
	ADDQ CX, BX
	VPMOVDB Z12, (BX)
	ADDQ CX, BX
	VPMOVDB Z13, (BX)
	ADDQ CX, BX
	VPMOVDB Z14, (BX)
	ADDQ CX, BX
	VPMOVDB Z15, (BX)
	ADDQ $1024, SI
	ADDQ $16, R10
	CMPQ R10, CX
	JB   fl_loop
	VZEROUPPER
	RET

// T8 transposes the 8×8 block of 32-bit values in Y0..Y7 (row r in Yr) in place, with Y8..Y15
// as scratch: unpack pairs of rows, shuffle 64-bit pairs within 128-bit lanes, exchange lanes.
#define T8 \
	VUNPCKLPS Y1, Y0, Y8; \
	VUNPCKHPS Y1, Y0, Y9; \
	VUNPCKLPS Y3, Y2, Y10; \
	VUNPCKHPS Y3, Y2, Y11; \
	VUNPCKLPS Y5, Y4, Y12; \
	VUNPCKHPS Y5, Y4, Y13; \
	VUNPCKLPS Y7, Y6, Y14; \
	VUNPCKHPS Y7, Y6, Y15; \
	VSHUFPS $0x44, Y10, Y8, Y0; \
	VSHUFPS $0xEE, Y10, Y8, Y1; \
	VSHUFPS $0x44, Y11, Y9, Y2; \
	VSHUFPS $0xEE, Y11, Y9, Y3; \
	VSHUFPS $0x44, Y14, Y12, Y4; \
	VSHUFPS $0xEE, Y14, Y12, Y5; \
	VSHUFPS $0x44, Y15, Y13, Y6; \
	VSHUFPS $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VPERM2F128 $0x20, Y5, Y1, Y9; \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// LOAD8 loads eight rows of 32 bytes, DX bytes apart, from AX into Y0..Y7 (AX advances).
#define LOAD8 \
	VMOVUPS (AX), Y0; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y1; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y2; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y3; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y4; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y5; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y6; \
	ADDQ DX, AX; \
	VMOVUPS (AX), Y7

// STORE8 stores the transposed rows Y8..Y15 as eight consecutive rows of 32 bytes at BX.
#define STORE8 \
	VMOVUPS Y8, 0(BX); \
	VMOVUPS Y9, 32(BX); \
	VMOVUPS Y10, 64(BX); \
	VMOVUPS Y11, 96(BX); \
	VMOVUPS Y12, 128(BX); \
	VMOVUPS Y13, 160(BX); \
	VMOVUPS Y14, 192(BX); \
	VMOVUPS Y15, 224(BX)

// SQUARE8 squares Y8..Y15 in place.
#define SQUARE8 \
	VMULPS Y8, Y8, Y8; \
	VMULPS Y9, Y9, Y9; \
	VMULPS Y10, Y10, Y10; \
	VMULPS Y11, Y11, Y11; \
	VMULPS Y12, Y12, Y12; \
	VMULPS Y13, Y13, Y13; \
	VMULPS Y14, Y14, Y14; \
	VMULPS Y15, Y15, Y15

// func toLanes8AVX2(X, W, x, qw *float32, n int)
// n a multiple of 8. Block b (columns 8b..8b+7 of the 8 sub-blocks, rows n floats apart)
// becomes lanes 8b..8b+7: X + 256·b bytes, W likewise.
TEXT ·toLanes8AVX2(SB), NOSPLIT, $0-40
	MOVQ X+0(FP), DI
	MOVQ W+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ qw+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ CX, DX
	SHLQ $2, DX      // a sub-block's bytes
	XORQ R10, R10    // the block's byte offset within a sub-block

t8_loop:
	LEAQ (SI)(R10*1), AX
	LOAD8
	T8
	MOVQ DI, BX
	STORE8
	TESTQ R9, R9
	JNZ  t8_qw
	SQUARE8
	JMP  t8_w

t8_qw:
	LEAQ (R9)(R10*1), AX
	LOAD8
	T8

t8_w:
	MOVQ R8, BX
	STORE8
	ADDQ $256, DI
	ADDQ $256, R8
	ADDQ $32, R10
	CMPQ R10, DX
	JB   t8_loop
	VZEROUPPER
	RET

DATA lowBytes<>+0(SB)/8, $0x808080800c080400
DATA lowBytes<>+8(SB)/8, $0x8080808080808080
GLOBL lowBytes<>(SB), RODATA|NOPTR, $16

// LOWBYTES8 writes the low bytes of the eight dwords of Y (scratch X7) as 8 bytes at BX.
#define LOWBYTES8(Y, X) \
	VPSHUFB Y6, Y, Y; \
	VEXTRACTI128 $1, Y, X7; \
	VPUNPCKLDQ X7, X, X; \
	MOVQ X, (BX)

// func fromLanes8AVX2(L *uint8, src *int32, n int)
// n a multiple of 8. Lanes 8b..8b+7 (256 bytes at src + 256·b) transposed, each value's low
// byte kept (VPSHUFB), give bytes 8b..8b+7 of each sub-block, n bytes apart.
TEXT ·fromLanes8AVX2(SB), NOSPLIT, $0-24
	MOVQ L+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ $32, DX     // lane rows are 32 bytes apart
	XORQ R10, R10    // the block's byte offset within a sub-block

f8_loop:
	MOVQ SI, AX
	LOAD8
	T8
	VBROADCASTI128 lowBytes<>(SB), Y6
	LEAQ (DI)(R10*1), BX
	LOWBYTES8(Y8, X8)
	ADDQ CX, BX
	LOWBYTES8(Y9, X9)
	ADDQ CX, BX
	LOWBYTES8(Y10, X10)
	ADDQ CX, BX
	LOWBYTES8(Y11, X11)
	ADDQ CX, BX
	LOWBYTES8(Y12, X12)
	ADDQ CX, BX
	LOWBYTES8(Y13, X13)
	ADDQ CX, BX
	LOWBYTES8(Y14, X14)
	ADDQ CX, BX
	LOWBYTES8(Y15, X15)
	ADDQ $256, SI
	ADDQ $8, R10
	CMPQ R10, CX
	JB   f8_loop
	VZEROUPPER
	RET

// func transpose8PanelAVX2(dst *float32, ldd int, src *float32, lds int, nb int)
// Block b: the 8×8 values at src + 32·b bytes (rows lds floats apart) go, transposed, to dst +
// 8·b rows (rows ldd floats apart).
TEXT ·transpose8PanelAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	SHLQ $2, R8      // dst row bytes
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), DX
	SHLQ $2, DX      // src row bytes
	MOVQ nb+32(FP), CX
	TESTQ CX, CX
	JZ   tp_done

tp_loop:
	MOVQ SI, AX
	LOAD8
	T8
	MOVQ DI, BX
	VMOVUPS Y8, (BX)
	ADDQ R8, BX
	VMOVUPS Y9, (BX)
	ADDQ R8, BX
	VMOVUPS Y10, (BX)
	ADDQ R8, BX
	VMOVUPS Y11, (BX)
	ADDQ R8, BX
	VMOVUPS Y12, (BX)
	ADDQ R8, BX
	VMOVUPS Y13, (BX)
	ADDQ R8, BX
	VMOVUPS Y14, (BX)
	ADDQ R8, BX
	VMOVUPS Y15, (BX)
	ADDQ R8, BX
	MOVQ BX, DI      // the next block's first row
	ADDQ $32, SI
	DECQ CX
	JNZ  tp_loop

tp_done:
	VZEROUPPER
	RET
