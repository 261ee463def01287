//go:build amd64 && !purego

#include "textflag.h"

// qkxSearch16AVX512 is qkxSearch8AVX2 (search_amd64.s) over 16 lanes in ZMM registers: each
// lane runs one sub-block's scalar make_qkx2_quants search with the same float32 operations,
// one rounding each (no FMA), in the same order, so its result is bit-identical to the
// 8-lane kernel's and the scalar search's. Blends go through mask registers: K1 holds the
// degenerate lanes (max == min) for the whole call, K2-K4 the per-step conditions. Only
// AVX-512F instructions are used (VPXORD, VPANDD and VMOVDQA32 instead of the DQ forms).

#define NEAREST16(r, lo, hi) \
	VADDPS  Z15, r, r \
	VPANDD  Z14, r, r \
	VPSUBD  Z13, r, r \
	VPMAXSD lo, r, r  \
	VPMINSD hi, r, r

#define BCAST16(val, z) \
	MOVL         val, R8 \
	VPBROADCASTD R8, z

// QkxLanes16 field offsets (search.go; TestLaneStateLayout checks them).
#define SX 0
#define SW 2048
#define SFL 4096
#define SSUMW 6144
#define SSUMX 6208
#define SBEST 6272
#define SSCALE 6336
#define SBIS 6400
#define SBMIN 6464
#define SMAX 6528
#define SMIN0 6592
#define SOSCALE 6656
#define SOMIN 6720
#define SL 6784

// The float label of element BX for the lanes' iscale Z8 and minimum Z0: x into Z4, the
// label clamp(nearest_int(iscale·(x − min)), 0, nmax) as float into Z5.
#define SXLABEL \
	VMOVUPS   SX(DI)(BX*1), Z4 \
	VSUBPS    Z0, Z4, Z5       \
	VMULPS    Z5, Z8, Z5       \
	NEAREST16(Z5, Z11, Z12)    \
	VCVTDQ2PS Z5, Z5

// func qkxSearch16AVX512(s *QkxLanes16, nmax int32, num *float32, nnum int, n int)
TEXT ·qkxSearch16AVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), DI
	MOVL nmax+8(FP), AX
	MOVQ num+16(FP), SI
	MOVQ nnum+24(FP), CX
	MOVQ n+32(FP), DX
	SHLQ $6, DX                       // bytes of one transposed input
	BCAST16($0x4b400000, Z15)         // 1.5·2^23
	BCAST16($0x007fffff, Z14)
	BCAST16($0x00400000, Z13)
	VPBROADCASTD AX, Z12              // nmax (int32)
	VPXORD       Z11, Z11, Z11        // 0

	// min, max, sumW = Σw, sumX = Σw·x
	VMOVUPS SX(DI), Z0
	VMOVAPS Z0, Z1
	VMOVUPS SW(DI), Z2
	VMULPS  Z0, Z2, Z3
	MOVQ    $64, BX

sxStats:
	CMPQ    BX, DX
	JAE     sxStatsDone
	VMOVUPS SX(DI)(BX*1), Z4
	VMOVUPS SW(DI)(BX*1), Z5
	VMINPS  Z0, Z4, Z0                // v < min ? v : min
	VMAXPS  Z1, Z4, Z1                // v > max ? v : max
	VADDPS  Z5, Z2, Z2
	VMULPS  Z4, Z5, Z6
	VADDPS  Z6, Z3, Z3
	ADDQ    $64, BX
	JMP     sxStats

