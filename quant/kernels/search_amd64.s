//go:build amd64 && !purego

#include "textflag.h"

// Lane-parallel K-quant scale searches (search.go). Each of the 8 lanes runs one
// sub-block's scalar search: the same float32 operations, one rounding each (no FMA), in
// the same order as quant's ggmlQkxQuants / ggmlQxQuants. Go's three-operand AVX syntax
// is Intel's reversed: VSUBPS a, b, d is d = b - a; VCMPPS $p, a, b, d is d = b p a;
// VBLENDVPS m, t, f, d is d = m ? t : f.

// ggml's nearest_int (x + 1.5·2^23, low mantissa bits, minus 2^22), then the clamp.
#define NEAREST(r, lo, hi) \
	VADDPS  Y15, r, r \
	VPAND   Y14, r, r \
	VPSUBD  Y13, r, r \
	VPMAXSD lo, r, r  \
	VPMINSD hi, r, r

#define BCAST(val, x, y) \
	MOVL         val, R8 \
	VMOVD        R8, x   \
	VPBROADCASTD x, y

// QkxLanes field offsets (search.go; TestLaneStateLayout checks them).
#define KX 0
#define KW 1024
#define KFL 2048
#define KSUMW 3072
#define KSUMX 3104
#define KBEST 3136
#define KSCALE 3168
#define KBIS 3200
#define KBMIN 3232
#define KMAX 3264
#define KMIN0 3296
#define KDEG 3328
#define KOSCALE 3360
#define KOMIN 3392
#define KL 3424

// The float label of element BX for the lanes' iscale Y8 and minimum Y0: x from KX into Y4,
// the label clamp(nearest_int(iscale·(x − min)), 0, nmax) as float into Y5.
#define KXLABEL \
	VMOVUPS   KX(DI)(BX*1), Y4 \
	VSUBPS    Y0, Y4, Y5       \
	VMULPS    Y5, Y8, Y5       \
	NEAREST(Y5, Y11, Y12)      \
	VCVTDQ2PS Y5, Y5

// func qkxSearch8AVX2(s *QkxLanes, nmax int32, num *float32, nnum int, n int)
TEXT ·qkxSearch8AVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), DI
	MOVL nmax+8(FP), AX
	MOVQ num+16(FP), SI
	MOVQ nnum+24(FP), CX
	MOVQ n+32(FP), DX
	SHLQ $5, DX                       // bytes of one transposed input
	BCAST($0x4b400000, X15, Y15)      // 1.5·2^23
	BCAST($0x007fffff, X14, Y14)
	BCAST($0x00400000, X13, Y13)
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12             // nmax (int32)
	VXORPS       Y11, Y11, Y11        // 0

	// min, max, sumW = Σw, sumX = Σw·x
	VMOVUPS KX(DI), Y0
	VMOVAPS Y0, Y1
	VMOVUPS KW(DI), Y2
	VMULPS  Y0, Y2, Y3
	MOVQ    $32, BX

kxStats:
	CMPQ    BX, DX
	JAE     kxStatsDone
	VMOVUPS KX(DI)(BX*1), Y4
	VMOVUPS KW(DI)(BX*1), Y5
	VMINPS  Y0, Y4, Y0                // v < min ? v : min
	VMAXPS  Y1, Y4, Y1                // v > max ? v : max
	VADDPS  Y5, Y2, Y2
	VMULPS  Y4, Y5, Y6
	VADDPS  Y6, Y3, Y3
	ADDQ    $32, BX
	JMP     kxStats

kxStatsDone:
	VMINPS  Y0, Y11, Y0               // min > 0 ? 0 : min
	VMOVUPS Y2, KSUMW(DI)
	VMOVUPS Y3, KSUMX(DI)
	VMOVUPS Y1, KMAX(DI)
	VMOVUPS Y0, KMIN0(DI)
	VCMPPS  $0, Y0, Y1, Y4            // max == min: degenerate lane
	VMOVUPS Y4, KDEG(DI)

	// first labels at iscale = nmax/(max-min), scale = 1/iscale
	VSUBPS       Y0, Y1, Y5
	VCVTDQ2PS    Y12, Y6
	VDIVPS       Y5, Y6, Y8
	BCAST($0x3f800000, X7, Y7)
	VDIVPS       Y8, Y7, Y7
	VMOVUPS      Y7, KSCALE(DI)
	VMOVUPS      Y8, KBIS(DI)
	VMOVUPS      Y0, KBMIN(DI)
	VXORPS       Y9, Y9, Y9
	XORQ         BX, BX

