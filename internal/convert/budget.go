package convert

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/quant"
)

// Budget solver (--target-bpw / --max-size).
//
// Every tensor the policy left free (quantizable, not fixed by --tensor-type or turboquant
// skip/tensor_types) gets a type from a ladder of llama.cpp types that fit its row length:
//
//	rows multiple of 256: q2_K q3_K iq4_xs q4_K q5_K q6_K q8_0 f16
//	rows multiple of 32:  q4_0 q4_1 q5_0 q5_1 q8_0 f16
//
// The predicted damage of type T on tensor W is cost(W,T) = n(W) · Σ w·(x − x̂)² / Σ w·x²,
// measured on the fly on up to budgetSampleRows rows spread over the tensor (x̂ = dequantized
// T), where w is the calibration importance of the column (the imatrix: mean squared input
// activation, so w·(x − x̂)² estimates the output error the column causes) or 1 without
// calibration (then the proxy is the plain relative weight quantization error). The solver
// starts every free tensor at its cheapest type and repeatedly applies the upgrade with the
// largest cost decrease per extra byte (on each tensor's lower convex hull) while the total
// stays within the budget, which minimises the summed predicted error for a given size (up to
// the granularity of whole-tensor steps). Tensors policy.KeepsHighPrecision names (Qwen3.5's
// ssm_alpha / ssm_beta) are pinned to F16. With --use-turboquant the policy's type of each free
// tensor is its floor: the ladder keeps only types of at least as many bytes (ladderAbove).
//
// With measured sensitivities (TypeOptions.Sensitivity: tq calibrate's KL of the model's
// output when a tensor alone is in a reference type R), a tensor's costs are rescaled to
// predicted KL: cost(W,T) · KL(W,R) / cost(W,R). For small errors the output KL is quadratic
// in the weight error, as is the weighted squared error, so the ratio carries the tensor's
// measured effect on the output over to every type of its ladder; tensors without a
// measurement get the median ratio of those with one.
const budgetSampleRows = 32

// SensitivitySource gives a tensor's measured output KL in a reference type and the
// importance-weighted relative squared error Σw(x−x̂)²/Σw·x² of the encoding it was measured
// with (relErr 0: not recorded; the budget's own encoding of the reference type stands in).
type SensitivitySource interface {
	Sensitivity(tensor string) (typ gguf.GGMLType, kl, relErr float64, ok bool)
}

var (
	ladder256 = []gguf.GGMLType{gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeIQ4_XS, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ8_0, gguf.TypeF16}
	ladder32  = []gguf.GGMLType{gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0, gguf.TypeF16}
)

func ladderFor(cols int64) []gguf.GGMLType {
	switch {
	case cols%256 == 0:
		return ladder256
	case cols%32 == 0:
		return ladder32
	}
	return []gguf.GGMLType{gguf.TypeF16}
}

// ladderAbove keeps the types of lad that cost at least as many bytes per row as floor, with
// floor itself first when lad lacks it (gguf.TypeCount: no floor).
func ladderAbove(lad []gguf.GGMLType, floor gguf.GGMLType, cols int64) []gguf.GGMLType {
	if floor == gguf.TypeCount {
		return lad
	}
	fb, err := floor.RowBytes(cols)
	if err != nil {
		return lad
	}
	out := []gguf.GGMLType{floor}
	for _, t := range lad {
		if b, err := t.RowBytes(cols); err == nil && b >= fb && t != floor {
			out = append(out, t)
		}
	}
	return out
}

type budgetOption struct {
	typ   gguf.GGMLType
	bytes int64
	cost  float64
}

type budgetTensor struct {
	idx  int
	all  []budgetOption // every measured type
	hull []budgetOption // the lower convex hull of all (after any sensitivity scaling)
	at   int
	// refCost is the cost in the sensitivity reference type; scale converts costs to
	// predicted KL (measured: from this tensor's own measurement).
	refCost  float64
	scale    float64
	measured bool
}

// scaleFor is the factor from weighted error to predicted KL: kl / refCost, with a floor so
// that a tensor measured at zero KL still prefers fewer errors.
func scaleFor(kl, refCost float64) float64 {
	if refCost <= 0 {
		return 0
	}
	return max(kl, 1e-12) / refCost
}

// applySensitivity rescales every tensor's costs to predicted KL; tensors without a
// measurement take the median factor of the measured ones. It reports whether any tensor had
// a measurement (else nothing changes).
func applySensitivity(free []*budgetTensor) bool {
	var fs []float64
	for _, bt := range free {
		if bt.measured && bt.scale > 0 {
			fs = append(fs, bt.scale)
		}
	}
	if len(fs) == 0 {
		return false
	}
	sort.Float64s(fs)
	med := fs[len(fs)/2]
	for _, bt := range free {
		f := bt.scale
		if !bt.measured || f <= 0 {
			f = med
		}
		for k := range bt.all {
			bt.all[k].cost *= f
		}
	}
	return true
}

