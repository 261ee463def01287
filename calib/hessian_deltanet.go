package calib

import (
	"fmt"
	"math"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant/kernels"
)

// Gated DeltaNet value and gate rows (docs/calibration.md, "Gated DeltaNet heads").
//
// A value channel j of value head h reaches the block's output through the delta rule: its
// output o_j(t) = Σ_{τ≤t} c_h(t,τ)·v_j(τ) is a causal mixture of the values of every earlier
// token, with weights c_h(t,τ) set by the head's queries, keys, write strengths and decays and
// the same for every channel of the head (the recurrence treats value channels independently).
// An error Δw·x(τ) in a value row of attn_qkv therefore reaches the output as Δw·r_h(t) with
// r_h(t) = Σ_τ c_h(t,τ)·x(τ), and the gated RMSNorm then scales it by γ_j·SiLU(z_j(t))/rms(o_h(t)).
// The matrix that row's error-compensating search should use is the Gram matrix of the mixed
// inputs, weighted per token:
//
//	H_h = Σ_t w_h(t)·r_h(t)·r_h(t)ᵀ,   w_h(t) = mean_j (γ_j·SiLU(z_j(t))/rms(o_h(t)))²,
//
// not E[x xᵀ]: where consecutive inputs share a component, its errors add up in the state,
// while components that change from token to token average out. r_h is computed by running the
// head's delta rule with the input rows in place of its values (the recurrence is linear in
// them). Left out: the convolution and SiLU between the projection and the delta rule (they
// act per channel) and the RMSNorm's projection onto the output's direction.
//
// A gate channel j multiplies the normalised output: an error Δw·x(t) in its row reaches the
// output as γ_j·ô_j(t)·SiLU'(z_j(t))·Δw·x(t) (ô = o/rms(o)), so its head gets
//
//	G_h = Σ_t u_h(t)·x(t)·x(t)ᵀ,   u_h(t) = mean_j (γ_j·ô_j(t)·SiLU'(z_j(t)))².
//
// Per-channel weights instead of the head's mean were measured worse (docs/results.md): a
// gated channel sees few tokens with weight, too few for its 256+ columns.

// MaxDeltaNetHeadGroups bounds the matrices per projection and block: value heads are summed in
// this many groups of consecutive heads at most (the largest divisor of the head count not
// above it), so that a 35B-A3B-sized model (32 value heads, 2048 inputs, 30 such blocks) keeps
// 2 × 4 matrices per block: 34 MB of float32 per block before compression, not 270 MB.
const MaxDeltaNetHeadGroups = 4

// headGroups is the number of groups for hv value heads.
func headGroups(hv int) int {
	for g := min(hv, MaxDeltaNetHeadGroups); g > 1; g-- {
		if hv%g == 0 {
			return g
		}
	}
	return 1
}

// Weight entries of a Gram file holding the per-head matrices (after "blk.N."), one matrix
// per value head; their inputs are "<input id>.vheads" and "<input id>.zheads".
const (
	VHeadsEntry    = "attn_qkv.vheads"
	GateHeadsEntry = "attn_gate.heads"
)

// planDeltaNet returns the per-head plan of block il from its weights (zero when the block
// has no Gated DeltaNet or its attn_qkv input gets no full matrix).
func planDeltaNet(descs []modelsrc.TensorDesc, il int, cols map[string]int) dnPlan {
	p := layerPrefix(il)
	var qkv, gate, beta []int64
	for _, d := range descs {
		switch d.Name {
		case p + "attn_qkv.weight":
			qkv = d.Shape
		case p + "attn_gate.weight":
			gate = d.Shape
		case p + "ssm_beta.weight":
			beta = d.Shape
		}
	}
	if len(qkv) != 2 || len(gate) != 2 || len(beta) != 2 || qkv[0] != gate[0] || beta[1] <= 0 || gate[1]%beta[1] != 0 {
		return dnPlan{}
	}
	in, _, ok := gramInputOf(p + "attn_qkv.weight")
	if !ok || cols[in] != int(qkv[0]) {
		return dnPlan{}
	}
	heads, ds := int(beta[1]), int(gate[1]/beta[1])
	if heads > maxGramMat || ds <= 0 {
		return dnPlan{}
	}
	return dnPlan{in: in, heads: heads, dstate: ds}
}

