package kernels

import (
	"fmt"
	"unsafe"
)

// Repack-order kernels.
//
// On AVX2 machines llama.cpp's CPU backend does not run weight matrices of type Q4_0, Q4_K
// or IQ4_NL whose row count is a multiple of 8 through ggml_vec_dot_*: it repacks them
// (ggml-cpu/repack.cpp, "CPU_REPACK") and multiplies with ggml_gemv_*_8x8 (one activation
// row) and ggml_gemm_*_8x8 (groups of 4 activation rows). The integer block sums are the
// same, but the float accumulation order is not, so a runner that wants llama.cpp's numbers
// bit for bit must use the functions below for those tensors. Per output element (weight
// row w, activation row x), with fma a single-rounding float32 fused multiply-add and every
// chain starting at +0:
//
//	Q4_K·Q8_K, gemv order (per super-block b of 256):
//	  isum_b = Σ_j sc_j·Σ_{sub-block j} q·x                 exact int32
//	  imin_b = Σ_j m_j·P_j,  P_j = int16(bsum_2j + bsum_2j+1) exact int32 (P wraps like VPHADDW)
//	  acc  = fma(float32(isum_b), float32(f16(d)·d_x), acc)
//	  accm = fma(float32(imin_b), float32(f16(dmin)·d_x), accm)
//	  result = acc − accm
//	Q4_K·Q8_K, gemm order: the same, but one FMA per 64-element chunk c (in order c = 0..3)
//	  with isum_c = sc_2c·Σ q·x + sc_2c+1·Σ q·x and imin_c = m_2c·P_2c + m_2c+1·P_2c+1.
//	Q4_0 and IQ4_NL·Q8_0 (per block b of 32):
//	  isum_b = Σ v(q)·x  with v(q) = q−8 (Q4_0) or kvalues_iq4nl[q] (IQ4_NL)   exact int32
//	  acc = fma(float32(isum_b), float32(f16(d)·f16(d_x)), acc);  result = acc
//
// The Q4_0/IQ4_NL gemv form multiplies |v|·sign(x, v) (VPSIGNB), so an activation quant of
// −128 against a negative v contributes +|v|·(−128) instead of v·(−128); the gemm form
// (|x|·sign(v, x)) is exact for every byte. QuantizeRowQ8_0 and ggml never write −128, so
// for real activations the two forms agree. ggml quantizes groups of 4 activation rows with
// ggml_quantize_mat_q8_0_4x8 / _q8_K_4x8 instead of the row quantizers; those give the same
// bytes as QuantizeRowQ8_0 / QuantizeRowQ8K per row, except that the Q8_K one picks the sign
// of d from "+amax occurs in the block" rather than from the first element of largest |x|,
// so when both +amax and −amax occur and −amax comes first its d, quants and bsums are all
// negated. Every product above then flips sign twice, so the dot results are identical, and
// the kernels take QuantizeRowQ8K rows for every activation row.

// IQ4_NL is ggml's type id for IQ4_NL weights (block of 32: fp16 d, 16 bytes of nibbles,
// x = d·kvalues_iq4nl[q]). Only the repack-order kernels support it; Type.String, BlockSize
// and the vec_dot-order kernels do not know it.
const IQ4_NL Type = 20

// BlockBytesIQ4_NL is the byte size of an IQ4_NL block (32 elements).
const BlockBytesIQ4_NL = 18

// DotQ4_KQ8KRepack returns the dot product of n elements (a multiple of 256) of a Q4_K
// weight row w and a Q8_K activation row x in ggml's repack gemv order (see the formula
// above): what llama.cpp's AVX2 CPU backend computes for one activation row when the weight
// matrix has a multiple of 8 rows. It panics with a *LengthError on a length violation.
func DotQ4_KQ8KRepack(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ4_KQ8KRepack", n, QK_K, BlockBytesQ4_K, BlockBytesQ8_K, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ4KRepackAVX2(&w[0], &x[0], nb)
	}
	acc, accm := dotQ4KRepackGo(nb, w, x, false, 0, 0)
	return acc - accm
}

// DotQ4_0Q8_0Repack returns the dot product of n elements (a multiple of 32) of a Q4_0
// weight row w and a Q8_0 activation row x in ggml's repack gemv order (one FMA per block;
// see the formula above). It panics with a *LengthError on a length violation.
func DotQ4_0Q8_0Repack(n int, w, x []byte) float32 {
	nb := checkBlocks("DotQ4_0Q8_0Repack", n, QK8_0, BlockBytesQ4_0, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ4RepackAVX2(&w[0], &x[0], nb, lutPtr(Q4_0))
	}
	return dotQ4RepackGo(&repackLUTQ4_0, nb, w, x, false, 0)
}

