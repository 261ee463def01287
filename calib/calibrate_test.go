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
)

// TestCalibrateMatchesFullForward checks the layer-by-layer statistics against a
// straightforward float64 accumulation of the activations a full (all layers at once) forward
// pass feeds every linear layer, padding excluded, for dense, MoE and hybrid (Qwen3.5/3.6:
// gated delta-net + attention, all experts) models. The two
// forwards use the same kernels and batch boundaries, so the sums agree to float64 rounding
// (relative 1e-12); the max |x| must be equal exactly. The input Gram matrices are checked
// against a float64 XᵀX of the same activations (checkHessians); "qwen3moe-diag" calibrates
// without per-expert matrices (ExpertHessianBytes < 0), so the experts' reconstruction is checked.
func TestCalibrateMatchesFullForward(t *testing.T) {
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
