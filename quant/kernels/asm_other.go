//go:build !amd64 || purego

package kernels

// haveAsm is false: this build has no assembly kernels.
const haveAsm = false

const noAsm = "kernels: assembly kernel called in a build without assembly"

func quantizeQ8_0AVX2(dst *byte, x *float32, nb int)                   { panic(noAsm) }
func quantizeQ8KAVX2(dst *byte, x *float32, nb int)                    { panic(noAsm) }
func dotQ8_0Q8_0AVX2(w, x *byte, xs *float32, nb int, acc *[8]float32) { panic(noAsm) }
func dotQ4_0Q8_0AVX2(w, x *byte, xs *float32, nb int, acc *[8]float32) { panic(noAsm) }
func q8ScalesAVX2(x *byte, nb int, dst *float32)                       { panic(noAsm) }
func dotQ4KQ8KAVX2(w, x *byte, nb int) float32                         { panic(noAsm) }
func dotQ5KQ8KAVX2(w, x *byte, nb int) float32                         { panic(noAsm) }
func dotQ6KQ8KAVX2(w, x *byte, nb int) float32                         { panic(noAsm) }
func dotF32AVX2(a, b *float32, n int) float32                          { panic(noAsm) }
func dotF16F32AVX2(w *byte, x *float32, n int) float32                 { panic(noAsm) }
func dotBF16F32AVX2(w *byte, x *float32, n int) float32                { panic(noAsm) }
func sgemmKernel6x16AVX2(k int, a *float32, lda int, b, c *float32, ldc int, accumulate bool) {
	panic(noAsm)
}
func packB16AVX2(dst, b *float32, ldb, kc8 int) { panic(noAsm) }
func sumBytesAVX2(p *byte, n int) uint64        { panic(noAsm) }

func softmaxExpAVX2(y, x *float32, n int, max float32) float64 { panic(noAsm) }
func swigluAVX2(y, x, gt *float32, n int)                      { panic(noAsm) }

func axpyFMAAVX2(y *float32, a float32, x *float32, n int) { panic(noAsm) }
func scaleF32AVX2(y *float32, a float32, n int)            { panic(noAsm) }

func qkxSearch8AVX2(s *QkxLanes, nmax int32, num *float32, nnum int, n int) { panic(noAsm) }
func qkxSearch16AVX512(s *QkxLanes16, nmax int32, num *float32, nnum int, n int) {
	panic(noAsm)
}
func qxSearch16AVX512(s *QxLanes16, nmax int32, num *float32, nnum int, n int) {
	panic(noAsm)
}
func qxSearch8AVX2(s *QxLanes, nmax int32, num *float32, nnum int, n int) { panic(noAsm) }
func widenF16AVX2(dst *float32, src *byte, n int)                         { panic(noAsm) }
func narrowF16AVX2(dst *byte, src *float32, n int)                        { panic(noAsm) }
func dotF16F32RowsAVX2(w *byte, stride int, x *float32, n int, rows int, out *float32) {
	panic(noAsm)
}
func roundF16AVX2(x *float32, n int)                    { panic(noAsm) }
func widenBF16AVX2(dst *float32, src *byte, n int)      { panic(noAsm) }
func finiteRunAVX2(x *float32, n int) int               { panic(noAsm) }
func quantizeQ8_0RefAVX2(dst *byte, x *float32, nb int) { panic(noAsm) }

const have512 = false

func sgemmKernel12x32AVX512(k int, a *float32, lda int, b *float32, pstride int, c *float32, ldc int, accumulate bool) {
	panic(noAsm)
}

func sgemmKernel6x32AVX512(k int, a *float32, lda int, b *float32, pstride int, c *float32, ldc int, accumulate bool) {
	panic(noAsm)
}

const haveVNNI = false

const slowGather = false

func q4Transpose8AVX2(w *byte, rowBytes int, nb int, lut *byte, dst *byte, kStride, bStride int) {
	panic(noAsm)
}
func q4GemmTile16x4VNNI(wt *byte, dws *float32, nb int, x *byte, xStride int, pre *int32, dx *float32, out *float32, ldOut int) {
	panic(noAsm)
}
func q8SumsAVX2(x *byte, nb int, off int32, pre *int32, dx *float32) { panic(noAsm) }
func dotQ4Repack8RowsVNNI(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int) {
	panic(noAsm)
}
func dotQ4Repack8RowsVNNILoads(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int) {
	panic(noAsm)
}
func dotQ40Repack8RowsVNNILoads(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int) {
	panic(noAsm)
}
func q8HasMin(x *byte, nb int) bool { panic(noAsm) }
func q4KScales8AVX2(w *byte, offs *int32, nb int, sm *int32, dd *float32) {
	panic(noAsm)
}
func dotQ40Repack8RowsVNNI(w *byte, stride int, x *byte, pd *int32, nb int, ulut *byte, out *float32, pf int) {
	panic(noAsm)
}
func dotQ4KRepack4RowsVNNI(w *byte, stride int, x *byte, nb int, out *float32, pf int) {
	panic(noAsm)
}

func q4KTranspose8AVX2(w *byte, rowBytes int, nb int, dst *byte, kStride, bStride int) { panic(noAsm) }
func q4KGemmTile16x4VNNI(wt *byte, sm *int32, dd *float32, nb int, x *byte, xStride int, pk *int32, dx *float32, out *float32, ldOut int) {
	panic(noAsm)
}
func q0tQ8Z4x6(w *byte, rowBytes int, x *byte, xRowBytes int, xs *float32, xsStride int, dws *float32, nb int, y *float32, ldy int) {
	panic(noAsm)
}
func q4KGemvTile16x4VNNI(wt *byte, sm *int32, dd *float32, nb int, x *byte, xStride int, pk *int32, dx *float32, out *float32, ldOut int) {
	panic(noAsm)
}
func asymSubEval8AVX2(x, w *float32, n int, ds, dm *[8]float32, nmax int32, e *[8]float64, q *int32) {
	panic(noAsm)
}
func asymProxyAVX2(p *ProxyLanes, n int, D, Dm, smax float64, varyD, sPos int) {
	panic(noAsm)
}
func asymScore8AVX2(x, w *float32, n int, mn float32, id *[8]float32, nmax int32, out *[24]float32) {
	panic(noAsm)
}

func haveAMX() bool { return false }
func amxKernel32x32BF16(ks int, a0, a1 *uint16, b *uint32, c *float32, ldc int, acc bool, cfg *byte) {
	panic(noAsm)
}
func amxKernel32x32BF16R(ks int, a *byte, lda int, b *uint32, c *float32, ldc int, acc bool, cfg *byte) {
	panic(noAsm)
}
func splitBF16x3AVX512(dst *uint16, src *float32, steps int)         { panic(noAsm) }
func packTilesBF16AVX512(dst *uint32, src *byte, ldb int, steps int) { panic(noAsm) }

func haveBF16DP() bool { return false }
func dpDefault() bool  { return false }
func dpKernel8x32(ks int, a *byte, lda int, b *uint32, c *float32, ldc int, acc bool) {
	panic(noAsm)
}
func roundBF16AVX512(dst *byte, src *float32, n int) { panic(noAsm) }

func subATB8x16AVX512(k int, a *float64, lda int, b *float64, ldb int, c *float64, ldc int) {
	panic(noAsm)
}