kxFirst:
	KXLABEL
	VMULPS    Y5, Y7, Y5              // scale·l
	VADDPS    Y0, Y5, Y5              // + min
	VSUBPS    Y4, Y5, Y5              // − x
	VMULPS    Y5, Y5, Y5
	VMULPS    KW(DI)(BX*1), Y5, Y5
	VADDPS    Y5, Y9, Y9
	ADDQ      $32, BX
	CMPQ      BX, DX
	JB        kxFirst
	VMOVUPS   Y9, KBEST(DI)
	XORQ      R9, R9

kxStep:
	CMPQ          R9, CX
	JAE           kxDone
	VBROADCASTSS  (SI)(R9*4), Y6
	VMOVUPS       KMAX(DI), Y5
	VSUBPS        Y0, Y5, Y5
	VDIVPS        Y5, Y6, Y8          // iscale = num/(max-min)
	VXORPS        Y9, Y9, Y9          // sumL
	VXORPS        Y10, Y10, Y10       // sumL2
	VXORPS        Y1, Y1, Y1          // sumXL
	XORQ          BX, BX

kxSums:
	KXLABEL
	VMOVUPS   Y5, KFL(DI)(BX*1)
	VMULPS    KW(DI)(BX*1), Y5, Y6    // w·l
	VADDPS    Y6, Y9, Y9
	VMULPS    Y5, Y6, Y7
	VADDPS    Y7, Y10, Y10
	VMULPS    Y4, Y6, Y7
	VADDPS    Y7, Y1, Y1
	ADDQ      $32, BX
	CMPQ      BX, DX
	JB        kxSums

	VMOVUPS KSUMW(DI), Y2
	VMOVUPS KSUMX(DI), Y3
	VMULPS  Y10, Y2, Y4
	VMULPS  Y9, Y9, Y5
	VSUBPS  Y5, Y4, Y4                // D = sumW·sumL2 − sumL·sumL
	VMULPS  Y1, Y2, Y5
	VMULPS  Y9, Y3, Y6
	VSUBPS  Y6, Y5, Y5
	VDIVPS  Y4, Y5, Y5                // thisScale = (sumW·sumXL − sumX·sumL)/D
	VMULPS  Y3, Y10, Y6
	VMULPS  Y1, Y9, Y7
	VSUBPS  Y7, Y6, Y6
	VDIVPS  Y4, Y6, Y6                // thisMin = (sumL2·sumX − sumL·sumXL)/D
	VCMPPS  $0x0e, Y11, Y6, Y7        // thisMin > 0
	VDIVPS  Y10, Y1, Y2
	VBLENDVPS Y7, Y2, Y5, Y5          // then thisScale = sumXL/sumL2
	VBLENDVPS Y7, Y11, Y6, Y6         // and thisMin = 0
	VXORPS  Y9, Y9, Y9
	XORQ    BX, BX

kxErr:
	VMOVUPS KFL(DI)(BX*1), Y2
	VMULPS  Y2, Y5, Y2
	VADDPS  Y6, Y2, Y2
	VSUBPS  KX(DI)(BX*1), Y2, Y2
	VMULPS  Y2, Y2, Y2
	VMULPS  KW(DI)(BX*1), Y2, Y2
	VADDPS  Y2, Y9, Y9
	ADDQ    $32, BX
	CMPQ    BX, DX
	JB      kxErr

	VCMPPS    $0x0e, Y11, Y4, Y4      // D > 0
	VMOVUPS   KBEST(DI), Y3
	VCMPPS    $1, Y3, Y9, Y7          // cur < best
	VANDPS    Y7, Y4, Y4
	VBLENDVPS Y4, Y9, Y3, Y3
	VMOVUPS   Y3, KBEST(DI)
	VMOVUPS   KSCALE(DI), Y3
	VBLENDVPS Y4, Y5, Y3, Y3
	VMOVUPS   Y3, KSCALE(DI)
	VMOVUPS   KBIS(DI), Y3
	VBLENDVPS Y4, Y8, Y3, Y3
	VMOVUPS   Y3, KBIS(DI)
	VMOVUPS   KBMIN(DI), Y3
	VBLENDVPS Y4, Y0, Y3, Y3          // the minimum these labels were rounded against
	VMOVUPS   Y3, KBMIN(DI)
	VBLENDVPS Y4, Y6, Y0, Y0
	INCQ      R9
	JMP       kxStep