// DotIQ4_NLQ8_0Repack returns the dot product of n elements (a multiple of 32) of an IQ4_NL
// weight row w and a Q8_0 activation row x in ggml's repack gemv order (one FMA per block;
// see the formula above). It panics with a *LengthError on a length violation.
func DotIQ4_NLQ8_0Repack(n int, w, x []byte) float32 {
	nb := checkBlocks("DotIQ4_NLQ8_0Repack", n, QK8_0, BlockBytesIQ4_NL, BlockBytesQ8_0, w, x)
	if nb == 0 {
		return 0
	}
	if useAsm() {
		return dotQ4RepackAVX2(&w[0], &x[0], nb, lutPtr(IQ4_NL))
	}
	return dotQ4RepackGo(&repackLUTIQ4NL, nb, w, x, false, 0)
}

// repackGeom returns the weight block bytes, activation block bytes and elements per block
// of a repack-order weight type, or ok = false.
func repackGeom(t Type) (wb, ab, bs int, ok bool) {
	switch t {
	case Q4_0:
		return BlockBytesQ4_0, BlockBytesQ8_0, QK8_0, true
	case IQ4_NL:
		return BlockBytesIQ4_NL, BlockBytesQ8_0, QK8_0, true
	case Q4_K:
		return BlockBytesQ4_K, BlockBytesQ8_K, QK_K, true
	}
	return 0, 0, 0, false
}

func repackTypeName(t Type) string {
	if t == IQ4_NL {
		return "iq4_nl"
	}
	return t.String()
}

// MatVecRepack is MatVec in ggml's repack gemv order for t = Q4_0, IQ4_NL or Q4_K: out[r] =
// the Dot…Repack value of row r of w and xq, bit for bit, for r in [r0, r1). Row r occupies
// w[r·rowBytes : (r+1)·rowBytes]; xq is one activation row quantized to Q8_0 (Q4_0, IQ4_NL)
// or Q8_K (Q4_K) with at least as many elements. The assembly handles 8 (Q4_0, IQ4_NL) or
// 4 (Q4_K) rows per pass, loading each activation block once for all of them. Callers split [0, rows) into ranges
// for their own workers (ranges of a multiple of 8 rows keep every row in the multi-row
// kernels); out is indexed by absolute row.
func MatVecRepack(t Type, out []float32, w []byte, rowBytes int, xq []byte, r0, r1 int) error {
	nb, err := checkRepackArgs("MatVecRepack", t, w, rowBytes, xq)
	if err != nil {
		return err
	}
	if err := checkRows(out, w, rowBytes, r0, r1); err != nil {
		return err
	}
	matVecRepack(t, out, w, rowBytes, xq, nb, r0, r1)
	return nil
}

// checkRepackArgs validates the weight type, row size and activation length of a repack
// mat-vec, returning the blocks per row.
func checkRepackArgs(fn string, t Type, w []byte, rowBytes int, xq []byte) (int, error) {
	wb, ab, _, ok := repackGeom(t)
	if !ok {
		return 0, fmt.Errorf("kernels: %s: unsupported weight type %v (want q4_0, iq4_nl or q4_K)", fn, repackTypeName(t))
	}
	if rowBytes <= 0 || rowBytes%wb != 0 {
		return 0, fmt.Errorf("kernels: %s: row size %d is not a positive multiple of the %v block size %d bytes", fn, rowBytes, repackTypeName(t), wb)
	}
	nb := rowBytes / wb
	if nb > len(xq)/ab {
		return 0, fmt.Errorf("kernels: %s: activation row has %d bytes, %d blocks need %d", fn, len(xq), nb, nb*ab)
	}
	return nb, nil
}

// gemvPrefetchBytes is the least prefetch distance of the VNNI gemv kernels: they prefetch
// the same lines of a later group of rows, and one group ahead is too close for short rows
// (single thread from DRAM, the 2048 × 768 Q4_K expert matrices of a MoE read at 18.7 GB/s
// one 4-row group ahead, 27 GB/s at 4 KB and 30.6 GB/s at 8 KB).
const gemvPrefetchBytes = 8192