// solveBudget replaces the free decisions by the budget solver's choice. reads[i] reads rows
// of ts[i]; rowsPerMatrix[i] is the rows of one of its matrices.
func solveBudget(p *Plan, model policy.Model, ts []policy.Tensor, ds []policy.Decision, reads []func(r0, n int64, dst []float32) error,
	rowsPerMatrix []int64, imp *importanceLookup, opts *TypeOptions) ([]policy.Decision, error) {
	if opts.TargetBPW < 0 || opts.MaxSize < 0 {
		return nil, fmt.Errorf("negative size budget")
	}
	var totalElems int64
	for _, t := range ts {
		totalElems += t.Elements()
	}
	budget := int64(math.MaxInt64)
	if opts.TargetBPW > 0 {
		budget = int64(opts.TargetBPW * float64(totalElems) / 8)
	}
	if opts.MaxSize > 0 {
		budget = min(budget, opts.MaxSize)
	}
	out := append([]policy.Decision(nil), ds...)
	var fixedBytes int64
	var free []*budgetTensor
	for i, t := range ts {
		d := ds[i]
		if d.Quantize && !d.Fixed && policy.AllowsQuantization(t, opts.LeaveOutput) && policy.KeepsHighPrecision(t) {
			// Qwen3.5 recurrent gate projections stay F16 under any budget (policy.KeepsHighPrecision)
			d = policy.Decision{Name: d.Name, Type: gguf.TypeF16, Quantize: true, Fixed: true, Rule: "recurrent gate projection: F16"}
			out[i] = d
		}
		if !d.Quantize || d.Fixed || !policy.AllowsQuantization(t, opts.LeaveOutput) {
			rb, err := d.Type.RowBytes(t.Cols())
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			fixedBytes += rb * (t.Elements() / t.Cols())
			continue
		}
		// turboquant's types are a floor: a budget spends extra bits, never fewer
		var floor gguf.GGMLType = gguf.TypeCount
		if opts.TurboQuant {
			floor = d.Type
		}
		var ref gguf.GGMLType = gguf.TypeCount
		var refKL, refRel float64
		if opts.Sensitivity != nil {
			if typ, kl, rel, ok := opts.Sensitivity.Sensitivity(t.Name); ok {
				ref, refKL, refRel = typ, kl, rel
			}
		}
		// KL per unit of weighted error, from the error of the encoding the KL was measured
		// with when the measurement records it (so its encoder need not be the budget's);
		// else from the budget's own encoding of the reference type
		measureRef := ref
		if refRel > 0 {
			measureRef = gguf.TypeCount
		}
		bt, err := measureTensor(i, t, reads[i], rowsPerMatrix[i], imp, opts.Improved, floor, measureRef)
		if err != nil {
			return nil, err
		}
		if refRel > 0 {
			bt.refCost = refRel * float64(t.Elements())
		}
		if ref != gguf.TypeCount {
			bt.scale, bt.measured = scaleFor(refKL, bt.refCost), true
		}
		free = append(free, bt)
	}
	sensitive := false
	if opts.Sensitivity != nil {
		if sensitive = applySensitivity(free); !sensitive && len(free) > 0 {
			p.warn("the measured sensitivities name none of the tensors the budget chooses (another model's calibration?): budget by weight error only")
		}
	} else if len(free) > 0 {
		// without them the budget cannot tell which tensors the output depends on: on the
		// trained models of docs/results.md the held-out KLD at the Q4_K_M size was 1.9-2.8×
		// that with them, on the hybrid worse than llama.cpp's preset
		p.warn("no measured sensitivities (--calibration with the sensitivity.json of tq calibrate; the pass is skipped below 128 scored tokens or when it does not fit --memory-budget): the budget weighs every tensor by its weight error alone")
	}
	for _, bt := range free {
		bt.hull = lowerHull(bt.all)
	}
	used := fixedBytes
	for _, bt := range free {
		used += bt.hull[0].bytes
	}
	if used > budget {
		return nil, fmt.Errorf("size budget of %d bytes (%.3f bpw) is below the smallest possible output, %d bytes (%.3f bpw)",
			budget, float64(budget)*8/float64(totalElems), used, float64(used)*8/float64(totalElems))
	}
	h := &upgradeHeap{}
	for _, bt := range free {
		if bt.at+1 < len(bt.hull) {
			heap.Push(h, bt)
		}
	}
	for h.Len() > 0 {
		bt := heap.Pop(h).(*budgetTensor)
		next := bt.hull[bt.at+1]
		extra := next.bytes - bt.hull[bt.at].bytes
		if used+extra > budget {
			continue // this tensor's next step does not fit; smaller steps elsewhere may
		}
		used += extra
		bt.at++
		if bt.at+1 < len(bt.hull) {
			heap.Push(h, bt)
		}
	}
	var chosen float64
	for _, bt := range free {
		chosen += bt.hull[bt.at].cost
	}
	if !opts.TurboQuant {
		// never worse than a preset of the same size by the same prediction: the best preset
		// whose mixture fits the budget replaces the solver's choice if it predicts less
		if pre, types, cost := bestPresetWithin(model, ts, free, budget, fixedBytes, opts); pre != "" && cost < chosen {
			for _, bt := range free {
				d := &out[bt.idx]
				d.Type, d.Fallback = types[bt.idx], false
				d.Rule = fmt.Sprintf("budget: preset %s predicts less (%.3g vs %.3g)", pre, cost, chosen)
			}
			p.warn("the %s preset's mixture predicts less error than the budget solver's choice at this size; using it", pre)
			return finishBudget(p, out), nil
		}
	}
	for _, bt := range free {
		o := bt.hull[bt.at]
		d := &out[bt.idx]
		d.Type = o.typ
		d.Fallback = false
		if sensitive {
			d.Rule = fmt.Sprintf("budget: predicted KL %.2e", o.cost)
		} else {
			d.Rule = fmt.Sprintf("budget: predicted rel. error %.2e", o.cost/float64(max(1, ts[bt.idx].Elements())))
		}
	}
	return finishBudget(p, out), nil
}