kxDone:
	VMOVUPS   KDEG(DI), Y4
	VMOVUPS   KSCALE(DI), Y3
	VBLENDVPS Y4, Y11, Y3, Y3
	VMOVUPS   Y3, KOSCALE(DI)
	VMOVUPS   KMIN0(DI), Y3
	VBLENDVPS Y4, Y3, Y0, Y0
	BCAST($0x80000000, X5, Y5)
	VXORPS    Y5, Y0, Y0
	VMOVUPS   Y0, KOMIN(DI)
	VMOVUPS   KBIS(DI), Y8
	VMOVUPS   KBMIN(DI), Y7
	XORQ      BX, BX

kxLabels:
	VMOVUPS KX(DI)(BX*1), Y5
	VSUBPS  Y7, Y5, Y5
	VMULPS  Y5, Y8, Y5
	NEAREST(Y5, Y11, Y12)
	VANDNPS Y5, Y4, Y5
	VMOVUPS Y5, KL(DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, DX
	JB      kxLabels
	VZEROUPPER
	RET

// QxLanes field offsets.
#define QX 0
#define QW 1024
#define QMAX 2048
#define QBIS 2080
#define QBEST 2112
#define QDEG 2144
#define QOSCALE 2176
#define QL 2208

// Σ w·x·l and Σ w·l·l of the labels at iscale Y3 into Y1 and Y2 (clobbers Y4-Y7, BX).
#define QXSUMS(loop) \
	VXORPS    Y1, Y1, Y1           \
	VXORPS    Y2, Y2, Y2           \
	XORQ      BX, BX               \
loop:                              \
	VMOVUPS   QX(DI)(BX*1), Y4     \
	VMULPS    Y4, Y3, Y5           \
	NEAREST(Y5, Y12, Y11)          \
	VCVTDQ2PS Y5, Y5               \
	VMOVUPS   QW(DI)(BX*1), Y6     \
	VMULPS    Y4, Y6, Y7           \
	VMULPS    Y5, Y7, Y7           \
	VADDPS    Y7, Y1, Y1           \
	VMULPS    Y5, Y6, Y7           \
	VMULPS    Y5, Y7, Y7           \
	VADDPS    Y7, Y2, Y2           \
	ADDQ      $32, BX              \
	CMPQ      BX, DX               \
	JB        loop

// func qxSearch8AVX2(s *QxLanes, nmax int32, num *float32, nnum int, n int)
TEXT ·qxSearch8AVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), DI
	MOVL nmax+8(FP), AX
	MOVQ num+16(FP), SI
	MOVQ nnum+24(FP), CX
	MOVQ n+32(FP), DX
	SHLQ $5, DX
	BCAST($0x4b400000, X15, Y15)
	BCAST($0x007fffff, X14, Y14)
	BCAST($0x00400000, X13, Y13)
	MOVL         AX, R8
	NEGL         R8
	VMOVD        R8, X12
	VPBROADCASTD X12, Y12             // −nmax
	LEAL         -1(AX), R8
	VMOVD        R8, X11
	VPBROADCASTD X11, Y11             // nmax − 1
	BCAST($0x7fffffff, X10, Y10)

	// the first element with the largest |x| (strictly greater replaces)
	VXORPS Y0, Y0, Y0                 // max (signed)
	VXORPS Y1, Y1, Y1                 // amax
	XORQ   BX, BX

qxMax:
	VMOVUPS   QX(DI)(BX*1), Y4
	VANDPS    Y10, Y4, Y5
	VCMPPS    $0x0e, Y1, Y5, Y6       // |x| > amax
	VBLENDVPS Y6, Y5, Y1, Y1
	VBLENDVPS Y6, Y4, Y0, Y0
	ADDQ      $32, BX
	CMPQ      BX, DX
	JB        qxMax
	VMOVUPS   Y0, QMAX(DI)
	BCAST($0x26901d7d, X5, Y5)        // 1e-15
	VCMPPS    $1, Y5, Y1, Y6          // amax < 1e-15: degenerate lane
	VMOVUPS   Y6, QDEG(DI)

	// first labels at iscale = −nmax/max
	VCVTDQ2PS Y12, Y4
	VDIVPS    Y0, Y4, Y3
	VMOVUPS   Y3, QBIS(DI)
	QXSUMS(qxFirst)
	VXORPS    Y10, Y10, Y10
	VCMPPS    $4, Y10, Y2, Y6         // suml2 != 0
	VDIVPS    Y2, Y1, Y8
	VANDPS    Y6, Y8, Y8              // scale = suml2 != 0 ? sumlx/suml2 : 0
	VMULPS    Y1, Y8, Y9              // best = scale·sumlx
	XORQ      R9, R9