// deltaNetAcc accumulates one block's per-head value and gate matrices (per group of heads).
type deltaNetAcc struct {
	n, dk, hv, hk int
	v, z          []*gramAcc // per group of value heads (headGroups)
	state         []float32  // per value head: n × dk, the delta rule run on the input rows
	r, xz         []float32  // scratch: one head's weighted rows of a batch
}

func newDeltaNetAcc(tr *infer.DeltaNetTrace, threads int, rounded bool) *deltaNetAcc {
	a := &deltaNetAcc{n: tr.NEmbd, dk: tr.DState, hv: tr.NVHeads, hk: tr.NKHeads}
	vbuf, zbuf := newGramBuf(a.n, rounded), newGramBuf(a.n, rounded)
	for range headGroups(a.hv) {
		a.v = append(a.v, newSharedGramAcc(a.n, threads, vbuf))
		a.z = append(a.z, newSharedGramAcc(a.n, threads, zbuf))
	}
	a.state = make([]float32, a.hv*a.n*a.dk)
	return a
}

// deltaNetAccBytes is the memory of a deltaNetAcc: two sets of per-head accumulators and the
// recurrent states.
func deltaNetAccBytes(n, dk, hv int) int64 {
	return 2*gramAccsBytes(n, headGroups(hv)) + 4*int64(hv)*int64(n)*int64(dk)
}

// add feeds one batch. Rows at positions ≥ valid are padding (they come last): not
// accumulated. A batch at position 0 starts a sequence (zero states).
func (a *deltaNetAcc) add(tr *infer.DeltaNetTrace, valid int) error {
	n, dk, hv := a.n, a.dk, a.hv
	if tr.NEmbd != n || tr.DState != dk || tr.NVHeads != hv || tr.NKHeads != a.hk || a.hk <= 0 {
		return fmt.Errorf("calib: Gated DeltaNet trace of %d/%d/%d/%d, earlier %d/%d/%d/%d", tr.NEmbd, tr.DState,
			tr.NVHeads, tr.NKHeads, n, dk, hv, a.hk)
	}
	vd, kdim := hv*dk, a.hk*dk
	T := min(tr.T, max(0, valid-tr.Pos0))
	if tr.Pos0 == 0 {
		clear(a.state)
	}
	if T <= 0 {
		return nil
	}
	if tr.QKStride < 2*kdim || len(tr.X) < T*n || len(tr.QK) < (T-1)*tr.QKStride+2*kdim || len(tr.Beta) < T*hv ||
		len(tr.G) < T*hv || len(tr.O) < T*vd || len(tr.Z) < T*vd || len(tr.Norm) < dk {
		return fmt.Errorf("calib: Gated DeltaNet trace of %d rows: slices too short", T)
	}
	if len(a.r) < T*n {
		a.r, a.xz = make([]float32, T*n), make([]float32, T*n)
	}
	for h := 0; h < hv; h++ {
		kh := h % a.hk
		S := a.state[h*n*dk : (h+1)*n*dk]
		for t := 0; t < T; t++ {
			q := tr.QK[t*tr.QKStride+kh*dk : t*tr.QKStride+(kh+1)*dk]
			k := tr.QK[t*tr.QKStride+kdim+kh*dk : t*tr.QKStride+kdim+(kh+1)*dk]
			x := tr.X[t*n : (t+1)*n]
			wv, wz := deltaNetWeights(tr.O[t*vd+h*dk:t*vd+(h+1)*dk], tr.Z[t*vd+h*dk:t*vd+(h+1)*dk], tr.Norm[:dk], tr.Eps)
			decay := float32(math.Exp(float64(tr.G[t*hv+h])))
			b := tr.Beta[t*hv+h]
			r := a.r[t*n : (t+1)*n]
			sv := tr.Scale * float32(wv)
			// the head's delta rule with input column m as a value channel: S_m ← decay·S_m,
			// S_m += β·(x_m − S_m·k)·k, r_m = S_m·q·scale
			// (the kernels infer's deltaNetHead uses; all n states decay at once)
			kernels.ScaleF32(S, decay)
			for m := 0; m < n; m++ {
				row := S[m*dk : (m+1)*dk]
				kernels.AxpyFMA(row, (x[m]-kernels.DotF32(row, k))*b, k)
				r[m] = kernels.DotF32(row, q) * sv
			}
			xz := a.xz[t*n : (t+1)*n]
			for m, v := range x {
				xz[m] = v * float32(wz)
			}
		}
		grp := h / (hv / len(a.v))
		if err := a.v[grp].add(a.r[:T*n], T); err != nil {
			return err
		}
		if err := a.z[grp].add(a.xz[:T*n], T); err != nil {
			return err
		}
	}
	return nil
}

