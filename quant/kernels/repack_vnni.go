package kernels

import (
	"math"
	"sync"
	"sync/atomic"
)

// The VNNI gemm-order path of MatMulRepack for Q4_0 and IQ4_NL (repack_vnni_amd64.s). The
// gemm order's float step is one FMA per block and output, so any layout that forms each
// output's exact integer block sum gives the same bits. Here a tile of 16 weight rows is
// decoded and transposed once per call, and each group of 4 activation rows is multiplied
// with VPDPBUSD, one lane per weight row, instead of one horizontal reduction per output.

// vnniOff disables the VNNI kernels (tests compare them with the AVX2 ones).
var vnniOff atomic.Bool

// scaleLoads makes the 8-row Q4_0/IQ4_NL VNNI gemv read each group's eight fp16 block scales
// with scalar loads instead of one VPGATHERDD (same bits; tests run both). It starts as
// slowGather: on the CPUs that have AVX-512 VNNI but not AVX512-BF16 (Intel Cascade Lake, Ice
// Lake, Tiger Lake, Rocket Lake) the gather form measured half the speed of the loads (Ice
// Lake-SP, docs/kernels.md), on Sapphire Rapids 0.87-0.90× for Q4_0; on Zen 5 the gather was
// as fast for Q4_0 and faster for IQ4_NL.
var scaleLoads atomic.Bool

func init() { scaleLoads.Store(slowGather) }

// useVNNI reports whether the VNNI kernels run (haveVNNI includes AVX-512F, VL and BW, so
// they may use ZMM registers).
func useVNNI() bool { return haveVNNI && useAsm() && !vnniOff.Load() }