// gemvPrefetch returns the prefetch distance for groups of group bytes: the first whole
// number of groups at or beyond gemvPrefetchBytes.
func gemvPrefetch(group int) int {
	return max(1, (gemvPrefetchBytes+group-1)/group) * group
}

// matVecRepack is MatVecRepack after validation.
func matVecRepack(t Type, out []float32, w []byte, rowBytes int, xq []byte, nb, r0, r1 int) {
	if !useAsm() {
		for r := r0; r < r1; r++ {
			row := w[r*rowBytes : (r+1)*rowBytes]
			switch t {
			case Q4_K:
				acc, accm := dotQ4KRepackGo(nb, row, xq, false, 0, 0)
				out[r] = acc - accm
			case Q4_0:
				out[r] = dotQ4RepackGo(&repackLUTQ4_0, nb, row, xq, false, 0)
			default:
				out[r] = dotQ4RepackGo(&repackLUTIQ4NL, nb, row, xq, false, 0)
			}
		}
		return
	}
	r := r0
	if t != Q4_K && r1-r0 >= 8 && useVNNI() && !q8HasMin(&xq[0], nb) {
		// One VPDPBUSD per row and block instead of ggml's four-instruction gemv sum: the
		// same exact block sums when no activation quant is −128 (checked above).
		ulut, off := &repackUQ4_0, int32(8)
		if t != Q4_0 {
			ulut, off = &repackUIQ4NL, 128
		}
		buf := vnniPool.Get().(*vnniBuf)
		buf.pre = grow(buf.pre, 4*nb)
		pd := buf.pre // pd[4b] = −off·Σx, pd[4b+1] = d_x
		q8SumsAVX2(&xq[0], nb, off, &pd[0], (*float32)(unsafe.Pointer(&pd[1])))
		pf := gemvPrefetch(8 * rowBytes)
		kern := dotQ4Repack8RowsVNNI // the kernel: Q4_0's own or the table's, scales gathered or loaded
		switch loads := scaleLoads.Load(); {
		case t == Q4_0 && loads:
			kern = dotQ40Repack8RowsVNNILoads
		case loads:
			kern = dotQ4Repack8RowsVNNILoads
		case t == Q4_0:
			kern = dotQ40Repack8RowsVNNI
		}
		for ; r+8 <= r1; r += 8 {
			kern(&w[r*rowBytes], rowBytes, &xq[0], &pd[0], nb, &ulut[0], &out[r], pf)
		}
		vnniPool.Put(buf)
	}
	if t != Q4_K && r1-r >= 8 {
		var buf [1024]float32 // rows of up to 32768 elements without allocating
		xs := buf[:]
		if nb > len(buf) {
			xs = make([]float32, nb)
		}
		q8ScalesAVX2(&xq[0], nb, &xs[0])
		for ; r+8 <= r1; r += 8 {
			dotQ4Repack8RowsAVX2(&w[r*rowBytes], rowBytes, &xq[0], &xs[0], nb, lutPtr(t), &out[r])
		}
	}
	pf := gemvPrefetch(4 * rowBytes)
	for ; r+4 <= r1; r += 4 {
		if t == Q4_K && useVNNI() {
			dotQ4KRepack4RowsVNNI(&w[r*rowBytes], rowBytes, &xq[0], nb, &out[r], pf)
		} else if t == Q4_K {
			dotQ4KRepack4RowsAVX2(&w[r*rowBytes], rowBytes, &xq[0], nb, &out[r])
		} else {
			dotQ4Repack4RowsAVX2(&w[r*rowBytes], rowBytes, &xq[0], nb, lutPtr(t), &out[r])
		}
	}
	for ; r < r1; r++ {
		if t == Q4_K {
			out[r] = dotQ4KRepackAVX2(&w[r*rowBytes], &xq[0], nb)
		} else {
			out[r] = dotQ4RepackAVX2(&w[r*rowBytes], &xq[0], nb, lutPtr(t))
		}
	}
}