qxStep:
	CMPQ         R9, CX
	JAE          qxDone
	VBROADCASTSS (SI)(R9*4), Y4
	VMOVUPS      QMAX(DI), Y0
	VDIVPS       Y0, Y4, Y3           // iscale = num/max
	QXSUMS(qxSums)
	VXORPS       Y10, Y10, Y10
	VCMPPS       $0x0e, Y10, Y2, Y4   // suml2 > 0
	VMULPS       Y1, Y1, Y5
	VMULPS       Y2, Y9, Y6
	VCMPPS       $0x0e, Y6, Y5, Y7    // sumlx·sumlx > best·suml2
	VANDPS       Y7, Y4, Y4
	VDIVPS       Y2, Y1, Y5
	VMULPS       Y1, Y5, Y6
	VBLENDVPS    Y4, Y5, Y8, Y8
	VBLENDVPS    Y4, Y6, Y9, Y9
	VMOVUPS      QBIS(DI), Y5
	VBLENDVPS    Y4, Y3, Y5, Y5
	VMOVUPS      Y5, QBIS(DI)
	INCQ         R9
	JMP          qxStep

qxDone:
	VMOVUPS   QDEG(DI), Y4
	VXORPS    Y10, Y10, Y10
	VBLENDVPS Y4, Y10, Y8, Y8
	VMOVUPS   Y8, QOSCALE(DI)
	VMOVUPS   QBIS(DI), Y3
	VPSUBD    Y12, Y10, Y9            // nmax
	XORQ      BX, BX

qxLabels:
	VMOVUPS QX(DI)(BX*1), Y5
	VMULPS  Y5, Y3, Y5
	NEAREST(Y5, Y12, Y11)
	VPADDD  Y9, Y5, Y5
	VANDNPS Y5, Y4, Y5
	VMOVUPS Y5, QL(DI)(BX*1)
	ADDQ    $32, BX
	CMPQ    BX, DX
	JB      qxLabels
	VZEROUPPER
	RET

// func asymSubEval8AVX2(x, w *float32, n int, ds, dm *[8]float32, nmax int32, e *[8]float64, q *int32)
// Lane l is one candidate (ds[l], dm[l]) of quant's asymSubEval: per element the same float32
// operations (add, divide, nearest_int, clamp, multiply, subtract), then the float64 error
// term (w·r)·r added to the lane's sum in index order. Y8/Y9 hold the sums of lanes 0-3/4-7.
TEXT ·asymSubEval8AVX2(SB), NOSPLIT, $0-64
	MOVQ    x+0(FP), SI
	MOVQ    w+8(FP), DX
	MOVQ    n+16(FP), CX
	MOVQ    ds+24(FP), AX
	VMOVUPS (AX), Y0                  // ds
	MOVQ    dm+32(FP), AX
	VMOVUPS (AX), Y1                  // dm
	MOVL    nmax+40(FP), AX
	VMOVD   AX, X7
	VPBROADCASTD X7, Y7               // nmax
	MOVQ    q+56(FP), DI
	BCAST($0x4b400000, X15, Y15)      // 1.5·2^23
	BCAST($0x007fffff, X14, Y14)
	BCAST($0x00400000, X13, Y13)
	VPXOR   Y6, Y6, Y6                // 0 (clamp low; ds == 0 test)
	VCMPPS  $4, Y6, Y0, Y2            // ds != 0 (unordered: NaN counts as nonzero, as in Go)
	VXORPD  Y8, Y8, Y8
	VXORPD  Y9, Y9, Y9

