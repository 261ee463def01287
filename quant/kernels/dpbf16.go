package kernels

//go:generate go run dpbf16_gen.go

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
)

// The rounded-rows GEMM for bf16 weights: AVX512-BF16's VDPBF16PS (AMD Zen 4 and later,
// Intel Cooper Lake and Sapphire Rapids) multiplies pairs of bf16 values and adds both
// products to a float32 accumulator, 32 products per instruction where a float32 FMA does 16.
// Unlike the AMX path (amx.go), which splits each activation into three exact bf16 pieces, this
// path rounds each float32 activation to the nearest bf16 (ties to even) once, as ggml does for
// a bf16 weight's activations (ggml_cpu_fp32_to_bf16 before ggml_vec_dot_bf16). The weights
// are exact operands, so the result is the float32 sum of the exact products of the rounded
// activations with the weights, in the instruction's order; an activation moves by at most
// 2⁻⁹ of itself (8 significant bits). The hardware treats bf16 subnormals as zero and flushes
// subnormal results. Callers choose this path explicitly (SgemmHalfRounded); it is not a
// drop-in for the exact GEMMs.
//
// Layouts. RoundedRows: the rows one after the other as bf16, each padded with zeros to whole
// 32-value steps, and zero rows up to a multiple of 8 (the kernel's rows). The packed B is
// packBF16AMX's: per block of 32 columns and per step two 16×16 tiles whose row kk holds per
// column the pair (w[2kk], w[2kk+1]); one tile row is one 512-bit register of the kernel,
// which broadcasts each row's pair (A's 32-bit word) against it.

// dpOn says whether the rounded-rows products may take the VDPBF16PS kernel: by default
// where it pays (dpDefault), else as SetBF16DP left it.
var dpOn atomic.Bool

func init() { dpOn.Store(dpDefault()) }

// dpPays reports whether VDPBF16PS gives more products per second than the float32 FMA
// kernel on CPUs of this vendor, so that the rounded products are worth their rounding.
// AMD's AVX-512 CPUs (Zen 4, Zen 5) issue it as often as VFMADD231PS, with twice the
// products (docs/kernels.md, "AVX512-BF16 GEMM with rounded activations"). Intel's issue it
// on one port against the FMA's two: on a Sapphire Rapids with AMX turned off the kernel ran
// at 0.6× the FMA kernel's rate, and the calibration forward took 1.3× as long. There the
// products stay float32 unless AMX runs them.
func dpPays(vendor string) bool { return vendor == "AuthenticAMD" }

// SetBF16DP turns the AVX512-BF16 path on (where the machine has it) or off and returns the
// previous setting, for tests and benchmarks (defer SetBF16DP(SetBF16DP(true))).
// TQ_BF16DP=off or TQ_BF16DP=on sets the default for a whole process.
func SetBF16DP(on bool) bool { return dpOn.Swap(on) }

// HasBF16DP reports whether this machine can run the AVX512-BF16 kernel.
func HasBF16DP() bool { return haveBF16DP() }

// UsingBF16DP reports whether the VDPBF16PS kernel runs the rounded-rows products where AMX
// is not in use (UsingRounded): the machine has it and it is on (by default where dpPays).
func UsingBF16DP() bool { return useAsm() && dpOn.Load() && haveBF16DP() }

// dpRows is the rows of one block of RoundedRows (and of the kernel).
const dpRows = 8

// RoundedRows holds m float32 rows of k values rounded to bf16, in the kernel's layout, for
// SgemmHalfRounded: a batch of activations rounded once and multiplied with many weight tiles.
type RoundedRows struct {
	m, k int
	h    []byte // little-endian bf16
}

// ld is the bf16 values of one row (k padded to whole steps).
func (s *RoundedRows) ld() int { return amxSteps(s.k) * amxK }

// RoundedRowsBytes is the memory a RoundedRows of m rows of k values holds.
func RoundedRowsBytes(m, k int) int64 {
	return 2 * int64(roundedRowsAlloc(m)) * int64(amxSteps(k)*amxK)
}

// Rows is the number of rows s holds (Reset's m).
func (s *RoundedRows) Rows() int { return s.m }

// roundedPadRows is the zero rows RoundedRows keeps past its last block of dpRows: the AMX
// kernel (SgemmRoundedPacked on AMX) reads 32 rows from each multiple of 32 of a view, which
// for a view ending at the last row reaches up to 31 rows past it (their results are dropped).
const roundedPadRows = 32

// roundedRowsAlloc is the rows RoundedRows allocates for m rows.
func roundedRowsAlloc(m int) int { return (m+dpRows-1)/dpRows*dpRows + roundedPadRows }

// Reset sizes s for m rows of k values (reusing its memory); the rows are then filled by Set,
// possibly from several goroutines over disjoint row ranges.
func (s *RoundedRows) Reset(m, k int) {
	s.m, s.k = m, k
	n := 2 * roundedRowsAlloc(m) * s.ld()
	if cap(s.h) < n {
		s.h = make([]byte, n)
	}
	s.h = s.h[:n]
	clear(s.h[2*m*s.ld():]) // the padding rows
}

