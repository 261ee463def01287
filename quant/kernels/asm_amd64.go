//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// haveAsm is true when the CPU and OS support the AVX2+FMA+F16C baseline the assembly needs.
var haveAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// The assembly kernels (quant_amd64.s, dotq_amd64.s, dotk_amd64.s, float_amd64.s,
// sgemm_amd64.s). Callers guarantee the lengths.

//go:noescape
func quantizeQ8_0AVX2(dst *byte, x *float32, nb int)

//go:noescape
func quantizeQ8KAVX2(dst *byte, x *float32, nb int)

// dotQ8_0Q8_0AVX2 and dotQ4_0Q8_0AVX2 take the activation block scales pre-converted to
// float32 in xs (see q8ScalesAVX2), so a mat-vec converts them once for all rows. They
// accumulate into the 8 lanes of acc (ggml's order); hsum8(acc) is the dot product.
//
//go:noescape
func dotQ8_0Q8_0AVX2(w, x *byte, xs *float32, nb int, acc *[8]float32)

//go:noescape
func dotQ4_0Q8_0AVX2(w, x *byte, xs *float32, nb int, acc *[8]float32)

// q8ScalesAVX2 widens the fp16 scales of nb Q8_0 blocks at x into dst[0:nb].
//
//go:noescape
func q8ScalesAVX2(x *byte, nb int, dst *float32)

//go:noescape
func dotQ4KQ8KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5KQ8KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ6KQ8KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func dotF16F32AVX2(w *byte, x *float32, n int) float32

//go:noescape
func dotBF16F32AVX2(w *byte, x *float32, n int) float32

// sgemmKernel6x16AVX2 computes the 6×16 tile C (+)= A·Bp over k steps: A is six rows lda
// floats apart (read in place), Bp a packed panel of 16 floats per step, C rows ldc apart.
//
//go:noescape
func sgemmKernel6x16AVX2(k int, a *float32, lda int, b, c *float32, ldc int, accumulate bool)

// packB16AVX2 packs 16 rows of B (ldb apart) × 8·kc8 columns into dst, 16 floats per column.
//
//go:noescape
func packB16AVX2(dst, b *float32, ldb, kc8 int)

// sumBytesAVX2 reads n bytes (n a multiple of 128) and returns their sum as uint64 lanes
// added together; it exists to measure read bandwidth.
//
//go:noescape
func sumBytesAVX2(p *byte, n int) uint64

// The lane-parallel K-quant searches (search_amd64.s, search.go).
//
//go:noescape
func qkxSearch8AVX2(s *QkxLanes, nmax int32, num *float32, nnum int, n int)

//go:noescape
func qxSearch8AVX2(s *QxLanes, nmax int32, num *float32, nnum int, n int)

// qkxSearch16AVX512 is qkxSearch8AVX2 over 16 lanes (search512_amd64.s; AVX-512F).
//
//go:noescape
func qkxSearch16AVX512(s *QkxLanes16, nmax int32, num *float32, nnum int, n int)

// qxSearch16AVX512 is qxSearch8AVX2 over 16 lanes (search512_amd64.s; AVX-512F).
//
//go:noescape
func qxSearch16AVX512(s *QxLanes16, nmax int32, num *float32, nnum int, n int)

// Row widening (float_amd64.s); n is a positive multiple of 8.
//
//go:noescape
func widenF16AVX2(dst *float32, src *byte, n int)

// dotF16F32RowsAVX2 is dotF16F32AVX2 for rows rows stride bytes apart, n a positive
// multiple of 32 (float_amd64.s).
//
//go:noescape
func dotF16F32RowsAVX2(w *byte, stride int, x *float32, n int, rows int, out *float32)

// narrowF16AVX2 and roundF16AVX2 are NarrowF16 and RoundF16 for n a multiple of 8
// (float_amd64.s).
//
//go:noescape
func narrowF16AVX2(dst *byte, src *float32, n int)

//go:noescape
func roundF16AVX2(x *float32, n int)

//go:noescape
func widenBF16AVX2(dst *float32, src *byte, n int)

// finiteRunAVX2 returns the offset of the first 32-value block of x[:n] (n a multiple of 32)
// that holds a NaN or ±Inf, or n when none does.
//
//go:noescape
func finiteRunAVX2(x *float32, n int) int

//go:noescape
func quantizeQ8_0RefAVX2(dst *byte, x *float32, nb int)

// have512 is true when the CPU and OS support AVX-512F (the 6×32 SGEMM kernel).
var have512 = haveAsm && cpu.X86.HasAVX512F

// sgemmKernel6x32AVX512 is sgemmKernel6x16AVX2 over two packed B panels, the second
// pstride floats after the first (sgemm512_amd64.s).
//
//go:noescape
func sgemmKernel6x32AVX512(k int, a *float32, lda int, b *float32, pstride int, c *float32, ldc int, accumulate bool)

// sgemmKernel12x32AVX512 is sgemmKernel6x32AVX512 over twelve A rows (24 accumulators).
//
//go:noescape
func sgemmKernel12x32AVX512(k int, a *float32, lda int, b *float32, pstride int, c *float32, ldc int, accumulate bool)

// haveVNNI is true when the CPU and OS support AVX-512 VNNI with VL and BW (the gemm-order
// Q4_0/IQ4_NL kernels of repack_vnni_amd64.s use VPDPBUSD and EVEX registers Y16–Y31).
var haveVNNI = haveAsm && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI

// slowGather marks the CPUs with AVX-512 VNNI where the scale gather loses to eight loads
// (see scaleLoads): all but those with AVX512-BF16 and no AMX, which are AMD's AVX-512 CPUs
// (Zen 4 and later) and Intel's Cooper Lake. Intel's generations before Sapphire Rapids
// have no BF16 (the gather measured half the loads' speed on Ice Lake); Sapphire Rapids and
// later have AMX (the loads measured 11-14 % faster for Q4_0 on one).
var slowGather = haveVNNI && (!cpu.X86.HasAVX512BF16 || cpu.X86.HasAMXTile)

// q4Transpose8AVX2 decodes nb blocks of 8 Q4_0/IQ4_NL rows (rowBytes apart) through lut and
// writes them transposed to dst: dword k of the 8 rows at dst + bStride·b + kStride·k.
//
//go:noescape
func q4Transpose8AVX2(w *byte, rowBytes int, nb int, lut *byte, dst *byte, kStride, bStride int)

// q4GemmTile16x4VNNI writes the gemm-order outputs of a transposed 16-row Q4_0/IQ4_NL tile
// with 4 Q8_0 activation rows to out[t·ldOut + j].
//
//go:noescape
func q4GemmTile16x4VNNI(wt *byte, dws *float32, nb int, x *byte, xStride int, pre *int32, dx *float32, out *float32, ldOut int)

// q8SumsAVX2 writes −off·Σqs and d of the nb Q8_0 blocks at x to pre[4b] and dx[4b].
//
//go:noescape
func q8SumsAVX2(x *byte, nb int, off int32, pre *int32, dx *float32)

// dotQ4Repack8RowsVNNI is dotQ4Repack8RowsAVX2 with one VPDPBUSD per row: ulut maps a
// nibble to v + off unsigned, pd[4b] = −off·Σx and pd[4b+1] = d_x's float32 bits
// (q8SumsAVX2 with dx = pd[1:]). Exact for activations without −128 (q8HasMin). pf is the
// prefetch distance in bytes, a multiple of 8·stride.
//
//go:noescape
func dotQ4Repack8RowsVNNI(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)

// dotQ4KRepack4RowsVNNI is dotQ4KRepack4RowsAVX2 with 512-bit chunks and VPDPWSSD
// (repack_vnni_amd64.s); same bits. pf is the prefetch distance in bytes, a multiple of
// 4·stride.
//
//go:noescape
func dotQ4KRepack4RowsVNNI(w *byte, stride int, x *byte, nb int, out *float32, pf int)

// dotQ40Repack8RowsVNNI is dotQ4Repack8RowsVNNI for Q4_0 (u = the nibble, no table; ulut is
// not used).
//
//go:noescape
func dotQ40Repack8RowsVNNI(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)

// dotQ4Repack8RowsVNNILoads and dotQ40Repack8RowsVNNILoads are dotQ4Repack8RowsVNNI and
// dotQ40Repack8RowsVNNI with the block scales read by scalar loads instead of a gather
// (scaleLoads); same bits.
//
//go:noescape
func dotQ4Repack8RowsVNNILoads(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)

//go:noescape
func dotQ40Repack8RowsVNNILoads(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int)

// q4KScales8AVX2 writes the Q4_K tiles' scale/min table and d/dmin of the 8 rows at
// w + offs[k] (repack_vnni_amd64.s).
//
//go:noescape
func q4KScales8AVX2(w *byte, offs *int32, nb int, sm *int32, dd *float32)

// q8HasMin reports whether a quant of the nb Q8_0 blocks at x is −128.
//
//go:noescape
func q8HasMin(x *byte, nb int) bool

// q4KTranspose8AVX2 writes the quants of 8 Q4_K rows transposed (repack_vnni_amd64.s).
//
//go:noescape
func q4KTranspose8AVX2(w *byte, rowBytes int, nb int, dst *byte, kStride, bStride int)

// q4KGemmTile16x4VNNI is the Q4_K gemm-order tile of 16 rows × 4 activation rows.
//
//go:noescape
func q4KGemmTile16x4VNNI(wt *byte, sm *int32, dd *float32, nb int, x *byte, xStride int, pk *int32, dx *float32, out *float32, ldOut int)

// q0tQ8Z4x6 is the AVX-512 VNNI Q8_0 tile of 4 weight rows × 6 activation rows
// (q0tile512_amd64.s).
//
//go:noescape
func q0tQ8Z4x6(w *byte, rowBytes int, x *byte, xRowBytes int, xs *float32, xsStride int, dws *float32, nb int, y *float32, ldy int)

// q4KGemvTile16x4VNNI is q4KGemmTile16x4VNNI in ggml's gemv order (one FMA per super-block).
//
//go:noescape
func q4KGemvTile16x4VNNI(wt *byte, sm *int32, dd *float32, nb int, x *byte, xStride int, pk *int32, dx *float32, out *float32, ldOut int)

// asymSubEval8AVX2 is AsymSubEval8's kernel (search_amd64.s); n >= 1.
//
//go:noescape
func asymSubEval8AVX2(x, w *float32, n int, ds, dm *[8]float32, nmax int32, e *[8]float64, q *int32)

// asymProxyAVX2 is AsymProxy8's kernel (search_amd64.s).
//
//go:noescape
func asymProxyAVX2(p *ProxyLanes, n int, D, Dm, smax float64, varyD, sPos int)

// asymScore8AVX2 is AsymScore8's kernel (search_amd64.s); n >= 1.
//
//go:noescape
func asymScore8AVX2(x, w *float32, n int, mn float32, id *[8]float32, nmax int32, out *[24]float32)

// subATB8x16AVX512 is SubATB8x16's AVX-512F kernel (dgemm512_amd64.s).
//
//go:noescape
func subATB8x16AVX512(k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int)