ase8Loop:
	VBROADCASTSS (SI), Y10            // v
	VADDPS    Y1, Y10, Y11            // v + dm
	VDIVPS    Y0, Y11, Y11            // (v + dm) / ds
	NEAREST(Y11, Y6, Y7)
	VPAND     Y2, Y11, Y11            // q = 0 where ds == 0
	VMOVDQU   Y11, (DI)
	VCVTDQ2PS Y11, Y12
	VMULPS    Y0, Y12, Y12            // ds·q
	VSUBPS    Y1, Y12, Y12            // ds·q − dm
	VCVTPS2PD X12, Y3                 // lanes 0-3 as float64
	VEXTRACTF128 $1, Y12, X12
	VCVTPS2PD X12, Y12                // lanes 4-7
	VCVTPS2PD X10, Y10                // v as float64 (all lanes)
	VSUBPD    Y3, Y10, Y3             // r = v − (ds·q − dm)
	VSUBPD    Y12, Y10, Y12
	VBROADCASTSS (DX), X4
	VCVTPS2PD X4, Y4                  // w as float64
	VMULPD    Y3, Y4, Y5              // w·r
	VMULPD    Y3, Y5, Y5              // (w·r)·r
	VADDPD    Y5, Y8, Y8
	VMULPD    Y12, Y4, Y5
	VMULPD    Y12, Y5, Y5
	VADDPD    Y5, Y9, Y9
	ADDQ      $4, SI
	ADDQ      $4, DX
	ADDQ      $32, DI
	DECQ      CX
	JNZ       ase8Loop

	MOVQ    e+48(FP), AX
	VMOVUPD Y8, (AX)
	VMOVUPD Y9, 32(AX)
	VZEROUPPER
	RET

// ProxyLanes field offsets (search.go; TestProxyLanesLayout checks them).
#define PFD 0
#define PFM 128
#define PSQQ 256
#define PSQ 384
#define PSW 512
#define PFIX0 640
#define PFIX1 768
#define PCOST 896

DATA pxOne<>+0(SB)/8, $0x3ff0000000000000
GLOBL pxOne<>(SB), RODATA|NOPTR, $8

// PCOSTOF(a, b) takes into Y0 (the least cost so far) the cost of integer candidates a (of
// D, Y12) and b (of −Dm, Y13) for the four sub-blocks whose fd, fm, sqq, 2·sq, sw are in
// Y1..Y5, as asymProxy writes it: ((sqq·ds)·ds + ((2·sq)·ds)·do) + (sw·do)·do with
// ds = D·a − fd, do = (−Dm)·b − fm; then Y0 = c < Y0 ? c : Y0 (VMINPD), asymProxy's
// "if c < cost". a and b may be memory operands.
#define PCOSTOF(a, b) \
	VMULPD a, Y12, Y6  \
	VSUBPD Y1, Y6, Y6  \
	VMULPD b, Y13, Y7  \
	VSUBPD Y2, Y7, Y7  \
	VMULPD Y3, Y6, Y8  \
	VMULPD Y6, Y8, Y8  \
	VMULPD Y4, Y6, Y9  \
	VMULPD Y7, Y9, Y9  \
	VADDPD Y9, Y8, Y8  \
	VMULPD Y5, Y7, Y9  \
	VMULPD Y7, Y9, Y9  \
	VADDPD Y9, Y8, Y9  \
	VMINPD Y0, Y9, Y0

// func asymProxyAVX2(p *ProxyLanes, n int, D, Dm, smax float64, varyD, sPos int)
// Y12 = D, Y13 = −Dm, Y14 = smax, Y15 = +Inf. Per group of four sub-blocks the varying
// scale's integers go to Y10/Y11: floorCeil(v/S, 0, smax) with v, S = fd, D (varyD) or −fm,
// Dm, and 0, 0 when S is not positive; the fixed scale's are read from Fixed0/Fixed1.
TEXT ·asymProxyAVX2(SB), NOSPLIT, $0-56
	MOVQ         p+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSD D+16(FP), Y12
	VBROADCASTSD Dm+24(FP), Y13
	VBROADCASTSD smax+32(FP), Y14
	MOVQ         varyD+40(FP), DX
	MOVQ         $0x7ff0000000000000, AX
	VMOVQ        AX, X15
	VBROADCASTSD X15, Y15
	MOVQ         $0x8000000000000000, AX
	VMOVQ        AX, X0
	VBROADCASTSD X0, Y0               // sign bit
	MOVQ         sPos+48(FP), R9      // the varying scale is positive
	VXORPD Y0, Y13, Y13               // −Dm (sign flip, exact)
	XORQ   BX, BX

pxLoop:
	VMOVUPD PFD(DI)(BX*1), Y1
	VMOVUPD PFM(DI)(BX*1), Y2
	VMOVUPD PSQQ(DI)(BX*1), Y3
	VMOVUPD PSQ(DI)(BX*1), Y4
	VADDPD  Y4, Y4, Y4                // 2·sq (exact)
	VMOVUPD PSW(DI)(BX*1), Y5
	VXORPD  Y10, Y10, Y10
	VXORPD  Y11, Y11, Y11
	TESTQ   R9, R9
	JZ      pxInts                    // varying scale not positive: integers 0, 0
	TESTQ   DX, DX
	JZ      pxMins
	VDIVPD  Y12, Y1, Y6               // u = fd / D
	JMP     pxFloor

