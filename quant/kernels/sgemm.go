package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Blocking of the packed SGEMM (assembly path). The micro-kernel computes a 6×16 tile from
// six A rows read in place and a packed kc×16 B sliver (16 KiB, stays in L1); the mc×kc A
// block (≤ 144 KiB) stays in L2 and the packed kc×nc B block (≤ 512 KiB) is reused across all
// row blocks.
const (
	sgMR = 6
	sgNR = 16
	sgKC = 256
	sgMC = 144
	sgNC = 512
)

type sgemmBuf struct {
	b     [sgNC * sgKC]float32
	h     [sgNR * sgKC]float32 // 16 rows of a 16-bit B widened (SgemmHalf)
	aTail [sgMR * sgKC]float32 // a partial (< 6 row) A panel, zero-padded
	tmp   [sgMR * sgNR]float32 // a partial C tile
}

var sgemmPool = sync.Pool{New: func() any { return new(sgemmBuf) }}

// Sgemm computes C = A·Bᵀ (accumulate false) or C += A·Bᵀ (accumulate true) for row-major
// float32 matrices: A is m×k (row stride lda), B is n×k (row stride ldb), C is m×n (row
// stride ldc). This is the "x·Wᵀ" product of a batch of m activation rows with n weight
// rows. It runs on the calling goroutine; see SgemmRange to split the work.
func Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) error {
	return SgemmRange(m, n, k, a, lda, b, ldb, c, ldc, accumulate, 0, m, 0, n)
}

// SgemmRange computes only the block C[i0:i1, j0:j1] of Sgemm. Disjoint blocks may be
// computed concurrently by a caller's workers (each call packs its own panels), and together
// they reproduce a single Sgemm call bit for bit.
func SgemmRange(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool, i0, i1, j0, j1 int) error {
	if err := checkSgemm("Sgemm", m, n, k, a, lda, len(b), ldb, c, ldc, i0, i1, j0, j1); err != nil {
		return err
	}
	if i0 == i1 || j0 == j1 {
		return nil
	}
	if k == 0 {
		if !accumulate {
			for i := i0; i < i1; i++ {
				clear(c[i*ldc+j0 : i*ldc+j1])
			}
		}
		return nil
	}
	if useAsm() {
		sgemmPacked(k, a, lda, c, ldc, accumulate, i0, i1, j0, j1, func(buf *sgemmBuf, jc, nc, pc, kc int) []float32 {
			packB(buf.b[:], b, ldb, jc, nc, pc, kc)
			return buf.b[:]
		})
	} else {
		sgemmGo(k, a, lda, b, ldb, c, ldc, accumulate, i0, i1, j0, j1)
	}
	return nil
}

// checkSgemm validates the arguments of fn (Sgemm, SgemmHalf): B holds nb values.
func checkSgemm(fn string, m, n, k int, a []float32, lda int, nb, ldb int, c []float32, ldc int, i0, i1, j0, j1 int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("kernels: %s: negative dimension m=%d n=%d k=%d", fn, m, n, k)
	}
	if lda < max(1, k) || ldb < max(1, k) || ldc < max(1, n) {
		return fmt.Errorf("kernels: %s: strides lda=%d ldb=%d ldc=%d too small for k=%d n=%d", fn, lda, ldb, ldc, k, n)
	}
	if i0 < 0 || i1 < i0 || i1 > m || j0 < 0 || j1 < j0 || j1 > n {
		return fmt.Errorf("kernels: %s: range [%d,%d)×[%d,%d) outside %d×%d", fn, i0, i1, j0, j1, m, n)
	}
	if !fitsMatrix(m, k, lda, len(a)) {
		return fmt.Errorf("kernels: %s: A has %d elements, too few for %d×%d with stride %d", fn, len(a), m, k, lda)
	}
	if !fitsMatrix(n, k, ldb, nb) {
		return fmt.Errorf("kernels: %s: B has %d elements, too few for %d×%d with stride %d", fn, nb, n, k, ldb)
	}
	if !fitsMatrix(m, n, ldc, len(c)) {
		return fmt.Errorf("kernels: %s: C has %d elements, too few for %d×%d with stride %d", fn, len(c), m, n, ldc)
	}
	return nil
}

// fitsMatrix reports whether a rows×cols matrix with row stride ld (≥ cols, ≥ 1) fits in
// length elements, i.e. (rows−1)·ld + cols ≤ length, without overflowing.
func fitsMatrix(rows, cols, ld, length int) bool {
	if rows == 0 || cols == 0 {
		return true
	}
	return cols <= length && rows-1 <= (length-cols)/ld
}

