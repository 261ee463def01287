//go:build amd64 && !purego

#include "textflag.h"
#include "q4k4_amd64.h"

// Repack-order dot products (see repack.go for the formulas). The integer block sums are
// computed as in the vec_dot-order kernels; what differs is the float part: every block
// (Q4_0/IQ4_NL) or super-block / 64-element chunk (Q4_K) sum is reduced to one exact int32,
// converted, and FMA-accumulated with the rounded product of the two scales, in block order.
// The multi-row kernels reduce 4 rows' (or 4 activation rows') lane vectors together with a
// VPHADDD tree so that each float lane carries one output, as ggml's gemv/gemm do.

DATA rpk_nib<>+0(SB)/1, $0x0f
GLOBL rpk_nib<>(SB), RODATA|NOPTR, $1

DATA rpk_one16<>+0(SB)/2, $1
GLOBL rpk_one16<>(SB), RODATA|NOPTR, $2

// Per-qword shift counts: low 128-bit lane unshifted, high lane shifted right by 4.
DATA rpk_hishift<>+0(SB)/8, $0
DATA rpk_hishift<>+8(SB)/8, $0
DATA rpk_hishift<>+16(SB)/8, $4
DATA rpk_hishift<>+24(SB)/8, $4
GLOBL rpk_hishift<>(SB), RODATA|NOPTR, $32

// rpk_kscale<>+32j: VPSHUFB mask that broadcasts int16 word j of each lane to all 8 words.
DATA rpk_kscale<>+0(SB)/8, $0x0100010001000100
DATA rpk_kscale<>+8(SB)/8, $0x0100010001000100
DATA rpk_kscale<>+16(SB)/8, $0x0100010001000100
DATA rpk_kscale<>+24(SB)/8, $0x0100010001000100
DATA rpk_kscale<>+32(SB)/8, $0x0302030203020302
DATA rpk_kscale<>+40(SB)/8, $0x0302030203020302
DATA rpk_kscale<>+48(SB)/8, $0x0302030203020302
DATA rpk_kscale<>+56(SB)/8, $0x0302030203020302
DATA rpk_kscale<>+64(SB)/8, $0x0504050405040504
DATA rpk_kscale<>+72(SB)/8, $0x0504050405040504
DATA rpk_kscale<>+80(SB)/8, $0x0504050405040504
DATA rpk_kscale<>+88(SB)/8, $0x0504050405040504
DATA rpk_kscale<>+96(SB)/8, $0x0706070607060706
DATA rpk_kscale<>+104(SB)/8, $0x0706070607060706
DATA rpk_kscale<>+112(SB)/8, $0x0706070607060706
DATA rpk_kscale<>+120(SB)/8, $0x0706070607060706
DATA rpk_kscale<>+128(SB)/8, $0x0908090809080908
DATA rpk_kscale<>+136(SB)/8, $0x0908090809080908
DATA rpk_kscale<>+144(SB)/8, $0x0908090809080908
DATA rpk_kscale<>+152(SB)/8, $0x0908090809080908
DATA rpk_kscale<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA rpk_kscale<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA rpk_kscale<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA rpk_kscale<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA rpk_kscale<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA rpk_kscale<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA rpk_kscale<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA rpk_kscale<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA rpk_kscale<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA rpk_kscale<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA rpk_kscale<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA rpk_kscale<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL rpk_kscale<>(SB), RODATA|NOPTR, $256

// ---------------------------------------------------------------------------------------
// Q4_0 / IQ4_NL · Q8_0. Y14 = the 16-entry signed nibble table in both lanes, Y15 = 0x0f
// bytes, Y13 = rpk_hishift, Y12 = int16 ones.

// Signed weights of the 18-byte block at woff(base) into w: elements 0–15 in the low lane,
// 16–31 in the high lane, mapped through the table.
#define Q4W(base, woff, w) \
	VBROADCASTI128 (woff+2)(base), w \
	VPSRLVQ        Y13, w, w         \
	VPAND          Y15, w, w         \
	VPSHUFB        w, Y14, w

// gemv form, as ggml_gemv_*_8x8: a = 8 int32 lanes of Σ |w|·sign(x, w) for the weights in a
// and the activation quants in x (clobbers t).
#define GEMVSUM(a, x, t) \
	VPSIGNB    a, x, t \
	VPABSB     a, a    \
	VPMADDUBSW t, a, a \
	VPMADDWD   Y12, a, a

