//go:build amd64 && !purego

#include "textflag.h"
#include "q4k4_amd64.h"
#include "transpose_amd64.h"
#include "zmm_amd64.h"

// The Q4_K tiles' arguments (q4KGemmTile16x4VNNI's layout) into registers; zero the
// acc (Z0–Z3) and accm (Z4–Z7) chains.
#define KTILE_ENTER \
	MOVQ   wt+0(FP), DI \
	MOVQ   sm+8(FP), SI \
	MOVQ   dd+16(FP), DX \
	MOVQ   nb+24(FP), CX \
	MOVQ   x+32(FP), R8 \
	MOVQ   xStride+40(FP), AX \
	LEAQ   (R8)(AX*1), R9 \
	LEAQ   (R9)(AX*1), R10 \
	LEAQ   (R10)(AX*1), R11 \
	MOVQ   pk+48(FP), R12 \
	MOVQ   dx+56(FP), R13 \
	ZERO_Z0_Z7

// Advance every pointer by one super-block and count it.
#define KTILE_NEXT \
	ADDQ $4096, DI \
	ADDQ $1024, SI \
	ADDQ $128, DX \
	ADDQ $292, R8 \
	ADDQ $292, R9 \
	ADDQ $292, R10 \
	ADDQ $292, R11 \
	ADDQ $128, R12 \
	ADDQ $16, R13 \
	DECQ CX

// out[t·ldOut + j] = acc_t − accm_t, then return.
#define KTILE_EXIT \
	MOVQ    out+64(FP), AX \
	MOVQ    ldOut+72(FP), BX \
	SHLQ    $2, BX \
	VSUBPS  Z4, Z0, Z0 \
	VSUBPS  Z5, Z1, Z1 \
	VSUBPS  Z6, Z2, Z2 \
	VSUBPS  Z7, Z3, Z3 \
	VMOVUPS Z0, (AX) \
	ADDQ    BX, AX \
	VMOVUPS Z1, (AX) \
	ADDQ    BX, AX \
	VMOVUPS Z2, (AX) \
	ADDQ    BX, AX \
	VMOVUPS Z3, (AX) \
	VZEROUPPER \
	RET

// Q4_0 / IQ4_NL · Q8_0 in gemm order with AVX-512 VNNI (repack_vnni.go). A tile of 8 weight
// rows is decoded once into unsigned bytes u = v(q) + off and transposed so that register k
// holds bytes 4k..4k+3 of every row (lane j = row j); then VPDPBUSD against the broadcast
// activation dword 4k..4k+3 accumulates each row's Σ u·x in its own lane, and
// isum = Σ u·x − off·Σ x is the exact block sum Σ v·x. The float step is the gemm chain,
// acc = fma(float32(isum), float32(f16(d)·f16(d_x)), acc), with one lane per output.

// Decode the 16 nibble bytes of a block at addr into the 32 element bytes of Yr (elements
// 0..15 from the low nibbles, 16..31 from the high ones), mapped through the table in Y10.
// Y9 = 0x0f bytes; clobbers X8.
#define DEC(addr, Yr, Xr) \
	VMOVDQU     addr, Xr      \
	VPSRLW      $4, Xr, X8    \
	VPAND       X9, Xr, Xr    \
	VPAND       X9, X8, X8    \
	VINSERTI128 $1, X8, Yr, Yr \
	VPSHUFB     Yr, Y10, Yr