// packB writes rows [j, j+nc) × columns [p, p+kc) of B as 16-row panels: panel q holds, for
// each step s, b[j+16q+t][p+s] for t = 0..15 (rows beyond nc are zero).
func packB(dst []float32, b []float32, ldb, j, nc, p, kc int) {
	for q := 0; q*sgNR < nc; q++ {
		panel := dst[q*sgNR*kc : (q+1)*sgNR*kc]
		s0 := 0
		if q*sgNR+sgNR <= nc && kc >= 8 {
			s0 = kc &^ 7
			packB16AVX2(&panel[0], &b[(j+q*sgNR)*ldb+p], ldb, kc/8)
		}
		for t := 0; t < sgNR; t++ {
			if q*sgNR+t >= nc {
				for s := s0; s < kc; s++ {
					panel[s*sgNR+t] = 0
				}
				continue
			}
			row := b[(j+q*sgNR+t)*ldb+p:][:kc]
			for s := s0; s < kc; s++ {
				panel[s*sgNR+t] = row[s]
			}
		}
	}
}

// avx512Off disables the AVX-512F SGEMM kernels (tests compare them with the AVX2 one);
// k12Off disables only the 12×32 one.
var avx512Off, k12Off atomic.Bool

// use512 reports whether the AVX-512F SGEMM kernel runs: the CPU has AVX-512F, the assembly
// is in use and the tests have not turned it off.
func use512() bool { return have512 && useAsm() && !avx512Off.Load() }

// SgemmHalf is Sgemm with B in 16-bit floats: t is BF16 or F16 and b holds n rows of k
// little-endian values, ldb values apart. Widening either type to float32 is exact, so the
// result is, bit for bit, Sgemm's on the widened B; the assembly path widens the values while
// it packs them (16 rows at a time), instead of reading a float32 copy of B. Where the AMX
// path is in use (UsingAMX) and A has at least AMXMinRows rows, bf16 B is multiplied by AMX
// tiles instead (amx.go): the same exact products summed in float32 in another order, so the
// result agrees with Sgemm's to float32 rounding, not bit for bit.
func SgemmHalf(t Type, m, n, k int, a []float32, lda int, b []byte, ldb int, c []float32, ldc int, accumulate bool) error {
	if t != BF16 && t != F16 {
		return fmt.Errorf("kernels: SgemmHalf: type %v is not bf16 or f16", t)
	}
	if err := checkSgemm("SgemmHalf", m, n, k, a, lda, len(b)/2, ldb, c, ldc, 0, m, 0, n); err != nil {
		return err
	}
	if !useAsm() || m == 0 || n == 0 || k == 0 {
		return Sgemm(m, n, k, a, lda, widenRows(t, n, k, b, ldb), max(1, k), c, ldc, accumulate)
	}
	if t == BF16 && m >= AMXMinRows && UsingAMX() {
		sc := amxPool.Get().(*amxScratch)
		defer amxPool.Put(sc)
		sc.rows.Reset(m, k)
		sc.rows.Set(0, m, a, lda)
		var err error
		sc.pack, err = SgemmHalfSplit(&sc.rows, n, b, ldb, c, ldc, accumulate, sc.pack)
		return err
	}
	sgemmPacked(k, a, lda, c, ldc, accumulate, 0, m, 0, n, func(buf *sgemmBuf, jc, nc, pc, kc int) []float32 {
		packHalfBlock(t, buf.b[:], buf.h[:], b, ldb, jc, nc, pc, kc)
		return buf.b[:]
	})
	return nil
}

// packHalfBlock packs columns [jc, jc+nc) and k steps [pc, pc+kc) of the 16-bit B into dst as
// 16-row float32 panels (packB's layout), widening as it goes; h is scratch for 16·kc floats.
func packHalfBlock(t Type, dst, h []float32, b []byte, ldb, jc, nc, pc, kc int) {
	for q := 0; q*sgNR < nc; q++ {
		rows := min(sgNR, nc-q*sgNR)
		if rows == sgNR && kc%8 == 0 { // widen and transpose in one pass
			off := (jc+q*sgNR)*ldb + pc
			if t == BF16 {
				packB16BF16AVX2(&dst[q*sgNR*kc], &b[2*off], ldb, kc/8)
			} else {
				packB16F16AVX2(&dst[q*sgNR*kc], &b[2*off], ldb, kc/8)
			}
			continue
		}
		for r := 0; r < rows; r++ {
			off := (jc+q*sgNR+r)*ldb + pc
			widenHalf(t, h[r*kc:(r+1)*kc], b[2*off:2*(off+kc)])
		}
		packB(dst[q*sgNR*kc:], h, kc, 0, rows, 0, kc)
	}
}

