package verify

import (
	"math"
	"slices"

	"github.com/tq-project/tq/verify/reflogits"
)

// meanAndUncertainty is llama-perplexity's helper: the mean of n values given their sum and
// sum of squares, and its standard error sqrt((mean(x²) − mean²)/(n − 1)) (0 unless that is
// positive and n > 10).
func meanAndUncertainty(sum, sum2 float64, n int) (mean, unc float64) {
	if n < 1 {
		return 0, 0
	}
	mean = sum / float64(n)
	d := sum2/float64(n) - mean*mean
	if d > 0 && n > 10 {
		unc = math.Sqrt(d / float64(n-1))
	}
	return mean, unc
}

// covariance is llama-perplexity's covariance of the means of two series (0 when n < 10).
func covariance(sumA, sumB, sumAB float64, n int) float64 {
	if n < 10 {
		return 0
	}
	v := sumAB/float64(n) - (sumA/float64(n))*(sumB/float64(n))
	return v / float64(n-1)
}

// percentile of sorted values at fraction f: linear interpolation at p = f·(n−1), as
// llama-perplexity computes it.
func percentile(sorted []float64, f float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	if f <= 0 {
		return sorted[0]
	}
	if f >= 1 {
		return sorted[len(sorted)-1]
	}
	p := f * float64(len(sorted)-1)
	ip := int(p)
	p -= float64(ip)
	return (1-p)*sorted[ip] + p*sorted[min(ip+1, len(sorted)-1)]
}

// median of sorted values (mean of the two middle ones for even n).
func median(sorted []float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 0:
		return 0.5 * (sorted[n/2] + sorted[n/2-1])
	}
	return sorted[n/2]
}

// finite clamps ±Inf to ±MaxFloat64 (a broken model's perplexity can overflow exp; JSON has
// no infinities). NaN is returned unchanged (inputs are checked for NaN before).
func finite(x float64) float64 {
	switch {
	case math.IsInf(x, 1):
		return math.MaxFloat64
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	}
	return x
}

// expf is exp clamped to a finite value.
func expf(x float64) float64 { return finite(math.Exp(x)) }

// logSoftmaxParams returns max(l) and log Σ exp(l − max), summed in float64.
func logSoftmaxParams(l []float32) (mx, lse float64) {
	mx = math.Inf(-1)
	for _, v := range l {
		if float64(v) > mx {
			mx = float64(v)
		}
	}
	var s float64
	for _, v := range l {
		s += math.Exp(float64(v) - mx)
	}
	return mx, math.Log(s)
}

// argmax returns the index of the first strict maximum.
func argmax(l []float32) int {
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return best
}

// nll is −log softmax(l)[tok] = max + log Σ exp(l − max) − l_tok.
func nll(l []float32, tok int32) float64 {
	mx, lse := logSoftmaxParams(l)
	return mx + lse - float64(l[tok])
}

// kldCutoff: llama-perplexity only sums KLD terms of tokens whose base log-probability is above
// −16 (§9.3).
const kldCutoff = -16

// posCompare is the comparison of the quantized model with the reference at one position.
type posCompare struct {
	nll, nllBase float64 // −log p(next token) under the model and the reference
	kld          float64 // KL(reference ‖ model)
	dp           float64 // p_model(tok) − p_ref(tok)
	sameTop      bool
}

// compareFull compares full logits rows: base (reference) and cur (model). scratch, when it
// has len(base) entries, holds the reference's exp(l − max) between passes (saves one exp per
// token); nil allocates nothing and recomputes.
func compareFull(base, cur []float32, tok int32, scratch []float64) posCompare {
	bmx := math.Inf(-1)
	for _, v := range base {
		bmx = math.Max(bmx, float64(v))
	}
	useScratch := len(scratch) == len(base)
	var bs float64
	for i, v := range base {
		e := math.Exp(float64(v) - bmx)
		if useScratch {
			scratch[i] = e
		}
		bs += e
	}
	blse := math.Log(bs)
	cmx, clse := logSoftmaxParams(cur)
	// Σ_{log p_i > −16} p_i (log p_i − log q_i) with log p_i − log q_i = (b_i − c_i) − (bmx +
	// blse) + (cmx + clse)
	shift := cmx + clse - bmx - blse
	var kld float64
	for i, b := range base {
		lp := float64(b) - bmx - blse
		if lp > kldCutoff {
			var p float64
			if useScratch {
				p = scratch[i] / bs
			} else {
				p = math.Exp(lp)
			}
			kld += p * (float64(b) - float64(cur[i]) + shift)
		}
	}
	c := posCompare{
		nll:     cmx + clse - float64(cur[tok]),
		nllBase: bmx + blse - float64(base[tok]),
		kld:     kld,
		sameTop: argmax(base) == argmax(cur),
	}
	c.dp = math.Exp(-c.nll) - math.Exp(-c.nllBase)
	return c
}