// deltaNetWeights returns √w_h(t) and √u_h(t) for one head and token: o the delta rule's
// output, z the gate projection (before SiLU), norm ssm_norm.
func deltaNetWeights(o, z, norm []float32, eps float32) (float64, float64) {
	var ss float64
	for _, v := range o {
		ss += float64(v) * float64(v)
	}
	d := float64(len(o))
	inv := 1 / math.Sqrt(ss/d+float64(eps))
	var wv, wz float64
	for j, zj := range z {
		s := 1 / (1 + math.Exp(-float64(zj)))
		silu := float64(zj) * s
		dsilu := s * (1 + float64(zj)*(1-s))
		g := float64(norm[j]) * inv
		wv += (g * silu) * (g * silu)
		wz += (g * float64(o[j]) * dsilu) * (g * float64(o[j]) * dsilu)
	}
	if math.IsNaN(wv) || math.IsInf(wv, 0) || math.IsNaN(wz) || math.IsInf(wz, 0) {
		return 0, 0
	}
	return math.Sqrt(wv / d), math.Sqrt(wz / d)
}

func (a *deltaNetAcc) flush() error {
	for h := range a.v {
		if err := a.v[h].flush(); err != nil {
			return err
		}
		if err := a.z[h].flush(); err != nil {
			return err
		}
	}
	return nil
}

type dnEntry struct {
	weight string
	input  *gramInput
}

// entries are the Gram-file weights and inputs of the per-head matrices (input id in, block
// prefix p).
func (a *deltaNetAcc) entries(in, p string) []dnEntry {
	return []dnEntry{
		{p + VHeadsEntry, expertsInput(in+".vheads", a.n, a.v)},
		{p + GateHeadsEntry, expertsInput(in+".zheads", a.n, a.z)},
	}
}

// HeadGroups returns the number of matrices (groups of value heads, headGroups) of a per-head
// entry of block il (VHeadsEntry or GateHeadsEntry): 0 when the calibration has none (older
// calibrations, models without Gated DeltaNet, inputs kept diagonal). No values are read.
func (s *HessianSet) HeadGroups(il int, entry string) int {
	ref, found := s.weights[layerPrefix(il)+entry]
	if !found || ref.w.experts < 0 || ref.ix.inputs[ref.w.experts].kind != GramFull {
		return 0
	}
	return len(ref.ix.inputs[ref.w.experts].counts)
}

// HeadHessian returns matrix h (a group of value heads, headGroups) of a per-head entry of
// block il (VHeadsEntry or GateHeadsEntry), n×n row-major, divided by its row count; ok is
// false with a nil error when the calibration has no such entry (see HeadGroups) or the group
// saw no rows.
func (s *HessianSet) HeadHessian(il int, entry string, h int) (g []float64, n int, ok bool, err error) {
	groups := s.HeadGroups(il, entry)
	if groups == 0 {
		return nil, 0, false, nil
	}
	ref := s.weights[layerPrefix(il)+entry]
	ix := ref.ix
	in := ix.inputs[ref.w.experts]
	if h < 0 || h >= groups {
		return nil, 0, false, fmt.Errorf("calib: Gram file %s: %s: head group %d of %d", ix.path, in.id, h, groups)
	}
	if in.counts[h] == 0 {
		return nil, 0, false, nil
	}
	p, err := s.values(ix, ref.w.experts, h)
	if err != nil {
		return nil, 0, false, err
	}
	n = in.cols
	return unpackSym(n, p, 1/float64(in.counts[h])), n, true, nil
}

// unpackSym expands a packed upper triangle times scale into a new row-major n×n matrix.
func unpackSym(n int, packed []float32, scale float64) []float64 {
	dst := make([]float64, n*n)
	for i := 0; i < n; i++ {
		row := packed[packedRow(n, i) : packedRow(n, i)+n-i]
		for k, v := range row {
			j := i + k
			h := float64(v) * scale
			dst[i*n+j] = h
			dst[j*n+i] = h
		}
	}
	return dst
}
