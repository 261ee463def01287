package kernels

//go:generate go run amx_gen.go

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// The AMX-BF16 path of SgemmHalf for bf16 weights (Intel Sapphire Rapids and later, Linux).
//
// A tile multiply (TDPBF16PS) takes bf16 operands and accumulates their products in float32;
// bf16 weights are exact operands, float32 activations are not. Each activation x is therefore
// split into three bf16 pieces, hi = x with the low 16 bits cleared, mid = (x−hi) likewise and
// lo = x−hi−mid, whose sum is x exactly (a float32 significand has 24 bits, each piece holds 8,
// and both subtractions are exact); a piece is zero where x needs fewer. Every product of a
// piece with a bf16 weight is exact in float32, so C = Σ_k (hi_k + mid_k + lo_k)·w_k sums the
// exact products of the dot product into a float32 accumulator, like the FMA kernels but in
// the tile unit's own order (it does not follow the order of Intel's pseudo-code; see
// TestSgemmHalfAMX), so it agrees with them to float32 rounding, not bit for bit. The hardware treats bf16
// subnormals as zero and flushes subnormal sums (pieces below 2⁻¹²⁶, |x| < about 2⁻¹¹⁰, are
// lost), and an infinite activation gives NaN (∞−∞ in the split).
//
// Layouts. Both operands are stored tile by tile, 64 bytes per tile row, so that every tile
// load reads one contiguous KiB. The split rows: for each block of 16 rows, each step of 32 k
// values and each piece (hi, mid, lo), a tile of 16 rows × 32 bf16; k is padded with zeros to
// a whole step and the rows to a multiple of 32. The packed B: for each block of 32 columns
// and each step, two tiles (columns 0-15, 16-31) of 16 rows, row kk holding per column the
// pair (w[2kk], w[2kk+1]) as one 32-bit word (TDPBF16PS's "VNNI" operand); padding is zero.

// amxScratch is SgemmHalf's split rows and packed B on the AMX path.
type amxScratch struct {
	rows SplitRows
	pack []uint32
}

var amxPool = sync.Pool{New: func() any { return new(amxScratch) }}

// AMXMinRows is the fewest rows of A for which SgemmHalf takes the AMX path: the kernel
// computes 32 rows at a time, so fewer would mostly multiply padding.
const AMXMinRows = 16

// amxK is the k values per step of the AMX kernel (one tile row of bf16).
const amxK = 32

// amxWordsPerStep is the packed B of one 32-column block and one step: two 16×16 tiles.
const amxWordsPerStep = 2 * 16 * 16

// amxOff is set by SetAMX(false).
var amxOff atomic.Bool

// SetAMX turns the AMX path off (false) or back on (true, where the machine has it). It is
// meant for tests and benchmarks that compare paths; the environment variable TQ_AMX=off
// turns it off for a whole process.
func SetAMX(on bool) { amxOff.Store(!on) }

// HasAMX reports whether this machine and OS run the AMX-BF16 kernel.
func HasAMX() bool { return haveAMX() }

// UsingAMX reports whether SgemmHalf on bf16 weights currently runs the AMX kernel.
func UsingAMX() bool { return useAsm() && !amxOff.Load() && haveAMX() }

// amxConfig is the tile configuration (LDTILECFG's 64 bytes): palette 1, eight tiles of 16
// rows × 64 bytes.
var amxConfig = func() (c [64]byte) {
	c[0] = 1
	for t := 0; t < 8; t++ {
		c[16+2*t] = 64
		c[48+t] = 16
	}
	return c
}()

// SplitRows holds m float32 rows of k values as bf16 pieces in the AMX kernel's layout (see
// above), for SgemmHalfSplit: a batch of activations split once and multiplied with many
// weight tiles.
type SplitRows struct {
	m, k int
	h    []uint16
}

// amxSteps is the number of 32-value steps covering k.
func amxSteps(k int) int { return (k + amxK - 1) / amxK }

// amxTileHalves is the uint16 values of one tile (16 rows × 32).
const amxTileHalves = 16 * amxK

// block is the uint16 values of one block of 16 rows (every step, three pieces).
func (s *SplitRows) block() int { return 3 * amxTileHalves * amxSteps(s.k) }

// SplitRowsBytes is the memory a SplitRows of m rows of k values holds.
func SplitRowsBytes(m, k int) int64 {
	return 2 * int64((m+31)/32*2) * int64(3*amxTileHalves*amxSteps(k))
}

// Reset sizes s for m rows of k values (reusing its memory); the rows are then filled by
// Set, possibly from several goroutines over disjoint row ranges.
func (s *SplitRows) Reset(m, k int) {
	s.m, s.k = m, k
	blocks := (m + 31) / 32 * 2
	n := blocks * s.block()
	if cap(s.h) < n {
		s.h = make([]uint16, n)
	}
	s.h = s.h[:n]
	// the padding rows: whole blocks past m, and the rows past m in m's last block
	for r := m; r < blocks*16; r++ {
		if r%16 == 0 {
			clear(s.h[r/16*s.block():])
			break
		}
		s.clearRow(r)
	}
}

