//go:build amd64 && !purego

#include "textflag.h"

// Float dot products (F32·F32, F16·F32, BF16·F32) and the read-bandwidth probe.

// The three dots follow ggml's x86 vec_dot kernels (ggml-cpu/vec.cpp) operation for operation, so
// that decode logits match llama.cpp's to the bit: four 8-lane accumulators over 32-element steps,
// the leftovers (n % 32) after the reduction.

// GGML_F32x8_REDUCE of Y0..Y3 into X0[0] (clobbers X1): x0+=x2, x1+=x3, x0+=x1, then
// lo+hi and two horizontal adds.
#define REDUCE_GGML \
	VADDPS       Y2, Y0, Y0 \
	VADDPS       Y3, Y1, Y1 \
	VADDPS       Y1, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0

// ggml_vec_dot_bf16's AVX2 reduction of Y0..Y3 into X0[0]: (c1+c3)+(c2+c4), lo+hi, then
// (v0+v2)+(v1+v3).
#define REDUCE_BF16 \
	VADDPS       Y2, Y0, Y0 \
	VADDPS       Y3, Y1, Y1 \
	VADDPS       Y1, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVHLPS     X0, X0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVSHDUP    X0, X1     \
	VADDSS       X1, X0, X0

// func dotF32AVX2(a, b *float32, n int) float32
// ggml_vec_dot_f32: FMA accumulators; leftovers as the compiled C does them (see f32tail).
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   CX, $32
	JLT    f32tail

