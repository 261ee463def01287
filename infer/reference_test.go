package infer

import (
	"fmt"
	"math"
	"sort"
)

// Reference is a slow, straightforward float64 forward pass over a [Source], written
// independently of the fast path (no activation rounding, no cache quantization, float64
// everywhere) as a test oracle. Weights are dequantized once to float64.
type Reference struct {
	cfg *Config
	w   map[string][]float64
}

// NewReference dequantizes every tensor of src. Memory is 8 bytes per weight: use small models.
func NewReference(src Source) (*Reference, error) {
	cfg, err := ReadConfig(src)
	if err != nil {
		return nil, err
	}
	r := &Reference{cfg: cfg, w: map[string][]float64{}}
	for _, name := range src.TensorNames() {
		t, _ := src.Tensor(name)
		n := t.Elements()
		if n <= 0 || n > 1<<28 {
			return nil, fmt.Errorf("reference: tensor %q has %d elements", name, n)
		}
		tmp := make([]float32, n)
		if err := kDequant(t.Type, t.Data, tmp); err != nil {
			return nil, fmt.Errorf("reference: tensor %q: %v", name, err)
		}
		d := make([]float64, n)
		for i, v := range tmp {
			d[i] = float64(v)
		}
		r.w[name] = d
	}
	emb, ok := r.w["token_embd.weight"]
	if !ok {
		return nil, fmt.Errorf("reference: tensor token_embd.weight is missing")
	}
	cfg.NVocab = len(emb) / cfg.NEmbd
	return r, nil
}

func (r *Reference) get(name string) []float64 { return r.w[name] }

// matvec: W has rows of length in; returns W·x.
func refMatVec(w []float64, in int, x []float64) []float64 {
	out := make([]float64, len(w)/in)
	for i := range out {
		row := w[i*in : (i+1)*in]
		var s float64
		for j, v := range row {
			s += v * x[j]
		}
		out[i] = s
	}
	return out
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	sc := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * sc
		if w != nil {
			y[i] *= w[i]
		}
	}
	return y
}

func refSoftmax(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	var s float64
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = math.Exp(v - mx)
		s += y[i]
	}
	for i := range y {
		y[i] /= s
	}
	return y
}

func refSilu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// refRope rotates one head at position pos (float64 version of ggml_rope_ext incl. YaRN).
func (r *Reference) rope(x []float64, pos int) {
	c := r.cfg
	n := c.NRot
	freqScale := 1.0
	if c.Rope.Type != "none" {
		freqScale = 1 / c.Rope.Factor
	}
	var extFactor, attn float64 = 0, 1
	var corr [2]float64
	if c.Rope.Type == "yarn" {
		extFactor = 1
		corrDim := func(beta float64) float64 {
			return float64(n) * math.Log(float64(c.Rope.OrigCtx)/(beta*2*math.Pi)) / (2 * math.Log(c.RopeBase))
		}
		corr = [2]float64{math.Max(0, math.Floor(corrDim(c.Rope.YarnBetaFst))), math.Min(float64(n-1), math.Ceil(corrDim(c.Rope.YarnBetaSlw)))}
	}
	attn *= c.Rope.AttnFactor
	freqs := r.get("rope_freqs.weight")
	for i := 0; i < n/2; i++ {
		thetaExtrap := float64(pos) * math.Pow(c.RopeBase, -2*float64(i)/float64(n))
		if freqs != nil {
			thetaExtrap /= freqs[i]
		}
		theta := freqScale * thetaExtrap
		mscale := attn
		if extFactor != 0 {
			y := (float64(i) - corr[0]) / math.Max(0.001, corr[1]-corr[0])
			ramp := (1 - math.Min(1, math.Max(0, y))) * extFactor
			theta = theta*(1-ramp) + thetaExtrap*ramp
			// YaRN magnitude scaling: net factor 1 + 0.1·ln(factor) (HF attention_factor)
			mscale *= 1 + 0.1*math.Log(1/freqScale)
		}
		cs, sn := math.Cos(theta)*mscale, math.Sin(theta)*mscale
		a, b := 2*i, 2*i+1
		if c.RopeMode == RopeNeox {
			a, b = i, i+n/2
		}
		x0, x1 := x[a], x[b]
		x[a] = x0*cs - x1*sn
		x[b] = x0*sn + x1*cs
	}
}

