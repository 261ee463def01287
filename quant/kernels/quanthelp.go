package kernels

import "math"

// WeightedSqErr returns Σ w·(x−y)² and Σ w·x² over the elements of x (w nil: every weight 1),
// the importance-weighted squared error of a reconstruction y of x and its signal. Each term
// is computed in float64 from the float32 values, (w·e)·e with e = x − y, no fused
// multiply-add; element i is added to partial sum i mod 8, and the eight partial sums are
// added in order at the end. The assembly and pure-Go paths give the same bits. It panics with
// a *LengthError if y or w (when not nil) is shorter than x.
func WeightedSqErr(x, y, w []float32) (num, den float64) {
	n := len(x)
	if len(y) < n || w != nil && len(w) < n {
		lengthPanic("WeightedSqErr", "y has %d and w %d elements, x has %d", len(y), len(w), n)
	}
	var acc [16]float64 // num lanes, then den lanes
	i := 0
	if useAsm() && w != nil && n >= 8 {
		i = n &^ 7
		weightedSqErrAVX2(&acc, &x[0], &y[0], &w[0], i)
	}
	for ; i < n; i++ {
		v := float64(x[i])
		e := v - float64(y[i])
		wt := 1.0
		if w != nil {
			wt = float64(w[i])
		}
		acc[i%8] += float64(float64(wt*e) * e)
		acc[8+i%8] += float64(float64(wt*v) * v)
	}
	for k := 0; k < 8; k++ {
		num += acc[k]
		den += acc[8+k]
	}
	return num, den
}

// Lerp moves y toward x: y[i] = x[i] + t·(y[i] − x[i]) in float32, each operation rounded
// (no fused multiply-add). The assembly and pure-Go paths give the same bits. It panics with a
// *LengthError if y is shorter than x.
func Lerp(y, x []float32, t float32) {
	n := len(x)
	if len(y) < n {
		lengthPanic("Lerp", "y has %d elements, x has %d", len(y), n)
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		lerpAVX2(&y[0], &x[0], t, i)
	}
	for ; i < n; i++ {
		v := x[i]
		y[i] = v + float32(t*(y[i]-v))
	}
}

// ImatrixWeights fills w[j] = qw[j]·sqrt(sigma2 + x[j]²) for the elements of x (ggml's
// weighting of a quantizer's error by an importance matrix), each operation rounded to float32
// (the square, the sum, the square root, the product). The assembly and pure-Go paths give the
// same bits. It panics with a *LengthError if w or qw is shorter than x.
func ImatrixWeights(w, x, qw []float32, sigma2 float32) {
	n := len(x)
	if len(w) < n || len(qw) < n {
		lengthPanic("ImatrixWeights", "w has %d and qw %d elements, x has %d", len(w), len(qw), n)
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		imatrixWeightsAVX2(&w[0], &x[0], &qw[0], sigma2, i)
	}
	for ; i < n; i++ {
		v := x[i]
		w[i] = qw[i] * float32(math.Sqrt(float64(sigma2+float32(v*v))))
	}
}

// DequantNibbles decodes 32 bytes of packed 4-bit codes q into 64 values, as ggml's Q4_K
// dequantizer does for one pair of sub-blocks: y[l] = dlo·float32(q[l]&15) − mlo and
// y[32+l] = dhi·float32(q[l]>>4) − mhi, each product rounded before the subtraction. The
// assembly and pure-Go paths give the same bits. It panics with a *LengthError if y has
// fewer than 64 elements or q fewer than 32 bytes.
func DequantNibbles(y []float32, q []byte, dlo, mlo, dhi, mhi float32) {
	if len(y) < 64 || len(q) < 32 {
		lengthPanic("DequantNibbles", "y has %d elements and q %d bytes, want 64 and 32", len(y), len(q))
	}
	if useAsm() {
		dequantNibblesAVX2(&y[0], &q[0], dlo, mlo, dhi, mhi)
		return
	}
	for l := 0; l < 32; l++ {
		y[l] = float32(dlo*float32(q[l]&0xf)) - mlo
		y[l+32] = float32(dhi*float32(q[l]>>4)) - mhi
	}
}

// RequantAsym writes the codes of the elements of x under an effective scale ds and offset dm
// (x ≈ ds·l − dm), as ggml's K-quant quantizers re-derive them once the block scales are
// final: L[i] = clamp(nearest_int((x[i] + dm)/ds), 0, nmax), each operation in float32 and
// nearest_int being ggml's (adding 1.5·2²³ and reading the low mantissa bits). The assembly
// and pure-Go paths give the same bits. It panics with a *LengthError if L is shorter than x.
func RequantAsym(L []uint8, x []float32, ds, dm float32, nmax int32) {
	n := len(x)
	if len(L) < n {
		lengthPanic("RequantAsym", "L has %d elements, x has %d", len(L), n)
	}
	i := 0
	if useAsm() && n >= 8 && nmax >= 0 && nmax <= 255 { // the assembly packs with byte saturation
		i = n &^ 7
		requantAsymAVX2(&L[0], &x[0], ds, dm, nmax, i)
	}
	for ; i < n; i++ {
		v := float32(float32(x[i]+dm)/ds) + 12582912
		l := int32(math.Float32bits(v)&0x007fffff) - 0x00400000
		L[i] = uint8(min(max(l, 0), nmax))
	}
}
