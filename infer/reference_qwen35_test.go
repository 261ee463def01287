package infer

import (
	"fmt"
	"math"
)

// hybridLogits is the float64 reference forward pass of qwen35 / qwen35moe, written from the
// model's definition (Gated DeltaNet as a step-by-step recurrence over the whole sequence,
// gated attention, MoE with a gated shared expert) rather than from the fast path.
func (r *Reference) hybridLogits(tokens []int32) ([][]float64, error) {
	c := r.cfg
	E := c.NEmbd
	T := len(tokens)
	for _, t := range tokens {
		if t < 0 || int(t) >= c.NVocab {
			return nil, fmt.Errorf("reference: token %d out of range", t)
		}
	}
	emb := r.get("token_embd.weight")
	x := make([][]float64, T)
	for t, tok := range tokens {
		x[t] = append([]float64(nil), emb[int(tok)*E:(int(tok)+1)*E]...)
	}
	for il := 0; il < c.NLayer; il++ {
		r.hybridBlock(il, x)
	}
	out := r.get("output.weight")
	if out == nil {
		out = emb
	}
	logits := make([][]float64, T)
	for t := 0; t < T; t++ {
		logits[t] = refMatVec(out, E, refRMSNorm(x[t], r.get("output_norm.weight"), c.RMSEps))
	}
	return logits, nil
}

// hybridBlock applies block il to the residual rows x in place.
func (r *Reference) hybridBlock(il int, x [][]float64) {
	c := r.cfg
	hy := c.Hybrid
	E := c.NEmbd
	T := len(x)
	blk := func(s string) []float64 { return r.get(fmt.Sprintf("blk.%d.%s", il, s)) }
	h := make([][]float64, T)
	for t := range h {
		h[t] = refRMSNorm(x[t], blk("attn_norm.weight"), c.RMSEps)
	}
	var a [][]float64
	if hy.Linear[il] {
		a = r.refDeltaNet(il, h)
	} else {
		a = r.refGatedAttention(il, h)
	}
	for t := range x {
		for i := range x[t] {
			x[t][i] += a[t][i]
		}
	}
	for t := 0; t < T; t++ {
		h2 := refRMSNorm(x[t], blk("post_attention_norm.weight"), c.RMSEps)
		var y []float64
		if c.NExpert > 0 {
			y = r.moe(il, h2)
			sh := refFFN(blk("ffn_gate_shexp.weight"), blk("ffn_up_shexp.weight"), blk("ffn_down_shexp.weight"), E, hy.NFFShexp, h2)
			var gl float64
			for i, w := range blk("ffn_gate_inp_shexp.weight") {
				gl += w * h2[i]
			}
			g := 1 / (1 + math.Exp(-gl))
			for i := range y {
				y[i] += g * sh[i]
			}
		} else {
			y = refFFN(blk("ffn_gate.weight"), blk("ffn_up.weight"), blk("ffn_down.weight"), E, c.NFF, h2)
		}
		for i := range y {
			x[t][i] += y[i]
		}
	}
}

// refGatedAttention: per head query/gate split of attn_q, q/k RMSNorm, multi-section RoPE
// (text positions: time/height/width sections rotate by the position, the extra section by 0),
// causal softmax attention with GQA, output times sigmoid(gate), attn_output.
func (r *Reference) refGatedAttention(il int, h [][]float64) [][]float64 {
	c := r.cfg
	E, hd, nh, nkv := c.NEmbd, c.HeadDim, c.NHead, c.NHeadKV
	blk := func(s string) []float64 { return r.get(fmt.Sprintf("blk.%d.%s", il, s)) }
	T := len(h)
	sec := c.Hybrid.Sections
	sum := sec[0] + sec[1] + sec[2] + sec[3]
	rope := func(v []float64, pos int) {
		n := c.NRot
		for i := 0; i < n/2; i++ {
			s := i % sum
			p := 0.0 // extra stream: position 0 for text
			if (s%3 == 0 && s < 3*sec[0]) || (s%3 == 1 && s < 3*sec[1]) || (s%3 == 2 && s < 3*sec[2]) {
				p = float64(pos)
			}
			th := p * math.Pow(c.RopeBase, -2*float64(i)/float64(n))
			cs, sn := math.Cos(th), math.Sin(th)
			x0, x1 := v[i], v[i+n/2]
			v[i] = x0*cs - x1*sn
			v[i+n/2] = x0*sn + x1*cs
		}
	}
	qs := make([][]float64, T)
	gs := make([][]float64, T)
	ks := make([][]float64, T)
	vs := make([][]float64, T)
	for t := 0; t < T; t++ {
		qg := refMatVec(blk("attn_q.weight"), E, h[t])
		q := make([]float64, nh*hd)
		g := make([]float64, nh*hd)
		for j := 0; j < nh; j++ {
			copy(q[j*hd:(j+1)*hd], refRMSNorm(qg[2*j*hd:2*j*hd+hd], blk("attn_q_norm.weight"), c.RMSEps))
			copy(g[j*hd:(j+1)*hd], qg[2*j*hd+hd:2*(j+1)*hd])
			rope(q[j*hd:(j+1)*hd], t)
		}
		k := refMatVec(blk("attn_k.weight"), E, h[t])
		for j := 0; j < nkv; j++ {
			copy(k[j*hd:(j+1)*hd], refRMSNorm(k[j*hd:(j+1)*hd], blk("attn_k_norm.weight"), c.RMSEps))
			rope(k[j*hd:(j+1)*hd], t)
		}
		qs[t], gs[t], ks[t], vs[t] = q, g, k, refMatVec(blk("attn_v.weight"), E, h[t])
	}
	out := make([][]float64, T)
	grp := nh / nkv
	for t := 0; t < T; t++ {
		att := make([]float64, nh*hd)
		for j := 0; j < nh; j++ {
			kv := j / grp
			sc := make([]float64, t+1)
			for u := 0; u <= t; u++ {
				var d float64
				for i := 0; i < hd; i++ {
					d += qs[t][j*hd+i] * ks[u][kv*hd+i]
				}
				sc[u] = d / math.Sqrt(float64(hd))
			}
			p := refSoftmax(sc)
			for u := 0; u <= t; u++ {
				for i := 0; i < hd; i++ {
					att[j*hd+i] += p[u] * vs[u][kv*hd+i]
				}
			}
		}
		for i := range att {
			att[i] *= 1 / (1 + math.Exp(-gs[t][i]))
		}
		out[t] = refMatVec(blk("attn_output.weight"), nh*hd, att)
	}
	return out
}

