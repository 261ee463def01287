package infer

import (
	"math"

	"github.com/tq-project/tq/quant/kernels"
)

// Scalar and row functions of the Qwen3.5 hybrid layers, written to reproduce llama.cpp's CPU
// ops bit for bit:
//
//   - ggml_sigmoid, ggml_softplus and the decay e^g of ggml_gated_delta_net are scalar C
//     code calling the C library's expf and logf (glibc's are not correctly rounded), see
//     expf32 and logf32;
//   - ggml_silu is the 8-lane vector exponential ggml_v_expf per group of 8 from each row
//     start, with a scalar x/(1+expf(−x)) tail (siluRows);
//   - ggml_vec_mad_f32 and the scalar loops of ggml_ssm_conv are contracted into FMAs
//     (kernels.AxpyFMA, causalConv1d).

// cExpf and cLogf are the C library's expf and logf where useSystemLibm could load them,
// else nil. They are set once, before the first model is built (newRopeParams).
var cExpf, cLogf func(float32) float32

// Error bounds (in ulps) of the C library functions, as documented for glibc's expf
// (0.502) and logf (0.818), rounded up: a correctly rounded result whose exact value lies
// closer to it than 1 − bound of the gap to the neighbour can be the only result of a
// function within that bound.
const (
	expfBound = 0.51
	logfBound = 0.83
)

// nearest returns float32(e) and true when the float64 value e (exact to far below a
// float32 ulp) lies so close to it that a function within bound ulps of the exact value
// must return that float too; otherwise false: the caller then calls the C function. This
// keeps the C library's last bit while paying for a C call (about 0.5 µs through purego)
// only on the few inputs near a rounding boundary. Zero, subnormal and infinite results
// always take the C call.
func nearest(e float64, bound float64) (float32, bool) {
	r := float32(e)
	a := math.Abs(float64(r))
	if !(a >= 0x1p-126 && a <= math.MaxFloat32) {
		return 0, false
	}
	var nb float32
	if e >= float64(r) {
		nb = math.Nextafter32(r, float32(math.Inf(1)))
	} else {
		nb = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	gap := math.Abs(float64(nb) - float64(r))
	return r, math.Abs(e-float64(r)) < (1-bound)*gap
}

// expf32 is the C library's expf where it is loaded (see useSystemLibm), else the correctly
// rounded e^x.
func expf32(x float32) float32 {
	e := math.Exp(float64(x))
	if cExpf == nil {
		return float32(e)
	}
	if r, ok := nearest(e, expfBound); ok {
		return r
	}
	return cExpf(x)
}

// logf32 is the C library's logf where it is loaded, else the correctly rounded ln x.
func logf32(x float32) float32 {
	e := math.Log(float64(x))
	if cLogf == nil {
		return float32(e)
	}
	if r, ok := nearest(e, logfBound); ok {
		return r
	}
	return cLogf(x)
}

// sigmoid is ggml's op_sigmoid: 1/(1+expf(−x)).
func sigmoid(x float32) float32 { return 1 / (1 + expf32(-x)) }

// softplus is ggml's op_softplus: logf(1+expf(x)), x itself above 20.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return logf32(1 + expf32(x))
}

// siluOnes is the multiplier that turns kernels.SwiGLU into a plain SiLU.
var siluOnes = func() (o [64]float32) {
	for i := range o {
		o[i] = 1
	}
	return
}()

// siluRows sets y = x·σ(x) for rows of n elements as ggml_silu does on AVX2: ggml_v_silu on
// each group of 8 from the row start, x/(1+expf(−x)) on the row's last n mod 8 elements.
// y may alias x.
func siluRows(y, x []float32, n int) {
	y = y[:len(x)]
	for r := 0; r+n <= len(x); r += n {
		xr, yr := x[r:r+n], y[r:r+n]
		n8 := n &^ 7
		for i := 0; i < n8; i += len(siluOnes) {
			j := min(i+len(siluOnes), n8)
			kernels.SwiGLU(yr[i:j], xr[i:j], siluOnes[:j-i])
		}
		for i := n8; i < n; i++ {
			v := xr[i]
			yr[i] = v / (1 + expf32(-v))
		}
	}
}