// Logits returns next-token logits after every prefix of tokens (one row per token).
func (r *Reference) Logits(tokens []int32) ([][]float64, error) {
	if r.cfg.Hybrid != nil {
		return r.hybridLogits(tokens)
	}
	c := r.cfg
	E, hd := c.NEmbd, c.HeadDim
	qd, kd := c.QDim(), c.KVDim()
	for _, t := range tokens {
		if t < 0 || int(t) >= c.NVocab {
			return nil, fmt.Errorf("reference: token %d out of range", t)
		}
	}
	T := len(tokens)
	emb := r.get("token_embd.weight")
	x := make([][]float64, T)
	for t, tok := range tokens {
		x[t] = append([]float64(nil), emb[int(tok)*E:(int(tok)+1)*E]...)
	}
	blk := func(il int, s string) []float64 { return r.get(fmt.Sprintf("blk.%d.%s", il, s)) }
	addB := func(y, b []float64) {
		for i := range b {
			y[i] += b[i]
		}
	}
	for il := 0; il < c.NLayer; il++ {
		qs := make([][]float64, T)
		ks := make([][]float64, T)
		vs := make([][]float64, T)
		for t := 0; t < T; t++ {
			h := refRMSNorm(x[t], blk(il, "attn_norm.weight"), c.RMSEps)
			q := refMatVec(blk(il, "attn_q.weight"), E, h)
			k := refMatVec(blk(il, "attn_k.weight"), E, h)
			v := refMatVec(blk(il, "attn_v.weight"), E, h)
			addB(q, blk(il, "attn_q.bias"))
			addB(k, blk(il, "attn_k.bias"))
			addB(v, blk(il, "attn_v.bias"))
			if qn := blk(il, "attn_q_norm.weight"); qn != nil {
				for i := 0; i < qd; i += hd {
					copy(q[i:i+hd], refRMSNorm(q[i:i+hd], qn, c.RMSEps))
				}
				kn := blk(il, "attn_k_norm.weight")
				for i := 0; i < kd; i += hd {
					copy(k[i:i+hd], refRMSNorm(k[i:i+hd], kn, c.RMSEps))
				}
			}
			for i := 0; i < qd; i += hd {
				r.rope(q[i:i+hd], t)
			}
			for i := 0; i < kd; i += hd {
				r.rope(k[i:i+hd], t)
			}
			qs[t], ks[t], vs[t] = q, k, v
		}
		grp := c.NHead / c.NHeadKV
		for t := 0; t < T; t++ {
			att := make([]float64, qd)
			for h := 0; h < c.NHead; h++ {
				g := h / grp
				sc := make([]float64, t+1)
				for u := 0; u <= t; u++ {
					var d float64
					for i := 0; i < hd; i++ {
						d += qs[t][h*hd+i] * ks[u][g*hd+i]
					}
					sc[u] = d / math.Sqrt(float64(hd))
				}
				p := refSoftmax(sc)
				for u := 0; u <= t; u++ {
					for i := 0; i < hd; i++ {
						att[h*hd+i] += p[u] * vs[u][g*hd+i]
					}
				}
			}
			o := refMatVec(blk(il, "attn_output.weight"), qd, att)
			addB(o, blk(il, "attn_output.bias"))
			for i := range o {
				x[t][i] += o[i]
			}
		}
		for t := 0; t < T; t++ {
			h := refRMSNorm(x[t], blk(il, "ffn_norm.weight"), c.RMSEps)
			var y []float64
			if c.NExpert > 0 {
				y = r.moe(il, h)
			} else {
				y = refFFN(blk(il, "ffn_gate.weight"), blk(il, "ffn_up.weight"), blk(il, "ffn_down.weight"), E, c.NFF, h)
			}
			for i := range y {
				x[t][i] += y[i]
			}
		}
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

func refFFN(gate, up, down []float64, E, nff int, h []float64) []float64 {
	g := refMatVec(gate, E, h)
	u := refMatVec(up, E, h)
	for i := range g {
		g[i] = refSilu(g[i]) * u[i]
	}
	return refMatVec(down, nff, g)
}

func (r *Reference) moe(il int, h []float64) []float64 {
	c := r.cfg
	E, nff := c.NEmbd, c.NFFExp
	blk := func(s string) []float64 { return r.get(fmt.Sprintf("blk.%d.%s", il, s)) }
	p := refSoftmax(refMatVec(blk("ffn_gate_inp.weight"), E, h))
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	sel := idx[:c.NExpertUse]
	var sum float64
	for _, e := range sel {
		sum += p[e]
	}
	y := make([]float64, E)
	gate, up, down := blk("ffn_gate_exps.weight"), blk("ffn_up_exps.weight"), blk("ffn_down_exps.weight")
	for _, e := range sel {
		ye := refFFN(gate[e*nff*E:(e+1)*nff*E], up[e*nff*E:(e+1)*nff*E], down[e*E*nff:(e+1)*E*nff], E, nff, h)
		w := p[e] / math.Max(sum, 6.103515625e-5)
		for i := range y {
			y[i] += w * ye[i]
		}
	}
	return y
}