// MatMulRepack multiplies rows [r0, r1) of the weight matrix w by nx activation rows the way
// ggml's CPU_REPACK mul_mat does for one batch of nx activation rows: activation rows
// k < nx − nx%4 in groups of 4 in gemm order (for Q4_K one FMA per 64-element chunk; for
// Q4_0/IQ4_NL exact products), the remaining nx%4 rows in gemv order (as MatVecRepack).
// Activation row k is xq[k·xStride:], quantized per row with QuantizeRowQ8_0 (Q4_0, IQ4_NL)
// or QuantizeRowQ8K (Q4_K); the result for weight row r and activation row k goes to
// out[k·ldOut + r]. ldOut must be ≥ r1. The assembly streams each weight row once per group
// of 4 activation rows. To reproduce llama.cpp, nx must be the whole src1 plane of the
// mul_mat (the ubatch's token count), since the grouping into 4s starts at its first row.
func MatMulRepack(t Type, out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, nx, r0, r1 int) error {
	nb, err := checkMatMulRepack("MatMulRepack", t, out, ldOut, w, rowBytes, xq, xStride, nx, r0, r1)
	if err != nil || nx == 0 || r0 == r1 {
		return err
	}
	matMulRepack(t, out, ldOut, w, rowBytes, xq, xStride, nx, nb, r0, r1)
	return nil
}

// MatMulRepackGemv computes nx activation rows against weight rows [r0, r1) like
// MatMulRepack, but every output in ggml's gemv order: what llama.cpp's mul_mat_id computes
// row by row for repacked MoE experts. Q4_K runs 4 activation rows at a time where the CPU has
// AVX-512 VNNI (the rest through MatVecRepack). For Q4_0 and IQ4_NL the gemv and gemm orders
// agree whenever no activation quant is −128 (QuantizeRowQ8_0 never writes one), which this
// function requires of them; it then runs MatMulRepack's kernels.
func MatMulRepackGemv(t Type, out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, nx, r0, r1 int) error {
	nb, err := checkMatMulRepack("MatMulRepackGemv", t, out, ldOut, w, rowBytes, xq, xStride, nx, r0, r1)
	if err != nil || nx == 0 || r0 == r1 {
		return err
	}
	if t != Q4_K {
		matMulRepack(t, out, ldOut, w, rowBytes, xq, xStride, nx, nb, r0, r1)
		return nil
	}
	g := 0
	if useVNNI() {
		g = nx - nx%4
		if g > 0 {
			matMulQ4KVNNI(out, ldOut, w, rowBytes, xq, xStride, g, nb, r0, r1, true)
		}
	}
	for k := g; k < nx; k++ {
		matVecRepack(t, out[k*ldOut:], w, rowBytes, xq[k*xStride:], nb, r0, r1)
	}
	return nil
}

// checkMatMulRepack validates the arguments of MatMulRepack and MatMulRepackGemv and returns
// the blocks per row.
func checkMatMulRepack(name string, t Type, out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, nx, r0, r1 int) (int, error) {
	nb, err := checkRepackArgs(name, t, w, rowBytes, xq)
	if err != nil {
		return 0, err
	}
	if nx < 0 {
		return 0, fmt.Errorf("kernels: %s: negative activation row count %d", name, nx)
	}
	if r0 < 0 || r1 < r0 {
		return 0, fmt.Errorf("kernels: %s: invalid row range [%d, %d)", name, r0, r1)
	}
	if r1 > 0 && len(w)/rowBytes < r1 {
		return 0, fmt.Errorf("kernels: %s: weights hold %d rows of %d bytes, row range ends at %d", name, len(w)/rowBytes, rowBytes, r1)
	}
	if nx == 0 || r0 == r1 {
		return nb, nil
	}
	_, ab, _, _ := repackGeom(t)
	xRow := nb * ab
	if nx > 1 {
		if xStride < xRow {
			return 0, fmt.Errorf("kernels: %s: activation stride %d is less than the %d bytes of a row", name, xStride, xRow)
		}
		if ldOut < r1 {
			return 0, fmt.Errorf("kernels: %s: output stride %d is less than the row range end %d", name, ldOut, r1)
		}
		// (nx−1)·stride + size ≤ len, compared by division to avoid overflow.
		if (len(xq)-xRow)/xStride < nx-1 {
			return 0, fmt.Errorf("kernels: %s: %d activation bytes hold fewer than %d rows %d bytes apart", name, len(xq), nx, xStride)
		}
		if len(out) < r1 || (len(out)-r1)/ldOut < nx-1 {
			return 0, fmt.Errorf("kernels: %s: out has %d entries, %d rows of stride %d need %d", name, len(out), nx, ldOut, (nx-1)*ldOut+r1)
		}
	} else if len(out) < r1 {
		return 0, fmt.Errorf("kernels: %s: out has %d entries, row range ends at %d", name, len(out), r1)
	}
	return nb, nil
}