sxStatsDone:
	VMINPS  Z0, Z11, Z0               // min > 0 ? 0 : min
	VMOVUPS Z2, SSUMW(DI)
	VMOVUPS Z3, SSUMX(DI)
	VMOVUPS Z1, SMAX(DI)
	VMOVUPS Z0, SMIN0(DI)
	VCMPPS  $0, Z0, Z1, K1            // max == min: degenerate lane

	// first labels at iscale = nmax/(max-min), scale = 1/iscale
	VSUBPS    Z0, Z1, Z5
	VCVTDQ2PS Z12, Z6
	VDIVPS    Z5, Z6, Z8
	BCAST16($0x3f800000, Z7)
	VDIVPS    Z8, Z7, Z7
	VMOVUPS   Z7, SSCALE(DI)
	VMOVUPS   Z8, SBIS(DI)
	VMOVUPS   Z0, SBMIN(DI)
	VPXORD    Z9, Z9, Z9
	XORQ      BX, BX

sxFirst:
	SXLABEL
	VMULPS    Z5, Z7, Z5              // scale·l
	VADDPS    Z0, Z5, Z5              // + min
	VSUBPS    Z4, Z5, Z5              // − x
	VMULPS    Z5, Z5, Z5
	VMULPS    SW(DI)(BX*1), Z5, Z5
	VADDPS    Z5, Z9, Z9
	ADDQ      $64, BX
	CMPQ      BX, DX
	JB        sxFirst
	VMOVUPS   Z9, SBEST(DI)
	XORQ      R9, R9

sxStep:
	CMPQ         R9, CX
	JAE          sxDone
	VBROADCASTSS (SI)(R9*4), Z6
	VMOVUPS      SMAX(DI), Z5
	VSUBPS       Z0, Z5, Z5
	VDIVPS       Z5, Z6, Z8           // iscale = num/(max-min)
	VPXORD       Z9, Z9, Z9           // sumL
	VPXORD       Z10, Z10, Z10        // sumL2
	VPXORD       Z1, Z1, Z1           // sumXL
	XORQ         BX, BX

sxSums:
	SXLABEL
	VMOVUPS   Z5, SFL(DI)(BX*1)
	VMULPS    SW(DI)(BX*1), Z5, Z6    // w·l
	VADDPS    Z6, Z9, Z9
	VMULPS    Z5, Z6, Z7
	VADDPS    Z7, Z10, Z10
	VMULPS    Z4, Z6, Z7
	VADDPS    Z7, Z1, Z1
	ADDQ      $64, BX
	CMPQ      BX, DX
	JB        sxSums

	VMOVUPS   SSUMW(DI), Z2
	VMOVUPS   SSUMX(DI), Z3
	VMULPS    Z10, Z2, Z4
	VMULPS    Z9, Z9, Z5
	VSUBPS    Z5, Z4, Z4              // D = sumW·sumL2 − sumL·sumL
	VMULPS    Z1, Z2, Z5
	VMULPS    Z9, Z3, Z6
	VSUBPS    Z6, Z5, Z5
	VDIVPS    Z4, Z5, Z5              // thisScale = (sumW·sumXL − sumX·sumL)/D
	VMULPS    Z3, Z10, Z6
	VMULPS    Z1, Z9, Z7
	VSUBPS    Z7, Z6, Z6
	VDIVPS    Z4, Z6, Z6              // thisMin = (sumL2·sumX − sumL·sumXL)/D
	VCMPPS    $0x0e, Z11, Z6, K2      // thisMin > 0
	VDIVPS    Z10, Z1, Z2
	VBLENDMPS Z2, Z5, K2, Z5          // then thisScale = sumXL/sumL2
	VBLENDMPS Z11, Z6, K2, Z6         // and thisMin = 0
	VPXORD    Z9, Z9, Z9
	XORQ      BX, BX