// compareTopK compares a stored top-k reference record with the model's logits. The KLD is
// that of the two distributions with every unlisted token merged into one outcome ("rest"):
//
//	Σ_{i listed, log p_i > −16} p_i (log p_i − log q_i)  +  r_p (log r_p − log r_q)
//
// where r_p is the reference's stored rest mass and r_q the model's mass on the same tokens.
// mark is scratch of at least len(cur) entries, all false (restored before returning).
func compareTopK(rec *reflogits.Record, cur []float32, tok int32, mark []bool) posCompare {
	cmx, clse := logSoftmaxParams(cur)
	var kld float64
	for j, id := range rec.IDs {
		mark[id] = true
		lp := float64(rec.LogP[j])
		if lp > kldCutoff {
			lq := float64(cur[id]) - cmx - clse
			kld += math.Exp(lp) * (lp - lq)
		}
	}
	if rp := float64(rec.LogRest); !math.IsInf(rp, -1) {
		var rq float64
		for i, v := range cur {
			if !mark[i] {
				rq += math.Exp(float64(v) - cmx)
			}
		}
		lrq := math.Log(rq) - clse
		if rq == 0 {
			lrq = -745 // below the smallest float64; keeps the term finite
		}
		kld += math.Exp(rp) * (rp - lrq)
	}
	for _, id := range rec.IDs {
		mark[id] = false
	}
	c := posCompare{
		nll:     cmx + clse - float64(cur[tok]),
		nllBase: -float64(rec.LogPTok),
		kld:     kld,
		sameTop: int32(argmax(cur)) == rec.IDs[0],
	}
	c.dp = math.Exp(-c.nll) - math.Exp(-c.nllBase)
	return c
}

// kldAcc accumulates comparisons like llama-perplexity's kl_divergence_result.
type kldAcc struct {
	n                                      int
	sumNLL, sumNLL2, sumNLLBase, sumNLLB2  float64
	sumNLLxBase                            float64
	sumKLD, sumKLD2                        float64
	sumDP, sumDP2, sumDP4, sumAbsDP, maxDP float64
	nSameTop                               int
	klds, dps                              []float64
	sumRest                                float64 // stored references: Σ rest mass
}

func (a *kldAcc) add(c posCompare) {
	a.n++
	a.sumNLL += c.nll
	a.sumNLL2 += c.nll * c.nll
	a.sumNLLBase += c.nllBase
	a.sumNLLB2 += c.nllBase * c.nllBase
	a.sumNLLxBase += c.nll * c.nllBase
	a.sumKLD += c.kld
	a.sumKLD2 += c.kld * c.kld
	a.sumDP += c.dp
	a.sumDP2 += c.dp * c.dp
	a.sumDP4 += c.dp * c.dp * c.dp * c.dp
	a.sumAbsDP += math.Abs(c.dp)
	a.maxDP = math.Max(a.maxDP, math.Abs(c.dp))
	if c.sameTop {
		a.nSameTop++
	}
	a.klds = append(a.klds, c.kld)
	a.dps = append(a.dps, c.dp)
}

// ValueErr is a value with its standard error.
type ValueErr struct {
	Value float64 `json:"value"`
	Err   float64 `json:"err"`
}

