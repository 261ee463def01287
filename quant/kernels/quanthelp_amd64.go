//go:build amd64 && !purego

package kernels

//go:noescape
func weightedSqErrAVX2(acc *[16]float64, x, y, w *float32, n int)

//go:noescape
func lerpAVX2(y, x *float32, t float32, n int)

//go:noescape
func imatrixWeightsAVX2(w, x, qw *float32, sigma2 float32, n int)

//go:noescape
func dequantNibblesAVX2(y *float32, q *byte, dlo, mlo, dhi, mhi float32)

//go:noescape
func requantAsymAVX2(L *uint8, x *float32, ds, dm float32, nmax int32, n int)