sxErr:
	VMOVUPS SFL(DI)(BX*1), Z2
	VMULPS  Z2, Z5, Z2
	VADDPS  Z6, Z2, Z2
	VSUBPS  SX(DI)(BX*1), Z2, Z2
	VMULPS  Z2, Z2, Z2
	VMULPS  SW(DI)(BX*1), Z2, Z2
	VADDPS  Z2, Z9, Z9
	ADDQ    $64, BX
	CMPQ    BX, DX
	JB      sxErr

	VCMPPS    $0x0e, Z11, Z4, K3      // D > 0
	VMOVUPS   SBEST(DI), Z3
	VCMPPS    $1, Z3, Z9, K4          // cur < best
	KANDW     K4, K3, K3
	VBLENDMPS Z9, Z3, K3, Z3
	VMOVUPS   Z3, SBEST(DI)
	VMOVUPS   SSCALE(DI), Z3
	VBLENDMPS Z5, Z3, K3, Z3
	VMOVUPS   Z3, SSCALE(DI)
	VMOVUPS   SBIS(DI), Z3
	VBLENDMPS Z8, Z3, K3, Z3
	VMOVUPS   Z3, SBIS(DI)
	VMOVUPS   SBMIN(DI), Z3
	VBLENDMPS Z0, Z3, K3, Z3          // the minimum these labels were rounded against
	VMOVUPS   Z3, SBMIN(DI)
	VBLENDMPS Z6, Z0, K3, Z0
	INCQ      R9
	JMP       sxStep

sxDone:
	VMOVUPS   SSCALE(DI), Z3
	VBLENDMPS Z11, Z3, K1, Z3         // degenerate lanes: scale 0
	VMOVUPS   Z3, SOSCALE(DI)
	VMOVUPS   SMIN0(DI), Z3
	VBLENDMPS Z3, Z0, K1, Z0          // and their minimum
	BCAST16($0x80000000, Z5)
	VPXORD    Z5, Z0, Z0
	VMOVUPS   Z0, SOMIN(DI)
	VMOVUPS   SBIS(DI), Z8
	VMOVUPS   SBMIN(DI), Z7
	KNOTW     K1, K5
	XORQ      BX, BX

sxLabels:
	VMOVUPS      SX(DI)(BX*1), Z5
	VSUBPS       Z7, Z5, Z5
	VMULPS       Z5, Z8, Z5
	NEAREST16(Z5, Z11, Z12)
	VMOVDQA32.Z  Z5, K5, Z5           // degenerate lanes: labels 0
	VMOVUPS      Z5, SL(DI)(BX*1)
	ADDQ         $64, BX
	CMPQ         BX, DX
	JB           sxLabels
	VZEROUPPER
	RET

// QxLanes16 field offsets (search.go; TestLaneStateLayout checks them).
#define QX16 0
#define QW16 2048
#define QMAX16 4096
#define QBIS16 4160
#define QOSCALE16 4224
#define QL16 4288

// Σ w·x·l and Σ w·l·l of the labels at iscale Z3 into Z1 and Z2 (clobbers Z4-Z7, BX).
#define QXSUMS16(loop) \
	VPXORD    Z1, Z1, Z1           \
	VPXORD    Z2, Z2, Z2           \
	XORQ      BX, BX               \
loop:                              \
	VMOVUPS   QX16(DI)(BX*1), Z4   \
	VMULPS    Z4, Z3, Z5           \
	NEAREST16(Z5, Z12, Z11)        \
	VCVTDQ2PS Z5, Z5               \
	VMOVUPS   QW16(DI)(BX*1), Z6   \
	VMULPS    Z4, Z6, Z7           \
	VMULPS    Z5, Z7, Z7           \
	VADDPS    Z7, Z1, Z1           \
	VMULPS    Z5, Z6, Z7           \
	VMULPS    Z5, Z7, Z7           \
	VADDPS    Z7, Z2, Z2           \
	ADDQ      $64, BX              \
	CMPQ      BX, DX               \
	JB        loop

