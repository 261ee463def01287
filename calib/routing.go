package calib

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// LayerRouting is the routing histogram of one mixture-of-experts layer over the calibration
// tokens (padding excluded): how often each expert was selected. The planner uses it to decide
// which experts stay in fast memory.
type LayerRouting struct {
	Layer   int `json:"layer"`
	NExpert int `json:"n_expert"`
	// K is the number of experts used per token.
	K int `json:"k"`
	// Tokens is the number of tokens routed.
	Tokens int64 `json:"tokens"`
	// Counts[e] is the number of (token, slot) selections of expert e; ΣCounts = K·Tokens.
	Counts []int64 `json:"counts"`
	// Top1[e] is the number of tokens whose highest-probability expert was e.
	Top1 []int64 `json:"top1"`
	// WeightSum[e] is the sum of the renormalised router weights expert e received.
	WeightSum []float64 `json:"weight_sum"`
}

// NewLayerRouting returns an empty histogram.
func NewLayerRouting(layer, nExpert, k int) *LayerRouting {
	return &LayerRouting{Layer: layer, NExpert: nExpert, K: k,
		Counts: make([]int64, nExpert), Top1: make([]int64, nExpert), WeightSum: make([]float64, nExpert)}
}

// Add records the routing of n tokens (experts[t*k+j] in descending probability, weights
// alike). Expert ids out of range are an error.
func (r *LayerRouting) Add(experts []int32, weights []float32, n, k int) error {
	if k != r.K || len(experts) < n*k || len(weights) < n*k {
		return fmt.Errorf("calib: layer %d routing: %d tokens × %d experts, histogram expects k=%d", r.Layer, n, k, r.K)
	}
	for t := 0; t < n; t++ {
		for j := 0; j < k; j++ {
			e := experts[t*k+j]
			if e < 0 || int(e) >= r.NExpert {
				return fmt.Errorf("calib: layer %d routing: expert id %d out of range (%d experts)", r.Layer, e, r.NExpert)
			}
			r.Counts[e]++
			r.WeightSum[e] += float64(weights[t*k+j])
			if j == 0 {
				r.Top1[e]++
			}
		}
	}
	r.Tokens += int64(n)
	return nil
}

// Merge adds o (same layer and shape) into r.
func (r *LayerRouting) Merge(o *LayerRouting) error {
	if o.NExpert != r.NExpert || o.K != r.K {
		return fmt.Errorf("calib: layer %d routing: cannot merge %d/%d experts with %d/%d", r.Layer, o.NExpert, o.K, r.NExpert, r.K)
	}
	r.Tokens += o.Tokens
	for e := range r.Counts {
		r.Counts[e] += o.Counts[e]
		r.Top1[e] += o.Top1[e]
		r.WeightSum[e] += o.WeightSum[e]
	}
	return nil
}

func (r *LayerRouting) check() error {
	if r.NExpert <= 0 || r.K <= 0 || r.K > r.NExpert {
		return fmt.Errorf("routing of layer %d: bad expert counts %d used of %d", r.Layer, r.K, r.NExpert)
	}
	if len(r.Counts) != r.NExpert || len(r.Top1) != r.NExpert || len(r.WeightSum) != r.NExpert {
		return fmt.Errorf("routing of layer %d: arrays do not have %d entries", r.Layer, r.NExpert)
	}
	if r.Tokens < 0 {
		return fmt.Errorf("routing of layer %d: negative token count", r.Layer)
	}
	for e := range r.Counts {
		if r.Counts[e] < 0 || r.Top1[e] < 0 || !(r.WeightSum[e] >= 0) || math.IsInf(r.WeightSum[e], 1) {
			return fmt.Errorf("routing of layer %d: bad entry for expert %d", r.Layer, e)
		}
	}
	return nil
}

// Coverage summarises how well the calibration tokens cover the experts of a layer.
type Coverage struct {
	Layer   int `json:"layer"`
	NExpert int `json:"n_expert"`
	// Uncovered lists the experts never selected; Low those selected fewer than LowThreshold
	// times.
	Uncovered []int `json:"uncovered"`
	Low       []int `json:"low,omitempty"`
	// Min, Median and Max are the selection counts over experts.
	Min    int64 `json:"min"`
	Median int64 `json:"median"`
	Max    int64 `json:"max"`
	// Entropy is the normalised entropy of the selection distribution (1 = perfectly even).
	Entropy float64 `json:"entropy"`
}

// LowThreshold is the selection count below which an expert is reported as poorly covered.
const LowThreshold = 16

// Coverage computes the coverage summary of r.
func (r *LayerRouting) Coverage() Coverage {
	c := Coverage{Layer: r.Layer, NExpert: r.NExpert, Uncovered: []int{}}
	sorted := append([]int64(nil), r.Counts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	if len(sorted) > 0 {
		c.Min, c.Max, c.Median = sorted[0], sorted[len(sorted)-1], sorted[len(sorted)/2]
	}
	var total float64
	for e, n := range r.Counts {
		total += float64(n)
		switch {
		case n == 0:
			c.Uncovered = append(c.Uncovered, e)
		case n < LowThreshold:
			c.Low = append(c.Low, e)
		}
	}
	if total > 0 && r.NExpert > 1 {
		var h float64
		for _, n := range r.Counts {
			if n > 0 {
				p := float64(n) / total
				h -= p * math.Log(p)
			}
		}
		c.Entropy = h / math.Log(float64(r.NExpert))
	}
	return c
}

// CoverageReport renders the per-layer expert coverage as text (one line per layer).
func CoverageReport(rs []*LayerRouting) string {
	var b strings.Builder
	for _, r := range rs {
		c := r.Coverage()
		fmt.Fprintf(&b, "layer %3d: %d/%d experts routed, selections min %d median %d max %d, entropy %.3f",
			c.Layer, c.NExpert-len(c.Uncovered), c.NExpert, c.Min, c.Median, c.Max, c.Entropy)
		if len(c.Uncovered) > 0 {
			fmt.Fprintf(&b, ", never routed: %v", c.Uncovered)
		}
		if len(c.Low) > 0 {
			fmt.Fprintf(&b, ", fewer than %d tokens: %v", LowThreshold, c.Low)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
