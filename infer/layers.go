package infer

import (
	"math"

	"github.com/tq-project/tq/quant/kernels"
)

// Element-wise building blocks, written to follow ggml's CPU ops in float32 (sums of squares in
// float64 as ggml does).

// rmsNorm writes y = x * (1/sqrt(mean(x²)+eps)) * w (w may be nil). y may alias x.
func rmsNorm(y, x, w []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	mean := float32(sum / float64(len(x)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	if w == nil {
		for i, v := range x {
			y[i] = v * scale
		}
		return
	}
	w = w[:len(x)]
	for i, v := range x {
		y[i] = (v * scale) * w[i]
	}
}

// swiglu writes g[i] = silu(g[i]) * u[i] for rows of n elements, exactly as
// ggml_vec_swiglu_f32 (ggml_v_expf per group of 8 from each row start).
func swiglu(g, u []float32, n int) {
	u = u[:len(g)]
	for r := 0; r+n <= len(g); r += n {
		kernels.SwiGLU(g[r:r+n], g[r:r+n], u[r:r+n])
	}
}

// scaleMax multiplies x by scale (ggml_vec_scale_f32) and returns the largest element.
func scaleMax(x []float32, scale float32) float32 { return kernels.ScaleMax(x, scale) }

// softmaxInPlace computes softmax(x*scale) of a row of exactly len(x) elements as
// ggml_soft_max does: float32 exponentials (ggml_v_expf per group of 8), per-8 float sums
// added in float64, then one multiply by float32(1/sum).
func softmaxInPlace(x []float32, scale float32) {
	mx := scaleMax(x, scale)
	sum := kernels.SoftMaxExp(x, x, mx)
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// softmaxMasked is softmaxInPlace for an attention row whose later positions are masked
// (−Inf): llama.cpp's rows run over the padded KV length, so the partial last group of 8 is
// evaluated by the vector exponential too, with the masked lanes contributing exactly 0.
func softmaxMasked(x []float32, scale float32) {
	mx := scaleMax(x, scale)
	n8 := len(x) &^ 7
	sum := kernels.SoftMaxExp(x[:n8], x[:n8], mx)
	if n8 < len(x) {
		var pad [8]float32
		for i := range pad {
			pad[i] = float32(math.Inf(-1))
		}
		copy(pad[:], x[n8:])
		sum += kernels.SoftMaxExp(pad[:], pad[:], mx)
		copy(x[n8:], pad[:])
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

func addInPlace(y, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += x[i]
	}
}

// ropeParams holds everything needed to rotate a head at a position, as ggml_rope_ext computes it.
type ropeParams struct {
	mode       RopeMode
	nRot       int
	thetaScale float32
	freqScale  float32
	extFactor  float32
	attnFactor float32
	corr       [2]float32
	freqs      []float32 // optional per-pair divisors (rope_freqs.weight)
	// cosSin and logf are the math library in use (see ropeCosSin), fixed at creation so that
	// one model never mixes two.
	cosSin func(float32) (float32, float32)
	logf   func(float32) float32
}

func newRopeParams(c *Config, freqs []float32) ropeParams {
	useSystemLibm()
	p := ropeParams{
		cosSin:     ropeCosSin,
		logf:       logf,
		mode:       c.RopeMode,
		nRot:       c.NRot,
		thetaScale: float32(math.Pow(float64(float32(c.RopeBase)), float64(-2/float32(c.NRot)))),
		freqScale:  1,
		attnFactor: 1,
		freqs:      freqs,
	}
	if c.Rope.Type != "none" && c.Rope.Factor != 0 {
		p.freqScale = float32(1 / c.Rope.Factor)
	}
	if c.Rope.Type == "yarn" {
		p.extFactor = 1
		factor := 1 / p.freqScale
		mscale := func(scale float32) float32 {
			if scale <= 1 {
				return 1
			}
			return 0.1*float32(math.Log(float64(scale))) + 1
		}
		p.attnFactor = mscale(factor)
		p.attnFactor *= 1 / (1 + 0.1*float32(math.Log(float64(factor))))
		orig := c.Rope.OrigCtx
		if orig == 0 {
			orig = c.CtxTrain
		}
		corrDim := func(beta float64) float64 {
			return float64(c.NRot) * math.Log(float64(orig)/(beta*2*math.Pi)) / (2 * math.Log(float64(float32(c.RopeBase))))
		}
		start := math.Floor(float64(float32(corrDim(c.Rope.YarnBetaFst))))
		end := math.Ceil(float64(float32(corrDim(c.Rope.YarnBetaSlw))))
		p.corr = [2]float32{float32(max(0, start)), float32(min(float64(c.NRot-1), end))}
	}
	p.attnFactor *= float32(c.Rope.AttnFactor)
	return p
}

// ropeCosSin and logf are the libm functions of RoPE. llama.cpp calls the C library's cosf,
// sinf and logf, whose last bit depends on the libc (glibc's cosf/sinf are not correctly
// rounded). Where the C library can be loaded, useSystemLibm (called once, before the first
// ropeParams is made) points these at it; otherwise they are correctly rounded. libmName says
// which is in use.
var (
	ropeCosSin = func(x float32) (c, s float32) {
		return float32(math.Cos(float64(x))), float32(math.Sin(float64(x)))
	}
	logf     = func(x float32) float32 { return float32(math.Log(float64(x))) }
	libmName = "go"
)

// MathLibrary names the source of RoPE's cos/sin/log: "libm.so.6" (the C library, as
// llama.cpp) or "go" (correctly rounded). It is decided once per process.
func MathLibrary() string {
	useSystemLibm()
	return libmName
}

// cache fills cs (length nRot) with interleaved cos/sin for position pos.
func (p *ropeParams) cache(cs []float32, pos int) {
	theta := float32(pos)
	for i0 := 0; i0 < p.nRot; i0 += 2 {
		ff := float32(1)
		if p.freqs != nil {
			ff = p.freqs[i0/2]
		}
		thetaExtrap := theta / ff
		thetaInterp := p.freqScale * thetaExtrap
		th := thetaInterp
		mscale := p.attnFactor
		if p.extFactor != 0 {
			y := (float32(i0/2) - p.corr[0]) / max(0.001, p.corr[1]-p.corr[0])
			ramp := (1 - min(1, max(0, y))) * p.extFactor
			// ggml's C is contracted into FMAs here: θ_i·(1−r) + θ_e·r and 1 + 0.1·ln(1/s).
			th = kernels.FMA32(thetaInterp, 1-ramp, float32(thetaExtrap*ramp))
			mscale *= kernels.FMA32(0.1, p.logf(1/p.freqScale), 1)
		}
		c, s := p.cosSin(th)
		cs[i0] = c * mscale
		cs[i0+1] = s * mscale
		theta *= p.thetaScale
	}
}

// apply rotates one head vector x (length head_dim) in place using a cache from [ropeParams.cache].
// Each pair takes ggml's contracted FMAs, x0' = fma(x0, c, −x1·s), x1' = fma(x0, s, x1·c)
// (kernels.RopeNeox / RopeNorm, 8 pairs per AVX2 step).
func (p *ropeParams) apply(x, cs []float32) {
	n := p.nRot
	if p.mode == RopeNeox {
		kernels.RopeNeox(x[:n], cs[:n])
		return
	}
	kernels.RopeNorm(x[:n], cs[:n])
}