// PackedHalf is a 16-bit B (n×k) widened and packed once (or a float32 one packed, SetF32),
// for SgemmPackedHalf: what SgemmHalf packs on every call, kept for a matrix that multiplies
// many activation batches (the calibration forward runs every sequence through a block's
// weights). It takes 4·n·k bytes (panels padded to 16 rows), twice the 16-bit matrix (bf16
// packed for AMX: 2·n·k).
type PackedHalf struct {
	n, k int
	asm  bool      // b holds the assembly's panels; otherwise the widened row-major B
	b    []float32 // the (jc, pc) blocks in sgemmPacked's order, ⌈nc/16⌉·16·kc floats each
	amx  []uint32  // bf16 B packed for the AMX kernel (packBF16AMX) instead of b
}

// Bytes is the memory the packed matrix holds.
func (p *PackedHalf) Bytes() int64 { return 4 * int64(cap(p.b)+cap(p.amx)) }

// PackHalf widens and packs the n×k matrix b (type t, BF16 or F16; rows ldb values apart) for
// SgemmPackedHalf.
func PackHalf(t Type, n, k int, b []byte, ldb int) (*PackedHalf, error) {
	if t != BF16 && t != F16 {
		return nil, fmt.Errorf("kernels: PackHalf: type %v is not bf16 or f16", t)
	}
	if n < 0 || k < 0 || ldb < max(1, k) || !fitsMatrix(n, k, ldb, len(b)/2) {
		return nil, fmt.Errorf("kernels: PackHalf: %d×%d with stride %d does not fit %d values", n, k, ldb, len(b)/2)
	}
	p := &PackedHalf{n: n, k: k, asm: useAsm()}
	if t == BF16 && n > 0 && k > 0 && UsingAMX() { // SgemmHalf's AMX path, bf16 kept
		p.amx = make([]uint32, amxPackedLen(n, k))
		packBF16AMX(p.amx, b, ldb, n, k)
		return p, nil
	}
	if !p.asm || n == 0 || k == 0 {
		p.asm = false
		p.b = widenRows(t, n, k, b, ldb)
		return p, nil
	}
	p.b = make([]float32, PackedHalfBytes(n, k)/4)
	h := make([]float32, sgNR*sgKC)
	packBlocks(p.b, n, k, func(dst []float32, jc, nc, pc, kc int) {
		packHalfBlock(t, dst, h, b, ldb, jc, nc, pc, kc)
	})
	return p, nil
}

// SetF32 packs the float32 n×k matrix b (rows ldb values apart) into p for SgemmPackedHalf,
// reusing p's memory: Sgemm's packing done once, for a B that multiplies several A (the Gram
// matrices' column blocks). SgemmPackedHalf then gives Sgemm's result bit for bit.
func (p *PackedHalf) SetF32(n, k int, b []float32, ldb int) error {
	if n < 0 || k < 0 || ldb < max(1, k) || !fitsMatrix(n, k, ldb, len(b)) {
		return fmt.Errorf("kernels: PackedHalf.SetF32: %d×%d with stride %d does not fit %d values", n, k, ldb, len(b))
	}
	p.n, p.k, p.asm, p.amx = n, k, useAsm(), nil
	size := n * k
	if p.asm {
		size = int(PackedHalfBytes(n, k) / 4)
	}
	if cap(p.b) < size {
		p.b = make([]float32, size)
	}
	p.b = p.b[:size]
	if !p.asm || n == 0 || k == 0 {
		p.asm = false
		for j := 0; j < n; j++ {
			copy(p.b[j*k:(j+1)*k], b[j*ldb:])
		}
		return nil
	}
	packBlocks(p.b, n, k, func(dst []float32, jc, nc, pc, kc int) {
		packB(dst, b, ldb, jc, nc, pc, kc)
	})
	return nil
}

// packBlocks fills dst with the (jc, pc) blocks of an n×k B in sgemmPacked's order, each
// written by pack (packedLen(nc, kc) floats).
func packBlocks(dst []float32, n, k int, pack func(dst []float32, jc, nc, pc, kc int)) {
	off := 0
	for jc := 0; jc < n; jc += sgNC {
		nc := min(sgNC, n-jc)
		for pc := 0; pc < k; pc += sgKC {
			kc := min(sgKC, k-pc)
			pack(dst[off:], jc, nc, pc, kc)
			off += packedLen(nc, kc)
		}
	}
}