// repackUnsigned maps a nibble to v(q) + off as an unsigned byte: the Q4_0 nibble itself
// (v = q − 8, off 8) and kvalues_iq4nl[q] + 128 (off 128).
var (
	repackUQ4_0  = [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	repackUIQ4NL = func() (u [16]byte) {
		for i, v := range repackLUTIQ4NL {
			u[i] = byte(int(int8(v)) + 128)
		}
		return
	}()
)

type vnniBuf struct {
	wt      []byte
	pre, sm []int32
	dx, dws []float32
}

var vnniPool = sync.Pool{New: func() any { return new(vnniBuf) }}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// tileScales writes the fp16 block scales of rows [r, r+n) as float32 to dws[n·b + j].
func tileScales(dws []float32, w []byte, rowBytes, nb, r, n int) {
	for b := 0; b < nb; b++ {
		for j := 0; j < n; j++ {
			dws[n*b+j] = halfToFloat(le16(w[(r+j)*rowBytes+b*BlockBytesQ4_0:])) // IQ4_NL blocks have the same size
		}
	}
}

// q4KScaleTable is q4KScales8AVX2 for the 16 rows from r in Go: sm[256b + 16s + j] =
// scale s, sm[256b + 128 + 16s + j] = min s, dws[32b + j] = d, dws[32b + 16 + j] = dmin of
// row r+j and super-block b.
func q4KScaleTable(smAll []int32, dws []float32, w []byte, rowBytes, nb, r int) {
	for b := 0; b < nb; b++ {
		sm := smAll[256*b : 256*b+256]
		dd := dws[32*b : 32*b+32]
		for j := 0; j < 16; j++ {
			wb := (*[BlockBytesQ4_K]byte)(w[(r+j)*rowBytes+b*BlockBytesQ4_K:])
			sc, m := kScales((*[12]byte)(wb[4:16]))
			for s := 0; s < 8; s++ {
				sm[16*s+j] = sc[s]
				sm[128+16*s+j] = m[s]
			}
			dd[j] = halfToFloat(le16(wb[0:]))
			dd[16+j] = halfToFloat(le16(wb[2:]))
		}
	}
}

// matMulQ4VNNI computes activation rows [0, g) (g a multiple of 4) against weight rows
// [r0, r1) of a Q4_0 or IQ4_NL matrix in gemm order: tiles of 16 rows in ZMM lanes,
// the remaining rows with matMul4Repack.
func matMulQ4VNNI(t Type, out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, g, nb, r0, r1 int) {
	lut, off := &repackUQ4_0, int32(8)
	if t != Q4_0 {
		lut, off = &repackUIQ4NL, 128
	}
	buf := vnniPool.Get().(*vnniBuf)
	defer vnniPool.Put(buf)
	// per group of 4 activation rows and block: −off·Σx and d_x of each row
	buf.pre = grow(buf.pre, g*nb)
	buf.dx = grow(buf.dx, g*nb)
	pre, dx := buf.pre, buf.dx
	for k := 0; k < g; k++ {
		i := (k/4)*nb*4 + k%4
		q8SumsAVX2(&xq[k*xStride], nb, off, &pre[i], &dx[i])
	}
	buf.wt = grow(buf.wt, 512*nb)
	buf.dws = grow(buf.dws, 16*nb)
	dws := buf.dws
	r := r0
	for ; r+16 <= r1; r += 16 {
		q4Transpose8AVX2(&w[r*rowBytes], rowBytes, nb, &lut[0], &buf.wt[0], 64, 512)
		q4Transpose8AVX2(&w[(r+8)*rowBytes], rowBytes, nb, &lut[0], &buf.wt[32], 64, 512)
		tileScales(dws, w, rowBytes, nb, r, 16)
		for k := 0; k < g; k += 4 {
			q := k / 4
			q4GemmTile16x4VNNI(&buf.wt[0], &dws[0], nb, &xq[k*xStride], xStride, &pre[q*nb*4], &dx[q*nb*4], &out[k*ldOut+r], ldOut)
		}
	}
	if r < r1 {
		for k := 0; k < g; k += 4 {
			matMul4Repack(t, out[k*ldOut:], ldOut, w, rowBytes, xq[k*xStride:], xStride, nb, r, r1)
		}
	}
}

// matMulQ4KVNNI computes activation rows [0, g) (g a multiple of 4) against weight rows
// [r0, r1) of a Q4_K matrix in gemm order: tiles of 16 rows in ZMM lanes (the quants
// transposed once per call, VPDPBUSD per 32-element sub-block with each row in its own lane,
// then the sub-block scales, the mins against the activation pair sums, and the two FMA
// chains per 64-element chunk), the remaining rows with matMul4Repack.
//
// With gemv set, every output follows ggml's gemv order instead (one FMA per super-block and
// chain; q4KGemvTile16x4VNNI), the remaining rows MatVecRepack's.
func matMulQ4KVNNI(out []float32, ldOut int, w []byte, rowBytes int, xq []byte, xStride, g, nb, r0, r1 int, gemv bool) {
	buf := vnniPool.Get().(*vnniBuf)
	defer vnniPool.Put(buf)
	// per group of 4 activation rows and super-block: the pair sums P_j (32 words), d_x (4)
	buf.pre = grow(buf.pre, g*nb*8)
	buf.dx = grow(buf.dx, g*nb)
	pk, dx := buf.pre, buf.dx
	for k := 0; k < g; k++ {
		q, t := k/4, k%4
		x := xq[k*xStride:]
		for b := 0; b < nb; b++ {
			xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
			p := repackQ8KPairs(xb)
			copy(pk[(q*nb+b)*32+8*t:][:8], p[:])
			dx[(q*nb+b)*4+t] = q8kScale(xb)
		}
	}
	buf.wt = grow(buf.wt, 4096*nb)
	buf.sm = grow(buf.sm, 256*nb)
	buf.dws = grow(buf.dws, 32*nb)
	// row offsets for q4KScales8AVX2's gathers (int32: 7 rows must fit)
	var offs [8]int32
	gather := 7*rowBytes <= math.MaxInt32
	for k := range offs {
		offs[k] = int32(k * rowBytes)
	}
	r := r0
	for ; r+16 <= r1; r += 16 {
		q4KTranspose8AVX2(&w[r*rowBytes], rowBytes, nb, &buf.wt[0], 64, 4096)
		q4KTranspose8AVX2(&w[(r+8)*rowBytes], rowBytes, nb, &buf.wt[32], 64, 4096)
		if gather {
			q4KScales8AVX2(&w[r*rowBytes], &offs[0], nb, &buf.sm[0], &buf.dws[0])
			q4KScales8AVX2(&w[(r+8)*rowBytes], &offs[0], nb, &buf.sm[8], &buf.dws[8])
		} else {
			q4KScaleTable(buf.sm, buf.dws, w, rowBytes, nb, r)
		}
		for k := 0; k < g; k += 4 {
			q := k / 4
			if gemv {
				q4KGemvTile16x4VNNI(&buf.wt[0], &buf.sm[0], &buf.dws[0], nb, &xq[k*xStride], xStride, &pk[q*nb*32], &dx[q*nb*4], &out[k*ldOut+r], ldOut)
			} else {
				q4KGemmTile16x4VNNI(&buf.wt[0], &buf.sm[0], &buf.dws[0], nb, &xq[k*xStride], xStride, &pk[q*nb*32], &dx[q*nb*4], &out[k*ldOut+r], ldOut)
			}
		}
	}
	if r < r1 {
		for k := 0; k < g; k += 4 {
			if gemv {
				for kk := k; kk < k+4; kk++ {
					matVecRepack(Q4_K, out[kk*ldOut:], w, rowBytes, xq[kk*xStride:], nb, r, r1)
				}
			} else {
				matMul4Repack(Q4_K, out[k*ldOut:], ldOut, w, rowBytes, xq[k*xStride:], xStride, nb, r, r1)
			}
		}
	}
}
