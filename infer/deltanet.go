package infer

import "math"

// Building blocks of the Gated DeltaNet (linear attention) layers of qwen35 / qwen35moe,
// written after ggml's CPU ops: ggml_ssm_conv + SiLU, ggml_l2_norm, ggml_softplus and the
// fused ggml_gated_delta_net (the path llama.cpp's CPU backend takes for prompts and decode
// alike). All arithmetic is float32 except the L2 sums of squares (float64, as ggml).

// causalConv1d computes, for T rows of x (T×C, one row per token), the depthwise causal
// convolution out[t][c] = SiLU(Σ_{i<K} w[c·K+i] · u[t−K+1+i][c]), where u is x preceded by
// state (K−1 rows of C, oldest first; zeros at a sequence start), and then replaces state by
// the last K−1 rows of u. w holds channel c's K taps at w[c·K : (c+1)·K] (the ggml tensor
// ssm_conv1d {K, C}), oldest tap first. tmp needs (K−1)·C values.
func causalConv1d(out, x, state, w, tmp []float32, T, C, K int) {
	km := K - 1
	at := func(r, c int) float32 { // row r of u, r in [0, km+T)
		if r < km {
			return state[r*C+c]
		}
		return x[(r-km)*C+c]
	}
	for t := 0; t < T; t++ {
		o := out[t*C : (t+1)*C]
		for c := range o {
			taps := w[c*K : (c+1)*K]
			var sum float32
			for i, wi := range taps {
				sum += at(t+i, c) * wi
			}
			o[c] = silu(sum)
		}
	}
	if km == 0 {
		return
	}
	tmp = tmp[:km*C]
	for r := 0; r < km; r++ {
		for c := 0; c < C; c++ {
			tmp[r*C+c] = at(T+r, c)
		}
	}
	copy(state, tmp)
}

// l2NormHeads normalises every head of d consecutive values of x in place:
// x / max(sqrt(Σx²), eps), the sum in float64 as ggml_l2_norm.
func l2NormHeads(x []float32, d int, eps float32) {
	for h := 0; h+d <= len(x); h += d {
		v := x[h : h+d]
		var sum float64
		for _, e := range v {
			sum += float64(e * e)
		}
		scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
		for i := range v {
			v[i] *= scale
		}
	}
}

// softplus is ggml's log(1 + e^x), x for x > 20.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + float32(math.Exp(float64(x))))))
}

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// deltaNetHead runs the gated delta rule for one value head over T tokens. state is the head's
// dS×dS matrix stored transposed as ggml does (state[b·dS+a] = S[a][b]); q, k (the head's key
// head, L2-normalised) and v are T rows of dS with row strides qs, ks, vs; g (log decay, ≤ 0)
// and beta (write strength) have one value per token at stride hs; out receives T rows of dS
// at stride os. Per token: S ← e^g·S; δ = β·(v − Sᵀk); S ← S + k·δᵀ; o = scale·Sᵀq (the scale
// 1/sqrt(dS) applied to the output, as the fused ggml op does). delta needs dS values.
func deltaNetHead(state, q, k, v, g, beta, out, delta []float32, T, dS, qs, ks, vs, hs, os int, scale float32) {
	delta = delta[:dS]
	for t := 0; t < T; t++ {
		qt := q[t*qs : t*qs+dS]
		kt := k[t*ks : t*ks+dS]
		vt := v[t*vs : t*vs+dS]
		decay := float32(math.Exp(float64(g[t*hs])))
		b := beta[t*hs]
		for i := range state[:dS*dS] {
			state[i] *= decay
		}
		for j := 0; j < dS; j++ {
			delta[j] = (vt[j] - kDotF32(state[j*dS:(j+1)*dS], kt)) * b
		}
		for j := 0; j < dS; j++ {
			axpyF32(state[j*dS:(j+1)*dS], delta[j], kt)
		}
		ot := out[t*os : t*os+dS]
		for j := 0; j < dS; j++ {
			ot[j] = kDotF32(state[j*dS:(j+1)*dS], qt) * scale
		}
	}
}
