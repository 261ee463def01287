// Shared by sgemm512_amd64.s, q0tile512_amd64.s and repack_vnni_amd64.s: zero the ZMM
// accumulators Z0..Z7 (Z0..Z11).
#define ZERO_Z0_Z7 \
	VPXORD Z0, Z0, Z0   \
	VPXORD Z1, Z1, Z1   \
	VPXORD Z2, Z2, Z2   \
	VPXORD Z3, Z3, Z3   \
	VPXORD Z4, Z4, Z4   \
	VPXORD Z5, Z5, Z5   \
	VPXORD Z6, Z6, Z6   \
	VPXORD Z7, Z7, Z7

#define ZERO_Z0_Z11 \
	ZERO_Z0_Z7          \
	VPXORD Z8, Z8, Z8   \
	VPXORD Z9, Z9, Z9   \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11
