// Shared by sgemm_amd64.s, sgemm_half_amd64.s and repack_vnni_amd64.s.

// Transpose the 8×8 block in Y0..Y7 (row i in Yi) into Y8..Y15 (column i in Y(8+i)).
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8        \
	VUNPCKHPS  Y1, Y0, Y9        \
	VUNPCKLPS  Y3, Y2, Y10       \
	VUNPCKHPS  Y3, Y2, Y11       \
	VUNPCKLPS  Y5, Y4, Y12       \
	VUNPCKHPS  Y5, Y4, Y13       \
	VUNPCKLPS  Y7, Y6, Y14       \
	VUNPCKHPS  Y7, Y6, Y15       \
	VSHUFPS    $0x44, Y10, Y8, Y0  \
	VSHUFPS    $0xee, Y10, Y8, Y1  \
	VSHUFPS    $0x44, Y11, Y9, Y2  \
	VSHUFPS    $0xee, Y11, Y9, Y3  \
	VSHUFPS    $0x44, Y14, Y12, Y4 \
	VSHUFPS    $0xee, Y14, Y12, Y5 \
	VSHUFPS    $0x44, Y15, Y13, Y6 \
	VSHUFPS    $0xee, Y15, Y13, Y7 \
	VPERM2F128 $0x20, Y4, Y0, Y8   \
	VPERM2F128 $0x20, Y5, Y1, Y9   \
	VPERM2F128 $0x20, Y6, Y2, Y10  \
	VPERM2F128 $0x20, Y7, Y3, Y11  \
	VPERM2F128 $0x31, Y4, Y0, Y12  \
	VPERM2F128 $0x31, Y5, Y1, Y13  \
	VPERM2F128 $0x31, Y6, Y2, Y14  \
	VPERM2F128 $0x31, Y7, Y3, Y15


// Store the transposed columns Y8..Y15 of TRANSPOSE8 64 bytes apart from off(DI): the layout
// of an 8-row half of a 16-wide packed B panel (off 0 for rows 0..7, 32 for rows 8..15).
#define STORE_T8(off) \
	VMOVUPS Y8, (off)(DI)      \
	VMOVUPS Y9, (off+64)(DI)   \
	VMOVUPS Y10, (off+128)(DI) \
	VMOVUPS Y11, (off+192)(DI) \
	VMOVUPS Y12, (off+256)(DI) \
	VMOVUPS Y13, (off+320)(DI) \
	VMOVUPS Y14, (off+384)(DI) \
	VMOVUPS Y15, (off+448)(DI)