// Distribution summarizes a set of per-position values (llama-perplexity's percentile set).
type Distribution struct {
	Mean   float64 `json:"mean"`
	Err    float64 `json:"err"` // standard error of the mean
	Min    float64 `json:"min"`
	P0_1   float64 `json:"p0_1"`
	P1     float64 `json:"p1"`
	P5     float64 `json:"p5"`
	P10    float64 `json:"p10"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	P99_9  float64 `json:"p99_9"`
	Max    float64 `json:"max"`
}

func distribution(vals []float64, sum, sum2 float64) Distribution {
	s := slices.Clone(vals)
	slices.Sort(s)
	m, e := meanAndUncertainty(sum, sum2, len(s))
	return Distribution{Mean: m, Err: e, Min: percentile(s, 0), P0_1: percentile(s, 0.001), P1: percentile(s, 0.01),
		P5: percentile(s, 0.05), P10: percentile(s, 0.10), Median: median(s), P90: percentile(s, 0.90),
		P95: percentile(s, 0.95), P99: percentile(s, 0.99), P99_9: percentile(s, 0.999), Max: percentile(s, 1)}
}

// KLDReport compares the model with the reference over the scored positions (§9.3 of the
// llama.cpp facts; docs/verify.md).
type KLDReport struct {
	Positions int `json:"positions"` // scored positions compared
	// PPL and PPLBase are the perplexities of the model and of the reference on the same
	// tokens; LogPPLRatio is mean ln(PPL(Q)/PPL(base)) with its standard error, PPLRatio its
	// exponential, Correlation Cor(ln PPL(Q), ln PPL(base)).
	PPL         ValueErr `json:"ppl"`
	PPLBase     ValueErr `json:"ppl_base"`
	PPLRatio    ValueErr `json:"ppl_ratio"`
	LogPPLRatio ValueErr `json:"ln_ppl_ratio"`
	PPLDiff     ValueErr `json:"ppl_diff"`
	Correlation float64  `json:"ln_ppl_correlation"`
	// KLD summarizes KL(reference ‖ model) per position, in nats.
	KLD Distribution `json:"kld"`
	// DeltaP summarizes Δp = p_model(tok) − p_ref(tok) of the correct next token.
	DeltaP Distribution `json:"delta_p"`
	// MeanAbsDeltaP is mean |Δp|; RMSDeltaP is sqrt(mean Δp²) with llama.cpp's uncertainty.
	MeanAbsDeltaP float64  `json:"mean_abs_delta_p"`
	RMSDeltaP     ValueErr `json:"rms_delta_p"`
	// SameTop is the fraction of positions where the model's and the reference's most likely
	// tokens agree (top-1 agreement), with its standard error sqrt(p(1−p)/(n−1)).
	SameTop ValueErr `json:"same_top"`
	// TopK is the number of reference tokens stored per position when the reference came from a
	// saved file (0: full distributions were compared). KLD is then a lower bound of the
	// full-vocabulary value, short by MeanRestMass·KL(tail) (docs/verify.md).
	TopK int `json:"top_k,omitempty"`
	// MeanRestMass is the mean reference probability of the tokens a saved reference did not
	// list (0 for full comparisons); the relative KLD error is of the order of this value.
	MeanRestMass float64 `json:"mean_rest_mass,omitempty"`

	values []float64 // per-position KLD (for the histogram)
}

func (a *kldAcc) report() *KLDReport {
	r := &KLDReport{Positions: a.n}
	lq, uq := meanAndUncertainty(a.sumNLL, a.sumNLL2, a.n)
	lb, ub := meanAndUncertainty(a.sumNLLBase, a.sumNLLB2, a.n)
	cov := covariance(a.sumNLL, a.sumNLLBase, a.sumNLLxBase, a.n)
	ppl, pplB := expf(lq), expf(lb)
	r.PPL = ValueErr{ppl, finite(ppl * uq)}
	r.PPLBase = ValueErr{pplB, finite(pplB * ub)}
	if uq > 0 && ub > 0 {
		r.Correlation = cov / (uq * ub)
	}
	lr := lq - lb
	lrErr := math.Sqrt(math.Max(0, uq*uq+ub*ub-2*cov))
	r.LogPPLRatio = ValueErr{lr, lrErr}
	r.PPLRatio = ValueErr{expf(lr), finite(expf(lr) * lrErr)}
	pcov := ppl * pplB * cov
	r.PPLDiff = ValueErr{finite(ppl - pplB), finite(math.Sqrt(math.Max(0, r.PPL.Err*r.PPL.Err+r.PPLBase.Err*r.PPLBase.Err-2*pcov)))}
	r.KLD = distribution(a.klds, a.sumKLD, a.sumKLD2)
	r.DeltaP = distribution(a.dps, a.sumDP, a.sumDP2)
	if a.n > 0 {
		r.MeanAbsDeltaP = a.sumAbsDP / float64(a.n)
		msq, msqErr := meanAndUncertainty(a.sumDP2, a.sumDP4, a.n)
		rms := math.Sqrt(msq)
		r.RMSDeltaP = ValueErr{rms, 0}
		if rms > 0 {
			r.RMSDeltaP.Err = 0.5 / rms * msqErr
		}
		p := float64(a.nSameTop) / float64(a.n)
		r.SameTop = ValueErr{Value: p}
		if a.n > 1 {
			r.SameTop.Err = math.Sqrt(p * (1 - p) / float64(a.n-1))
		}
	}
	if a.n > 0 {
		r.MeanRestMass = a.sumRest / float64(a.n)
	}
	r.values = a.klds
	return r
}
