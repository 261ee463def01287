package calib

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
)

// dnSynth is a random Gated DeltaNet batch sequence: n input columns, hv value heads of dk
// reading hk key heads, T tokens.
type dnSynth struct {
	n, dk, hv, hk, T           int
	x, qk, beta, g, o, z, norm []float32
}

func newDNSynth(seed uint64, n, dk, hv, hk, T int) *dnSynth {
	r := rand.New(rand.NewPCG(seed, 7))
	s := &dnSynth{n: n, dk: dk, hv: hv, hk: hk, T: T}
	f := func(k int, sc float64) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(r.NormFloat64() * sc)
		}
		return v
	}
	s.x = f(T*n, 1)
	for t := 1; t < T; t++ { // a slow common component, as real hidden states have
		for m := 0; m < n; m++ {
			s.x[t*n+m] += 0.7 * s.x[(t-1)*n+m]
		}
	}
	s.qk = f(T*2*hk*dk, 1)
	for i := 0; i+dk <= len(s.qk); i += dk { // L2-normalised heads
		var ss float64
		for _, v := range s.qk[i : i+dk] {
			ss += float64(v) * float64(v)
		}
		for j := i; j < i+dk; j++ {
			s.qk[j] /= float32(math.Sqrt(ss))
		}
	}
	s.beta, s.g = make([]float32, T*hv), make([]float32, T*hv)
	for i := range s.beta {
		s.beta[i] = float32(0.2 + 0.7*r.Float64())
		s.g[i] = float32(-0.5 * r.Float64())
	}
	s.o, s.z, s.norm = f(T*hv*dk, 0.3), f(T*hv*dk, 1.5), f(dk, 1)
	return s
}

// trace returns rows [t0, t1) as a batch at position t0.
func (s *dnSynth) trace(t0, t1 int) *infer.DeltaNetTrace {
	vd, qs := s.hv*s.dk, 2*s.hk*s.dk
	return &infer.DeltaNetTrace{T: t1 - t0, Pos0: t0, X: s.x[t0*s.n : t1*s.n], QK: s.qk[t0*qs : t1*qs], QKStride: qs,
		Beta: s.beta[t0*s.hv : t1*s.hv], G: s.g[t0*s.hv : t1*s.hv], O: s.o[t0*vd : t1*vd], Z: s.z[t0*vd : t1*vd],
		Norm: s.norm, Eps: 1e-6, NEmbd: s.n, DState: s.dk, NKHeads: s.hk, NVHeads: s.hv, Scale: float32(1 / math.Sqrt(float64(s.dk)))}
}

// valueResponse runs head h's delta rule in float64 on one value channel v(t) and returns
// its outputs o(t) (llama.cpp's order: decay, delta against the decayed state, write, read).
func (s *dnSynth) valueResponse(h int, v []float64) []float64 {
	dk, hv, kh := s.dk, s.hv, h%s.hk
	qs, kdim := 2*s.hk*dk, s.hk*dk
	st := make([]float64, dk)
	out := make([]float64, s.T)
	scale := 1 / math.Sqrt(float64(dk))
	for t := 0; t < s.T; t++ {
		q := s.qk[t*qs+kh*dk : t*qs+(kh+1)*dk]
		k := s.qk[t*qs+kdim+kh*dk : t*qs+kdim+(kh+1)*dk]
		decay := math.Exp(float64(s.g[t*hv+h]))
		var sk float64
		for i := range st {
			st[i] *= decay
			sk += st[i] * float64(k[i])
		}
		d := (v[t] - sk) * float64(s.beta[t*hv+h])
		var sq float64
		for i := range st {
			st[i] += d * float64(k[i])
			sq += st[i] * float64(q[i])
		}
		out[t] = sq * scale
	}
	return out
}

// TestDeltaNetHeadHessians checks the per-head matrices against their definition, computed
// independently in float64: for a random row perturbation Δw shared by a head's channels,
// Δwᵀ·H_h·Δw (times the rows) must equal Σ_t w_h(t)·δo(t)², where δo is the change of the
// head's delta-rule output when every value v(t) moves by Δw·x(t) (float64 delta rule on
// values, not on inputs), and Δwᵀ·G_h·Δw·dk must equal Σ_t Σ_j (γ_j·ô_j(t)·δSiLU_j(t))², the
// gated norm's change for z_j(t) moved by ε·Δw·x(t), by a central difference. The
// accumulator's recurrence runs in float32 over two batches (a sequence split at position 13)
// and a second sequence, with 3 padding rows left out: tolerance 2e-4 relative (float32
// recurrence and Gram partial sums; the finite difference's own error is ~ε²).
func TestDeltaNetHeadHessians(t *testing.T) {
	for _, hv := range []int{4, 12} { // one matrix per head; 4 groups of 3 heads
		testDeltaNetHeadHessians(t, hv)
	}
}