f32loop32:
	VMOVUPS     0(SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         f32loop32

f32tail:
	REDUCE_GGML
	// Leftovers as GCC compiled ggml's scalar loop: the first (CX &^ 3) products rounded and
	// added in order, the last CX & 3 fused.
	MOVQ  CX, DX
	ANDQ  $3, DX
	SUBQ  DX, CX
	JZ    f32fma

f32loop1:
	VMOVSS 0(SI), X4
	VMULSS 0(DI), X4, X4
	VADDSS X4, X0, X0
	ADDQ   $4, SI
	ADDQ   $4, DI
	DECQ   CX
	JNZ    f32loop1

f32fma:
	TESTQ DX, DX
	JZ    f32done

f32loopfma:
	VMOVSS      0(SI), X4
	VFMADD231SS 0(DI), X4, X0
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        DX
	JNZ         f32loopfma

f32done:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// 32 elements of ggml_vec_dot_f16: fp16 at SI times f32 at DI into the accumulators Y0-Y3;
// advances SI, DI and counts CX down (clobbers Y4-Y7).
#define F16STEP32 \
	VCVTPH2PS   0(SI), Y4 \
	VCVTPH2PS   16(SI), Y5 \
	VCVTPH2PS   32(SI), Y6 \
	VCVTPH2PS   48(SI), Y7 \
	VFMADD231PS 0(DI), Y4, Y0 \
	VFMADD231PS 32(DI), Y5, Y1 \
	VFMADD231PS 64(DI), Y6, Y2 \
	VFMADD231PS 96(DI), Y7, Y3 \
	ADDQ        $64, SI \
	ADDQ        $128, DI \
	SUBQ        $32, CX

// func dotF16F32AVX2(w *byte, x *float32, n int) float32
// ggml_vec_dot_f16: FMA accumulators; the leftovers are exact f32 products summed in float64.
TEXT ·dotF16F32AVX2(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   CX, $32
	JLT    f16tail

f16loop32:
	F16STEP32
	CMPQ        CX, $32
	JGE         f16loop32

f16tail:
	REDUCE_GGML
	TESTQ CX, CX
	JZ    f16done
	VCVTSS2SD X0, X0, X0

f16loop1:
	MOVWLZX   0(SI), AX
	VMOVD     AX, X4
	VCVTPH2PS X4, X4
	VMULSS    0(DI), X4, X4
	VCVTSS2SD X4, X4, X4
	VADDSD    X4, X0, X0
	ADDQ      $2, SI
	ADDQ      $4, DI
	DECQ      CX
	JNZ       f16loop1
	VCVTSD2SS X0, X0, X0

f16done:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotBF16F32AVX2(w *byte, x *float32, n int) float32
// ggml_vec_dot_bf16 (AVX2): separate multiply and add, its own reduction, leftovers in float64.
TEXT ·dotBF16F32AVX2(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   CX, $32
	JLT    bf16tail

bf16loop32:
	VPMOVZXWD 0(SI), Y4
	VPMOVZXWD 16(SI), Y5
	VPMOVZXWD 32(SI), Y6
	VPMOVZXWD 48(SI), Y7
	VPSLLD    $16, Y4, Y4
	VPSLLD    $16, Y5, Y5
	VPSLLD    $16, Y6, Y6
	VPSLLD    $16, Y7, Y7
	VMULPS    0(DI), Y4, Y4
	VMULPS    32(DI), Y5, Y5
	VMULPS    64(DI), Y6, Y6
	VMULPS    96(DI), Y7, Y7
	VADDPS    Y4, Y0, Y0
	VADDPS    Y5, Y1, Y1
	VADDPS    Y6, Y2, Y2
	VADDPS    Y7, Y3, Y3
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	CMPQ      CX, $32
	JGE       bf16loop32

bf16tail:
	REDUCE_BF16
	TESTQ CX, CX
	JZ    bf16done
	VCVTSS2SD X0, X0, X0

bf16loop1:
	MOVWLZX   0(SI), AX
	SHLL      $16, AX
	VMOVD     AX, X4
	VMULSS    0(DI), X4, X4
	VCVTSS2SD X4, X4, X4
	VADDSD    X4, X0, X0
	ADDQ      $2, SI
	ADDQ      $4, DI
	DECQ      CX
	JNZ       bf16loop1
	VCVTSD2SS X0, X0, X0

bf16done:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func sumBytesAVX2(p *byte, n int) uint64
TEXT ·sumBytesAVX2(SB), NOSPLIT, $0-24
	MOVQ  p+0(FP), SI
	MOVQ  n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	SHRQ  $7, CX
	JZ    sumdone

sumloop:
	VPADDQ 0(SI), Y0, Y0
	VPADDQ 32(SI), Y1, Y1
	VPADDQ 64(SI), Y2, Y2
	VPADDQ 96(SI), Y3, Y3
	ADDQ   $128, SI
	DECQ   CX
	JNZ    sumloop

sumdone:
	VPADDQ       Y1, Y0, Y0
	VPADDQ       Y3, Y2, Y2
	VPADDQ       Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDQ       X1, X0, X0
	VMOVQ        X0, AX
	MOVQ         AX, ret+16(FP)
	VZEROUPPER
	RET

// func widenF16AVX2(dst *float32, src *byte, n int)   (n a multiple of 8)
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

widenF16Loop:
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JB        widenF16Loop
	VZEROUPPER
	RET

// func widenBF16AVX2(dst *float32, src *byte, n int)   (n a multiple of 8)
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

widenBF16Loop:
	VPMOVZXWD (SI)(AX*2), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JB        widenBF16Loop
	VZEROUPPER
	RET

DATA f16_qnan<>+0(SB)/4, $0x7fc00000
GLOBL f16_qnan<>(SB), RODATA|NOPTR, $4
DATA f16_abs<>+0(SB)/4, $0x7fffffff
GLOBL f16_abs<>(SB), RODATA|NOPTR, $4

// func narrowF16AVX2(dst *byte, src *float32, n int)   (n a multiple of 8)
// F16C's round-to-nearest-even conversion; a NaN becomes 0x7e00 with its sign, as
// floatToHalf (VCVTPS2PH would keep part of the payload).
TEXT ·narrowF16AVX2(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	XORQ         AX, AX
	VPBROADCASTW f16_qnanh<>(SB), X3

narrowF16Loop:
	VMOVUPS   (SI)(AX*4), Y0
	VCVTPS2PH $0, Y0, X1
	VCMPPS    $3, Y0, Y0, Y2 // unordered: NaN lanes
	VPACKSSDW Y2, Y2, Y2     // 16-bit masks, lanes 0-3 | 0-3, 4-7 | 4-7
	VPERMQ    $0x08, Y2, Y2  // words 0-7 in the low 128 bits
	VPSRLW    $15, X1, X4    // sign bit
	VPSLLW    $15, X4, X4
	VPOR      X3, X4, X4     // sign | 0x7e00
	VPBLENDVB X2, X4, X1, X1
	VMOVDQU   X1, (DI)(AX*2)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JB        narrowF16Loop
	VZEROUPPER
	RET

DATA f16_qnanh<>+0(SB)/2, $0x7e00
GLOBL f16_qnanh<>(SB), RODATA|NOPTR, $2

// func roundF16AVX2(x *float32, n int)   (n a multiple of 8)
// x[i] = the float32 value of floatToHalf(x[i]): VCVTPS2PH then VCVTPH2PS; NaNs become
// the quiet NaN 0x7fc00000 with their sign (floatToHalf's 0x7e00, widened).
TEXT ·roundF16AVX2(SB), NOSPLIT, $0-16
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	XORQ         AX, AX
	VBROADCASTSS f16_qnan<>(SB), Y3
	VBROADCASTSS f16_abs<>(SB), Y5

roundF16Loop:
	VMOVUPS   (SI)(AX*4), Y0
	VCVTPS2PH $0, Y0, X1
	VCVTPH2PS X1, Y1
	VCMPPS    $3, Y0, Y0, Y2 // NaN lanes
	VANDNPS   Y0, Y5, Y4     // sign bit
	VORPS     Y3, Y4, Y4     // sign | 0x7fc00000
	VBLENDVPS Y2, Y4, Y1, Y1
	VMOVUPS   Y1, (SI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JB        roundF16Loop
	VZEROUPPER
	RET

// func dotF16F32RowsAVX2(w *byte, stride int, x *float32, n int, rows int, out *float32)
// out[r] = dotF16F32AVX2(w + r·stride, x, n) for r < rows, n a positive multiple of 32 (no
// leftovers): the same accumulators and reduction per row, one call for many rows.
TEXT ·dotF16F32RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), R8
	MOVQ stride+8(FP), R9
	MOVQ x+16(FP), R10
	MOVQ n+24(FP), R11
	MOVQ rows+32(FP), R12
	MOVQ out+40(FP), R13

f16rowloop:
	MOVQ   R8, SI
	MOVQ   R10, DI
	MOVQ   R11, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f16rloop32:
	F16STEP32
	JNZ         f16rloop32

	REDUCE_GGML
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	ADDQ   R9, R8
	DECQ   R12
	JNZ    f16rowloop
	VZEROUPPER
	RET

DATA finExpMask<>+0(SB)/4, $0x7f800000
GLOBL finExpMask<>(SB), RODATA|NOPTR, $4

// func finiteRunAVX2(x *float32, n int) int   (n a multiple of 32)
// A value is NaN or ±Inf when all its exponent bits are set: (bits & 0x7f800000) ==
// 0x7f800000, tested on 32 values (four registers) per step.
TEXT ·finiteRunAVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	XORQ         AX, AX
	VPBROADCASTD finExpMask<>(SB), Y15
	TESTQ        CX, CX
	JZ           fin_done

fin_loop:
	VPAND    0(SI), Y15, Y0
	VPAND    32(SI), Y15, Y1
	VPAND    64(SI), Y15, Y2
	VPAND    96(SI), Y15, Y3
	VPCMPEQD Y15, Y0, Y0
	VPCMPEQD Y15, Y1, Y1
	VPCMPEQD Y15, Y2, Y2
	VPCMPEQD Y15, Y3, Y3
	VPOR     Y1, Y0, Y0
	VPOR     Y3, Y2, Y2
	VPOR     Y2, Y0, Y0
	VPTEST   Y0, Y0
	JNZ      fin_done
	ADDQ     $128, SI
	ADDQ     $32, AX
	CMPQ     AX, CX
	JB       fin_loop

fin_done:
	MOVQ       AX, ret+16(FP)
	VZEROUPPER
	RET
