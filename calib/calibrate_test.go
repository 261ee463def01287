package calib

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/quant/kernels"
)

// TestCalibrateMatchesFullForward checks the layer-by-layer statistics against a
// straightforward float64 accumulation of the activations a full (all layers at once) forward
// pass feeds every linear layer, padding excluded, for dense, MoE and hybrid (Qwen3.5/3.6:
// gated delta-net + attention, all experts) models. The two
// forwards use the same kernels and batch boundaries, so the sums agree to float64 rounding
// (relative 1e-12); the max |x| must be equal exactly. The input Gram matrices are checked
// against a float64 XᵀX of the same activations (checkHessians); "qwen3moe-diag" calibrates
// without per-expert matrices (ExpertHessianBytes < 0), so the experts' reconstruction is checked.
// The AMX path is off here: it sums bf16 products in another order than the float32-weight
// forward (TestCalibrateAMXAgrees compares it).
func TestCalibrateMatchesFullForward(t *testing.T) {
	kernels.SetAMX(false)
	defer kernels.SetAMX(true)
	for _, arch := range []string{"qwen3", "qwen3moe", "qwen3moe-diag", "llama", "qwen35moe", "qwen35"} {
		t.Run(arch, func(t *testing.T) {
			var expertBytes int64
			arch, diag := strings.CutSuffix(arch, "-diag")
			if diag {
				expertBytes = -1
			}
			o := fixtures.Preset(arch)
			if arch == "llama" {
				o.TieEmbeddings = true
			}
			dir := genModel(t, o)
			vocab := vocabOf(t, dir)
			seqs := randSeqs(7, 4, vocab, 40, 150, 64)
			res := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, UncoveredSample: -1, NoBaseline: true, ExpertHessianBytes: expertBytes})
			// without Gram matrices (and no budget) the forward keeps the 16-bit weights packed
			// for the GEMM: the statistics are the same bits as this run's, which does not
			res2 := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, UncoveredSample: -1, NoBaseline: true,
				NoHessians: true, NoSensitivity: true, SensitivityTokens: -1, ExpertHessianBytes: expertBytes})
			if res.PackedWeightBytes != 0 || res2.PackedWeightBytes == 0 {
				t.Errorf("packed weights: %d bytes with Gram matrices, %d without", res.PackedWeightBytes, res2.PackedWeightBytes)
			}
			for name, ts := range res.Stats.Tensors {
				t2 := res2.Stats.Tensors[name]
				if t2 == nil || !slices.Equal(ts.Counts, t2.Counts) || !slices.Equal(ts.MaxAbs, t2.MaxAbs) ||
					!slices.EqualFunc(ts.SumSq, t2.SumSq, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
					t.Fatalf("%s: the statistics with packed weights differ", name)
				}
			}

			ms := fullSource(t, dir)
			m, err := infer.Load(ms, infer.Options{Threads: 2, CtxSize: 256, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			cfg := m.Config()
			nv := newNaive(cfg.NExpert)
			gv := newGramObserver()
			for _, s := range seqs {
				sess, err := m.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				sess.SetObserver(teeObserver{nv, gv})
				nv.start(s.Valid)
				gv.start(s.Valid)
				if _, err := sess.Eval(s.Tokens, infer.LogitsAll); err != nil {
					t.Fatal(err)
				}
			}
			st := res.Stats
			checked := 0
			for name, sums := range nv.sums {
				ts := st.Tensors[name]
				if ts == nil {
					t.Fatalf("no statistics for %s", name)
				}
				for e := range sums {
					if sums[e] == nil {
						if ts.Counts[e] != 0 {
							t.Errorf("%s expert %d: count %d, naive 0", name, e, ts.Counts[e])
						}
						continue
					}
					if ts.Counts[e] != nv.counts[name][e] {
						t.Errorf("%s[%d]: count %d, naive %d", name, e, ts.Counts[e], nv.counts[name][e])
					}
					for c, want := range sums[e] {
						got := ts.SumSq[e*ts.Cols+c]
						if math.Abs(got-want) > 1e-12*math.Abs(want)+1e-300 {
							t.Fatalf("%s[%d] column %d: Σx² %v, float64 reference %v", name, e, c, got, want)
						}
						if float64(ts.MaxAbs[e*ts.Cols+c]) != nv.maxes[name][e][c] {
							t.Fatalf("%s[%d] column %d: max|x| %v, reference %v", name, e, c, ts.MaxAbs[e*ts.Cols+c], nv.maxes[name][e][c])
						}
					}
					checked++
				}
			}
			// every observed tensor has statistics and nothing extra was collected
			for name := range st.Tensors {
				if _, ok := nv.sums[name]; !ok {
					t.Errorf("statistics for %s, which the full forward never fed", name)
				}
			}
			if checked == 0 {
				t.Fatal("nothing compared")
			}
			checkHessians(t, res, gv, nv)
			if cfg.NExpert > 0 { // every routed input is per-expert, or diagonal for the size limit
				hs, err := OpenHessians(res.HessianDir)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, name := range hs.Names() {
					if w := hs.weights[name].w; w.experts >= 0 {
						in := hs.weights[name].ix.inputs[w.experts]
						if (in.kind == GramDiagonal) != diag || (diag && in.reason != GramReasonDisk) {
							t.Fatalf("%s: expert input of kind %d (%s)", name, in.kind, GramReasonText(in.reason))
						}
						n++
					}
				}
				if n == 0 {
					t.Fatal("no expert inputs")
				}
			}
			var valid int64
			for _, s := range seqs {
				valid += int64(s.Valid)
			}
			if st.Meta.Tokens != valid {
				t.Errorf("meta tokens %d, want %d", st.Meta.Tokens, valid)
			}
			if cfg.NExpert > 0 {
				if len(st.Routing) != cfg.NLayer {
					t.Fatalf("%d routing layers, want %d", len(st.Routing), cfg.NLayer)
				}
				for _, r := range st.Routing {
					var sum int64
					for _, c := range r.Counts {
						sum += c
					}
					if r.Tokens != valid || sum != valid*int64(r.K) {
						t.Errorf("layer %d routing: %d tokens, %d selections; want %d and %d", r.Layer, r.Tokens, sum, valid, valid*int64(r.K))
					}
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(res.ConfigPath), RoutingFile)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestUncoveredExperts calibrates a MoE model with so few tokens that some experts are never
// routed to: they must get statistics from the layer's tokens run through them (gate/up: the
// FFN inputs, i.e. the router's inputs; down: silu(W_gate·x)·(W_up·x), checked against a
// float64 computation, relative 1e-4), flagged synthetic, and be reported.
func TestUncoveredExperts(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.Layers, o.Experts, o.ExpertsUsed = 1, 16, 2
	dir := genModel(t, o)
	seqs := randSeqs(2, 1, vocabOf(t, dir), 5, 5, 64)
	var warned []string
	res := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true,
		Warn: func(s string) { warned = append(warned, s) }})
	cov := res.Coverage[0]
	if len(cov.Uncovered) == 0 {
		t.Fatal("every expert was routed; the test needs uncovered ones")
	}
	st := res.Stats
	router := st.Tensors["blk.0.ffn_gate_inp.weight"]
	gate, up, down := st.Tensors["blk.0.ffn_gate_exps.weight"], st.Tensors["blk.0.ffn_up_exps.weight"], st.Tensors["blk.0.ffn_down_exps.weight"]
	ms := fullSource(t, dir)
	wg := bytesAsF32(ms.tensors["blk.0.ffn_gate_exps.weight"].Data)
	wu := bytesAsF32(ms.tensors["blk.0.ffn_up_exps.weight"].Data)
	// the router inputs of the valid tokens, recovered by a full forward
	m, err := infer.Load(ms, infer.Options{Threads: 2, CtxSize: 64, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec := &rowRecorder{name: "blk.0.ffn_gate_inp.weight"}
	sess, _ := m.NewSession()
	sess.SetObserver(rec)
	if _, err := sess.Eval(seqs[0].Tokens, infer.LogitsNone); err != nil {
		t.Fatal(err)
	}
	E, F := gate.Cols, down.Cols
	rows := rec.rows[:seqs[0].Valid*E]
	hs, err := OpenHessians(res.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cov.Uncovered {
		for _, ts := range []*TensorStats{gate, up, down} {
			if !ts.Synthetic[e] || ts.Counts[e] != int64(seqs[0].Valid) {
				t.Fatalf("%s expert %d: synthetic %v count %d", ts.Name, e, ts.Synthetic[e], ts.Counts[e])
			}
		}
		for c := 0; c < E; c++ {
			if gate.SumSq[e*E+c] != router.SumSq[c] || up.SumSq[e*E+c] != router.SumSq[c] {
				t.Fatalf("expert %d column %d: gate/up statistics differ from the FFN input's", e, c)
			}
		}
		want := make([]float64, F)
		for r := 0; r < seqs[0].Valid; r++ {
			x := rows[r*E : (r+1)*E]
			for j := 0; j < F; j++ {
				var g, u float64
				for c := 0; c < E; c++ {
					g += float64(wg[(e*F+j)*E+c]) * float64(x[c])
					u += float64(wu[(e*F+j)*E+c]) * float64(x[c])
				}
				a := g / (1 + math.Exp(-g)) * u
				want[j] += a * a
			}
		}
		for j, w := range want {
			if got := down.SumSq[e*F+j]; math.Abs(got-w) > 1e-4*w+1e-12 {
				t.Fatalf("expert %d down column %d: Σx² %v, float64 %v", e, j, got, w)
			}
		}
		// the per-expert Gram matrices saw the same sampled rows: their diagonals are the
		// statistics' mean squares (float32 tile sums: relative 1e-5)
		for _, ts := range []*TensorStats{gate, down} {
			h, ok, err := hs.For(ts.Name, e)
			if err != nil || !ok {
				t.Fatalf("%s expert %d: no H (ok %v, err %v)", ts.Name, e, ok, err)
			}
			for c := 0; c < ts.Cols; c++ {
				w := ts.SumSq[e*ts.Cols+c] / float64(ts.Counts[e])
				if got := h.At(c, c); math.Abs(got-w) > 1e-5*w+1e-30 {
					t.Fatalf("%s expert %d: H[%d][%d] = %v, statistics %v", ts.Name, e, c, c, got, w)
				}
			}
		}
	}
	for e := range gate.Counts {
		if !slices.Contains(cov.Uncovered, e) && gate.Synthetic[e] {
			t.Errorf("routed expert %d flagged synthetic", e)
		}
	}
	if len(warned) == 0 || !strings.Contains(strings.Join(warned, "\n"), "never routed") {
		t.Errorf("no warning about never-routed experts: %v", warned)
	}
}

type rowRecorder struct {
	name string
	rows []float32
}

func (r *rowRecorder) Linear(name string, _ int, x []float32, n, cols int) {
	if name == r.name {
		r.rows = append(r.rows, x[:n*cols]...)
	}
}

func (r *rowRecorder) Route(int, []int32, []float32, int, int) {}

// TestCalibrateAMXAgrees runs the calibration forward with the AMX GEMM (where the machine has
// it) and without, and requires the statistics and Gram matrices to agree to float32 rounding
// carried through the layers: relative 1e-3 for Σx², max |x| and every Gram entry (against
// the largest diagonal entry of its matrix). The two orders of summation differ by a few units
// of 2⁻²⁴ per product (TestSgemmHalfAMX), which each layer passes on to the next and which
// the hybrid's recurrence and the gated products amplify (up to 1.1·10⁻⁴ seen on a single
// max |x|, qwen35moe's fourth block); a wrong product is off by far more than that.
func TestCalibrateAMXAgrees(t *testing.T) {
	if !kernels.HasAMX() {
		t.Skip("no AMX-BF16 on this machine: the calibration forward runs the FMA GEMM only")
	}
	for _, arch := range []string{"qwen3", "qwen3moe", "qwen35moe"} {
		t.Run(arch, func(t *testing.T) {
			dir := genModel(t, fixtures.Preset(arch))
			seqs := randSeqs(7, 4, vocabOf(t, dir), 40, 150, 64)
			o := Options{Sequences: seqs, Threads: 2, UncoveredSample: -1, NoBaseline: true, NoSensitivity: true, SensitivityTokens: -1}
			kernels.SetAMX(false)
			off := calibrate(t, dir, o)
			kernels.SetAMX(true)
			on := calibrate(t, dir, o)
			worst := 0.0
			close := func(what string, a, b, scale float64) {
				t.Helper()
				if math.Abs(a-b) > 1e-3*scale {
					t.Fatalf("%s: %g with AMX, %g without", what, b, a)
				}
				if scale > 0 {
					worst = max(worst, math.Abs(a-b)/scale)
				}
			}
			for name, ts := range off.Stats.Tensors {
				t2 := on.Stats.Tensors[name]
				if t2 == nil || !slices.Equal(ts.Counts, t2.Counts) {
					t.Fatalf("%s: counts differ", name)
				}
				for i := range ts.SumSq {
					close(name+" Σx²", ts.SumSq[i], t2.SumSq[i], math.Abs(ts.SumSq[i]))
					close(name+" max|x|", float64(ts.MaxAbs[i]), float64(t2.MaxAbs[i]), math.Abs(float64(ts.MaxAbs[i])))
				}
			}
			h0, err := OpenHessians(off.HessianDir)
			if err != nil {
				t.Fatal(err)
			}
			h1, err := OpenHessians(on.HessianDir)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, name := range h0.Names() {
				ref := h0.weights[name]
				experts := []int{-1}
				if ref.w.experts >= 0 {
					experts = experts[:0]
					for e := range ref.ix.inputs[ref.w.experts].counts {
						experts = append(experts, e)
					}
				}
				for _, e := range experts {
					g0, ok0, err := h0.For(name, e)
					if err != nil {
						t.Fatal(err)
					}
					g1, ok1, err := h1.For(name, e)
					if err != nil {
						t.Fatal(err)
					}
					if ok0 != ok1 {
						t.Fatalf("%s[%d]: a Gram matrix with one path only", name, e)
					}
					if !ok0 {
						continue
					}
					big := 0.0
					for i := 0; i < g0.SymmetricDim(); i++ {
						big = max(big, g0.At(i, i))
					}
					for i := 0; i < g0.SymmetricDim(); i++ {
						for j := i; j < g0.SymmetricDim(); j++ {
							close(name+" Gram", g0.At(i, j), g1.At(i, j), big)
						}
					}
					n++
				}
			}
			if n == 0 {
				t.Fatal("no Gram matrices compared")
			}
			t.Logf("largest relative difference: %.2g", worst)
		})
	}
}