// func dotQ4RepackAVX2(w, x *byte, nb int, lut *byte) float32
TEXT ·dotQ4RepackAVX2(SB), NOSPLIT, $0-36
	MOVQ           w+0(FP), SI
	MOVQ           x+8(FP), DI
	MOVQ           nb+16(FP), CX
	MOVQ           lut+24(FP), AX
	VBROADCASTI128 (AX), Y14
	VPBROADCASTB   rpk_nib<>(SB), Y15
	VMOVDQU        rpk_hishift<>(SB), Y13
	VPBROADCASTW   rpk_one16<>(SB), Y12
	VXORPS         X0, X0, X0
	CMPQ           CX, $4
	JLT            q4gvtail

q4gvloop4:
	// Four blocks: integer sums reduced to [i0 i1 i2 i3] in X2.
	Q4W(SI, 0, Y2)
	VMOVDQU      2(DI), Y1
	GEMVSUM(Y2, Y1, Y5)
	Q4W(SI, 18, Y3)
	VMOVDQU      36(DI), Y1
	GEMVSUM(Y3, Y1, Y5)
	VPHADDD      Y3, Y2, Y2
	Q4W(SI, 36, Y3)
	VMOVDQU      70(DI), Y1
	GEMVSUM(Y3, Y1, Y5)
	Q4W(SI, 54, Y4)
	VMOVDQU      104(DI), Y1
	GEMVSUM(Y4, Y1, Y5)
	VPHADDD      Y4, Y3, Y3
	VPHADDD      Y3, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPADDD       X3, X2, X2
	VCVTDQ2PS    X2, X2

	// Scales: [f16(d_w)·f16(d_x)] for the four blocks in X4.
	VMOVD     0(SI), X4
	VPINSRW   $1, 18(SI), X4, X4
	VPINSRW   $2, 36(SI), X4, X4
	VPINSRW   $3, 54(SI), X4, X4
	VMOVD     0(DI), X5
	VPINSRW   $1, 34(DI), X5, X5
	VPINSRW   $2, 68(DI), X5, X5
	VPINSRW   $3, 102(DI), X5, X5
	VCVTPH2PS X4, X4
	VCVTPH2PS X5, X5
	VMULPS    X5, X4, X4

	// The FMA chain, one block after the other.
	VFMADD231SS X4, X2, X0
	VMOVSHDUP   X2, X6
	VMOVSHDUP   X4, X7
	VFMADD231SS X7, X6, X0
	VMOVHLPS    X2, X2, X6
	VMOVHLPS    X4, X4, X7
	VFMADD231SS X7, X6, X0
	VMOVSHDUP   X6, X6
	VMOVSHDUP   X7, X7
	VFMADD231SS X7, X6, X0

	ADDQ $72, SI
	ADDQ $136, DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  q4gvloop4

q4gvtail:
	TESTQ CX, CX
	JZ    q4gvdone