// Set rounds rows [r0, r1) of a (rows lda apart, s's k values each) into s.
func (s *RoundedRows) Set(r0, r1 int, a []float32, lda int) {
	k, ld := s.k, s.ld()
	asm := use512()
	for r := r0; r < r1; r++ {
		dst := s.h[2*r*ld : 2*(r+1)*ld]
		roundBF16Slice(dst, a[r*lda:r*lda+k], asm)
		clear(dst[2*k:])
	}
}

// RoundBF16Slice writes the bf16 nearest to each value of src (RoundBF16), little-endian, into
// dst[:2·len(src)], with the AVX-512 kernel where it runs.
func RoundBF16Slice(dst []byte, src []float32) { roundBF16Slice(dst, src, use512()) }

func roundBF16Slice(dst []byte, src []float32, asm bool) {
	k := len(src)
	_ = dst[:2*k]
	j := 0
	if asm && k >= 16 {
		j = k &^ 15
		roundBF16AVX512(&dst[0], &src[0], j)
	}
	for ; j < k; j++ {
		binary.LittleEndian.PutUint16(dst[2*j:], RoundBF16(src[j]))
	}
}

// RoundBF16 returns the bf16 nearest to x (ties to even; NaN stays NaN, quiet).
func RoundBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// dpKC is the steps of k one pass of sgemmRounded covers (512 values): a 32-column block of the
// packed B (32 KiB) stays in L1 while every block of rows of A streams past it.
const dpKC = 16

// roundedKernel is a block kernel of sgemmRounded: rows×32 of C (+)= rows of a (lda bf16 values
// apart) times one 32-column block of the packed B, over ks steps.
type roundedKernel = func(ks int, a []byte, lda int, b []uint32, c []float32, ldc int, acc bool)

// sgemmRounded computes C[0:m, 0:n] (+)= A·Bᵀ from the rounded rows s and B packed by
// packBF16AMX (n columns) with the block kernel kern of rows rows (dpRows for the VDPBF16PS
// kernel, 32 for the AMX one; or a Go twin in tests), for each pass of dpKC steps over every
// pair of a block of rows and a 32-column block. With 8 rows each column block (32 KiB) stays
// in L1 while the row blocks stream past it; with 32 (AMX) each row block meets every column
// block in turn, as in sgemmAMX (BenchmarkSgemmHalfRounded: 590-670 GFLOP/s on one Sapphire
// Rapids thread, 500-525 in the other order). A block at the end with fewer rows reads the
// rows after it (the padding rows, roundedPadRows, at the end) and drops their results.
func sgemmRounded(s *RoundedRows, n int, bp []uint32, c []float32, ldc int, accumulate bool, rows int, kern roundedKernel) {
	m, ks, ld := s.m, amxSteps(s.k), s.ld()
	ni, nj := (m+rows-1)/rows, (n+31)/32
	var tmp [32 * 32]float32
	for p0 := 0; p0 < ks; p0 += dpKC {
		kc := min(dpKC, ks-p0)
		acc := accumulate || p0 > 0
		for t := 0; t < ni*nj; t++ {
			bi, bj := t%ni, t/ni // column blocks outside
			if rows == 32 {
				bi, bj = t/nj, t%nj // row blocks outside
			}
			i0, j0 := bi*rows, bj*32
			a := s.h[2*(i0*ld+p0*amxK):]
			b := bp[(bj*ks+p0)*amxWordsPerStep:]
			r, cols := min(rows, m-i0), min(32, n-j0)
			if r == rows && cols == 32 {
				kern(kc, a, ld, b, c[i0*ldc+j0:], ldc, acc)
				continue
			}
			blk := edgeIn(tmp[:], r, cols, c[i0*ldc+j0:], ldc, acc)
			kern(kc, a, ld, b, blk, 32, acc)
			edgeOut(blk, r, cols, c[i0*ldc+j0:], ldc)
		}
	}
}

// dpKernelAsm runs the assembly block kernel (8 rows of a, lda bf16 values apart, and of c;
// ks steps).
func dpKernelAsm(ks int, a []byte, lda int, b []uint32, c []float32, ldc int, acc bool) {
	if !haveBF16DP() {
		panic("kernels: the AVX512-BF16 kernel called on a machine without it")
	}
	_ = a[2*((dpRows-1)*lda+ks*amxK)-1]
	_ = b[ks*amxWordsPerStep-1]
	_ = c[(dpRows-1)*ldc+31]
	dpKernel8x32(ks, &a[0], 2*lda, &b[0], &c[0], 4*ldc, acc)
}