// clearRow zeroes row r (every step and piece).
func (s *SplitRows) clearRow(r int) {
	base := r/16*s.block() + r%16*amxK
	for t := 0; t < 3*amxSteps(s.k); t++ {
		clear(s.h[base+t*amxTileHalves : base+t*amxTileHalves+amxK])
	}
}

// Rows is the number of rows s holds (Reset's m).
func (s *SplitRows) Rows() int { return s.m }

// Set splits rows [r0, r1) of a (rows lda apart, s's k values each) into s.
func (s *SplitRows) Set(r0, r1 int, a []float32, lda int) {
	k := s.k
	full := k / amxK
	asm := use512()
	for r := r0; r < r1; r++ {
		row := a[r*lda : r*lda+k]
		base := r/16*s.block() + r%16*amxK
		dst := s.h[base : (r/16+1)*s.block()]
		j0 := 0
		if asm && full > 0 {
			_ = dst[(full-1)*3*amxTileHalves+2*amxTileHalves+amxK-1]
			splitBF16x3AVX512(&dst[0], &row[0], full)
			j0 = full * amxK
		}
		for j := j0; j < k; j++ {
			o := j/amxK*3*amxTileHalves + j%amxK
			dst[o], dst[o+amxTileHalves], dst[o+2*amxTileHalves] = splitBF16x3(row[j])
		}
		if t := k % amxK; t > 0 { // the last step's padding
			o := full * 3 * amxTileHalves
			for p := 0; p < 3; p++ {
				clear(dst[o+p*amxTileHalves+t : o+p*amxTileHalves+amxK])
			}
		}
	}
}

// splitBF16x3 returns bf16 hi, mid and lo with hi+mid+lo = x exactly (finite x).
func splitBF16x3(x float32) (hi, mid, lo uint16) {
	b := math.Float32bits(x)
	r := x - math.Float32frombits(b&0xffff0000)
	b2 := math.Float32bits(r)
	r -= math.Float32frombits(b2 & 0xffff0000)
	return uint16(b >> 16), uint16(b2 >> 16), uint16(math.Float32bits(r) >> 16)
}

// amxPackedLen is the uint32 words of n columns of k values packed for the AMX kernel.
func amxPackedLen(n, k int) int { return (n + 31) / 32 * amxSteps(k) * amxWordsPerStep }

// packBF16AMX packs the n×k bf16 matrix b (rows ldb values apart) into dst
// (amxPackedLen(n, k) words), zero-padded.
func packBF16AMX(dst []uint32, b []byte, ldb, n, k int) {
	ks, full := amxSteps(k), k/amxK
	dst = dst[:amxPackedLen(n, k)]
	if n%32 != 0 || full < ks {
		clear(dst) // padding columns or k values
	}
	j0 := 0
	if use512() && full > 0 {
		for ; j0+16 <= n; j0 += 16 { // 16 rows at a time, full steps: transposed in registers
			jb, t := j0/32, j0%32/16
			d := dst[(jb*ks*2+t)*256:]
			_ = d[(full-1)*512+255]
			_ = b[2*((j0+15)*ldb+full*amxK)-1]
			packTilesBF16AVX512(&d[0], &b[2*j0*ldb], 2*ldb, full)
		}
	}
	for j := 0; j < n; j++ {
		jb, t, c := j/32, j%32/16, j%16
		row := b[2*j*ldb : 2*(j*ldb+k)]
		d := dst[(jb*ks*2+t)*256+c:]
		s0 := 0
		if j < j0 {
			s0 = full // its full steps are packed
		}
		for s := s0; s < full; s++ {
			src := row[s*2*amxK : (s+1)*2*amxK]
			o := s * 512
			_ = d[o+15*16]
			for kk := 0; kk < 16; kk++ {
				d[o+kk*16] = binary.LittleEndian.Uint32(src[4*kk:])
			}
		}
		if full < ks { // the last, partial step
			k0 := full * amxK
			for kk := 0; k0+2*kk < k; kk++ {
				i := 2 * (k0 + 2*kk)
				w := uint32(row[i]) | uint32(row[i+1])<<8
				if k0+2*kk+1 < k {
					w |= uint32(row[i+2])<<16 | uint32(row[i+3])<<24
				}
				d[full*512+kk*16] = w
			}
		}
	}
}

// amxKC is the steps of k one pass of sgemmAMX covers (512 values): a 32-row block of the
// split rows (96 KiB) and up to 512 packed columns (512 KiB) stay in L2 across the pass. 4
// and 8 steps measured no better (BenchmarkSgemmHalfAMX; the runs were noisy), 32 and 64
// slower.
const amxKC = 16

