//go:build amd64 && !purego

#include "textflag.h"
#include "transpose_amd64.h"

// Packing of 16-bit float B rows for SgemmHalf: each row is widened exactly as WidenBF16
// (bits << 16) and WidenF16 (F16C's VCVTPH2PS, as widenF16AVX2) do, then transposed like
// packB16AVX2.

// func packB16BF16AVX2(dst *float32, b *byte, ldb int, kc8 int)
// For 16 rows of B (little-endian bfloat16, ldb values apart) and kc8·8 columns:
// dst[s·16 + t] = float32(b[t·ldb + s]), the layout packB16AVX2 writes from float32 rows.
TEXT ·packB16BF16AVX2(SB), NOSPLIT, $0-32
	MOVQ  dst+0(FP), DI
	MOVQ  b+8(FP), SI
	MOVQ  ldb+16(FP), R9
	MOVQ  kc8+24(FP), CX
	SHLQ  $1, R9
	LEAQ  (R9)(R9*2), R10 // 3·ldb
	TESTQ CX, CX
	JZ    packB16BF16AVX2done

packB16BF16AVX2loop:
	// rows 0..7
	MOVQ    SI, AX
	VPMOVZXWD (AX), Y0
	VPSLLD    $16, Y0, Y0
	VPMOVZXWD (AX)(R9*1), Y1
	VPSLLD    $16, Y1, Y1
	VPMOVZXWD (AX)(R9*2), Y2
	VPSLLD    $16, Y2, Y2
	VPMOVZXWD (AX)(R10*1), Y3
	VPSLLD    $16, Y3, Y3
	LEAQ    (AX)(R9*4), AX
	VPMOVZXWD (AX), Y4
	VPSLLD    $16, Y4, Y4
	VPMOVZXWD (AX)(R9*1), Y5
	VPSLLD    $16, Y5, Y5
	VPMOVZXWD (AX)(R9*2), Y6
	VPSLLD    $16, Y6, Y6
	VPMOVZXWD (AX)(R10*1), Y7
	VPSLLD    $16, Y7, Y7
	TRANSPOSE8
	VMOVUPS Y8, 0(DI)
	VMOVUPS Y9, 64(DI)
	VMOVUPS Y10, 128(DI)
	VMOVUPS Y11, 192(DI)
	VMOVUPS Y12, 256(DI)
	VMOVUPS Y13, 320(DI)
	VMOVUPS Y14, 384(DI)
	VMOVUPS Y15, 448(DI)

	// rows 8..15
	LEAQ    (AX)(R9*4), AX
	VPMOVZXWD (AX), Y0
	VPSLLD    $16, Y0, Y0
	VPMOVZXWD (AX)(R9*1), Y1
	VPSLLD    $16, Y1, Y1
	VPMOVZXWD (AX)(R9*2), Y2
	VPSLLD    $16, Y2, Y2
	VPMOVZXWD (AX)(R10*1), Y3
	VPSLLD    $16, Y3, Y3
	LEAQ    (AX)(R9*4), AX
	VPMOVZXWD (AX), Y4
	VPSLLD    $16, Y4, Y4
	VPMOVZXWD (AX)(R9*1), Y5
	VPSLLD    $16, Y5, Y5
	VPMOVZXWD (AX)(R9*2), Y6
	VPSLLD    $16, Y6, Y6
	VPMOVZXWD (AX)(R10*1), Y7
	VPSLLD    $16, Y7, Y7
	TRANSPOSE8
	VMOVUPS Y8, 32(DI)
	VMOVUPS Y9, 96(DI)
	VMOVUPS Y10, 160(DI)
	VMOVUPS Y11, 224(DI)
	VMOVUPS Y12, 288(DI)
	VMOVUPS Y13, 352(DI)
	VMOVUPS Y14, 416(DI)
	VMOVUPS Y15, 480(DI)

	ADDQ $16, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  packB16BF16AVX2loop

packB16BF16AVX2done:
	VZEROUPPER
	RET

// func packB16F16AVX2(dst *float32, b *byte, ldb int, kc8 int)
// For 16 rows of B (little-endian IEEE half, ldb values apart) and kc8·8 columns:
// dst[s·16 + t] = float32(b[t·ldb + s]), the layout packB16AVX2 writes from float32 rows.
TEXT ·packB16F16AVX2(SB), NOSPLIT, $0-32
	MOVQ  dst+0(FP), DI
	MOVQ  b+8(FP), SI
	MOVQ  ldb+16(FP), R9
	MOVQ  kc8+24(FP), CX
	SHLQ  $1, R9
	LEAQ  (R9)(R9*2), R10 // 3·ldb
	TESTQ CX, CX
	JZ    packB16F16AVX2done

packB16F16AVX2loop:
	// rows 0..7
	MOVQ    SI, AX
	VCVTPH2PS (AX), Y0
	VCVTPH2PS (AX)(R9*1), Y1
	VCVTPH2PS (AX)(R9*2), Y2
	VCVTPH2PS (AX)(R10*1), Y3
	LEAQ    (AX)(R9*4), AX
	VCVTPH2PS (AX), Y4
	VCVTPH2PS (AX)(R9*1), Y5
	VCVTPH2PS (AX)(R9*2), Y6
	VCVTPH2PS (AX)(R10*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, 0(DI)
	VMOVUPS Y9, 64(DI)
	VMOVUPS Y10, 128(DI)
	VMOVUPS Y11, 192(DI)
	VMOVUPS Y12, 256(DI)
	VMOVUPS Y13, 320(DI)
	VMOVUPS Y14, 384(DI)
	VMOVUPS Y15, 448(DI)

	// rows 8..15
	LEAQ    (AX)(R9*4), AX
	VCVTPH2PS (AX), Y0
	VCVTPH2PS (AX)(R9*1), Y1
	VCVTPH2PS (AX)(R9*2), Y2
	VCVTPH2PS (AX)(R10*1), Y3
	LEAQ    (AX)(R9*4), AX
	VCVTPH2PS (AX), Y4
	VCVTPH2PS (AX)(R9*1), Y5
	VCVTPH2PS (AX)(R9*2), Y6
	VCVTPH2PS (AX)(R10*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, 32(DI)
	VMOVUPS Y9, 96(DI)
	VMOVUPS Y10, 160(DI)
	VMOVUPS Y11, 224(DI)
	VMOVUPS Y12, 288(DI)
	VMOVUPS Y13, 352(DI)
	VMOVUPS Y14, 416(DI)
	VMOVUPS Y15, 480(DI)

	ADDQ $16, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  packB16F16AVX2loop

packB16F16AVX2done:
	VZEROUPPER
	RET
