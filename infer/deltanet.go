package infer

import (
	"math"

	"github.com/tq-project/tq/quant/kernels"
)

// Building blocks of the Gated DeltaNet (linear attention) layers of qwen35 / qwen35moe,
// written after ggml's CPU ops: ggml_ssm_conv + ggml_silu, ggml_l2_norm, ggml_sigmoid,
// ggml_softplus and the fused ggml_gated_delta_net (llama.cpp enables the fused op for
// prompts and decode alike when the backend supports it, as the CPU backend does). All
// arithmetic is float32 except the L2 sums of squares (float64, as ggml); each block
// reproduces its ggml op bit for bit (qwen35_ops_oracle_test.go).

// causalConv1d computes, for T rows of x (T×C, one row per token), the depthwise causal
// convolution out[t][c] = SiLU(Σ_{i<K} w[c·K+i] · u[t−K+1+i][c]), where u is x preceded by
// state (K−1 rows of C, oldest first; zeros at a sequence start), and then replaces state by
// the last K−1 rows of u. w holds channel c's K taps at w[c·K : (c+1)·K] (the ggml tensor
// ssm_conv1d {K, C}), oldest tap first. tmp needs (K−1)·C values. The SiLU is ggml_silu's
// over the row of C channels, the sum ggml_ssm_conv's as llama.cpp's AVX2 build compiles it
// (oldest tap first, in float32): the compiler vectorised the products of the first K&^3 taps
// (8, then 4 at a time) and adds them one by one, while the last K mod 4 taps are scalar
// FMAs.
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
			for i, wi := range taps[:K&^3] {
				sum += float32(at(t+i, c) * wi) // rounded product: never fused
			}
			for i := K &^ 3; i < K; i++ {
				sum = kernels.FMA32(at(t+i, c), taps[i], sum)
			}
			o[c] = sum
		}
		siluRows(o, o, C)
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

// deltaNetHead runs the gated delta rule for one value head over T tokens. state is the head's
// dS×dS matrix stored transposed as ggml does (state[b·dS+a] = S[a][b]); q, k (the head's key
// head, L2-normalised) and v are T rows of dS with row strides qs, ks, vs; g (log decay, ≤ 0)
// and beta (write strength) have one value per token at stride hs; out receives T rows of dS
// at stride os. Per token: S ← e^g·S; δ = β·(v − Sᵀk); S ← S + k·δᵀ; o = scale·Sᵀq (the scale
// 1/sqrt(dS) applied to the output, as the fused ggml op does). delta needs dS values.
// The arithmetic is ggml_gated_delta_net's: the C library's expf for the decay,
// ggml_vec_dot_f32 for the products with k and q, FMAs (ggml_vec_mad_f32) for the update.
func deltaNetHead(state, q, k, v, g, beta, out, delta []float32, T, dS, qs, ks, vs, hs, os int, scale float32) {
	delta = delta[:dS]
	for t := 0; t < T; t++ {
		qt := q[t*qs : t*qs+dS]
		kt := k[t*ks : t*ks+dS]
		vt := v[t*vs : t*vs+dS]
		decay := expf32(g[t*hs])
		b := beta[t*hs]
		kernels.ScaleF32(state[:dS*dS], decay)
		for j := 0; j < dS; j++ {
			delta[j] = (vt[j] - kDotF32(state[j*dS:(j+1)*dS], kt)) * b
		}
		for j := 0; j < dS; j++ {
			kernels.AxpyFMA(state[j*dS:(j+1)*dS], delta[j], kt)
		}
		ot := out[t*os : t*os+dS]
		for j := 0; j < dS; j++ {
			ot[j] = kDotF32(state[j*dS:(j+1)*dS], qt) * scale
		}
	}
}

// deltaNetGates turns the T rows of hv raw projections in place into the write strengths
// β = σ(b) and the log decays g = softplus(a + dtBias)·ssmA (ggml_sigmoid; ggml_add,
// ggml_softplus, ggml_mul).
func deltaNetGates(b, a, dtBias, ssmA []float32, hv int) {
	for i := range b {
		j := i % hv
		b[i] = sigmoid(b[i])
		a[i] = softplus(a[i]+dtBias[j]) * ssmA[j]
	}
}

// gatedRMSNorm applies build_norm_gated to the heads of d values of o in place: RMSNorm(o)·w
// times SiLU(z) (ggml_rms_norm, ggml_mul, ggml_silu over rows of d, ggml_mul). z has o's
// length and is overwritten with SiLU(z).
func gatedRMSNorm(o, z, w []float32, d int, eps float32) {
	siluRows(z, z, d)
	for h := 0; h+d <= len(o); h += d {
		oh := o[h : h+d]
		rmsNorm(oh, oh, w, eps)
		zh := z[h : h+d]
		for i := range oh {
			oh[i] *= zh[i]
		}
	}
}

// hybridRopeCache fills cs (length nRot) like p.cache for a text token at pos under
// ggml_rope_multi with interleaved sections (GGML_ROPE_TYPE_IMROPE): the time, height and
// width streams all carry pos, so their pairs rotate as plain NEOX RoPE, while the pairs of
// the fourth stream (identity[i]) get position 0: θ = 0, so cos·mscale and sin·mscale are
// exactly mscale (YaRN's magnitude correction included) and +0.
func hybridRopeCache(p *ropeParams, identity []bool, cs []float32, pos int) {
	p.cache(cs, pos)
	m := p.attnFactor
	if p.extFactor != 0 {
		m *= kernels.FMA32(0.1, p.logf(1/p.freqScale), 1)
	}
	for i, id := range identity {
		if id {
			cs[2*i], cs[2*i+1] = m, 0
		}
	}
}

// sharedExpertGate is σ(w·h), the gate of qwen35moe's shared expert: ggml_mul_mat of the
// one-row F32 weight ffn_gate_inp_shexp (too few rows for llamafile's GEMM, so
// ggml_vec_dot_f32), then ggml_sigmoid.
func sharedExpertGate(w, h []float32) float32 { return sigmoid(kDotF32(w, h)) }