// func qxSearch16AVX512(s *QxLanes16, nmax int32, num *float32, nnum int, n int)
// qxSearch8AVX2 (search_amd64.s) over 16 lanes; K1 holds the degenerate lanes.
TEXT ·qxSearch16AVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), DI
	MOVL nmax+8(FP), AX
	MOVQ num+16(FP), SI
	MOVQ nnum+24(FP), CX
	MOVQ n+32(FP), DX
	SHLQ $6, DX
	BCAST16($0x4b400000, Z15)
	BCAST16($0x007fffff, Z14)
	BCAST16($0x00400000, Z13)
	MOVL         AX, R8
	NEGL         R8
	VPBROADCASTD R8, Z12              // −nmax
	LEAL         -1(AX), R8
	VPBROADCASTD R8, Z11              // nmax − 1
	BCAST16($0x7fffffff, Z10)

	// the first element with the largest |x| (strictly greater replaces)
	VPXORD Z0, Z0, Z0                 // max (signed)
	VPXORD Z1, Z1, Z1                 // amax
	XORQ   BX, BX

q16Max:
	VMOVUPS   QX16(DI)(BX*1), Z4
	VPANDD    Z10, Z4, Z5
	VCMPPS    $0x0e, Z1, Z5, K2       // |x| > amax
	VBLENDMPS Z5, Z1, K2, Z1
	VBLENDMPS Z4, Z0, K2, Z0
	ADDQ      $64, BX
	CMPQ      BX, DX
	JB        q16Max
	VMOVUPS   Z0, QMAX16(DI)
	BCAST16($0x26901d7d, Z5)          // 1e-15
	VCMPPS    $1, Z5, Z1, K1          // amax < 1e-15: degenerate lane

	// first labels at iscale = −nmax/max
	VCVTDQ2PS Z12, Z4
	VDIVPS    Z0, Z4, Z3
	VMOVUPS   Z3, QBIS16(DI)
	QXSUMS16(q16First)
	VPXORD    Z10, Z10, Z10
	VCMPPS    $4, Z10, Z2, K2         // suml2 != 0
	VDIVPS    Z2, Z1, Z8
	VMOVAPS.Z Z8, K2, Z8              // scale = suml2 != 0 ? sumlx/suml2 : 0
	VMULPS    Z1, Z8, Z9              // best = scale·sumlx
	XORQ      R9, R9

q16Step:
	CMPQ         R9, CX
	JAE          q16Done
	VBROADCASTSS (SI)(R9*4), Z4
	VMOVUPS      QMAX16(DI), Z0
	VDIVPS       Z0, Z4, Z3           // iscale = num/max
	QXSUMS16(q16Sums)
	VPXORD       Z10, Z10, Z10
	VCMPPS       $0x0e, Z10, Z2, K2   // suml2 > 0
	VMULPS       Z1, Z1, Z5
	VMULPS       Z2, Z9, Z6
	VCMPPS       $0x0e, Z6, Z5, K3    // sumlx·sumlx > best·suml2
	KANDW        K3, K2, K2
	VDIVPS       Z2, Z1, Z5
	VMULPS       Z1, Z5, Z6
	VBLENDMPS    Z5, Z8, K2, Z8
	VBLENDMPS    Z6, Z9, K2, Z9
	VMOVUPS      QBIS16(DI), Z5
	VBLENDMPS    Z3, Z5, K2, Z5
	VMOVUPS      Z5, QBIS16(DI)
	INCQ         R9
	JMP          q16Step

q16Done:
	VPXORD    Z10, Z10, Z10
	VBLENDMPS Z10, Z8, K1, Z8         // degenerate lanes: scale 0
	VMOVUPS   Z8, QOSCALE16(DI)
	VMOVUPS   QBIS16(DI), Z3
	VPSUBD    Z12, Z10, Z9            // nmax
	KNOTW     K1, K5
	XORQ      BX, BX

q16Labels:
	VMOVUPS     QX16(DI)(BX*1), Z5
	VMULPS      Z5, Z3, Z5
	NEAREST16(Z5, Z12, Z11)
	VPADDD      Z9, Z5, Z5
	VMOVDQA32.Z Z5, K5, Z5            // degenerate lanes: labels 0
	VMOVUPS     Z5, QL16(DI)(BX*1)
	ADDQ        $64, BX
	CMPQ        BX, DX
	JB          q16Labels
	VZEROUPPER
	RET
