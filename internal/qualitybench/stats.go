package main

import (
	"fmt"
	"math"
	"sort"
)

// minLogProb replaces log q = -Inf (a float32 probability that underflowed to 0 in
// llama.cpp) where the reference p is positive: the log of the smallest float32 subnormal.
var minLogProb = math.Log(math.SmallestNonzeroFloat32)

// quality is the comparison of one file's next-token distributions with the reference's
// over the same windows.
type quality struct {
	Positions int     `json:"positions"`
	Sequences int     `json:"sequences"`
	MeanKLD   float64 `json:"mean_kld"`
	// KLDLow, KLDHigh: 95% interval of the mean KLD with the window as the unit
	// (mean of the per-window means ± t(0.975, n-1) · their standard error): positions of one
	// window are correlated, windows are treated as independent.
	KLDLow  float64 `json:"kld_ci95_low"`
	KLDHigh float64 `json:"kld_ci95_high"`
	// MaxKLD and the 99th percentile over positions.
	MaxKLD   float64 `json:"max_kld"`
	P99KLD   float64 `json:"p99_kld"`
	SameTop1 float64 `json:"same_top1"`
	// PPL is the file's own perplexity on the held-out next tokens (every position but the
	// last of each window).
	PPL float64 `json:"ppl"`
	// Floored counts vocabulary entries where q was 0 but p was not (log q taken as
	// minLogProb).
	Floored int `json:"floored,omitempty"`

	seqKLD []float64 // per-window mean KLD
}

// compare computes the quality of q against the reference p (both [window][position][vocab]
// natural log-probabilities) on windows wins (the tokens, for the perplexity).
func compare(p, q [][][]float64, wins [][]int32) (*quality, error) {
	if len(p) != len(q) || len(p) != len(wins) || len(p) == 0 {
		return nil, fmt.Errorf("compare: %d reference windows, %d compared, %d token windows", len(p), len(q), len(wins))
	}
	r := &quality{Sequences: len(p)}
	var all []float64
	var nll float64
	var nTargets, same int
	for s := range p {
		if len(p[s]) != len(q[s]) || len(p[s]) != len(wins[s]) {
			return nil, fmt.Errorf("compare: window %d: %d, %d and %d positions", s, len(p[s]), len(q[s]), len(wins[s]))
		}
		var sum float64
		for i := range p[s] {
			lp, lq := p[s][i], q[s][i]
			if len(lp) != len(lq) || len(lp) == 0 {
				return nil, fmt.Errorf("compare: window %d position %d: vocabularies %d and %d", s, i, len(lp), len(lq))
			}
			k, floored := kld(lp, lq)
			r.Floored += floored
			sum += k
			all = append(all, k)
			if argmax(lp) == argmax(lq) {
				same++
			}
			if i+1 < len(wins[s]) {
				t := lq[wins[s][i+1]]
				if math.IsInf(t, -1) {
					t = minLogProb
				}
				nll -= t
				nTargets++
			}
		}
		r.seqKLD = append(r.seqKLD, sum/float64(len(p[s])))
	}
	r.Positions = len(all)
	r.MeanKLD = mean(all)
	r.MaxKLD = maxOf(all)
	r.P99KLD = quantile(all, 0.99)
	r.SameTop1 = float64(same) / float64(len(all))
	if nTargets > 0 {
		r.PPL = math.Exp(nll / float64(nTargets))
	}
	m, half := meanCI(r.seqKLD)
	r.KLDLow, r.KLDHigh = m-half, m+half
	return r, nil
}

// kld is KL(P || Q) = Σ p (log p - log q) over the entries with p > 0, from natural
// log-probabilities; it also returns how many log q were floored.
func kld(lp, lq []float64) (float64, int) {
	var s float64
	floored := 0
	for v, a := range lp {
		if math.IsInf(a, -1) {
			continue
		}
		b := lq[v]
		if math.IsInf(b, -1) {
			b = minLogProb
			floored++
		}
		s += math.Exp(a) * (a - b)
	}
	if s < 0 { // rounding of two nearly equal distributions
		s = 0
	}
	return s, floored
}

func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

func maxOf(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	return m
}

// quantile is the q-quantile of x with linear interpolation between order statistics.
func quantile(x []float64, q float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	f := pos - float64(lo)
	return s[lo]*(1-f) + s[lo+1]*f
}

// meanCI returns the mean of x and the half-width of its 95% interval, t(0.975, n-1) ·
// sd / sqrt(n) (0 for fewer than 2 values).
func meanCI(x []float64) (float64, float64) {
	m := mean(x)
	n := len(x)
	if n < 2 {
		return m, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - m) * (v - m)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return m, tQuantile975(n-1) * sd / math.Sqrt(float64(n))
}

// ratioCI returns a/b for paired per-window values (the ratio of their means) and the
// half-width of its 95% interval by the delta method.
func ratioCI(a, b []float64) (float64, float64) {
	n := len(a)
	ma, mb := mean(a), mean(b)
	if mb == 0 || n < 2 || len(b) != n {
		return math.NaN(), math.NaN()
	}
	r := ma / mb
	var va, vb, cab float64
	for i := range a {
		va += (a[i] - ma) * (a[i] - ma)
		vb += (b[i] - mb) * (b[i] - mb)
		cab += (a[i] - ma) * (b[i] - mb)
	}
	d := float64(n - 1)
	va, vb, cab = va/d, vb/d, cab/d
	v := (va + r*r*vb - 2*r*cab) / (mb * mb) / float64(n)
	return r, tQuantile975(n-1) * math.Sqrt(math.Max(v, 0))
}

// tQuantile975 is the 0.975 quantile of Student's t with df degrees of freedom: exact
// table values up to 30, the Cornish-Fisher expansion around the normal quantile beyond
// (error < 1e-4 there).
func tQuantile975(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < 1 {
		return math.NaN()
	}
	if df < len(table) {
		return table[df]
	}
	z := 1.959963984540054
	n := float64(df)
	z3, z5 := z*z*z, z*z*z*z*z
	return z + (z3+z)/(4*n) + (5*z5+16*z3+3*z)/(96*n*n)
}