// SgemmHalfRounded computes C[0:m, 0:n] (+)= A·Bᵀ for bf16 B (n×k, rows ldb values apart) with
// A given as rounded rows (m = s.Rows()): the float32 sums of the products of A rounded to bf16
// with B (see above). It runs on AMX tiles where UsingAMX holds, else with
// AVX512-BF16 (UsingBF16DP); the two agree to float32 rounding, not bit for bit
// (UsingRounded: one of them). pack is scratch for the packed B (grown as needed and
// returned).
func SgemmHalfRounded(s *RoundedRows, n int, b []byte, ldb int, c []float32, ldc int, accumulate bool, pack []uint32) ([]uint32, error) {
	if !UsingRounded() {
		return pack, fmt.Errorf("kernels: SgemmHalfRounded: neither the AMX nor the AVX512-BF16 path is in use")
	}
	pack, ok, err := packHalfB("SgemmHalfRounded", s.m, s.k, n, b, ldb, c, ldc, accumulate, pack)
	if ok {
		if UsingAMX() {
			sgemmRounded(s, n, pack, c, ldc, accumulate, 32, amxKernelRAsm)
		} else {
			sgemmRounded(s, n, pack, c, ldc, accumulate, dpRows, dpKernelAsm)
		}
	}
	return pack, err
}

// View returns rows [r0, r0+m) of s (r0 a multiple of 8, r0+m at most s.Rows()) as rounded
// rows sharing s's memory.
func (s *RoundedRows) View(r0, m int) RoundedRows {
	if r0%dpRows != 0 || r0 < 0 || m < 0 || r0+m > s.m {
		panic(fmt.Sprintf("kernels: RoundedRows.View(%d, %d) of %d rows", r0, m, s.m))
	}
	return RoundedRows{m: m, k: s.k, h: s.h[2*r0*s.ld():]}
}

// PackB packs rows [r0, r0+n) of s as the B operand of SgemmRoundedPacked, each row one column
// of B (dst is grown as needed and returned): for a product of rounded rows with themselves,
// such as a Gram matrix XᵀX.
func (s *RoundedRows) PackB(r0, n int, dst []uint32) []uint32 {
	if r0 < 0 || n < 0 || r0+n > s.m {
		panic(fmt.Sprintf("kernels: RoundedRows.PackB(%d, %d) of %d rows", r0, n, s.m))
	}
	ld := s.ld()
	need := amxPackedLen(n, ld)
	if cap(dst) < need {
		dst = make([]uint32, need)
	}
	dst = dst[:need]
	if n > 0 && ld > 0 {
		packBF16AMX(dst, s.h[2*r0*ld:2*(r0+n)*ld], ld, n, ld) // zeros past k: whole steps
	}
	return dst
}

// UsingRounded reports whether the rounded-rows products (SgemmHalfRounded,
// SgemmRoundedPacked) run: on AMX tiles (UsingAMX) or with AVX512-BF16 (UsingBF16DP).
func UsingRounded() bool { return UsingAMX() || UsingBF16DP() }

// SgemmRoundedPacked computes C[0:m, 0:n] (+)= A·Bᵀ with A the rounded rows a (m = a.Rows())
// and B n rows of the same k packed by PackB: the float32 sums of the exact products of the
// bf16 values. It runs on AMX tiles where UsingAMX holds (TDPBF16PS, 32×32 blocks of C), else
// with AVX512-BF16 (UsingBF16DP; the VDPBF16PS kernel), the same kernel SgemmHalfRounded takes
// on the same CPU; the two kernels add the same products in different orders, so they agree to float32 rounding, not
// bit for bit. It needs one of them (UsingRounded).
func SgemmRoundedPacked(a *RoundedRows, bp []uint32, n int, c []float32, ldc int, accumulate bool) error {
	if !UsingRounded() {
		return fmt.Errorf("kernels: SgemmRoundedPacked: neither the AMX nor the AVX512-BF16 path is in use")
	}
	m := a.m
	if n < 0 || len(bp) < amxPackedLen(n, a.k) || ldc < max(1, n) || !fitsMatrix(m, n, ldc, len(c)) {
		return fmt.Errorf("kernels: SgemmRoundedPacked: %d packed words for %d columns of %d, or %d×%d C (stride %d, %d values) does not fit", len(bp), n, a.k, m, n, ldc, len(c))
	}
	if m == 0 || n == 0 {
		return nil
	}
	if a.k == 0 {
		if !accumulate {
			for i := 0; i < m; i++ {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return nil
	}
	if UsingAMX() {
		sgemmRounded(a, n, bp, c, ldc, accumulate, 32, amxKernelRAsm)
		return nil
	}
	sgemmRounded(a, n, bp, c, ldc, accumulate, dpRows, dpKernelAsm)
	return nil
}

// amxKernelRAsm runs the assembly block kernel for rounded rows (32 rows of a, lda bf16 values
// apart, and of c; ks steps).
func amxKernelRAsm(ks int, a []byte, lda int, b []uint32, c []float32, ldc int, acc bool) {
	if !haveAMX() {
		panic("kernels: the AMX kernel called on a machine or process without AMX")
	}
	_ = a[2*(31*lda+ks*amxK)-1]
	_ = b[ks*amxWordsPerStep-1]
	_ = c[31*ldc+31]
	amxKernel32x32BF16R(ks, &a[0], 2*lda, &b[0], &c[0], 4*ldc, acc, &amxConfig[0])
}