pxMins:
	MOVQ         $0x8000000000000000, AX
	VMOVQ        AX, X7
	VBROADCASTSD X7, Y7
	VXORPD       Y7, Y2, Y6           // −fm
	VXORPD       Y7, Y13, Y7          // Dm
	VDIVPD       Y7, Y6, Y6           // u = −fm / Dm

pxFloor:
	// floorCeil(u, 0, smax): !(u > 0): 0, 0; !(u < smax): smax, smax; else ⌊u⌋, ⌊u⌋+1
	VROUNDPD     $9, Y6, Y10          // ⌊u⌋
	VBROADCASTSD pxOne<>(SB), Y11
	VADDPD       Y11, Y10, Y11        // ⌊u⌋ + 1
	VCMPPD       $0x01, Y14, Y6, Y7   // u < smax (ordered)
	VBLENDVPD    Y7, Y10, Y14, Y10
	VBLENDVPD    Y7, Y11, Y14, Y11
	VXORPD       Y9, Y9, Y9
	VCMPPD       $0x0e, Y9, Y6, Y7    // u > 0 (ordered)
	VBLENDVPD    Y7, Y10, Y9, Y10
	VBLENDVPD    Y7, Y11, Y9, Y11

pxInts:
	VMOVAPD Y15, Y0
	TESTQ   DX, DX
	JZ      pxFixA
	// the scale varies: a ∈ {Y10, Y11}, b ∈ {Fixed0, Fixed1}
	PCOSTOF(Y10, PFIX0(DI)(BX*1))
	PCOSTOF(Y10, PFIX1(DI)(BX*1))
	PCOSTOF(Y11, PFIX0(DI)(BX*1))
	PCOSTOF(Y11, PFIX1(DI)(BX*1))
	JMP     pxStore

pxFixA:
	// the min varies: a ∈ {Fixed0, Fixed1}, b ∈ {Y10, Y11}
	PCOSTOF(PFIX0(DI)(BX*1), Y10)
	PCOSTOF(PFIX0(DI)(BX*1), Y11)
	PCOSTOF(PFIX1(DI)(BX*1), Y10)
	PCOSTOF(PFIX1(DI)(BX*1), Y11)

pxStore:
	VMOVUPD Y0, PCOST(DI)(BX*1)
	ADDQ    $32, BX
	SUBQ    $4, CX
	JNZ     pxLoop
	VZEROUPPER
	RET

// func asymScore8AVX2(x, w *float32, n int, mn float32, id *[8]float32, nmax int32, out *[24]float32)
// Lane l is one first guess id[l] of quant's asymFit: Y0 sq, Y1 sqq, Y2 sqx (from 0).
TEXT ·asymScore8AVX2(SB), NOSPLIT, $0-56
	MOVQ         x+0(FP), SI
	MOVQ         w+8(FP), DX
	MOVQ         n+16(FP), CX
	VBROADCASTSS mn+24(FP), Y3
	MOVQ         id+32(FP), AX
	VMOVUPS      (AX), Y4
	MOVL         nmax+40(FP), AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12
	VPXOR        Y11, Y11, Y11
	BCAST($0x4b400000, X15, Y15)      // 1.5·2^23
	BCAST($0x007fffff, X14, Y14)
	BCAST($0x00400000, X13, Y13)
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	VXORPS       Y2, Y2, Y2

asLoop:
	VBROADCASTSS (SI), Y5             // v
	VSUBPS       Y3, Y5, Y6           // v − mn
	VMULPS       Y4, Y6, Y6           // (v − mn)·id
	NEAREST(Y6, Y11, Y12)
	VCVTDQ2PS    Y6, Y6               // q
	VBROADCASTSS (DX), Y7             // w
	VMULPS       Y6, Y7, Y7           // wq = w·q
	VADDPS       Y7, Y0, Y0           // sq += wq
	VMULPS       Y6, Y7, Y8
	VADDPS       Y8, Y1, Y1           // sqq += wq·q
	VMULPS       Y5, Y7, Y8
	VADDPS       Y8, Y2, Y2           // sqx += wq·v
	ADDQ         $4, SI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          asLoop

	MOVQ    out+48(FP), AX
	VMOVUPS Y0, (AX)
	VMOVUPS Y1, 32(AX)
	VMOVUPS Y2, 64(AX)
	VZEROUPPER
	RET