q4gvloop1:
	Q4W(SI, 0, Y2)
	VMOVDQU      2(DI), Y1
	GEMVSUM(Y2, Y1, Y5)
	VEXTRACTI128 $1, Y2, X3
	VPADDD       X3, X2, X2
	VPSHUFD      $0x4e, X2, X3
	VPADDD       X3, X2, X2
	VPSHUFD      $0xb1, X2, X3
	VPADDD       X3, X2, X2
	VCVTDQ2PS    X2, X2
	MOVWLZX      0(SI), AX
	VMOVD        AX, X4
	VCVTPH2PS    X4, X4
	MOVWLZX      0(DI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VMULSS       X5, X4, X4
	VFMADD231SS  X4, X2, X0
	ADDQ         $18, SI
	ADDQ         $34, DI
	DECQ         CX
	JNZ          q4gvloop1

q4gvdone:
	VMOVSS     X0, ret+32(FP)
	VZEROUPPER
	RET

// Row at base(BX) against the activation quants in Y1: 8 int32 lanes into a.
#define Q4ROW(base, a) \
	Q4W(base, 0, a)    \
	GEMVSUM(a, Y1, Y5)

// func dotQ4Repack4RowsAVX2(w *byte, stride int, x *byte, nb int, lut *byte, out *float32)
TEXT ·dotQ4Repack4RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ           w+0(FP), R8
	MOVQ           stride+8(FP), AX
	LEAQ           (R8)(AX*1), R9
	LEAQ           (R9)(AX*1), R10
	LEAQ           (R10)(AX*1), R11
	LEAQ           (AX*4), R12
	MOVQ           x+16(FP), DI
	MOVQ           nb+24(FP), CX
	MOVQ           lut+32(FP), AX
	VBROADCASTI128 (AX), Y14
	VPBROADCASTB   rpk_nib<>(SB), Y15
	VMOVDQU        rpk_hishift<>(SB), Y13
	VPBROADCASTW   rpk_one16<>(SB), Y12
	VXORPS         X0, X0, X0

q4g4loop:
	// Four short row streams: prefetch the next group of 4 rows (see the Q4_K kernel).
	PREFETCHT0   (R8)(R12*1)
	PREFETCHT0   (R9)(R12*1)
	PREFETCHT0   (R10)(R12*1)
	PREFETCHT0   (R11)(R12*1)
	VMOVDQU      2(DI), Y1
	Q4ROW(R8, Y2)
	Q4ROW(R9, Y3)
	VPHADDD      Y3, Y2, Y2
	Q4ROW(R10, Y3)
	Q4ROW(R11, Y4)
	VPHADDD      Y4, Y3, Y3
	VPHADDD      Y3, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPADDD       X3, X2, X2
	VCVTDQ2PS    X2, X2

	VMOVD        0(R8), X4
	VPINSRW      $1, 0(R9), X4, X4
	VPINSRW      $2, 0(R10), X4, X4
	VPINSRW      $3, 0(R11), X4, X4
	VCVTPH2PS    X4, X4
	MOVWLZX      0(DI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VBROADCASTSS X5, X5
	VMULPS       X5, X4, X4
	VFMADD231PS  X4, X2, X0

	ADDQ $18, R8
	ADDQ $18, R9
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $34, DI
	DECQ CX
	JNZ  q4g4loop

	MOVQ       out+40(FP), AX
	VMOVUPS    X0, (AX)
	VZEROUPPER
	RET

// func dotQ4Repack8RowsAVX2(w *byte, stride int, x *byte, xs *float32, nb int, lut *byte, out *float32)
// Eight rows per pass: xs[b] is the float32 scale of activation block b (q8ScalesAVX2).
TEXT ·dotQ4Repack8RowsAVX2(SB), NOSPLIT, $0-56
	MOVQ           w+0(FP), R8
	MOVQ           stride+8(FP), AX
	LEAQ           (R8)(AX*2), R9
	ADDQ           AX, R9 // row 3
	LEAQ           (R9)(AX*2), R10
	ADDQ           AX, R10 // row 6
	LEAQ           (R8)(AX*8), R11 // next group: rows 8, 11, 14
	LEAQ           (R9)(AX*8), R12
	LEAQ           (R10)(AX*8), R13
	MOVQ           x+16(FP), DI
	MOVQ           xs+24(FP), DX
	MOVQ           nb+32(FP), CX
	MOVQ           lut+40(FP), BX
	VBROADCASTI128 (BX), Y14
	VPBROADCASTB   rpk_nib<>(SB), Y15
	VMOVDQU        rpk_hishift<>(SB), Y13
	VPBROADCASTW   rpk_one16<>(SB), Y12
	VXORPS         Y0, Y0, Y0

q4g8loop:
	// Eight short row streams: prefetch the next group of 8 rows.
	PREFETCHT0 (R11)
	PREFETCHT0 (R11)(AX*1)
	PREFETCHT0 (R11)(AX*2)
	PREFETCHT0 (R12)
	PREFETCHT0 (R12)(AX*1)
	PREFETCHT0 (R12)(AX*2)
	PREFETCHT0 (R13)
	PREFETCHT0 (R13)(AX*1)

	VMOVDQU 2(DI), Y1
	Q4W(R8, 0, Y2)
	GEMVSUM(Y2, Y1, Y5)
	VBROADCASTI128 2(R8)(AX*1), Y3
	VPSRLVQ        Y13, Y3, Y3
	VPAND          Y15, Y3, Y3
	VPSHUFB        Y3, Y14, Y3
	GEMVSUM(Y3, Y1, Y5)
	VPHADDD        Y3, Y2, Y2 // rows 0, 1
	VBROADCASTI128 2(R8)(AX*2), Y3
	VPSRLVQ        Y13, Y3, Y3
	VPAND          Y15, Y3, Y3
	VPSHUFB        Y3, Y14, Y3
	GEMVSUM(Y3, Y1, Y5)
	Q4W(R9, 0, Y4)
	GEMVSUM(Y4, Y1, Y5)
	VPHADDD        Y4, Y3, Y3 // rows 2, 3
	VPHADDD        Y3, Y2, Y2 // rows 0–3: [low halves | high halves]
	VBROADCASTI128 2(R9)(AX*1), Y3
	VPSRLVQ        Y13, Y3, Y3
	VPAND          Y15, Y3, Y3
	VPSHUFB        Y3, Y14, Y3
	GEMVSUM(Y3, Y1, Y5)
	VBROADCASTI128 2(R9)(AX*2), Y4
	VPSRLVQ        Y13, Y4, Y4
	VPAND          Y15, Y4, Y4
	VPSHUFB        Y4, Y14, Y4
	GEMVSUM(Y4, Y1, Y5)
	VPHADDD        Y4, Y3, Y3 // rows 4, 5
	Q4W(R10, 0, Y4)
	GEMVSUM(Y4, Y1, Y5)
	VBROADCASTI128 2(R10)(AX*1), Y6
	VPSRLVQ        Y13, Y6, Y6
	VPAND          Y15, Y6, Y6
	VPSHUFB        Y6, Y14, Y6
	GEMVSUM(Y6, Y1, Y5)
	VPHADDD        Y6, Y4, Y4 // rows 6, 7
	VPHADDD        Y4, Y3, Y3 // rows 4–7
	VPERM2I128     $0x20, Y3, Y2, Y4
	VPERM2I128     $0x31, Y3, Y2, Y6
	VPADDD         Y6, Y4, Y2 // [isum0 … isum7]
	VCVTDQ2PS      Y2, Y2

	VMOVD        (R8), X7
	VPINSRW      $1, (R8)(AX*1), X7, X7
	VPINSRW      $2, (R8)(AX*2), X7, X7
	VPINSRW      $3, (R9), X7, X7
	VPINSRW      $4, (R9)(AX*1), X7, X7
	VPINSRW      $5, (R9)(AX*2), X7, X7
	VPINSRW      $6, (R10), X7, X7
	VPINSRW      $7, (R10)(AX*1), X7, X7
	VCVTPH2PS    X7, Y7
	VBROADCASTSS (DX), Y8
	VMULPS       Y8, Y7, Y7
	VFMADD231PS  Y7, Y2, Y0

	ADDQ $18, R8
	ADDQ $18, R9
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $18, R12
	ADDQ $18, R13
	ADDQ $34, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  q4g8loop

	MOVQ       out+48(FP), BX
	VMOVUPS    Y0, (BX)
	VZEROUPPER
	RET

// gemm form, as ggml_gemm_*_8x8: a = 8 int32 lanes of Σ |x|·sign(w, x) for the weights in
// Y1 and the activation block at xbase (exact for every byte; clobbers Y5, Y6).
#define GEMMSUM(xbase, a) \
	VMOVDQU    2(xbase), Y5 \
	VPABSB     Y5, Y6       \
	VPSIGNB    Y5, Y1, Y5   \
	VPMADDUBSW Y5, Y6, a    \
	VPMADDWD   Y12, a, a

// func dotQ4RepackGemmAVX2(w, x *byte, xStride int, xs *float32, nb int, lut *byte, out *float32)
TEXT ·dotQ4RepackGemmAVX2(SB), NOSPLIT, $0-56
	MOVQ           w+0(FP), SI
	MOVQ           x+8(FP), DI
	MOVQ           xStride+16(FP), AX
	LEAQ           (DI)(AX*1), R9
	LEAQ           (R9)(AX*1), R10
	LEAQ           (R10)(AX*1), R11
	MOVQ           xs+24(FP), DX
	MOVQ           nb+32(FP), CX
	MOVQ           lut+40(FP), AX
	VBROADCASTI128 (AX), Y14
	VPBROADCASTB   rpk_nib<>(SB), Y15
	VMOVDQU        rpk_hishift<>(SB), Y13
	VPBROADCASTW   rpk_one16<>(SB), Y12
	VXORPS         X0, X0, X0

q4gmloop:
	Q4W(SI, 0, Y1)
	GEMMSUM(DI, Y2)
	GEMMSUM(R9, Y3)
	VPHADDD      Y3, Y2, Y2
	GEMMSUM(R10, Y3)
	GEMMSUM(R11, Y4)
	VPHADDD      Y4, Y3, Y3
	VPHADDD      Y3, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPADDD       X3, X2, X2
	VCVTDQ2PS    X2, X2

	MOVWLZX      0(SI), AX
	VMOVD        AX, X4
	VCVTPH2PS    X4, X4
	VBROADCASTSS X4, X4
	VMULPS       (DX), X4, X4
	VFMADD231PS  X4, X2, X0

	ADDQ $18, SI
	ADDQ $34, DI
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $16, DX
	DECQ CX
	JNZ  q4gmloop

	MOVQ       out+48(FP), AX
	VMOVUPS    X0, (AX)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------------------
// Q4_K · Q8_K. Y15 = 0x0f bytes.

// Y2 = the 8 scales in R9 as int16 words, in both lanes.
#define KSC \
	VMOVQ       R9, X2     \
	VPMOVZXBW   X2, X2     \
	VINSERTI128 $1, X2, Y2, Y2

// Split the 32 quant bytes of chunk c at off(base) into Y9 (low nibbles, sub-block 2c) and
// Y10 (high nibbles, sub-block 2c+1).
#define KNIB(base, off) \
	VMOVDQU (off)(base), Y9 \
	VPSRLW  $4, Y9, Y10     \
	VPAND   Y15, Y9, Y9     \
	VPAND   Y15, Y10, Y10

// Chunk c of the nibbles in Y9/Y10 against the Q8_K quants at xoff(xbase), scaled by the
// scales 2c and 2c+1 from Y2, added to acc (clobbers Y9–Y12).
#define KCHUNK(c, xbase, xoff, acc) \
	VPMADDUBSW (xoff)(xbase), Y9, Y9              \
	VPMADDUBSW (xoff+32)(xbase), Y10, Y10         \
	VPSHUFB    rpk_kscale<>+(64*(c))(SB), Y2, Y11    \
	VPMADDWD   Y11, Y9, Y9                        \
	VPSHUFB    rpk_kscale<>+(64*(c)+32)(SB), Y2, Y12 \
	VPMADDWD   Y12, Y10, Y10                      \
	VPADDD     Y9, acc, acc                       \
	VPADDD     Y10, acc, acc

// acc = 8 int32 lanes summing to isum of the super-block at base with the Q8_K block at DI;
// leaves the mins in DX (clobbers AX, BX, R8, R9, Y2, Y9–Y12).
#define KROW(base, acc) \
	KDEC(base)              \
	KSC                     \
	VPXOR acc, acc, acc     \
	KNIB(base, 16)          \
	KCHUNK(0, DI, 4, acc)   \
	KNIB(base, 48)          \
	KCHUNK(1, DI, 68, acc)  \
	KNIB(base, 80)          \
	KCHUNK(2, DI, 132, acc) \
	KNIB(base, 112)         \
	KCHUNK(3, DI, 196, acc)

// func dotQ4KRepackAVX2(w, x *byte, nb int) float32
TEXT ·dotQ4KRepackAVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTB rpk_nib<>(SB), Y15
	VXORPS       X0, X0, X0 // lane 0: acc, lane 1: accm

q4kgvloop:
	KROW(SI, Y8)
	VEXTRACTI128 $1, Y8, X9
	VPADDD       X9, X8, X8 // isum in 4 lanes

	// imin = Σ m_j·P_j, P_j = int16(bsum_2j + bsum_2j+1): 4 lanes in X3.
	VMOVQ     DX, X3
	VPMOVZXBW X3, X3
	VMOVDQU   260(DI), X4
	VPHADDW   276(DI), X4, X4
	VPMADDWD  X4, X3, X3

	VPHADDD   X3, X8, X8 // [i, i, m, m] partial pairs
	VPHADDD   X8, X8, X8 // [isum, imin, isum, imin]
	VCVTDQ2PS X8, X8

	VMOVD        0(SI), X5
	VCVTPH2PS    X5, X5 // [d, dmin, 0, 0]
	VBROADCASTSS 0(DI), X6
	VMULPS       X6, X5, X5
	VFMADD231PS  X5, X8, X0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4kgvloop

	VMOVSHDUP  X0, X1
	VSUBSS     X1, X0, X0
	VMOVSS     X0, ret+24(FP)
	VZEROUPPER
	RET

// The row step of Q4K4_LOOP for the AVX2 kernel.
#define K4ROW(base, zacc, yacc) KROW(base, yacc)

// func dotQ4KRepack4RowsAVX2(w *byte, stride int, x *byte, nb int, out *float32)
TEXT ·dotQ4KRepack4RowsAVX2(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         stride+8(FP), AX
	LEAQ         (SI)(AX*1), R11
	LEAQ         (R11)(AX*1), R12
	LEAQ         (R12)(AX*1), R13
	LEAQ         (AX*4), R14
	MOVQ         x+16(FP), DI
	MOVQ         nb+24(FP), CX
	VPBROADCASTB rpk_nib<>(SB), Y15
	VXORPS       X0, X0, X0 // acc, one lane per row
	VXORPS       X1, X1, X1 // accm

	// The four rows are four short streams, which the hardware prefetchers serve worse than
	// one long one: Q4K4_START fetches the same lines of the next group of 4 rows (R14 =
	// 4·stride ahead).
	Q4K4_LOOP(q4kg4loop)

// Chunk part of activation row xbase: dst = 8 int32 lanes of sc_2c·Σq·x + sc_2c+1·Σq·x with
// the nibbles in Y9/Y10 and the broadcast scales in Y11/Y12 (clobbers Y4).
#define KTOK(xbase, xoff, dst) \
	VPMADDUBSW (xoff)(xbase), Y9, dst     \
	VPMADDWD   Y11, dst, dst              \
	VPMADDUBSW (xoff+32)(xbase), Y10, Y4  \
	VPMADDWD   Y12, Y4, Y4                \
	VPADDD     Y4, dst, dst

// Chunk c (pshufd = 0x55·c) of the gemm kernel: four activation rows' chunk sums reduced to
// [t0 t1 t2 t3] and FMA-accumulated into X0; the chunk's min term into X1.
#define KGEMMCHUNK(c, pshufd) \
	KNIB(SI, 16+32*(c))                                  \
	VPSHUFB      rpk_kscale<>+(64*(c))(SB), Y2, Y11      \
	VPSHUFB      rpk_kscale<>+(64*(c)+32)(SB), Y2, Y12   \
	KTOK(DI, 4+64*(c), Y3)                               \
	KTOK(R11, 4+64*(c), Y5)                              \
	VPHADDD      Y5, Y3, Y3                              \
	KTOK(R12, 4+64*(c), Y5)                              \
	KTOK(R13, 4+64*(c), Y8)                              \
	VPHADDD      Y8, Y5, Y5                              \
	VPHADDD      Y5, Y3, Y3                              \
	VEXTRACTI128 $1, Y3, X4                              \
	VPADDD       X4, X3, X3                              \
	VCVTDQ2PS    X3, X3                                  \
	VFMADD231PS  X6, X3, X0                              \
	VPSHUFD      $pshufd, X14, X5                        \
	VPMADDWD     (16*(c))(R14), X5, X5                   \
	VCVTDQ2PS    X5, X5                                  \
	VFMADD231PS  X7, X5, X1

// func dotQ4KRepackGemmAVX2(w, x *byte, xStride int, pre *uint32, nb int, out *float32)
TEXT ·dotQ4KRepackGemmAVX2(SB), NOSPLIT, $0-48
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         xStride+16(FP), AX
	LEAQ         (DI)(AX*1), R11
	LEAQ         (R11)(AX*1), R12
	LEAQ         (R12)(AX*1), R13
	MOVQ         pre+24(FP), R14
	MOVQ         nb+32(FP), CX
	VPBROADCASTB rpk_nib<>(SB), Y15
	VXORPS       X0, X0, X0 // acc, one lane per activation row
	VXORPS       X1, X1, X1 // accm

q4kgmloop:
	KDEC(SI)
	KSC
	VMOVQ        DX, X14
	VPMOVZXBW    X14, X14 // dword c = (m_2c, m_2c+1)
	VMOVD        0(SI), X6
	VCVTPH2PS    X6, X6
	VMOVSHDUP    X6, X7
	VBROADCASTSS X6, X6
	VBROADCASTSS X7, X7
	VMOVUPS      64(R14), X8 // d_x of the four activation rows
	VMULPS       X8, X6, X6  // f16(d)·d_x
	VMULPS       X8, X7, X7  // f16(dmin)·d_x

	KGEMMCHUNK(0, 0x00)
	KGEMMCHUNK(1, 0x55)
	KGEMMCHUNK(2, 0xaa)
	KGEMMCHUNK(3, 0xff)

	ADDQ $144, SI
	ADDQ $292, DI
	ADDQ $292, R11
	ADDQ $292, R12
	ADDQ $292, R13
	ADDQ $80, R14
	DECQ CX
	JNZ  q4kgmloop

	VSUBPS     X1, X0, X0
	MOVQ       out+40(FP), AX
	VMOVUPS    X0, (AX)
	VZEROUPPER
	RET