// SgemmPackedHalf is SgemmHalf with B packed by PackHalf: the same result bit for bit, without
// packing B again. It fails if the assembly (or, for bf16, the AMX path) was in use when B was
// packed and is not now (SetPureGo or SetAMX in between), or B was packed for AMX and A has
// fewer than AMXMinRows rows; the caller then multiplies the 16-bit matrix with SgemmHalf.
func SgemmPackedHalf(m int, a []float32, lda int, p *PackedHalf, c []float32, ldc int, accumulate bool) error {
	n, k := p.n, p.k
	if err := checkSgemm("SgemmPackedHalf", m, n, k, a, lda, n*k, max(1, k), c, ldc, 0, m, 0, n); err != nil {
		return err
	}
	if p.amx != nil {
		if !UsingAMX() {
			return fmt.Errorf("kernels: SgemmPackedHalf: B was packed for AMX, which is now off")
		}
		if m == 0 {
			return nil
		}
		if m < AMXMinRows {
			return fmt.Errorf("kernels: SgemmPackedHalf: B was packed for AMX, which SgemmHalf does not use for %d rows", m)
		}
		sc := amxPool.Get().(*amxScratch)
		defer amxPool.Put(sc)
		sc.rows.Reset(m, k)
		sc.rows.Set(0, m, a, lda)
		sgemmAMX(&sc.rows, n, p.amx, c, ldc, accumulate, amxKernelAsm)
		return nil
	}
	if !p.asm {
		return Sgemm(m, n, k, a, lda, p.b, max(1, k), c, ldc, accumulate)
	}
	if !useAsm() {
		return fmt.Errorf("kernels: SgemmPackedHalf: B was packed for the assembly, which is now off")
	}
	if m == 0 {
		return nil
	}
	off := 0
	sgemmPacked(k, a, lda, c, ldc, accumulate, 0, m, 0, n, func(_ *sgemmBuf, jc, nc, pc, kc int) []float32 {
		blk := p.b[off:]
		off += packedLen(nc, kc)
		return blk
	})
	return nil
}

// widenRows returns the n rows of k 16-bit values of type t in b (ldb values apart) as a
// row-major float32 matrix.
func widenRows(t Type, n, k int, b []byte, ldb int) []float32 {
	w := make([]float32, n*k)
	for j := 0; j < n; j++ {
		widenHalf(t, w[j*k:(j+1)*k], b[2*j*ldb:])
	}
	return w
}

// packedLen is the number of floats of a packed block of nc columns and kc k steps (16-row
// panels, the last one zero-padded).
func packedLen(nc, kc int) int { return (nc + sgNR - 1) / sgNR * sgNR * kc }

// PackedHalfBytes is the memory PackHalf takes for an n×k matrix with the assembly (at most:
// bf16 packed for the AMX path takes half of it).
func PackedHalfBytes(n, k int) int64 {
	var size int64
	for jc := 0; jc < n; jc += sgNC {
		size += int64(packedLen(min(sgNC, n-jc), k))
	}
	return 4 * size
}

// widenHalf writes len(dst) 16-bit values of type t (BF16 or F16) from src as float32.
func widenHalf(t Type, dst []float32, src []byte) {
	if t == F16 {
		WidenF16(dst, src)
	} else {
		WidenBF16(dst, src)
	}
}