// refDeltaNet is one Gated DeltaNet layer over the whole sequence, token by token: causal
// depthwise conv + SiLU over q|k|v, L2-normalised q/k (q also scaled by 1/sqrt(dk)), per value
// head j (key head j mod Hk) the state S (dk×dv, zero at the start) updated as
// S ← e^g·S, S ← S + k·(β·(v − Sᵀk))ᵀ, output o = Sᵀq; gated RMSNorm; ssm_out.
func (r *Reference) refDeltaNet(il int, h [][]float64) [][]float64 {
	c := r.cfg
	hy := c.Hybrid
	E := c.NEmbd
	blk := func(s string) []float64 { return r.get(fmt.Sprintf("blk.%d.%s", il, s)) }
	T := len(h)
	ds, hk, hv, K := hy.DState, hy.NKHeads, hy.NVHeads, hy.ConvK
	kd, vd := hk*ds, hv*ds
	cd := 2*kd + vd
	conv := blk("ssm_conv1d.weight") // channel ch: taps conv[ch*K : (ch+1)*K]
	dt, A, nw := blk("ssm_dt.bias"), blk("ssm_a"), blk("ssm_norm.weight")
	mixed := make([][]float64, T)
	for t := range mixed {
		mixed[t] = refMatVec(blk("attn_qkv.weight"), E, h[t])
	}
	S := make([][]float64, hv) // S[j][a*ds+b] = S_j[a][b]
	for j := range S {
		S[j] = make([]float64, ds*ds)
	}
	l2 := func(v []float64) {
		var ss float64
		for _, e := range v {
			ss += e * e
		}
		n := math.Max(math.Sqrt(ss), c.RMSEps)
		for i := range v {
			v[i] /= n
		}
	}
	out := make([][]float64, T)
	for t := 0; t < T; t++ {
		u := make([]float64, cd)
		for ch := 0; ch < cd; ch++ {
			var s float64
			for i := 0; i < K; i++ {
				if src := t - K + 1 + i; src >= 0 {
					s += conv[ch*K+i] * mixed[src][ch]
				}
			}
			u[ch] = refSilu(s)
		}
		for j := 0; j < 2*hk; j++ {
			l2(u[j*ds : (j+1)*ds])
		}
		z := refMatVec(blk("attn_gate.weight"), E, h[t])
		bv := refMatVec(blk("ssm_beta.weight"), E, h[t])
		av := refMatVec(blk("ssm_alpha.weight"), E, h[t])
		y := make([]float64, vd)
		for j := 0; j < hv; j++ {
			q := u[(j%hk)*ds : (j%hk+1)*ds]
			k := u[kd+(j%hk)*ds : kd+(j%hk+1)*ds]
			v := u[2*kd+j*ds : 2*kd+(j+1)*ds]
			beta := 1 / (1 + math.Exp(-bv[j]))
			sp := av[j] + dt[j]
			if sp <= 20 {
				sp = math.Log1p(math.Exp(sp))
			}
			decay := math.Exp(sp * A[j])
			s := S[j]
			for i := range s {
				s[i] *= decay
			}
			for b := 0; b < ds; b++ {
				var m float64
				for a := 0; a < ds; a++ {
					m += s[a*ds+b] * k[a]
				}
				d := beta * (v[b] - m)
				for a := 0; a < ds; a++ {
					s[a*ds+b] += k[a] * d
				}
			}
			o := make([]float64, ds)
			for b := 0; b < ds; b++ {
				for a := 0; a < ds; a++ {
					o[b] += s[a*ds+b] * q[a] / math.Sqrt(float64(ds))
				}
			}
			o = refRMSNorm(o, nw, c.RMSEps)
			for b := range o {
				y[j*ds+b] = o[b] * refSilu(z[j*ds+b])
			}
		}
		out[t] = refMatVec(blk("ssm_out.weight"), vd, y)
	}
	return out
}