// sgemmAMX computes C[0:m, 0:n] (+)= A·Bᵀ from the split rows s (m rows, k values) and B
// packed by packBF16AMX (n columns): for each pass of amxKC steps, every 32×32 block; kern is
// the block kernel (the assembly, or amxKernelGo in tests).
func sgemmAMX(s *SplitRows, n int, bp []uint32, c []float32, ldc int, accumulate bool,
	kern func(ks int, a0, a1 []uint16, b []uint32, c []float32, ldc int, acc bool)) {
	m, ks, blk := s.m, amxSteps(s.k), s.block()
	var tmp [32 * 32]float32
	for p0 := 0; p0 < ks; p0 += amxKC {
		kc := min(amxKC, ks-p0)
		acc := accumulate || p0 > 0
		for i0 := 0; i0 < m; i0 += 32 {
			a0 := s.h[i0/16*blk+p0*3*amxTileHalves:]
			a1 := s.h[(i0/16+1)*blk+p0*3*amxTileHalves:]
			rows := min(32, m-i0)
			for j0 := 0; j0 < n; j0 += 32 {
				b := bp[(j0/32*ks+p0)*amxWordsPerStep:]
				cols := min(32, n-j0)
				if rows == 32 && cols == 32 {
					kern(kc, a0, a1, b, c[i0*ldc+j0:], ldc, acc)
					continue
				}
				blk := edgeIn(tmp[:], rows, cols, c[i0*ldc+j0:], ldc, acc)
				kern(kc, a0, a1, b, blk, 32, acc)
				edgeOut(blk, rows, cols, c[i0*ldc+j0:], ldc)
			}
		}
	}
}

// edgeIn prepares a block kernel's run on a rows×cols corner of C (fewer than the kernel's
// rows or 32 columns) through tmp, rows of 32: with acc, C's values are copied in. edgeOut
// copies the corner back.
func edgeIn(tmp []float32, rows, cols int, c []float32, ldc int, acc bool) []float32 {
	if acc {
		for r := 0; r < rows; r++ {
			copy(tmp[r*32:r*32+cols], c[r*ldc:])
		}
	}
	return tmp
}

func edgeOut(tmp []float32, rows, cols int, c []float32, ldc int) {
	for r := 0; r < rows; r++ {
		copy(c[r*ldc:r*ldc+cols], tmp[r*32:r*32+cols])
	}
}

// amxKernelAsm runs the assembly block kernel (32 rows of a0/a1 and c, ks steps).
func amxKernelAsm(ks int, a0, a1 []uint16, b []uint32, c []float32, ldc int, acc bool) {
	if !haveAMX() {
		panic("kernels: the AMX kernel called on a machine or process without AMX")
	}
	_ = a0[ks*3*amxTileHalves-1]
	_ = a1[ks*3*amxTileHalves-1]
	_ = b[ks*amxWordsPerStep-1]
	_ = c[31*ldc+31]
	amxKernel32x32BF16(ks, &a0[0], &a1[0], &b[0], &c[0], 4*ldc, acc, &amxConfig[0])
}

// SgemmHalfSplit is SgemmHalf for bf16 B with A given as split rows (SplitRows, prepared once
// for many products): C[0:m, 0:n] (+)= A·Bᵀ with m = s.Rows() and B n×k bf16 (rows ldb
// values apart). It needs the AMX path (UsingAMX); its result is SgemmHalf's on the same rows
// bit for bit. pack is scratch for the packed B (grown as needed and returned).
func SgemmHalfSplit(s *SplitRows, n int, b []byte, ldb int, c []float32, ldc int, accumulate bool, pack []uint32) ([]uint32, error) {
	if !UsingAMX() {
		return pack, fmt.Errorf("kernels: SgemmHalfSplit: the AMX path is not in use")
	}
	pack, ok, err := packHalfB("SgemmHalfSplit", s.m, s.k, n, b, ldb, c, ldc, accumulate, pack)
	if ok {
		sgemmAMX(s, n, pack, c, ldc, accumulate, amxKernelAsm)
	}
	return pack, err
}

// packHalfB checks the shapes of a product of m activation rows (k values) with the n×k bf16
// B (rows ldb values apart) into C, and packs B into pack (grown as needed) by packBF16AMX. It
// reports whether the product is left to do: not for an error, for m or n zero, or for k zero
// (C then cleared unless accumulating).
func packHalfB(name string, m, k, n int, b []byte, ldb int, c []float32, ldc int, accumulate bool, pack []uint32) ([]uint32, bool, error) {
	if n < 0 || ldb < max(1, k) || ldc < max(1, n) || !fitsMatrix(n, k, ldb, len(b)/2) || !fitsMatrix(m, n, ldc, len(c)) {
		return pack, false, fmt.Errorf("kernels: %s: %d×%d B (stride %d, %d values) or %d×%d C (stride %d, %d values) does not fit", name, n, k, ldb, len(b)/2, m, n, ldc, len(c))
	}
	if m == 0 || n == 0 {
		return pack, false, nil
	}
	if k == 0 {
		if !accumulate {
			for i := 0; i < m; i++ {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return pack, false, nil
	}
	if need := amxPackedLen(n, k); cap(pack) < need {
		pack = make([]uint32, need)
	}
	pack = pack[:amxPackedLen(n, k)]
	packBF16AMX(pack, b, ldb, n, k)
	return pack, true, nil
}
