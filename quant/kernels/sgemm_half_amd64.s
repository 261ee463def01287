//go:build amd64 && !purego

#include "textflag.h"
#include "transpose_amd64.h"

// Packing of 16-bit float B rows for SgemmHalf: each row is widened exactly as WidenBF16
// (bits << 16) and WidenF16 (F16C's VCVTPH2PS, as widenF16AVX2) do, then transposed and
// stored like packB16AVX2 (sgemm_amd64.s).
// Registers: SI = row 0 of this step, AX = the current row group, R9 = ldb·2, R10 = 3·ldb·2.

// Load 8 consecutive rows (8 values each, from AX) into Y0..Y7; AX advances 4 rows.
#define LOAD8_BF16 \
	VPMOVZXWD (AX), Y0        \
	VPMOVZXWD (AX)(R9*1), Y1  \
	VPMOVZXWD (AX)(R9*2), Y2  \
	VPMOVZXWD (AX)(R10*1), Y3 \
	LEAQ      (AX)(R9*4), AX  \
	VPMOVZXWD (AX), Y4        \
	VPMOVZXWD (AX)(R9*1), Y5  \
	VPMOVZXWD (AX)(R9*2), Y6  \
	VPMOVZXWD (AX)(R10*1), Y7 \
	VPSLLD    $16, Y0, Y0     \
	VPSLLD    $16, Y1, Y1     \
	VPSLLD    $16, Y2, Y2     \
	VPSLLD    $16, Y3, Y3     \
	VPSLLD    $16, Y4, Y4     \
	VPSLLD    $16, Y5, Y5     \
	VPSLLD    $16, Y6, Y6     \
	VPSLLD    $16, Y7, Y7

#define LOAD8_F16 \
	VCVTPH2PS (AX), Y0        \
	VCVTPH2PS (AX)(R9*1), Y1  \
	VCVTPH2PS (AX)(R9*2), Y2  \
	VCVTPH2PS (AX)(R10*1), Y3 \
	LEAQ      (AX)(R9*4), AX  \
	VCVTPH2PS (AX), Y4        \
	VCVTPH2PS (AX)(R9*1), Y5  \
	VCVTPH2PS (AX)(R9*2), Y6  \
	VCVTPH2PS (AX)(R10*1), Y7

#define PACK_PROLOGUE \
	MOVQ  dst+0(FP), DI   \
	MOVQ  b+8(FP), SI     \
	MOVQ  ldb+16(FP), R9  \
	MOVQ  kc8+24(FP), CX  \
	SHLQ  $1, R9          \
	LEAQ  (R9)(R9*2), R10

// One step (8 columns of 16 rows): rows 0..7, then 8..15, each transposed into the panel.
#define PACK_STEP(LOAD8) \
	MOVQ SI, AX           \
	LOAD8                 \
	TRANSPOSE8            \
	STORE_T8(0)           \
	LEAQ (AX)(R9*4), AX   \
	LOAD8                 \
	TRANSPOSE8            \
	STORE_T8(32)          \
	ADDQ $16, SI          \
	ADDQ $512, DI

// func packB16BF16AVX2(dst *float32, b *byte, ldb int, kc8 int)
// For 16 rows of little-endian bfloat16 B (ldb values apart) and kc8·8 columns:
// dst[s·16 + t] = float32(b[t·ldb + s]).
TEXT ·packB16BF16AVX2(SB), NOSPLIT, $0-32
	PACK_PROLOGUE
	TESTQ CX, CX
	JZ    bfdone

bfloop:
	PACK_STEP(LOAD8_BF16)
	DECQ CX
	JNZ  bfloop

bfdone:
	VZEROUPPER
	RET

// func packB16F16AVX2(dst *float32, b *byte, ldb int, kc8 int)
// The same for IEEE half B.
TEXT ·packB16F16AVX2(SB), NOSPLIT, $0-32
	PACK_PROLOGUE
	TESTQ CX, CX
	JZ    hfdone

hfloop:
	PACK_STEP(LOAD8_F16)
	DECQ CX
	JNZ  hfloop

hfdone:
	VZEROUPPER
	RET