func testDeltaNetHeadHessians(t *testing.T, hv int) {
	const n, dk, hk, T, pad = 12, 4, 2, 29, 3
	groups := headGroups(hv)
	if len(newDeltaNetAcc(newDNSynth(1, n, dk, hv, hk, 2).trace(0, 1), 1, false).v) != groups || groups != min(hv, 4) {
		t.Fatalf("%d heads: %d groups", hv, groups)
	}
	seqs := []*dnSynth{newDNSynth(1, n, dk, hv, hk, T), newDNSynth(2, n, dk, hv, hk, T)}
	a := newDeltaNetAcc(seqs[0].trace(0, 13), 2, false)
	for _, s := range seqs {
		for _, r := range [][2]int{{0, 13}, {13, T}} {
			if err := a.add(s.trace(r[0], r[1]), T-pad); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.flush(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := 0; trial < 5; trial++ {
		dw := make([]float64, n)
		for i := range dw {
			dw[i] = rng.NormFloat64()
		}
		quad := func(acc *gramAcc) float64 {
			var q float64
			for i := 0; i < n; i++ {
				for j := i; j < n; j++ {
					v := float64(acc.at(i, j)) * dw[i] * dw[j]
					if i != j {
						v *= 2
					}
					q += v
				}
			}
			return q
		}
		wantV, wantZ := make([]float64, groups), make([]float64, groups)
		for h := 0; h < hv; h++ {
			grp := h / (hv / groups)
			for _, s := range seqs {
				dv := make([]float64, T)
				for t0 := 0; t0 < T; t0++ {
					for m := 0; m < n; m++ {
						dv[t0] += dw[m] * float64(s.x[t0*n+m])
					}
				}
				do := s.valueResponse(h, dv) // linear: the response to the change alone
				for t0 := 0; t0 < T-pad; t0++ {
					o := s.o[t0*hv*dk+h*dk : t0*hv*dk+(h+1)*dk]
					z := s.z[t0*hv*dk+h*dk : t0*hv*dk+(h+1)*dk]
					var ss float64
					for _, v := range o {
						ss += float64(v) * float64(v)
					}
					inv := 1 / math.Sqrt(ss/dk+1e-6)
					var wv float64
					const eps = 1e-4
					silu := func(x float64) float64 { return x / (1 + math.Exp(-x)) }
					for j := range o {
						gj := float64(s.norm[j]) * inv
						wv += math.Pow(gj*silu(float64(z[j])), 2) / dk
						dz := eps * dv[t0]
						fd := (silu(float64(z[j])+dz) - silu(float64(z[j])-dz)) / (2 * eps)
						wantZ[grp] += math.Pow(gj*float64(o[j])*fd, 2)
					}
					wantV[grp] += wv * do[t0] * do[t0]
				}
			}
		}
		for h := 0; h < groups; h++ {
			gotV, gotZ := quad(a.v[h]), quad(a.z[h])*dk
			rows := int64(2 * (T - pad) * (hv / groups))
			if a.v[h].rows != rows || a.z[h].rows != rows {
				t.Fatalf("group %d: %d/%d rows, want %d", h, a.v[h].rows, a.z[h].rows, rows)
			}
			if !(math.Abs(gotV-wantV[h]) <= 2e-4*wantV[h]) || !(math.Abs(gotZ-wantZ[h]) <= 2e-4*wantZ[h]) { // NaN fails
				t.Fatalf("%d heads, trial %d group %d: value ΔwᵀHΔw %.9g, reference %.9g; gate %.9g, reference %.9g",
					hv, trial, h, gotV, wantV[h], gotZ, wantZ[h])
			}
		}
	}
}

// TestDeltaNetHeadsBudget: the per-head matrices are counted in the memory estimate and are
// the first thing a budget that cannot hold them drops (named in a warning), before any plain
// matrix; with room they are written for every Gated DeltaNet block.
func TestDeltaNetHeadsBudget(t *testing.T) {
	o := fixtures.Preset("qwen35moe")
	o.Layers = 1
	dir := genModel(t, o)
	seqs := randSeqs(5, 2, vocabOf(t, dir), 30, 60, 64)
	base := Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true}
	full := calibrate(t, dir, base)
	hs, err := OpenHessians(full.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := hs.HeadHessian(0, VHeadsEntry, 0); !ok || err != nil || hs.HeadGroups(0, VHeadsEntry) != headGroups(o.Hybrid.LinearValueHeads) {
		t.Fatalf("no value-head matrices with room for them (ok %v, err %v, %d groups)", ok, err, hs.HeadGroups(0, VHeadsEntry))
	}
	var warned []string
	opts := base
	opts.MemoryBudget = full.EstimatedBytes - 1
	opts.Warn = func(s string) { warned = append(warned, s) }
	res := calibrate(t, dir, opts)
	w := strings.Join(warned, "\n")
	if !strings.Contains(w, "memory budget: Gated DeltaNet per-head matrices (block 0)") || strings.Contains(w, "memory budget: attn_in") {
		t.Fatalf("warnings %q: want the per-head matrices, and only them, dropped", w)
	}
	if res.EstimatedBytes > opts.MemoryBudget {
		t.Fatalf("estimate %d over the budget %d", res.EstimatedBytes, opts.MemoryBudget)
	}
	hs2, err := OpenHessians(res.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := hs2.HeadHessian(0, VHeadsEntry, 0); ok || err != nil || hs2.HeadGroups(0, VHeadsEntry) != 0 {
		t.Fatalf("per-head matrices written over the budget (ok %v, err %v)", ok, err)
	}
	if _, ok, err := hs2.For("blk.0.attn_qkv.weight", -1); !ok || err != nil {
		t.Fatalf("attn_qkv lost its plain matrix (ok %v, err %v)", ok, err)
	}
}