func finishBudget(p *Plan, out []policy.Decision) []policy.Decision {
	if p.Policy == "" {
		p.Policy = "budget"
	} else {
		p.Policy += "+budget"
	}
	return out
}

// budgetPresets are the presets the budget is checked against (llama-quantize's mixtures).
var budgetPresets = []policy.FileType{policy.FileTypeQ2_K, policy.FileTypeQ3_K_S, policy.FileTypeQ3_K_M, policy.FileTypeQ3_K_L,
	policy.FileTypeIQ4_XS, policy.FileTypeQ4_K_S, policy.FileTypeQ4_K_M, policy.FileTypeQ5_K_S, policy.FileTypeQ5_K_M,
	policy.FileTypeQ6_K, policy.FileTypeQ8_0}

// bestPresetWithin returns the preset whose mixture (for the free tensors; the others keep
// their decisions) fits budget bytes with the least predicted cost, its type per tensor and
// that cost; "" when none fits or a preset type has no measured cost for some tensor.
func bestPresetWithin(model policy.Model, ts []policy.Tensor, free []*budgetTensor, budget, fixedBytes int64,
	opts *TypeOptions) (string, map[int]gguf.GGMLType, float64) {
	best, bestCost := "", math.Inf(1)
	var bestTypes map[int]gguf.GGMLType
	for _, ft := range budgetPresets {
		mix := policy.NewMixture(ft)
		mix.HasImatrix = opts.IMatrixPath != "" || opts.Importance != nil
		mix.LeaveOutput = opts.LeaveOutput
		pds, err := mix.Assign(model, ts)
		if err != nil {
			continue
		}
		used, cost, ok := fixedBytes, 0.0, true
		types := make(map[int]gguf.GGMLType, len(free))
		for _, bt := range free {
			typ := pds[bt.idx].Type
			o, found := bt.option(typ)
			if !found {
				ok = false
				break
			}
			used += o.bytes
			cost += o.cost
			types[bt.idx] = typ
		}
		if ok && used <= budget && cost < bestCost {
			best, bestCost, bestTypes = strings.ToLower(ft.String()), cost, types
		}
	}
	return best, bestTypes, bestCost
}

// option returns the measured option of type typ (whether or not it is on the hull).
func (bt *budgetTensor) option(typ gguf.GGMLType) (budgetOption, bool) {
	for _, o := range bt.all {
		if o.typ == typ {
			return o, true
		}
	}
	return budgetOption{}, false
}

