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
// forward (TestCalibrateAMXAgrees compares it); so is the rounded AVX512-BF16 path
// (ExactForward; TestCalibrateBF16Agrees compares it).
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
			res := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, UncoveredSample: -1, NoBaseline: true, ExpertHessianBytes: expertBytes, ExactForward: true})
			// without Gram matrices (and no budget) the forward keeps the 16-bit weights packed
			// for the GEMM: the statistics are the same bits as this run's, which does not
			res2 := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, UncoveredSample: -1, NoBaseline: true,
				NoHessians: true, NoSensitivity: true, SensitivityTokens: -1, ExpertHessianBytes: expertBytes, ExactForward: true})
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
	res := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true, ExactForward: true,
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
		// statistics' mean squares (float32 tile sums: relative 1e-5; the file's storage 2⁻¹⁶)
		for _, ts := range []*TensorStats{gate, down} {
			h, ok, err := hs.For(ts.Name, e)
			if err != nil || !ok {
				t.Fatalf("%s expert %d: no H (ok %v, err %v)", ts.Name, e, ok, err)
			}
			for c := 0; c < ts.Cols; c++ {
				w := ts.SumSq[e*ts.Cols+c] / float64(ts.Counts[e])
				if got := h.At(c, c); math.Abs(got-w) > (1e-5+gramStoreTol)*w+1e-30 {
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

// TestCalibrateAMXAgrees runs the exact calibration forward (ExactForward: on a CPU with
// AVX512-BF16 the default without AMX would round the activations) with the AMX GEMM (where
// the machine has it) and without, and requires the statistics and Gram matrices to agree to
// float32 rounding carried through the layers: relative 1e-3 for Σx², max |x| and every Gram
// entry (against the largest diagonal entry of its matrix). The two orders of summation differ
// by a few units of 2⁻²⁴ per product (TestSgemmHalfAMX), which each layer passes on to the next
// and which the hybrid's recurrence and the gated products amplify (up to 1.1·10⁻⁴ seen on a
// single max |x|, qwen35moe's fourth block); a wrong product is off by far more than that.
// (The default, rounded forward is compared with the exact one by TestCalibrateBF16Agrees.)
func TestCalibrateAMXAgrees(t *testing.T) {
	if !kernels.HasAMX() {
		t.Skip("no AMX-BF16 on this machine: the calibration forward runs the FMA GEMM only")
	}
	defer kernels.SetAMX(true)
	for _, arch := range []string{"qwen3", "qwen3moe", "qwen35moe"} {
		t.Run(arch, func(t *testing.T) {
			dir := genModel(t, fixtures.Preset(arch))
			seqs := randSeqs(7, 4, vocabOf(t, dir), 40, 150, 64)
			o := Options{Sequences: seqs, Threads: 2, UncoveredSample: -1, NoBaseline: true, NoSensitivity: true, SensitivityTokens: -1, ExactForward: true}
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

// TestCalibrateBF16Agrees compares the default forward on a CPU with AMX or AVX512-BF16 (bf16
// weights multiply activations rounded to bf16, on whichever of the two runs them:
// infer.Options.BF16Products) with the
// exact one (ExactForward) on the trained dense qwen3 (random weights amplify any change
// chaotically through sharp attention, and a MoE's routing may flip on a near tie). A rounded
// activation moves by at most 2⁻⁹ of itself, so per tensor the statistics (Σx² and max|x| per
// column) and the Gram matrices (from the rounded rows too) must agree to 1 % in relative L2
// norm (measured: at most 0.3 %), single columns of Σx² to 5 % (3.5 %); and they must differ somewhere, or the rounded
// path did not run. The record names the arithmetic.
func TestCalibrateBF16Agrees(t *testing.T) {
	defer kernels.SetBF16DP(kernels.SetBF16DP(true)) // also where VDPBF16PS is not the default
	if !bf16Rounded(false) {
		t.Skip("neither AMX nor AVX512-BF16 on this machine: the forward's products stay exact")
	}
	dir := filepath.Join("..", "testdata", "trained", "qwen3")
	seqs := randSeqs(7, 4, vocabOf(t, dir), 40, 150, 64)
	o := Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true, SensitivityTokens: -1, OutDir: t.TempDir(), ExactForward: true}
	exact := calibrate(t, dir, o)
	o.OutDir, o.ExactForward = t.TempDir(), false
	rounded := calibrate(t, dir, o)
	if p := rounded.Config.Calibration.Precision; !strings.Contains(p, "rounded to bf16") {
		t.Errorf("the record says %q", p)
	}
	worst, worstCol := 0.0, 0.0
	// agree checks the relative L2 difference of two vectors of one quantity
	agree := func(what string, a, b []float64) {
		t.Helper()
		var d, n float64
		for i := range a {
			d += (a[i] - b[i]) * (a[i] - b[i])
			n += a[i] * a[i]
		}
		if n == 0 {
			return
		}
		if r := math.Sqrt(d / n); r > 0.01 {
			t.Errorf("%s: relative L2 difference %.3g", what, r)
		} else {
			worst = max(worst, r)
		}
	}
	for name, ts := range exact.Stats.Tensors {
		t2 := rounded.Stats.Tensors[name]
		if t2 == nil || !slices.Equal(ts.Counts, t2.Counts) {
			t.Fatalf("%s: counts differ", name)
		}
		agree(name+" Σx²", ts.SumSq, t2.SumSq)
		m0, m1 := make([]float64, len(ts.MaxAbs)), make([]float64, len(ts.MaxAbs))
		for i := range ts.MaxAbs {
			m0[i], m1[i] = float64(ts.MaxAbs[i]), float64(t2.MaxAbs[i])
		}
		agree(name+" max|x|", m0, m1)
		for i := range ts.SumSq {
			if d := math.Abs(ts.SumSq[i]-t2.SumSq[i]) / ts.SumSq[i]; d > 0.05 {
				t.Errorf("%s column %d: Σx² %g rounded, %g exact", name, i, t2.SumSq[i], ts.SumSq[i])
			} else {
				worstCol = max(worstCol, d)
			}
		}
	}
	h0, err := OpenHessians(exact.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := OpenHessians(rounded.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range h0.Names() {
		g0, ok0, err := h0.For(name, -1)
		if err != nil {
			t.Fatal(err)
		}
		g1, ok1, err := h1.For(name, -1)
		if err != nil || ok0 != ok1 {
			t.Fatalf("%s: %v, Gram matrix with one forward only: %v", name, err, ok0 != ok1)
		}
		if !ok0 {
			continue
		}
		var a, b []float64
		for i := 0; i < g0.SymmetricDim(); i++ {
			for j := i; j < g0.SymmetricDim(); j++ {
				a, b = append(a, g0.At(i, j)), append(b, g1.At(i, j))
			}
		}
		agree(name+" Gram", a, b)
		n++
	}
	if n == 0 {
		t.Fatal("no Gram matrices compared")
	}
	if worst == 0 {
		t.Fatal("the rounded forward gave the exact forward's bits: the rounded path did not run")
	}
	t.Logf("largest relative L2 difference of a tensor's statistics or Gram matrix: %.2g; of one column's Σx²: %.2g", worst, worstCol)
}