// matMulRepack is MatMulRepack after validation.
func matMulRepack(t Type, out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, nx, nb, r0, r1 int) {
	g := nx - nx%4
	if g > 0 && t != Q4_K && useVNNI() {
		matMulQ4VNNI(t, out, ldOut, w, rowBytes, xq, xStride, g, nb, r0, r1)
	} else if g > 0 && t == Q4_K && useVNNI() {
		matMulQ4KVNNI(out, ldOut, w, rowBytes, xq, xStride, g, nb, r0, r1, false)
	} else {
		for k := 0; k < g; k += 4 {
			matMul4Repack(t, out[k*ldOut:], ldOut, w, rowBytes, xq[k*xStride:], xStride, nb, r0, r1)
		}
	}
	for k := g; k < nx; k++ {
		matVecRepack(t, out[k*ldOut:], w, rowBytes, xq[k*xStride:], nb, r0, r1)
	}
}

// preQ4KWords is the per-super-block size (in uint32 words) of the gemm Q4_K activation table: for each chunk
// c, the four activation rows' (P_2c, P_2c+1) int16 pairs, then the four d_x floats.
const preQ4KWords = 20

// matMul4Repack computes 4 activation rows (xq, xq+xStride, …) against weight rows [r0, r1)
// in gemm order into out[k·ldOut + r].
func matMul4Repack(t Type, out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, nb, r0, r1 int) {
	if !useAsm() {
		for r := r0; r < r1; r++ {
			row := w[r*rowBytes : (r+1)*rowBytes]
			for k := 0; k < 4; k++ {
				x := xq[k*xStride:]
				var v float32
				switch t {
				case Q4_K:
					acc, accm := dotQ4KRepackGo(nb, row, x, true, 0, 0)
					v = acc - accm
				case Q4_0:
					v = dotQ4RepackGo(&repackLUTQ4_0, nb, row, x, true, 0)
				default:
					v = dotQ4RepackGo(&repackLUTIQ4NL, nb, row, x, true, 0)
				}
				out[k*ldOut+r] = v
			}
		}
		return
	}
	var res [4]float32
	if t == Q4_K {
		var buf [128 * preQ4KWords]uint32
		pre := buf[:]
		if nb*preQ4KWords > len(buf) {
			pre = make([]uint32, nb*preQ4KWords)
		}
		gemmPreQ4K(pre, xq, xStride, nb)
		for r := r0; r < r1; r++ {
			dotQ4KRepackGemmAVX2(&w[r*rowBytes], &xq[0], xStride, &pre[0], nb, &res[0])
			for k := range res {
				out[k*ldOut+r] = res[k]
			}
		}
		return
	}
	var buf [4 * 1024]float32
	xs := buf[:]
	if 4*nb > len(buf) {
		xs = make([]float32, 4*nb)
	}
	for b := 0; b < nb; b++ {
		for k := 0; k < 4; k++ {
			xs[4*b+k] = halfToFloat(le16(xq[k*xStride+b*BlockBytesQ8_0:]))
		}
	}
	for r := r0; r < r1; r++ {
		dotQ4RepackGemmAVX2(&w[r*rowBytes], &xq[0], xStride, &xs[0], nb, lutPtr(t), &res[0])
		for k := range res {
			out[k*ldOut+r] = res[k]
		}
	}
}

// gemmPreQ4K fills the per-super-block activation table of the Q4_K gemm kernel for the 4
// activation rows at xq, xq+xStride, ….
func gemmPreQ4K(pre []uint32, xq []byte, xStride, nb int) {
	for b := 0; b < nb; b++ {
		p := pre[b*preQ4KWords : (b+1)*preQ4KWords]
		for k := 0; k < 4; k++ {
			xb := (*[BlockBytesQ8_K]byte)(xq[k*xStride+b*BlockBytesQ8_K:])
			pp := repackQ8KPairs(xb)
			for c := 0; c < 4; c++ {
				p[4*c+k] = uint32(uint16(pp[2*c])) | uint32(uint16(pp[2*c+1]))<<16
			}
			p[16+k] = repackLE32(xb[0:])
		}
	}
}

func repackLE32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// lutPtr returns the nibble lookup table of a Q4_0 or IQ4_NL weight type for the assembly.
func lutPtr(t Type) *byte {
	if t == Q4_0 {
		return (*byte)(unsafe.Pointer(&repackLUTQ4_0[0]))
	}
	return (*byte)(unsafe.Pointer(&repackLUTIQ4NL[0]))
}