// measureTensor builds the convex hull of (bytes, predicted cost) over the tensor's ladder.
func measureTensor(idx int, t policy.Tensor, read func(r0, n int64, dst []float32) error, rowsPerMatrix int64,
	imp *importanceLookup, improved bool, floor, ref gguf.GGMLType) (*budgetTensor, error) {
	cols := t.Cols()
	rows := t.Elements() / cols
	lad := ladderAbove(ladderFor(cols), floor, cols)
	nlad := len(lad)
	if ref != gguf.TypeCount {
		// the reference type is measured too (last), whether or not the ladder has it
		if _, err := ref.RowBytes(cols); err != nil {
			ref = gguf.TypeCount
		} else {
			lad = append(append([]gguf.GGMLType(nil), lad...), ref)
		}
	}
	var impFn func(int64) ([]float32, error)
	if imp.enabled() {
		f, err := imp.forTensor(t.Name, cols)
		if err == nil {
			impFn = f
		}
	}
	nsample := min(int64(budgetSampleRows), rows)
	errSum := make([]float64, len(lad))
	var energy float64
	x := make([]float32, cols)
	y := make([]float32, cols)
	for s := int64(0); s < nsample; s++ {
		r := s * rows / nsample
		if err := read(r, 1, x); err != nil {
			return nil, err
		}
		var w []float32
		if impFn != nil && rowsPerMatrix > 0 {
			var err error
			if w, err = impFn(r / rowsPerMatrix); err != nil {
				return nil, err
			}
		}
		for c, v := range x {
			energy += weightAt(w, c) * float64(v) * float64(v)
		}
		for k, typ := range lad {
			if err := roundTrip(typ, x, y, w, improved, t.Name); err != nil {
				return nil, err
			}
			var e float64
			for c := range x {
				d := float64(x[c]) - float64(y[c])
				e += weightAt(w, c) * d * d
			}
			errSum[k] += e
		}
	}
	if energy == 0 {
		energy = 1
	}
	opts2 := make([]budgetOption, nlad)
	for k, typ := range lad[:nlad] {
		rb, err := typ.RowBytes(cols)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		opts2[k] = budgetOption{typ: typ, bytes: rb * rows, cost: errSum[k] / energy * float64(t.Elements())}
	}
	bt := &budgetTensor{idx: idx, all: opts2}
	if ref != gguf.TypeCount {
		bt.refCost = errSum[nlad] / energy * float64(t.Elements())
	}
	return bt, nil
}

func weightAt(w []float32, c int) float64 {
	if w == nil {
		return 1
	}
	return float64(w[c])
}

func roundTrip(typ gguf.GGMLType, x, y, w []float32, improved bool, name string) error {
	switch typ {
	case gguf.TypeF16:
		for i, v := range x {
			y[i] = quant.FP16ToFP32(quant.FP32ToFP16(v))
		}
		return nil
	case gguf.TypeF32:
		copy(y, x)
		return nil
	}
	rb, err := quant.RowSize(typ, len(x))
	if err != nil {
		return err
	}
	buf := make([]byte, rb)
	o := &quant.Options{Importance: w, Threads: 1, TensorName: name}
	if improved {
		o.Mode = quant.ModeImproved
	}
	if err := quant.Quantize(typ, buf, x, 1, len(x), o); err != nil {
		return err
	}
	return quant.Dequantize(typ, y, buf)
}

// lowerHull keeps the options on the lower convex hull of cost over bytes, cheapest first,
// with strictly decreasing cost.
func lowerHull(in []budgetOption) []budgetOption {
	o := append([]budgetOption(nil), in...)
	sort.SliceStable(o, func(i, j int) bool {
		if o[i].bytes != o[j].bytes {
			return o[i].bytes < o[j].bytes
		}
		return o[i].cost < o[j].cost
	})
	var h []budgetOption
	for _, p := range o {
		if len(h) > 0 && p.bytes == h[len(h)-1].bytes {
			continue
		}
		if len(h) > 0 && p.cost >= h[len(h)-1].cost {
			continue // more bytes, no better
		}
		for len(h) >= 2 {
			a, b := h[len(h)-2], h[len(h)-1]
			// b is above the segment a-p: drop it
			if (b.cost-a.cost)*float64(p.bytes-a.bytes) >= (p.cost-a.cost)*float64(b.bytes-a.bytes) {
				h = h[:len(h)-1]
				continue
			}
			break
		}
		h = append(h, p)
	}
	return h
}

type upgradeHeap []*budgetTensor

func (h upgradeHeap) ratio(i int) float64 {
	b := h[i]
	cur, next := b.hull[b.at], b.hull[b.at+1]
	return (cur.cost - next.cost) / float64(next.bytes-cur.bytes)
}
func (h upgradeHeap) Len() int           { return len(h) }
func (h upgradeHeap) Less(i, j int) bool { return h.ratio(i) > h.ratio(j) }
func (h upgradeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *upgradeHeap) Push(x any)        { *h = append(*h, x.(*budgetTensor)) }
func (h *upgradeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
