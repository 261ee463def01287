package kernels

import "math"

// Exponentials as llama.cpp's AVX2 CPU backend computes them. ggml evaluates exp in softmax
// (attention, MoE routing) and SiLU (SwiGLU) eight lanes at a time with ggml_v_expf, a
// Cody–Waite reduction and a degree-5 polynomial evaluated with FMAs; it is within about one
// ulp of exp but not correctly rounded, so a libm-style exp differs from it in the last bit
// for a good share of inputs. Each function below reproduces ggml's vector code lane for lane
// (assembly on AVX2 machines, pure Go elsewhere and in tests, with an exact float32 FMA).
// Elements past the last multiple of 8 are computed the way ggml's scalar tail does (expf),
// here correctly rounded.

// vexpf is one lane of ggml_v_expf (AVX2).
func vexpf(x float32) float32 {
	const r = 0x1.8p23
	z := lanes8FMA(x, 0x1.715476p+0, r)
	n := float32(z - r)
	b := lanes8FMA(-n, 0x1.7f7d1cp-20, lanes8FMA(-n, 0x1.62e4p-1, x))
	e := math.Float32bits(z) << 23
	k := math.Float32frombits(e + math.Float32bits(1))
	u := float32(b * b)
	j := lanes8FMA(lanes8FMA(lanes8FMA(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, lanes8FMA(0x1.555e66p-3, b, 0x1.fffdb6p-2)),
		u, float32(0x1.ffffecp-1*b))
	an := float32(math.Abs(float64(n)))
	if !(an > 126) {
		return lanes8FMA(j, k, k)
	}
	var g uint32
	if n <= 0 {
		g = 0x82000000
	}
	s1 := math.Float32frombits(g + 0x7f000000)
	s2 := math.Float32frombits(e - g)
	if an > 192 {
		return float32(s1 * s1)
	}
	return float32(lanes8FMA(s2, j, s2) * s1)
}

// expfScalar is ggml's scalar tail (expf).
func expfScalar(x float32) float32 { return float32(math.Exp(float64(x))) }

// SoftMaxExp sets y[i] = exp(x[i] − max) and returns Σ y[i], as ggml_vec_soft_max_f32 does on
// AVX2: each group of 8 is summed in float32 (ggml's hsum order) and the group sums are added
// in float64. y and x must have the same length; y may alias x.
func SoftMaxExp(y, x []float32, max float32) float64 {
	y = y[:len(x)]
	n8 := len(x) &^ 7
	var sum float64
	if n8 > 0 {
		if useAsm() {
			sum = softmaxExpAVX2(&y[0], &x[0], n8, max)
		} else {
			var v [8]float32
			for i := 0; i < n8; i += 8 {
				for l := 0; l < 8; l++ {
					v[l] = vexpf(x[i+l] - max)
					y[i+l] = v[l]
				}
				sum += float64(hsum8(&v))
			}
		}
	}
	for i := n8; i < len(x); i++ {
		v := expfScalar(x[i] - max)
		y[i] = v
		sum += float64(v)
	}
	return sum
}

// SwiGLU sets y[i] = silu(x[i])·g[i] with silu(x) = x/(1+exp(−x)), as ggml_vec_swiglu_f32
// does on AVX2. The slices must have the same length; y may alias x or g.
func SwiGLU(y, x, g []float32) {
	y, g = y[:len(x)], g[:len(x)]
	n8 := len(x) &^ 7
	if n8 > 0 && useAsm() {
		swigluAVX2(&y[0], &x[0], &g[0], n8)
	} else {
		for i := 0; i < n8; i++ {
			v := x[i]
			y[i] = float32(v/float32(1+vexpf(0-v))) * g[i]
		}
	}
	for i := n8; i < len(x); i++ {
		v := x[i]
		y[i] = float32(v/float32(1+expfScalar(-v))) * g[i]
	}
}

// FMA32 returns a·b+c rounded once to float32 (what one lane of VFMADD computes), for
// callers reproducing ggml code that the C compiler contracted into FMAs.
func FMA32(a, b, c float32) float32 { return lanes8FMA(a, b, c) }
