// Shared by the Q4_K gemv kernels (repack_amd64.s, repack_vnni_amd64.s).

// Decode the 12-byte Q4_K scales at 4(base): R9 = the 8 six-bit scales (bytes), DX = the 8
// six-bit mins (bytes). Clobbers AX, BX, R8.
#define KDEC(base) \
	MOVL 4(base), AX        \
	MOVL 8(base), BX        \
	MOVL 12(base), DX       \
	MOVL AX, R8             \
	ANDL $0x3f3f3f3f, R8    \
	MOVL DX, R9             \
	ANDL $0x0f0f0f0f, R9    \
	SHRL $2, AX             \
	ANDL $0x30303030, AX    \
	ORL  AX, R9             \
	SHLQ $32, R9            \
	ORQ  R8, R9             \
	MOVL BX, R8             \
	ANDL $0x3f3f3f3f, R8    \
	SHRL $4, DX             \
	ANDL $0x0f0f0f0f, DX    \
	SHRL $2, BX             \
	ANDL $0x30303030, BX    \
	ORL  BX, DX             \
	SHLQ $32, DX            \
	ORQ  R8, DX

// After the four rows of a super-block: Y13 (rows 0, 1 pair-added) and Y4/Y8 (rows 2, 3)
// hold lane vectors summing to each row's isum, X6/X5 the mins bytes of rows 0-1 / 2-3,
// X3 the rows' (d, dmin) fp16 pairs, Y14 the activation's pair sums P_j in both lanes and
// Y7 its d_x. Reduces isum and imin = Σ m_j·P_j to one lane per row, converts them, and
// adds isum·(d·d_x) to X0 and imin·(dmin·d_x) to X1 (one FMA each, lane per row).
#define Q4K4_FMA \
	VPHADDD Y8, Y4, Y4 \
	VPHADDD Y4, Y13, Y13 \
	VEXTRACTI128 $1, Y13, X4 \
	VPADDD  X4, X13, X13 \
	VPMOVZXBW    X6, Y6 \
	VPMADDWD     Y14, Y6, Y6 \
	VPMOVZXBW    X5, Y5 \
	VPMADDWD     Y14, Y5, Y5 \
	VPHADDD      Y5, Y6, Y6 \
	VPHADDD      Y6, Y6, Y6 \
	VEXTRACTI128 $1, Y6, X5 \
	VPUNPCKLDQ   X5, X6, X6 \
	VCVTPH2PS    X3, Y3 \
	VMULPS       Y7, Y3, Y3 \
	VEXTRACTF128 $1, Y3, X4 \
	VSHUFPS      $0x88, X4, X3, X5 \
	VSHUFPS      $0xdd, X4, X3, X4 \
	VCVTDQ2PS    X13, X13 \
	VFMADD231PS  X5, X13, X0 \
	VCVTDQ2PS    X6, X6 \
	VFMADD231PS  X4, X6, X1

// Start of a super-block of the four rows at SI, R11, R12, R13: prefetch the same lines of
// the rows R14 bytes ahead (a later group), then dx in Y7 and the activation's pair sums
// P_j in both lanes of Y14 (from the Q8_K block at DI).
#define Q4K4_START \
	PREFETCHT0 0(SI)(R14*1) \
	PREFETCHT0 64(SI)(R14*1) \
	PREFETCHT0 128(SI)(R14*1) \
	PREFETCHT0 0(R11)(R14*1) \
	PREFETCHT0 64(R11)(R14*1) \
	PREFETCHT0 128(R11)(R14*1) \
	PREFETCHT0 0(R12)(R14*1) \
	PREFETCHT0 64(R12)(R14*1) \
	PREFETCHT0 128(R12)(R14*1) \
	PREFETCHT0 0(R13)(R14*1) \
	PREFETCHT0 64(R13)(R14*1) \
	PREFETCHT0 128(R13)(R14*1) \
	VBROADCASTSS 0(DI), Y7 \
	VMOVDQU      260(DI), X4 \
	VPHADDW      276(DI), X4, X4 \
	VINSERTI128  $1, X4, Y4, Y14

// The super-block loop of the 4-row Q4_K gemv kernels and their epilogue, from label on: rows
// 0-3 (at SI, R11, R12, R13) through K4ROW(base, zacc, yacc), which the including file defines
// (yacc = 8 int32 lanes summing to the row's isum, the mins left in DX); the isum lane vectors
// reduced pairwise, the mins bytes collected in X6 (rows 0, 1) and X5 (rows 2, 3), the (d, dmin)
// fp16 pairs in X3; then Q4K4_FMA, the next super-block, and acc − accm stored to out.
#define Q4K4_LOOP(label) \
label: \
	Q4K4_START \
	K4ROW(SI, Z13, Y13) \
	VMOVQ   DX, X6 \
	VMOVD   0(SI), X3 \
	K4ROW(R11, Z8, Y8) \
	VPINSRQ $1, DX, X6, X6 \
	VPINSRD $1, 0(R11), X3, X3 \
	VPHADDD Y8, Y13, Y13 \
	K4ROW(R12, Z4, Y4) \
	VMOVQ   DX, X5 \
	VPINSRD $2, 0(R12), X3, X3 \
	K4ROW(R13, Z8, Y8) \
	VPINSRQ $1, DX, X5, X5 \
	VPINSRD $3, 0(R13), X3, X3 \
	Q4K4_FMA \
	ADDQ $144, SI \
	ADDQ $144, R11 \
	ADDQ $144, R12 \
	ADDQ $144, R13 \
	ADDQ $292, DI \
	DECQ CX \
	JNZ  label \
	VSUBPS     X1, X0, X0 \
	MOVQ       out+32(FP), AX \
	VMOVUPS    X0, (AX) \
	VZEROUPPER \
	RET