// sgemmPacked is the assembly path: pack B (pack returns columns [jc, jc+nc) and k
// steps [pc, pc+kc) as 16-row panels, see packB: buf.b filled now, or a block packed earlier),
// then run the 6×16 micro-kernel (6×32 with AVX-512F where two full panels remain) over A in
// place.
func sgemmPacked(k int, a []float32, lda int, c []float32, ldc int, accumulate bool, i0, i1, j0, j1 int, pack func(buf *sgemmBuf, jc, nc, pc, kc int) []float32) {
	buf := sgemmPool.Get().(*sgemmBuf)
	defer sgemmPool.Put(buf)
	for jc := j0; jc < j1; jc += sgNC {
		nc := min(sgNC, j1-jc)
		for pc := 0; pc < k; pc += sgKC {
			kc := min(sgKC, k-pc)
			acc := accumulate || pc > 0
			bp := pack(buf, jc, nc, pc, kc)
			for ic := i0; ic < i1; ic += sgMC {
				mc := min(sgMC, i1-ic)
				full := mc - mc%sgMR
				if full < mc { // copy the last, partial row panel (zero-padded)
					tail := buf.aTail[:sgMR*kc]
					clear(tail)
					for r := 0; r < mc-full; r++ {
						copy(tail[r*kc:(r+1)*kc], a[(ic+full+r)*lda+pc:])
					}
				}
				wide := use512()
				for jr := 0; jr < nc; {
					w := sgNR
					if wide && nc-jr >= 2*sgNR {
						w = 2 * sgNR // the AVX-512 6×32 kernel over two adjacent panels
					}
					cols := min(w, nc-jr)
					for ir := 0; ir < mc; ir += sgMR {
						ap, alda := &buf.aTail[0], kc
						if ir < full {
							ap, alda = &a[(ic+ir)*lda+pc], lda
						}
						if w == 2*sgNR && cols == w && ir+2*sgMR <= full && !k12Off.Load() {
							// twelve in-place rows: the 12×32 kernel
							sgemmKernel12x32AVX512(kc, ap, alda, &bp[jr*kc], sgNR*kc, &c[(ic+ir)*ldc+jc+jr], ldc, acc)
							ir += sgMR
							continue
						}
						rows := min(sgMR, mc-ir)
						if rows == sgMR && cols == w {
							if w == 2*sgNR {
								sgemmKernel6x32AVX512(kc, ap, alda, &bp[jr*kc], sgNR*kc, &c[(ic+ir)*ldc+jc+jr], ldc, acc)
							} else {
								sgemmKernel6x16AVX2(kc, ap, alda, &bp[jr*kc], &c[(ic+ir)*ldc+jc+jr], ldc, acc)
							}
							continue
						}
						for h := 0; h < cols; h += sgNR {
							hc := min(sgNR, cols-h)
							sgemmKernel6x16AVX2(kc, ap, alda, &bp[(jr+h)*kc], &buf.tmp[0], sgNR, false)
							for r := 0; r < rows; r++ {
								dst := c[(ic+ir+r)*ldc+jc+jr+h:][:hc]
								src := buf.tmp[r*sgNR:][:hc]
								if acc {
									for t := range dst {
										dst[t] += src[t]
									}
								} else {
									copy(dst, src)
								}
							}
						}
					}
					jr += w
				}
			}
		}
	}
}

// sgemmGo is the pure-Go twin: blocked over k (256) and over 2×4 register tiles of C. Every
// element is a sequential sum over each k block, wherever its tile falls, so disjoint
// SgemmRange calls reproduce a whole Sgemm bit for bit.
func sgemmGo(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool, i0, i1, j0, j1 int) {
	const kb = 256
	for pc := 0; pc < k; pc += kb {
		kc := min(kb, k-pc)
		acc := accumulate || pc > 0
		i := i0
		for ; i+2 <= i1; i += 2 {
			a0 := a[i*lda+pc:][:kc]
			a1 := a[(i+1)*lda+pc:][:kc]
			j := j0
			for ; j+4 <= j1; j += 4 {
				b0 := b[j*ldb+pc:][:kc]
				b1 := b[(j+1)*ldb+pc:][:kc]
				b2 := b[(j+2)*ldb+pc:][:kc]
				b3 := b[(j+3)*ldb+pc:][:kc]
				var s00, s01, s02, s03, s10, s11, s12, s13 float32
				for p := range a0 {
					x0, x1 := a0[p], a1[p]
					y0, y1, y2, y3 := b0[p], b1[p], b2[p], b3[p]
					s00 += x0 * y0
					s01 += x0 * y1
					s02 += x0 * y2
					s03 += x0 * y3
					s10 += x1 * y0
					s11 += x1 * y1
					s12 += x1 * y2
					s13 += x1 * y3
				}
				storeTile(c[i*ldc+j:][:4], acc, s00, s01, s02, s03)
				storeTile(c[(i+1)*ldc+j:][:4], acc, s10, s11, s12, s13)
			}
			for ; j < j1; j++ {
				bj := b[j*ldb+pc:][:kc]
				storeOne(c, i*ldc+j, acc, dotSeq(a0, bj))
				storeOne(c, (i+1)*ldc+j, acc, dotSeq(a1, bj))
			}
		}
		for ; i < i1; i++ {
			ai := a[i*lda+pc:][:kc]
			for j := j0; j < j1; j++ {
				storeOne(c, i*ldc+j, acc, dotSeq(ai, b[j*ldb+pc:][:kc]))
			}
		}
	}
}

func storeTile(dst []float32, acc bool, s0, s1, s2, s3 float32) {
	dst = dst[:4]
	if acc {
		dst[0] += s0
		dst[1] += s1
		dst[2] += s2
		dst[3] += s3
		return
	}
	dst[0], dst[1], dst[2], dst[3] = s0, s1, s2, s3
}

func storeOne(c []float32, idx int, acc bool, v float32) {
	if acc {
		c[idx] += v
	} else {
		c[idx] = v
	}
}

// dotSeq is a sequential float32 dot product (the summation order of sgemmGo's tiles).
func dotSeq(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}