// func q4Transpose8AVX2(w *byte, rowBytes int, nb int, lut *byte, dst *byte, kStride, bStride int)
// dst[bStride·b + kStride·k + 4·j + i] = lut[element 4k+i of block b of row j].
TEXT ·q4Transpose8AVX2(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R9
	MOVQ nb+16(FP), CX
	MOVQ lut+24(FP), AX
	MOVQ dst+32(FP), DI
	MOVQ kStride+40(FP), DX
	MOVQ bStride+48(FP), R12
	LEAQ (R9)(R9*2), R10
	LEAQ (SI)(R9*4), R11
	LEAQ (DX)(DX*2), R13              // 3·kStride

tloop:
	VPBROADCASTB   rvn_nib<>(SB), Y9
	VBROADCASTI128 (AX), Y10
	DEC(2(SI), Y0, X0)
	DEC(2(SI)(R9*1), Y1, X1)
	DEC(2(SI)(R9*2), Y2, X2)
	DEC(2(SI)(R10*1), Y3, X3)
	DEC(2(R11), Y4, X4)
	DEC(2(R11)(R9*1), Y5, X5)
	DEC(2(R11)(R9*2), Y6, X6)
	DEC(2(R11)(R10*1), Y7, X7)
	TRANSPOSE8
	MOVQ    DI, BX
	VMOVDQU Y8, (BX)
	VMOVDQU Y9, (BX)(DX*1)
	VMOVDQU Y10, (BX)(DX*2)
	VMOVDQU Y11, (BX)(R13*1)
	LEAQ    (BX)(DX*4), BX
	VMOVDQU Y12, (BX)
	VMOVDQU Y13, (BX)(DX*1)
	VMOVDQU Y14, (BX)(DX*2)
	VMOVDQU Y15, (BX)(R13*1)
	ADDQ    $18, SI
	ADDQ    $18, R11
	ADDQ    R12, DI
	DECQ    CX
	JNZ     tloop
	VZEROUPPER
	RET

DATA rvn_nib<>+0(SB)/1, $0x0f
GLOBL rvn_nib<>(SB), RODATA|NOPTR, $1

DATA rvn_x80<>+0(SB)/1, $0x80
GLOBL rvn_x80<>(SB), RODATA|NOPTR, $1

// func q8SumsAVX2(x *byte, nb int, off int32, pre *int32, dx *float32)
// For each Q8_0 block b of the row at x: pre[4b] = −off·Σ qs, dx[4b] = f16→f32 of its d.
// Σ qs = Σ (qs ⊕ 0x80) − 32·128 with VPSADBW (exact).
TEXT ·q8SumsAVX2(SB), NOSPLIT, $0-40
	MOVQ         x+0(FP), SI
	MOVQ         nb+8(FP), CX
	MOVL         off+16(FP), R8
	MOVQ         pre+24(FP), DI
	MOVQ         dx+32(FP), DX
	VPBROADCASTB rvn_x80<>(SB), Y15
	VPXOR        Y14, Y14, Y14

sloop:
	VMOVDQU      2(SI), Y0
	VPXOR        Y15, Y0, Y0
	VPSADBW      Y14, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDQ       X1, X0, X0
	VMOVD        X0, AX
	SUBL         $4096, AX
	IMULL        R8, AX
	NEGL         AX
	MOVL         AX, (DI)
	MOVWLZX      (SI), AX
	VMOVD        AX, X2
	VCVTPH2PS    X2, X2
	VMOVSS       X2, (DX)
	ADDQ         $34, SI
	ADDQ         $16, DI
	ADDQ         $16, DX
	DECQ         CX
	JNZ          sloop
	VZEROUPPER
	RET

// One activation row t (its Q8_0 block at xr) against the 16 rows' transposed dwords
// Z8..Z15: acc += float32(pre[t] + Σu·x) · (dws · dx[t]), pre[t] = −off·Σx. Two isum chains
// (a, b) halve the latency.
#define TOK16(xr, t, a, b, acc) \
	VPBROADCASTD  (4*t)(R12), a           \
	VPXORD        b, b, b                 \
	VPDPBUSD.BCST 2(xr), Z8, a            \
	VPDPBUSD.BCST 6(xr), Z9, b            \
	VPDPBUSD.BCST 10(xr), Z10, a          \
	VPDPBUSD.BCST 14(xr), Z11, b          \
	VPDPBUSD.BCST 18(xr), Z12, a          \
	VPDPBUSD.BCST 22(xr), Z13, b          \
	VPDPBUSD.BCST 26(xr), Z14, a          \
	VPDPBUSD.BCST 30(xr), Z15, b          \
	VPADDD        b, a, a                 \
	VCVTDQ2PS     a, a                    \
	VMULPS.BCST   (4*t)(R13), Z28, b      \
	VFMADD231PS   b, a, acc

// func q4GemmTile16x4VNNI(wt *byte, dws *float32, nb int, x *byte, xStride int, pre *int32, dx *float32, out *float32, ldOut int)
// A tile of 16 rows (512 transposed bytes and 16 row scales per block) against 4 Q8_0
// activation rows (pre, dx: per block 4 entries) in gemm order, into out[t·ldOut + j].
TEXT ·q4GemmTile16x4VNNI(SB), NOSPLIT, $0-72
	MOVQ   wt+0(FP), DI
	MOVQ   dws+8(FP), SI
	MOVQ   nb+16(FP), CX
	MOVQ   x+24(FP), R8
	MOVQ   xStride+32(FP), AX
	LEAQ   (R8)(AX*1), R9
	LEAQ   (R9)(AX*1), R10
	LEAQ   (R10)(AX*1), R11
	MOVQ   pre+40(FP), R12
	MOVQ   dx+48(FP), R13
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19

zloop:
	VMOVDQU32 0(DI), Z8
	VMOVDQU32 64(DI), Z9
	VMOVDQU32 128(DI), Z10
	VMOVDQU32 192(DI), Z11
	VMOVDQU32 256(DI), Z12
	VMOVDQU32 320(DI), Z13
	VMOVDQU32 384(DI), Z14
	VMOVDQU32 448(DI), Z15
	VMOVUPS   (SI), Z28
	TOK16(R8, 0, Z20, Z21, Z16)
	TOK16(R9, 1, Z22, Z23, Z17)
	TOK16(R10, 2, Z24, Z25, Z18)
	TOK16(R11, 3, Z26, Z27, Z19)
	ADDQ $512, DI
	ADDQ $64, SI
	ADDQ $34, R8
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $16, R12
	ADDQ $16, R13
	DECQ CX
	JNZ  zloop

	MOVQ    out+56(FP), AX
	MOVQ    ldOut+64(FP), BX
	SHLQ    $2, BX
	VMOVUPS Z16, (AX)
	ADDQ    BX, AX
	VMOVUPS Z17, (AX)
	ADDQ    BX, AX
	VMOVUPS Z18, (AX)
	ADDQ    BX, AX
	VMOVUPS Z19, (AX)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------------------
// Q4_K · Q8_K in gemm order with AVX-512 VNNI, 16 weight rows in ZMM lanes.

DATA rvn_nib32<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA rvn_nib32<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA rvn_nib32<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA rvn_nib32<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL rvn_nib32<>(SB), RODATA|NOPTR, $32

// Sub-block j of a Q4_K super-block (32 bytes at 16 + 32·(j/2), low nibbles for even j,
// high for odd) of the row at addr into Yr.
#define KLO(addr, Yr) \
	VMOVDQU addr, Yr                   \
	VPAND   rvn_nib32<>(SB), Yr, Yr

#define KHI(addr, Yr) \
	VMOVDQU addr, Yr                   \
	VPSRLW  $4, Yr, Yr                 \
	VPAND   rvn_nib32<>(SB), Yr, Yr

#define KSUB(DECODE, off) \
	DECODE(off(SI), Y0)          \
	DECODE(off(SI)(R9*1), Y1)    \
	DECODE(off(SI)(R9*2), Y2)    \
	DECODE(off(SI)(R10*1), Y3)   \
	DECODE(off(R11), Y4)         \
	DECODE(off(R11)(R9*1), Y5)   \
	DECODE(off(R11)(R9*2), Y6)   \
	DECODE(off(R11)(R10*1), Y7)  \
	TRANSPOSE8                   \
	VMOVDQU Y8, (BX)             \
	VMOVDQU Y9, (BX)(DX*1)       \
	VMOVDQU Y10, (BX)(DX*2)      \
	VMOVDQU Y11, (BX)(R13*1)     \
	LEAQ    (BX)(DX*4), BX       \
	VMOVDQU Y12, (BX)            \
	VMOVDQU Y13, (BX)(DX*1)      \
	VMOVDQU Y14, (BX)(DX*2)      \
	VMOVDQU Y15, (BX)(R13*1)     \
	LEAQ    (BX)(DX*4), BX

// func q4KTranspose8AVX2(w *byte, rowBytes int, nb int, dst *byte, kStride, bStride int)
// For 8 Q4_K rows: dst[bStride·b + kStride·(8j + k) + 4·r + i] = quant 32j + 4k + i of
// super-block b of row r (0..15).
TEXT ·q4KTranspose8AVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R9
	MOVQ nb+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ kStride+32(FP), DX
	MOVQ bStride+40(FP), R12
	LEAQ (R9)(R9*2), R10
	LEAQ (SI)(R9*4), R11
	LEAQ (DX)(DX*2), R13

ktloop:
	MOVQ DI, BX
	KSUB(KLO, 16)
	KSUB(KHI, 16)
	KSUB(KLO, 48)
	KSUB(KHI, 48)
	KSUB(KLO, 80)
	KSUB(KHI, 80)
	KSUB(KLO, 112)
	KSUB(KHI, 112)
	ADDQ $144, SI
	ADDQ $144, R11
	ADDQ R12, DI
	DECQ CX
	JNZ  ktloop
	VZEROUPPER
	RET

// Σ_k q·x of sub-block j for token t (activation block at xr): two chains a, b over the
// 8 transposed dwords in Z8..Z15, added into a.
#define KDOT(xr, j, a, b) \
	VPXORD        a, a, a                   \
	VPXORD        b, b, b                   \
	VPDPBUSD.BCST (4+32*(j))(xr), Z8, a       \
	VPDPBUSD.BCST (8+32*(j))(xr), Z9, b       \
	VPDPBUSD.BCST (12+32*(j))(xr), Z10, a     \
	VPDPBUSD.BCST (16+32*(j))(xr), Z11, b     \
	VPDPBUSD.BCST (20+32*(j))(xr), Z12, a     \
	VPDPBUSD.BCST (24+32*(j))(xr), Z13, b     \
	VPDPBUSD.BCST (28+32*(j))(xr), Z14, a     \
	VPDPBUSD.BCST (32+32*(j))(xr), Z15, b     \
	VPADDD        b, a, a

// Load the 8 transposed dwords of sub-block j (64 bytes per dword, 512 per sub-block).
#define KW(j) \
	VMOVDQU32 (512*(j))(DI), Z8       \
	VMOVDQU32 (512*(j)+64)(DI), Z9    \
	VMOVDQU32 (512*(j)+128)(DI), Z10  \
	VMOVDQU32 (512*(j)+192)(DI), Z11  \
	VMOVDQU32 (512*(j)+256)(DI), Z12  \
	VMOVDQU32 (512*(j)+320)(DI), Z13  \
	VMOVDQU32 (512*(j)+384)(DI), Z14  \
	VMOVDQU32 (512*(j)+448)(DI), Z15

// Sub-block j for the 4 tokens: sc_j·Σq·x added into Z24..Z27 (sc_j at scoff(SI)).
#define KSUBADD(j, scoff) \
	KW(j)                                     \
	KDOT(R8, j, Z16, Z17)                     \
	KDOT(R9, j, Z18, Z19)                     \
	KDOT(R10, j, Z20, Z21)                    \
	KDOT(R11, j, Z22, Z23)                    \
	VPMULLD scoff(SI), Z16, Z16               \
	VPMULLD scoff(SI), Z18, Z18               \
	VPMULLD scoff(SI), Z20, Z20               \
	VPMULLD scoff(SI), Z22, Z22               \
	VPADDD  Z16, Z24, Z24                     \
	VPADDD  Z18, Z25, Z25                     \
	VPADDD  Z20, Z26, Z26                     \
	VPADDD  Z22, Z27, Z27

// Chunk c's isum_t = sc_2c·Σq·x + sc_2c+1·Σq·x added into Z24..Z27.
#define KCHUNKADD(c) \
	KSUBADD(2*c, (128*c))                     \
	KSUBADD(2*c+1, (128*c+64))

// Zero the isum accumulators Z24..Z27.
#define KZEROSUMS \
	VPXORD Z24, Z24, Z24 \
	VPXORD Z25, Z25, Z25 \
	VPXORD Z26, Z26, Z26 \
	VPXORD Z27, Z27, Z27

// The float steps of chunk c for token t: acc_t = fma(float32(isum), d·dx_t, acc_t) and
// accm_t = fma(float32(m_2c·P_2c + m_2c+1·P_2c+1), dmin·dx_t, accm_t).
#define KFLOAT(c, t, isum, acc, accm) \
	VCVTDQ2PS    isum, isum                      \
	VBROADCASTSS (4*t)(R13), Z28                 \
	VMULPS       (DX), Z28, Z29                  \
	VFMADD231PS  Z29, isum, acc                  \
	VPBROADCASTD (32*t+8*c)(R12), Z30            \
	VPMULLD      (512+128*c)(SI), Z30, Z30       \
	VPBROADCASTD (32*t+8*c+4)(R12), Z31          \
	VPMULLD      (512+128*c+64)(SI), Z31, Z31    \
	VPADDD       Z31, Z30, Z30                   \
	VCVTDQ2PS    Z30, Z30                        \
	VMULPS       64(DX), Z28, Z29                \
	VFMADD231PS  Z29, Z30, accm

#define KCHUNK(c) \
	KZEROSUMS                        \
	KCHUNKADD(c)                     \
	KFLOAT(c, 0, Z24, Z0, Z4)        \
	KFLOAT(c, 1, Z25, Z1, Z5)        \
	KFLOAT(c, 2, Z26, Z2, Z6)        \
	KFLOAT(c, 3, Z27, Z3, Z7)

// func q4KGemmTile16x4VNNI(wt *byte, sm *int32, dd *float32, nb int, x *byte, xStride int, pk *int32, dx *float32, out *float32, ldOut int)
// A 16-row Q4_K tile (q4KTranspose8AVX2 layout, 4096 bytes per super-block; sm: per
// super-block the 8 scales then the 8 mins of the 16 rows as int32, 1024 bytes; dd: d then
// dmin of the 16 rows, 128 bytes) against 4 Q8_K activation rows (pk: per super-block the
// 8 pair sums P_j of each row, 128 bytes; dx: their d, 16 bytes) in gemm order, into
// out[t·ldOut + j] = acc − accm.
TEXT ·q4KGemmTile16x4VNNI(SB), NOSPLIT, $0-80
	KTILE_ENTER

kzloop:
	KCHUNK(0)
	KCHUNK(1)
	KCHUNK(2)
	KCHUNK(3)
	KTILE_NEXT
	JNZ  kzloop

	KTILE_EXIT

// ---------------------------------------------------------------------------------------
// Q4_K · Q8_K in gemv order (one FMA per super-block and chain) for 4 activation rows at
// once: what ggml's per-row gemv computes, batched (MoE experts).

// m_j·P_j of token t added into Z30 (j ≥ 1).
#define KMINJ(t, j) \
	VPBROADCASTD (32*t+4*j)(R12), Z31         \
	VPMULLD      (512+64*j)(SI), Z31, Z31     \
	VPADDD       Z31, Z30, Z30

// The super-block's float steps for token t: acc_t = fma(float32(isum), d·dx_t, acc_t),
// accm_t = fma(float32(Σ_j m_j·P_j), dmin·dx_t, accm_t).
#define KGEMVFLOAT(t, isum, acc, accm) \
	VCVTDQ2PS    isum, isum                      \
	VBROADCASTSS (4*t)(R13), Z28                 \
	VMULPS       (DX), Z28, Z29                  \
	VFMADD231PS  Z29, isum, acc                  \
	VPBROADCASTD (32*t)(R12), Z30                \
	VPMULLD      512(SI), Z30, Z30               \
	KMINJ(t, 1)                                  \
	KMINJ(t, 2)                                  \
	KMINJ(t, 3)                                  \
	KMINJ(t, 4)                                  \
	KMINJ(t, 5)                                  \
	KMINJ(t, 6)                                  \
	KMINJ(t, 7)                                  \
	VCVTDQ2PS    Z30, Z30                        \
	VMULPS       64(DX), Z28, Z29                \
	VFMADD231PS  Z29, Z30, accm

// func q4KGemvTile16x4VNNI(wt *byte, sm *int32, dd *float32, nb int, x *byte, xStride int, pk *int32, dx *float32, out *float32, ldOut int)
// q4KGemmTile16x4VNNI's arguments and layout, in gemv order.
TEXT ·q4KGemvTile16x4VNNI(SB), NOSPLIT, $0-80
	KTILE_ENTER

kvloop:
	KZEROSUMS
	KCHUNKADD(0)
	KCHUNKADD(1)
	KCHUNKADD(2)
	KCHUNKADD(3)
	KGEMVFLOAT(0, Z24, Z0, Z4)
	KGEMVFLOAT(1, Z25, Z1, Z5)
	KGEMVFLOAT(2, Z26, Z2, Z6)
	KGEMVFLOAT(3, Z27, Z3, Z7)
	KTILE_NEXT
	JNZ  kvloop

	KTILE_EXIT

// ---------------------------------------------------------------------------------------
// Gemv order for one activation row, 8 weight rows per pass, in the rows' own layout.
// ggml's gemv forms Σ|v|·sign(x, v) with VPSIGNB/VPABSB/VPMADDUBSW/VPMADDWD per row; here
// one VPDPBUSD per row forms Σ u·x with u = v + off unsigned (repackUQ4_0 / repackUIQ4NL),
// and pre[b] = −off·Σx (q8SumsAVX2) makes it the exact block sum Σ v·x. The two agree on
// every activation except −128 (matVecRepack checks for it). The float steps are those of
// dotQ4Repack8RowsAVX2.

// the 8 rows' offsets in units of the row stride, for the scale gather
DATA rvn_iota8<>+0(SB)/4, $0
DATA rvn_iota8<>+4(SB)/4, $1
DATA rvn_iota8<>+8(SB)/4, $2
DATA rvn_iota8<>+12(SB)/4, $3
DATA rvn_iota8<>+16(SB)/4, $4
DATA rvn_iota8<>+20(SB)/4, $5
DATA rvn_iota8<>+24(SB)/4, $6
DATA rvn_iota8<>+28(SB)/4, $7
GLOBL rvn_iota8<>(SB), RODATA|NOPTR, $32

DATA rvn_hishift<>+0(SB)/8, $0
DATA rvn_hishift<>+8(SB)/8, $0
DATA rvn_hishift<>+16(SB)/8, $4
DATA rvn_hishift<>+24(SB)/8, $4
GLOBL rvn_hishift<>(SB), RODATA|NOPTR, $32

// acc = Σ u·x over the 32 weights of the block at addr (x in Y1; clobbers nothing else).
#define VROW(addr, acc) \
	VBROADCASTI128 addr, acc \
	VPSRLVQ        Y13, acc, acc \
	VPAND          Y15, acc, acc \
	VPSHUFB        acc, Y14, Y12 \
	VPXOR          acc, acc, acc \
	VPDPBUSD       Y1, Y12, acc

// The 8 rows' fp16 block scales (the first 2 bytes of each row's block at R8, R8+AX, …,
// R10+AX) as 8 halves in X7. SCALESGATHER: one VPGATHERDD over the loop-invariant row offsets
// in Y10, masked with Y11 and packed. SCALESLOADS: 8 scalar loads, for CPUs whose gathers
// are slow (clobbers BX, DX).
#define SCALESGATHER \
	VPCMPEQD     Y9, Y9, Y9 \
	VPGATHERDD   Y9, (R8)(Y10*1), Y7 \
	VPAND        Y11, Y7, Y7 \
	VPACKUSDW    Y7, Y7, Y7 \
	VPERMQ       $0x08, Y7, Y7

#define SCALESLOADS \
	MOVWLZX      (R8), BX \
	MOVWLZX      (R8)(AX*1), DX \
	SHLL         $16, DX \
	ORL          DX, BX \
	MOVWLZX      (R8)(AX*2), DX \
	SHLQ         $32, DX \
	ORQ          DX, BX \
	MOVWLZX      (R9), DX \
	SHLQ         $48, DX \
	ORQ          DX, BX \
	VMOVQ        BX, X7 \
	MOVWLZX      (R9)(AX*1), BX \
	MOVWLZX      (R9)(AX*2), DX \
	SHLL         $16, DX \
	ORL          DX, BX \
	MOVWLZX      (R10), DX \
	SHLQ         $32, DX \
	ORQ          DX, BX \
	MOVWLZX      (R10)(AX*1), DX \
	SHLQ         $48, DX \
	ORQ          DX, BX \
	VPINSRQ      $1, BX, X7, X7

// The 8-row gemv body: ROW forms one row's Σ u·x (VROW through the table, VROWQ0 for Q4_0's
// own nibbles); loop and nopf are the function's label names. The next group of rows is
// prefetched every other block (36 bytes: every cache line at least once; a prefetch per
// block costs a third of the in-cache speed), pf bytes ahead.
#define GEMV8VNNI(ROW, SCALES, loop, nopf) \
	MOVQ           w+0(FP), R8 \
	MOVQ           stride+8(FP), AX \
	LEAQ           (R8)(AX*2), R9 \
	ADDQ           AX, R9 \
	LEAQ           (R9)(AX*2), R10 \
	ADDQ           AX, R10 \
	MOVQ           pf+56(FP), R11 \
	LEAQ           (R9)(R11*1), R12 \
	LEAQ           (R10)(R11*1), R13 \
	ADDQ           R8, R11 \
	MOVQ           x+16(FP), DI \
	MOVQ           pd+24(FP), SI \
	MOVQ           nb+32(FP), CX \
	MOVQ           ulut+40(FP), BX \
	VBROADCASTI128 (BX), Y14 \
	VPBROADCASTB   rvn_nib<>(SB), Y15 \
	VMOVDQU        rvn_hishift<>(SB), Y13 \
	VMOVQ          AX, X10 \
	VPBROADCASTD   X10, Y10 \
	VPMULLD        rvn_iota8<>(SB), Y10, Y10 \
	VPBROADCASTD   rvn_cffff<>(SB), Y11 \
	VXORPS         Y0, Y0, Y0 \
loop: \
	TESTQ      $1, CX \
	JNZ        nopf \
	PREFETCHT0 (R11) \
	PREFETCHT0 (R11)(AX*1) \
	PREFETCHT0 (R11)(AX*2) \
	PREFETCHT0 (R12) \
	PREFETCHT0 (R12)(AX*1) \
	PREFETCHT0 (R12)(AX*2) \
	PREFETCHT0 (R13) \
	PREFETCHT0 (R13)(AX*1) \
nopf: \
	VMOVDQU 2(DI), Y1 \
	ROW(2(R8), Y2) \
	ROW(2(R8)(AX*1), Y3) \
	ROW(2(R8)(AX*2), Y4) \
	ROW(2(R9), Y5) \
	ROW(2(R9)(AX*1), Y6) \
	ROW(2(R9)(AX*2), Y7) \
	ROW(2(R10), Y8) \
	ROW(2(R10)(AX*1), Y9) \
	VPHADDD    Y3, Y2, Y2 \
	VPHADDD    Y5, Y4, Y4 \
	VPHADDD    Y4, Y2, Y2 \
	VPHADDD    Y7, Y6, Y6 \
	VPHADDD    Y9, Y8, Y8 \
	VPHADDD    Y8, Y6, Y6 \
	VPERM2I128 $0x20, Y6, Y2, Y4 \
	VPERM2I128 $0x31, Y6, Y2, Y5 \
	VPADDD     Y5, Y4, Y2 \
	VPBROADCASTD (SI), Y3 \
	VPADDD     Y3, Y2, Y2 \
	VCVTDQ2PS  Y2, Y2 \
	SCALES \
	VCVTPH2PS    X7, Y7 \
	VBROADCASTSS 4(SI), Y8 \
	VMULPS       Y8, Y7, Y7 \
	VFMADD231PS  Y7, Y2, Y0 \
	ADDQ $18, R8 \
	ADDQ $18, R9 \
	ADDQ $18, R10 \
	ADDQ $18, R11 \
	ADDQ $18, R12 \
	ADDQ $18, R13 \
	ADDQ $34, DI \
	ADDQ $16, SI \
	DECQ CX \
	JNZ  loop \
	MOVQ       out+48(FP), BX \
	VMOVUPS    Y0, (BX) \
	VZEROUPPER \
	RET

// func dotQ4Repack8RowsVNNI(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)
// pd[4b] = −off·Σx and pd[4b+1] = the float32 bits of d_x for activation block b (q8SumsAVX2
// with dx = pd[1:]).
TEXT ·dotQ4Repack8RowsVNNI(SB), NOSPLIT, $0-64
	GEMV8VNNI(VROW, SCALESGATHER, v8loop, v8nopf)

// func dotQ4Repack8RowsVNNILoads(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)
TEXT ·dotQ4Repack8RowsVNNILoads(SB), NOSPLIT, $0-64
	GEMV8VNNI(VROW, SCALESLOADS, v8lloop, v8lnopf)

// VROW for Q4_0: u = q, no table.
#define VROWQ0(addr, acc) \
	VBROADCASTI128 addr, Y12 \
	VPSRLVQ        Y13, Y12, Y12 \
	VPAND          Y15, Y12, Y12 \
	VPXOR          acc, acc, acc \
	VPDPBUSD       Y1, Y12, acc

// func dotQ40Repack8RowsVNNI(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)
// dotQ4Repack8RowsVNNI for Q4_0, whose u is the nibble itself (ulut is loaded but not used).
TEXT ·dotQ40Repack8RowsVNNI(SB), NOSPLIT, $0-64
	GEMV8VNNI(VROWQ0, SCALESGATHER, v80loop, v80nopf)

// func dotQ40Repack8RowsVNNILoads(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)
TEXT ·dotQ40Repack8RowsVNNILoads(SB), NOSPLIT, $0-64
	GEMV8VNNI(VROWQ0, SCALESLOADS, v80lloop, v80lnopf)

// func q8HasMin(x *byte, nb int) bool
// Whether any quant of the nb Q8_0 blocks at x is −128.
TEXT ·q8HasMin(SB), NOSPLIT, $0-17
	MOVQ         x+0(FP), SI
	MOVQ         nb+8(FP), CX
	VPBROADCASTB rvn_x80<>(SB), Y15
	VPXOR        Y14, Y14, Y14

mloop:
	VPCMPEQB     2(SI), Y15, Y0
	VPOR         Y0, Y14, Y14
	ADDQ         $34, SI
	DECQ         CX
	JNZ          mloop
	VPTEST       Y14, Y14
	SETNE        ret+16(FP)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------------------
// Q4_K · Q8_K gemv order, 4 rows per pass, with 512-bit registers: each 32-byte quant chunk
// c is loaded once into both halves of a ZMM register, the high half shifted by 4, so one
// register holds sub-block 2c (low nibbles) and 2c+1 (high nibbles) against the 64
// contiguous activation quants of those sub-blocks: one VPMADDUBSW, one VPSHUFB for the two
// scales and one VPDPWSSD (VPMADDWD + VPADDD) per 64 weights. The integer sum isum is exact,
// so the float steps (those of dotQ4KRepack4RowsAVX2) give the same bits.

// qword shift counts: low 256 bits unshifted, high 256 bits right by 4
DATA rvn_hishift512<>+0(SB)/8, $0
DATA rvn_hishift512<>+8(SB)/8, $0
DATA rvn_hishift512<>+16(SB)/8, $0
DATA rvn_hishift512<>+24(SB)/8, $0
DATA rvn_hishift512<>+32(SB)/8, $4
DATA rvn_hishift512<>+40(SB)/8, $4
DATA rvn_hishift512<>+48(SB)/8, $4
DATA rvn_hishift512<>+56(SB)/8, $4
GLOBL rvn_hishift512<>(SB), RODATA|NOPTR, $64

// rvn_kscale512<>+64c: VPSHUFB mask broadcasting int16 word 2c of each 128-bit lane to the
// low 256 bits and word 2c+1 to the high 256 bits.
#define KSC512(c, lo, hi) \
	DATA rvn_kscale512<>+(64*(c))(SB)/8, lo \
	DATA rvn_kscale512<>+(64*(c)+8)(SB)/8, lo \
	DATA rvn_kscale512<>+(64*(c)+16)(SB)/8, lo \
	DATA rvn_kscale512<>+(64*(c)+24)(SB)/8, lo \
	DATA rvn_kscale512<>+(64*(c)+32)(SB)/8, hi \
	DATA rvn_kscale512<>+(64*(c)+40)(SB)/8, hi \
	DATA rvn_kscale512<>+(64*(c)+48)(SB)/8, hi \
	DATA rvn_kscale512<>+(64*(c)+56)(SB)/8, hi

KSC512(0, $0x0100010001000100, $0x0302030203020302)
KSC512(1, $0x0504050405040504, $0x0706070607060706)
KSC512(2, $0x0908090809080908, $0x0b0a0b0a0b0a0b0a)
KSC512(3, $0x0d0c0d0c0d0c0d0c, $0x0f0e0f0e0f0e0f0e)
GLOBL rvn_kscale512<>(SB), RODATA|NOPTR, $256

// Chunk c of the row at base against the Q8_K quants at DI, added to Zacc (Z2 = the 8
// scales as words in every 128-bit lane, Z16 = rvn_hishift512, Z17 = 0x0f bytes; clobbers
// Z9, Z11).
#define KCHUNKZ(c, base, zacc) \
	VBROADCASTI64X4 (16+32*(c))(base), Z9            \
	VPSRLVQ         Z16, Z9, Z9                      \
	VPANDD          Z17, Z9, Z9                      \
	VPMADDUBSW      (4+64*(c))(DI), Z9, Z9           \
	VPSHUFB         rvn_kscale512<>+(64*(c))(SB), Z2, Z11 \
	VPDPWSSD        Z11, Z9, zacc

// yacc (the low half of zacc) = 8 int32 lanes summing to isum of the super-block at base with
// the Q8_K block at DI; leaves the mins in DX (clobbers AX, BX, R8, R9, Z2, Z9, Z11).
#define KROWZ(base, zacc, yacc, yt) \
	KDEC(base)                       \
	VMOVQ           R9, X2           \
	VPMOVZXBW       X2, X2           \
	VSHUFI32X4      $0, Z2, Z2, Z2   \
	VPXORD          zacc, zacc, zacc \
	KCHUNKZ(0, base, zacc)           \
	KCHUNKZ(1, base, zacc)           \
	KCHUNKZ(2, base, zacc)           \
	KCHUNKZ(3, base, zacc)           \
	VEXTRACTI64X4   $1, zacc, yt     \
	VPADDD          yt, yacc, yacc

// The row step of Q4K4_LOOP for the VNNI kernel (Y10 scratch).
#define K4ROW(base, zacc, yacc) KROWZ(base, zacc, yacc, Y10)

// func dotQ4KRepack4RowsVNNI(w *byte, stride int, x *byte, nb int, out *float32, pf int)
// pf: the prefetch distance in bytes (a multiple of 4·stride: the same lines of a later group
// of 4 rows).
TEXT ·dotQ4KRepack4RowsVNNI(SB), NOSPLIT, $0-48
	MOVQ         w+0(FP), SI
	MOVQ         stride+8(FP), AX
	LEAQ         (SI)(AX*1), R11
	LEAQ         (R11)(AX*1), R12
	LEAQ         (R12)(AX*1), R13
	MOVQ         pf+40(FP), R14
	MOVQ         x+16(FP), DI
	MOVQ         nb+24(FP), CX
	VMOVDQU64    rvn_hishift512<>(SB), Z16
	VPBROADCASTB rvn_nib<>(SB), Z17
	VXORPS       X0, X0, X0 // acc, one lane per row
	VXORPS       X1, X1, X1 // accm

	Q4K4_LOOP(q4kz4loop)

// ---------------------------------------------------------------------------------------
// The Q4_K tiles' per-call table of 6-bit scales and mins and of d/dmin, 8 rows at a time
// (kScales per row in Go before): each super-block's 12 scale bytes and its (d, dmin) of the
// 8 rows are gathered with VPGATHERDD (one row per lane) and decoded lane-wise, so that each
// table entry, 8 consecutive rows, is one store.

DATA rvn_c63<>+0(SB)/4, $63
GLOBL rvn_c63<>(SB), RODATA|NOPTR, $4
DATA rvn_c15<>+0(SB)/4, $15
GLOBL rvn_c15<>(SB), RODATA|NOPTR, $4
DATA rvn_c3<>+0(SB)/4, $3
GLOBL rvn_c3<>(SB), RODATA|NOPTR, $4
DATA rvn_cffff<>+0(SB)/4, $0xffff
GLOBL rvn_cffff<>(SB), RODATA|NOPTR, $4

// Scales and mins j and j+4 of the 8 rows (w0 = Y0, w1 = Y1, w2 = Y2; Y12 = 63, Y13 = 15,
// Y14 = 3), stored to the table at DI (sm) in rows 16·j and 16·(j+4) (+128 for mins).
#define KSCALEJ(j) \
	VPSRLD $(8*(j)), Y0, Y4           \
	VPAND  Y12, Y4, Y4                \
	VMOVDQU Y4, (64*(j))(DI)          \
	VPSRLD $(8*(j)), Y1, Y5           \
	VPAND  Y12, Y5, Y5                \
	VMOVDQU Y5, (512+64*(j))(DI)      \
	VPSRLD $(8*(j)), Y2, Y6           \
	VPAND  Y13, Y6, Y6                \
	VPSRLD $(8*(j)+6), Y0, Y7         \
	VPAND  Y14, Y7, Y7                \
	VPSLLD $4, Y7, Y7                 \
	VPOR   Y7, Y6, Y6                 \
	VMOVDQU Y6, (64*((j)+4))(DI)      \
	VPSRLD $(8*(j)+4), Y2, Y6         \
	VPAND  Y13, Y6, Y6                \
	VPSRLD $(8*(j)+6), Y1, Y7         \
	VPAND  Y14, Y7, Y7                \
	VPSLLD $4, Y7, Y7                 \
	VPOR   Y7, Y6, Y6                 \
	VMOVDQU Y6, (512+64*((j)+4))(DI)

// func q4KScales8AVX2(w *byte, offs *int32, nb int, sm *int32, dd *float32)
// For the 8 rows at w + offs[k] (k < 8) and super-block b < nb: sm[256b + 16s + k] = scale
// s, sm[256b + 128 + 16s + k] = min s, dd[32b + k] = d, dd[32b + 16 + k] = dmin.
TEXT ·q4KScales8AVX2(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         offs+8(FP), AX
	VMOVDQU      (AX), Y10
	MOVQ         nb+16(FP), CX
	MOVQ         sm+24(FP), DI
	MOVQ         dd+32(FP), DX
	VPBROADCASTD rvn_c63<>(SB), Y12
	VPBROADCASTD rvn_c15<>(SB), Y13
	VPBROADCASTD rvn_c3<>(SB), Y14
	VPBROADCASTD rvn_cffff<>(SB), Y15

ksloop:
	VPCMPEQD   Y9, Y9, Y9
	VPGATHERDD Y9, 4(SI)(Y10*1), Y0
	VPCMPEQD   Y9, Y9, Y9
	VPGATHERDD Y9, 8(SI)(Y10*1), Y1
	VPCMPEQD   Y9, Y9, Y9
	VPGATHERDD Y9, 12(SI)(Y10*1), Y2
	VPCMPEQD   Y9, Y9, Y9
	VPGATHERDD Y9, 0(SI)(Y10*1), Y3
	KSCALEJ(0)
	KSCALEJ(1)
	KSCALEJ(2)
	KSCALEJ(3)
	VPAND      Y15, Y3, Y4 // d
	VPACKUSDW  Y4, Y4, Y4
	VPERMQ     $0x08, Y4, Y4
	VCVTPH2PS  X4, Y4
	VMOVUPS    Y4, (DX)
	VPSRLD     $16, Y3, Y5 // dmin
	VPACKUSDW  Y5, Y5, Y5
	VPERMQ     $0x08, Y5, Y5
	VCVTPH2PS  X5, Y5
	VMOVUPS    Y5, 64(DX)
	ADDQ       $144, SI
	ADDQ       $1024, DI
	ADDQ       $128, DX
	DECQ       CX
	JNZ        ksloop
	VZEROUPPER
	RET
