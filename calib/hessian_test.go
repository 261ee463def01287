package calib

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/quant/kernels"
	"gonum.org/v1/gonum/mat"
)

// gramObserver accumulates, in float64, X^T X of every non-expert weight's input over the
// valid rows of the observer calls of a full forward pass (an independent reference for the
// Gram matrices; expert weights are covered by naiveObserver's per-expert sums).
type gramObserver struct {
	g      map[string][]float64 // name -> cols×cols, row-major
	cols   map[string]int
	counts map[string]int64
	valid  int
	seen   map[string]int
	// Gated DeltaNet per-head references: entry name -> per head cols×cols, rows; and the
	// float64 delta-rule states on the inputs (layer -> per head n×dk)
	heads     map[string][][]float64
	headRows  map[string]int64
	headState map[int][][]float64
}

func newGramObserver() *gramObserver {
	return &gramObserver{g: map[string][]float64{}, cols: map[string]int{}, counts: map[string]int64{},
		heads: map[string][][]float64{}, headRows: map[string]int64{}, headState: map[int][][]float64{}}
}

// DeltaNet accumulates the per-head matrices of hessian_deltanet.go in float64.
func (o *gramObserver) DeltaNet(layer int, tr *infer.DeltaNetTrace) {
	n, dk, hv, hk := tr.NEmbd, tr.DState, tr.NVHeads, tr.NKHeads
	vd, kdim := hv*dk, hk*dk
	ve, ze := layerPrefix(layer)+VHeadsEntry, layerPrefix(layer)+GateHeadsEntry
	groups := headGroups(hv)
	if o.heads[ve] == nil {
		for range groups {
			o.heads[ve] = append(o.heads[ve], make([]float64, n*n))
			o.heads[ze] = append(o.heads[ze], make([]float64, n*n))
		}
	}
	if tr.Pos0 == 0 || o.headState[layer] == nil {
		o.headState[layer] = make([][]float64, hv)
		for h := range o.headState[layer] {
			o.headState[layer][h] = make([]float64, n*dk)
		}
	}
	add := func(g []float64, v []float64) {
		for i, a := range v {
			for j, b := range v {
				g[i*n+j] += a * b
			}
		}
	}
	for t := 0; t < tr.T; t++ {
		valid := tr.Pos0+t < o.valid
		if valid { // rows per group
			o.headRows[ve] += int64(hv / groups)
			o.headRows[ze] += int64(hv / groups)
		}
		x := tr.X[t*n : (t+1)*n]
		for h := 0; h < hv; h++ {
			kh := h % hk
			q := tr.QK[t*tr.QKStride+kh*dk : t*tr.QKStride+(kh+1)*dk]
			k := tr.QK[t*tr.QKStride+kdim+kh*dk : t*tr.QKStride+kdim+(kh+1)*dk]
			S := o.headState[layer][h]
			decay := math.Exp(float64(tr.G[t*hv+h]))
			b := float64(tr.Beta[t*hv+h])
			r := make([]float64, n)
			for m := 0; m < n; m++ {
				row := S[m*dk : (m+1)*dk]
				var sk float64
				for i := range row {
					row[i] *= decay
					sk += row[i] * float64(k[i])
				}
				d := (float64(x[m]) - sk) * b
				for i := range row {
					row[i] += d * float64(k[i])
					r[m] += row[i] * float64(q[i])
				}
			}
			if !valid {
				continue
			}
			wv, wz := deltaNetWeights(tr.O[t*vd+h*dk:t*vd+(h+1)*dk], tr.Z[t*vd+h*dk:t*vd+(h+1)*dk], tr.Norm[:dk], tr.Eps)
			xv, xz := make([]float64, n), make([]float64, n)
			for m := range r {
				xv[m] = r[m] * float64(tr.Scale) * wv
				xz[m] = float64(x[m]) * wz
			}
			add(o.heads[ve][h/(hv/groups)], xv)
			add(o.heads[ze][h/(hv/groups)], xz)
		}
	}
}

func (o *gramObserver) start(valid int) { o.valid, o.seen = valid, map[string]int{} }

func (o *gramObserver) Linear(name string, expert int, x []float32, n, cols int) {
	if expert >= 0 {
		return
	}
	off := o.seen[name]
	o.seen[name] += n
	if o.g[name] == nil {
		o.g[name], o.cols[name] = make([]float64, cols*cols), cols
	}
	g := o.g[name]
	row := make([]float64, cols)
	for r := 0; r < n && off+r < o.valid; r++ {
		for i, v := range x[r*cols : (r+1)*cols] {
			row[i] = float64(v)
		}
		for i, a := range row {
			gi := g[i*cols+i : (i+1)*cols]
			for j, b := range row[i:] {
				gi[j] += a * b
			}
		}
		o.counts[name]++
	}
}

func (o *gramObserver) Route(int, []int32, []float32, int, int) {}

// teeObserver forwards every call to each observer.
type teeObserver []infer.Observer

func (t teeObserver) Linear(name string, expert int, x []float32, n, cols int) {
	for _, o := range t {
		o.Linear(name, expert, x, n, cols)
	}
}

func (t teeObserver) Route(layer int, experts []int32, weights []float32, n, k int) {
	for _, o := range t {
		o.Route(layer, experts, weights, n, k)
	}
}

func (t teeObserver) DeltaNet(layer int, tr *infer.DeltaNetTrace) {
	for _, o := range t {
		if d, ok := o.(infer.DeltaNetObserver); ok {
			d.DeltaNet(layer, tr)
		}
	}
}

// checkExpertReconstruction checks For of an expert without its own matrix: gate/up
// λ·D^½ C D^½ + (1−λ)·D from the all-token Gram matrix ref (float64, n×n) and the expert's
// float64 Σx² sums over ne rows; down has no H.
func checkExpertReconstruction(t *testing.T, name string, e int, h *mat.SymDense, ok bool, ref []float64, n int, sums []float64, ne float64) {
	t.Helper()
	if strings.Contains(name, "ffn_down_exps") {
		if ok {
			t.Fatalf("%s expert %d: a full H where only a diagonal exists", name, e)
		}
		return
	}
	if !ok {
		t.Fatalf("%s expert %d: no H", name, e)
	}
	lambda := 1.0
	if ne < float64(n) {
		lambda = ne / (ne + float64(n))
	}
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			di, dj := sums[i]/ne, sums[j]/ne
			want := di
			if i != j {
				want = lambda * math.Sqrt(di*dj) * ref[i*n+j] / math.Sqrt(ref[i*n+i]*ref[j*n+j])
			}
			if got := h.At(i, j); math.Abs(got-want) > expertTol*math.Sqrt(di*dj)+1e-30 {
				t.Fatalf("%s expert %d (%v rows, λ %.3f): H[%d][%d] = %v, reference %v", name, e, ne, lambda, i, j, got, want)
			}
		}
	}
}

// gramTol is the tolerance of a stored H entry relative to √(H_ii H_jj): the float32 sums
// (~1e-6 typical for these row counts) and the file's 3-byte storage (gramStoreTol).
const gramTol = 2e-5 + gramStoreTol

// gramStoreTol is the most a value moves, relative to itself, when a version-3 Gram file
// stores it (round24: 15 mantissa bits, 2⁻¹⁶).
const gramStoreTol = 1.0 / 65536

// expertTol bounds an expert's reconstructed H entry relative to √(H_ii H_jj): the float32
// sums, and the storage of the two stored matrices it mixes.
const expertTol = 1e-5 + 2*gramStoreTol

// checkHessians compares the Gram matrices written by a calibration with the float64
// references of a full forward pass: every non-expert weight's H = G/n (n = its valid rows),
// the routed experts' gate/up H reconstructed from the layer's all-token matrix (the router's
// input) and the expert's own Σx², and down_exps diagonal-only.
func checkHessians(t *testing.T, res *Result, gv *gramObserver, nv *naiveObserver) {
	t.Helper()
	if res.HessianDir == "" || res.Config.Calibration.Hessians == nil {
		t.Fatal("no hessians recorded")
	}
	hs, err := OpenHessians(res.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	rec := res.Config.Calibration.Hessians
	if rec.Bytes != hs.Bytes || rec.Tokens != res.Config.Calibration.Tokens || hs.Tokens != rec.Tokens || rec.FullInputs == 0 {
		t.Fatalf("record %+v, set bytes %d tokens %d", rec, hs.Bytes, hs.Tokens)
	}
	names := map[string]bool{}
	for _, n := range hs.Names() {
		names[n] = true
	}
	checked := 0
	for name, ref := range gv.g {
		if !names[name] {
			t.Fatalf("no Gram entry for %s", name)
		}
		delete(names, name)
		h, ok, err := hs.For(name, -1)
		if err != nil || !ok {
			t.Fatalf("%s: ok %v err %v", name, ok, err)
		}
		w := hs.weights[name]
		if got := w.ix.inputs[w.w.input].counts[0]; got != gv.counts[name] {
			t.Fatalf("%s: %d rows, reference %d", name, got, gv.counts[name])
		}
		n := gv.cols[name]
		inv := 1 / float64(gv.counts[name])
		if h.SymmetricDim() != n {
			t.Fatalf("%s: %d columns, want %d", name, h.SymmetricDim(), n)
		}
		for i := 0; i < n; i++ {
			for j := i; j < n; j++ {
				want := ref[i*n+j] * inv
				scale := math.Sqrt(ref[i*n+i]*ref[j*n+j]) * inv
				if got := h.At(i, j); math.Abs(got-want) > gramTol*scale+1e-30 || h.At(j, i) != got {
					t.Fatalf("%s: H[%d][%d] = %v (H[%d][%d] %v), float64 reference %v", name, i, j, got, j, i, h.At(j, i), want)
				}
			}
		}
		checked++
	}
	// Gated DeltaNet per-head matrices: against the float64 references (their float32
	// recurrences and partial sums give ~1e-5 relative; 2e-4 of √(H_ii H_jj) bounds it)
	for entry, ref := range gv.heads {
		if !names[entry] {
			t.Fatalf("no Gram entry for %s", entry)
		}
		delete(names, entry)
		il := Layer(entry)
		role := strings.TrimPrefix(entry, layerPrefix(il))
		n := int(math.Sqrt(float64(len(ref[0]))))
		for h := range ref {
			g, cols, ok, err := hs.HeadHessian(il, role, h)
			if heads := hs.HeadGroups(il, role); err != nil || !ok || cols != n || heads != len(ref) {
				t.Fatalf("%s head %d: ok %v err %v, %d columns, %d heads", entry, h, ok, err, cols, heads)
			}
			inv := 1 / float64(gv.headRows[entry])
			for i := 0; i < n; i++ {
				for j := 0; j < n; j++ {
					want := ref[h][i*n+j] * inv
					sc := math.Sqrt(ref[h][i*n+i]*ref[h][j*n+j]) * inv
					if math.Abs(g[i*n+j]-want) > 2e-4*sc+1e-30 {
						t.Fatalf("%s head %d: H[%d][%d] = %v, float64 reference %v", entry, h, i, j, g[i*n+j], want)
					}
				}
			}
			checked++
		}
		if _, _, _, err := hs.HeadHessian(il, role, len(ref)); err == nil {
			t.Fatalf("%s: head %d of %d accepted", entry, len(ref), len(ref))
		}
	}
	// routed experts: each expert's own Gram matrix shrunk toward the all-token correlation
	// (gate/up) or its diagonal (down); without per-expert matrices, gate/up reconstructed from
	// the all-token matrix and the expert's diagonal, down diagonal-only
	for name := range names {
		sums := nv.sums[name]
		if sums == nil || len(sums) < 2 {
			t.Fatalf("Gram entry for %s, which the forward did not feed as a non-expert weight", name)
		}
		router := layerPrefix(Layer(name)) + "ffn_gate_inp.weight"
		ref, nr := gv.g[router], gv.cols[router]
		down := strings.Contains(name, "ffn_down_exps")
		if _, _, err := hs.For(name, -1); err == nil {
			t.Fatalf("%s: expert -1 accepted", name)
		}
		for e := range sums {
			h, ok, err := hs.For(name, e)
			if err != nil {
				t.Fatal(err)
			}
			if sums[e] == nil {
				if ok {
					t.Fatalf("%s expert %d: a full H for an expert without rows", name, e)
				}
				continue
			}
			w := hs.weights[name]
			if w.ix.inputs[w.w.experts].kind == GramDiagonal {
				checkExpertReconstruction(t, name, e, h, ok, ref, nr, sums[e], float64(nv.counts[name][e]))
				checked++
				continue
			}
			ge := nv.grams[name][e]
			n := len(sums[e])
			if !down && n != nr {
				t.Fatalf("%s: %d columns, router input %d", name, n, nr)
			}
			if !ok {
				t.Fatalf("%s expert %d: no H", name, e)
			}
			ne := float64(nv.counts[name][e])
			wt := ne / (ne + float64(n))
			if got := ExpertOwnWeight(ne, n); got != wt {
				t.Fatalf("ExpertOwnWeight(%v, %d) = %v, want %v", ne, n, got, wt)
			}
			for i := 0; i < n; i++ {
				for j := i; j < n; j++ {
					di, dj := ge[i*n+i]/ne, ge[j*n+j]/ne
					want := di
					if i != j {
						prior := 0.0
						if !down {
							prior = math.Sqrt(di*dj) * ref[i*n+j] / math.Sqrt(ref[i*n+i]*ref[j*n+j])
						}
						want = wt*ge[i*n+j]/ne + (1-wt)*prior
					}
					if got := h.At(i, j); math.Abs(got-want) > expertTol*math.Sqrt(di*dj)+1e-30 || h.At(j, i) != got {
						t.Fatalf("%s expert %d (%v rows, w %.3f): H[%d][%d] = %v, reference %v", name, e, ne, wt, i, j, got, want)
					}
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("nothing compared")
	}
}

// hessiansEqual checks two calibrations wrote the same matrices.
func hessiansEqual(t *testing.T, what, a, b string) {
	t.Helper()
	ha, err := OpenHessians(a)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := OpenHessians(b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ha.Names(), ",") != strings.Join(hb.Names(), ",") {
		t.Fatalf("%s: Gram entries differ", what)
	}
	for _, name := range ha.Names() {
		e := -1
		if strings.Contains(name, "_exps") {
			e = 0
		}
		x, okx, errx := ha.For(name, e)
		y, oky, erry := hb.For(name, e)
		if errx != nil || erry != nil || okx != oky || (okx && !mat.Equal(x, y)) {
			t.Fatalf("%s: H of %s differs (%v %v %v %v)", what, name, okx, oky, errx, erry)
		}
	}
}

// TestExpertHessianBudget gives a MoE run memory for its shared inputs' Gram accumulators but
// not for the per-expert ones: the per-expert matrices must be dropped first (diagonal, reason
// budget, named in the warning) and every shared input keep its full matrix.
func TestExpertHessianBudget(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.Layers = 1
	dir := genModel(t, o)
	seqs := randSeqs(6, 2, vocabOf(t, dir), 30, 60, 64)
	base := Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true}
	full := calibrate(t, dir, base)
	hs, err := OpenHessians(full.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	var shared int64
	experts := 0
	for _, ix := range []*gramIndex{hs.weights["blk.0.attn_q.weight"].ix} {
		for _, in := range ix.inputs {
			if in.kind != GramFull {
				t.Fatalf("%s: kind %d without a budget", in.id, in.kind)
			}
			if len(in.counts) > 1 {
				experts++
				continue
			}
			shared += gramAccBytes(in.cols)
		}
	}
	if experts != 2 {
		t.Fatalf("%d per-expert inputs, want 2 (gate/up and down)", experts)
	}
	var warned []string
	opts := base
	nohess := base
	nohess.NoHessians = true
	est := calibrate(t, dir, nohess).EstimatedBytes
	opts.MemoryBudget = est + gramWriteBytes(2) + shared + 1024
	opts.Warn = func(s string) { warned = append(warned, s) }
	res := calibrate(t, dir, opts)
	if w := strings.Join(warned, "\n"); !strings.Contains(w, "memory budget: ffn_in.experts (block 0)") ||
		!strings.Contains(w, "memory budget: ffn_down_exps_in.experts (block 0)") {
		t.Fatalf("warnings %q do not name the per-expert inputs", w)
	}
	hb, err := OpenHessians(res.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range hb.weights["blk.0.attn_q.weight"].ix.inputs {
		isExp := strings.HasSuffix(in.id, ".experts")
		if isExp && (in.kind != GramDiagonal || in.reason != GramReasonBudget) || !isExp && in.kind != GramFull {
			t.Errorf("%s: kind %d, %s", in.id, in.kind, GramReasonText(in.reason))
		}
	}
}

// TestHessianBudgetFallback gives the run memory for two of the block's four Gram
// accumulators: the largest input (the FFN intermediate, 512 columns) and, of the three of 256
// columns, the one read by a single weight (the attention output) must be stored
// diagonal-only, named in a warning, their diagonal equal to the statistics' Σx², and For must
// answer ok=false for them; a second run with a column limit of 256 drops the FFN intermediate
// for that reason.
func TestHessianBudgetFallback(t *testing.T) {
	kernels.SetAMX(false) // bf16 matrices are packed only off the AMX and rounded paths
	defer kernels.SetAMX(true)
	o := fixtures.Preset("qwen3")
	o.Layers = 1
	dir := genModel(t, o)
	seqs := randSeqs(5, 2, vocabOf(t, dir), 30, 60, 64)
	base := Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, ExactForward: true}
	r0 := calibrate(t, dir, base)
	est := r0.EstimatedBytes
	var warned []string
	opts := base
	opts.NoHessians = false
	opts.MemoryBudget = est + gramWriteBytes(2) + 2*gramAccBytes(256) + 1024
	opts.Warn = func(s string) { warned = append(warned, s) }
	res := calibrate(t, dir, opts)
	// without a budget the forward keeps the BF16 matrices packed; a budget without room for
	// them beside the Gram matrices does not
	if r0.PackedWeightBytes <= 0 || res.PackedWeightBytes != 0 {
		t.Errorf("packed weights: %d bytes without a budget, %d with a tight one", r0.PackedWeightBytes, res.PackedWeightBytes)
	}
	if w := strings.Join(warned, "\n"); !strings.Contains(w, "memory budget: ffn_down_in (block 0)") ||
		!strings.Contains(w, "memory budget: attn_output_in (block 0)") {
		t.Fatalf("warnings %q do not name the dropped inputs", w)
	}
	if res.EstimatedBytes > opts.MemoryBudget {
		t.Fatalf("estimate %d over the budget %d", res.EstimatedBytes, opts.MemoryBudget)
	}
	hs, err := OpenHessians(res.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, name := range hs.Names() {
		w := hs.weights[name]
		in := w.ix.inputs[w.w.input]
		kinds[roleOf(in.id)] = in.reason
		_, ok, err := hs.For(name, -1)
		if err != nil || ok != (in.kind == GramFull) {
			t.Fatalf("%s (%s, %s): ok %v err %v", name, in.id, GramReasonText(in.reason), ok, err)
		}
		if in.kind == GramDiagonal {
			vals, err := hs.values(w.ix, w.w.input, 0)
			if err != nil {
				t.Fatal(err)
			}
			ts := res.Stats.Tensors[name]
			for c, v := range vals {
				if v != stored24(float32(ts.SumSq[c])) {
					t.Fatalf("%s: diagonal %d = %v, statistics %v", name, c, v, ts.SumSq[c])
				}
			}
		}
	}
	want := map[string]int{"attn_in": GramReasonNone, "attn_output_in": GramReasonBudget, "ffn_in": GramReasonNone,
		"ffn_down_in": GramReasonBudget, "output_in": GramReasonNone}
	for k, v := range want {
		if kinds[k] != v {
			t.Errorf("%s: %s, want %s", k, GramReasonText(kinds[k]), GramReasonText(v))
		}
	}
	if r := res.Config.Calibration.Hessians; r.FullInputs != 3 || r.DiagonalInputs != 2 {
		t.Errorf("record: %d full, %d diagonal inputs; want 3 and 2", r.FullInputs, r.DiagonalInputs)
	}

	// the column limit, in the same output directory: the new run's files replace the old
	opts = base
	opts.NoHessians, opts.HessianMaxCols, opts.OutDir = false, 256, filepath.Dir(res.ConfigPath)
	warned = nil
	opts.Warn = func(s string) { warned = append(warned, s) }
	res2 := calibrate(t, dir, opts)
	if w := strings.Join(warned, "\n"); !strings.Contains(w, "more than 256 columns: ffn_down_in (block 0)") {
		t.Fatalf("warnings %q do not name the input over the limit", w)
	}
	hs2, err := OpenHessians(res2.HessianDir)
	if err != nil {
		t.Fatal(err)
	}
	if hs2.Run == hs.Run {
		t.Fatal("same run id for different options")
	}
	w := hs2.weights["blk.0.ffn_down.weight"]
	if in := w.ix.inputs[w.w.input]; in.kind != GramDiagonal || in.reason != GramReasonCols {
		t.Fatalf("ffn_down input: kind %d reason %s", in.kind, GramReasonText(in.reason))
	}
}

// testGramFile returns a small Gram file with a full input, a diagonal one and per-expert
// diagonals, and the values written.
func testGramFile(t testing.TB, cols int) ([]byte, *gramFileData, map[string][]float32) {
	return testGramFileVersion(t, cols, GramVersion)
}

// stored24 is the float32 a version-3 Gram file gives back for v.
func stored24(v float32) float32 { return math.Float32frombits(round24(v) << 8) }

func testGramFileVersion(t testing.TB, cols int, ver uint32) ([]byte, *gramFileData, map[string][]float32) {
	rng := rand.New(rand.NewPCG(8, 9))
	vals := map[string][]float32{}
	mk := func(id string, kind, reason, cols int, counts []int64) *gramInput {
		n := len(counts) * cols
		if kind == GramFull {
			n = len(counts) * packedLen(cols)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		if kind == GramFull {
			for m := range counts {
				for i := 0; i < cols; i++ {
					v[m*packedLen(cols)+packedRow(cols, i)] = float32(10 + rng.Float64())
				}
			}
		} else {
			for i := range v {
				v[i] = float32(math.Abs(float64(v[i])))
			}
		}
		vals[id] = v
		return &gramInput{id: id, kind: kind, reason: reason, cols: cols, counts: counts, nvals: n,
			values: func(i0, i1 int, dst []float32) { copy(dst, v[i0:i1]) }}
	}
	f := &gramFileData{layer: 3, run: [32]byte{1, 2, 3}}
	f.inputs = []*gramInput{
		mk("blk.3.attn_in", GramFull, GramReasonNone, cols, []int64{40}),
		mk("blk.3.ffn_down_in", GramDiagonal, GramReasonBudget, 48, []int64{40}),
		mk("blk.3.ffn_in.experts", GramDiagonal, GramReasonExperts, cols, []int64{5, 0, 2000}),
		mk("blk.3.ffn_down_exps_in.experts", GramFull, GramReasonNone, 40, []int64{30, 0, 7, 100}),
	}
	f.weights = []gramWeight{{"blk.3.attn_q.weight", 0, -1}, {"blk.3.ffn_down.weight", 1, -1}, {"blk.3.ffn_up_exps.weight", 0, 2},
		{"blk.3.ffn_down_exps.weight", -1, 3}}
	var buf bytes.Buffer
	if err := writeGramVersion(&buf, f, 1, ver); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), f, vals
}

// TestGramFileWorkers checks that compressing several chunks at a time writes the same bytes
// as one at a time (headers before their input's first chunk, chunks in file order), and that
// a bad value in a later chunk is still reported by input and index.
func TestGramFileWorkers(t *testing.T) {
	b1, f, vals := testGramFile(t, 1500) // 1 writer; the full input takes several chunks
	for _, w := range []int{2, 3, 5, 16} {
		var buf bytes.Buffer
		if err := writeGram(&buf, f, w); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), b1) {
			t.Fatalf("%d writers: %d bytes differ from one writer's %d", w, buf.Len(), len(b1))
		}
	}
	v := vals["blk.3.ffn_down_exps_in.experts"]
	at := 2*packedLen(40) + 5 // the third matrix: a later chunk
	v[at] = float32(math.NaN())
	for _, w := range []int{1, 3} {
		err := writeGram(io.Discard, f, w)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("input blk.3.ffn_down_exps_in.experts: value %d is NaN", at)) {
			t.Fatalf("%d writers: %v", w, err)
		}
	}
}

// TestGramFileRoundTrip writes a Gram file and reads every input back bit for bit (version 3:
// each value as round24 keeps it; version 2, which is still read: unchanged), then checks For
// on a set made of it (H = G/n, the expert reconstruction).
func TestGramFileRoundTrip(t *testing.T) {
	for _, ver := range []uint32{2, GramVersion} {
		t.Run(fmt.Sprintf("version=%d", ver), func(t *testing.T) { testGramFileRoundTrip(t, ver) })
	}
}

func testGramFileRoundTrip(t *testing.T, ver uint32) {
	b, f, vals := testGramFileVersion(t, 1500, ver) // the full input takes several chunks
	if ver >= 3 {
		for _, v := range vals {
			for i := range v {
				v[i] = stored24(v[i])
			}
		}
	}
	ix, err := parseGram(bytes.NewReader(b), int64(len(b)), "x.gram")
	if err != nil {
		t.Fatal(err)
	}
	if ix.layer != 3 || ix.run != f.run || len(ix.inputs) != 4 || len(ix.weights) != 4 {
		t.Fatalf("parsed %+v", ix)
	}
	if len(ix.inputs[0].chunks) < 2 {
		t.Fatalf("the full input has %d chunks; the test wants several", len(ix.inputs[0].chunks))
	}
	for i, in := range ix.inputs {
		want := vals[in.id]
		var got []float32
		for m := 0; m < len(in.counts); m++ { // a full input matrix by matrix
			part := make([]float32, in.matValues())
			if err := readGramValues(bytes.NewReader(b), ix, in, m, part); err != nil {
				t.Fatal(err)
			}
			got = append(got, part...)
			if in.kind == GramDiagonal {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("input %d: %d values, wrote %d", i, len(got), len(want))
		}
		for k := range want {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("input %d value %d: %v, wrote %v", i, k, got[k], want[k])
			}
		}
		if in.kind != f.inputs[i].kind || in.reason != f.inputs[i].reason || in.cols != f.inputs[i].cols {
			t.Fatalf("input %d header differs", i)
		}
	}

	dir := t.TempDir()
	writeTestSet(t, dir, b, f.run)
	hs, err := OpenHessians(dir)
	if err != nil {
		t.Fatal(err)
	}
	// InputKey: equal for the same matrix, different otherwise, empty where For fails
	q, down := hs.InputKey("blk.3.attn_q.weight", -1), hs.InputKey("blk.3.ffn_down.weight", -1)
	up0, up1 := hs.InputKey("blk.3.ffn_up_exps.weight", 0), hs.InputKey("blk.3.ffn_up_exps.weight", 1)
	if q == "" || down == "" || up0 == "" || q == down || up0 == up1 || up0 == q ||
		hs.InputKey("blk.3.ffn_up_exps.weight", -1) != "" || hs.InputKey("blk.3.attn_q.weight", 0) != "" ||
		hs.InputKey("blk.9.attn_q.weight", -1) != "" || up0 != hs.InputKey("blk.3.ffn_up_exps.weight", 0) {
		t.Errorf("input keys: q %q, down %q, up experts 0/1 %q/%q", q, down, up0, up1)
	}
	h, ok, err := hs.For("blk.3.attn_q.weight", -1)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	g := vals["blk.3.attn_in"]
	for _, ij := range [][2]int{{0, 0}, {0, 7}, {1499, 1499}, {700, 1200}} {
		i, j := ij[0], ij[1]
		if want := float64(g[packedRow(1500, i)+j-i]) / 40; h.At(i, j) != want || h.At(j, i) != want {
			t.Fatalf("H[%d][%d] = %v, want %v", i, j, h.At(i, j), want)
		}
	}
	if _, ok, err := hs.For("blk.3.ffn_down.weight", -1); ok || err != nil {
		t.Fatalf("diagonal-only input: ok %v err %v", ok, err)
	}
	if _, ok, err := hs.For("blk.3.ffn_up_exps.weight", 1); ok || err != nil {
		t.Fatalf("expert without rows: ok %v err %v", ok, err)
	}
	// per-expert matrices without a shared input: own off-diagonal shrunk toward 0 by
	// w = n_e/(n_e+cols), diagonal G_e[i][i]/n_e
	gd := vals["blk.3.ffn_down_exps_in.experts"]
	for _, e := range []int{0, 2, 3} {
		ne := []float64{30, 0, 7, 100}[e]
		h, ok, err := hs.For("blk.3.ffn_down_exps.weight", e)
		if err != nil || !ok {
			t.Fatalf("down expert %d: ok %v err %v", e, ok, err)
		}
		ge := gd[e*packedLen(40) : (e+1)*packedLen(40)]
		for _, ij := range [][2]int{{0, 0}, {0, 7}, {39, 39}, {5, 38}} {
			i, j := ij[0], ij[1]
			want := float64(ge[packedRow(40, i)+j-i]) / ne
			if i != j {
				want *= ne / (ne + 40)
			}
			if got := h.At(i, j); math.Abs(got-want) > 1e-15*math.Abs(want) || h.At(j, i) != got {
				t.Fatalf("down expert %d: H[%d][%d] = %v, want %v", e, i, j, got, want)
			}
		}
	}
	if _, ok, err := hs.For("blk.3.ffn_down_exps.weight", 1); ok || err != nil {
		t.Fatalf("down expert without rows: ok %v err %v", ok, err)
	}
	if _, _, err := hs.For("blk.3.ffn_up_exps.weight", 3); err == nil {
		t.Fatal("expert out of range accepted")
	}
	if _, _, err := hs.For("blk.3.attn_q.weight", 0); err == nil {
		t.Fatal("expert index on a dense weight accepted")
	}
	if _, ok, err := hs.For("blk.9.attn_q.weight", -1); ok || err != nil {
		t.Fatal("unknown weight")
	}
	// the expert reconstruction: 5 rows (< 1500 columns, λ = 5/1505) and 2000 rows (λ = 1)
	d := vals["blk.3.ffn_in.experts"]
	for _, e := range []int{0, 2} {
		h, ok, err := hs.For("blk.3.ffn_up_exps.weight", e)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		ne := []float64{5, 0, 2000}[e]
		lambda := map[int]float64{0: 5.0 / 1505, 2: 1}[e]
		if got := ExpertShrinkage(ne, 1500); got != lambda {
			t.Fatalf("λ(%v) = %v, want %v", ne, got, lambda)
		}
		for _, ij := range [][2]int{{3, 3}, {0, 7}, {700, 1200}} {
			i, j := ij[0], ij[1]
			di, dj := float64(d[e*1500+i])/ne, float64(d[e*1500+j])/ne
			gii, gjj, gij := float64(g[packedRow(1500, i)]), float64(g[packedRow(1500, j)]), float64(g[packedRow(1500, i)+j-i])
			want := lambda * math.Sqrt(di*dj) * gij / math.Sqrt(gii*gjj)
			if i == j {
				want = di
			}
			if math.Abs(h.At(i, j)-want) > 1e-12*math.Abs(want) {
				t.Fatalf("expert %d H[%d][%d] = %v, want %v", e, i, j, h.At(i, j), want)
			}
		}
	}
}

// writeTestSet puts one Gram file (as blk.3.gram) and its index into dir.
func writeTestSet(t testing.TB, dir string, b []byte, run [32]byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "blk.3.gram"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	idx := hessianIndex{Format: HessianIndexFormat, Version: GramVersion, Run: hexRun(run), Tokens: 40,
		Files: []hessianIndexFile{{Name: "blk.3.gram", Layer: 3, Bytes: int64(len(b))}}, Bytes: int64(len(b))}
	if err := saveJSON(filepath.Join(dir, HessianIndexFile), idx); err != nil {
		t.Fatal(err)
	}
}

func hexRun(r [32]byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 64)
	for i, c := range r {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// shuffleBytes is shuffle on the little-endian bytes of float32 values (any whole number of them).
func shuffleBytes(dst, src []byte) {
	n := len(src) / 4
	for i := 0; i < n; i++ {
		dst[i] = src[4*i]
		dst[n+i] = src[4*i+1]
		dst[2*n+i] = src[4*i+2]
		dst[3*n+i] = src[4*i+3]
	}
}

// replaceChunk rebuilds file b with chunk ci of input in replaced by the given float32 values
// (little-endian bytes), stored as the file's version stores them.
func replaceChunk(t testing.TB, b []byte, ix *gramIndex, in, ci int, raw []byte) []byte {
	ch := ix.inputs[in].chunks[ci]
	plane := make([]byte, len(raw))
	shuffleBytes(plane, raw)
	if gramValueBytes(ix.version) == 3 {
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		raw = raw[:3*len(v)] // only its length is used below
		plane = plane[:3*len(v)]
		shuffle3(plane, v)
	}
	comp := recompressForTest(t, plane)
	var out bytes.Buffer
	out.Write(b[:ch.off-8])
	var h [8]byte
	binary.LittleEndian.PutUint32(h[:4], uint32(len(raw)))
	binary.LittleEndian.PutUint32(h[4:], uint32(len(comp)))
	out.Write(h[:])
	out.Write(comp)
	out.Write(b[ch.off+int64(ch.comp):])
	return out.Bytes()
}

// TestGramFileErrors corrupts a Gram file field by field: every case must fail with an error
// naming the file and the field, never panic.
func TestGramFileErrors(t *testing.T) {
	const cols = 40
	b, f, _ := testGramFile(t, cols)
	ix, err := parseGram(bytes.NewReader(b), int64(len(b)), "x.gram")
	if err != nil {
		t.Fatal(err)
	}
	patch := func(off int, v ...byte) []byte {
		c := bytes.Clone(b)
		copy(c[off:], v)
		return c
	}
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	// offsets: magic 0, version 8, layer 12, run 16, n_weights 48, n_inputs 52, first weight 56
	w0 := 56 + 2 + len("blk.3.attn_q.weight")
	in0 := 56
	for _, w := range f.weights {
		in0 += 2 + len(w.name) + 8
	}
	in0cols := in0 + 2 + len("blk.3.attn_in") + 2
	// the experts' diagonals (input 2, one chunk), read by For(ffn_up_exps, 0)
	diagVals := make([]byte, 4*3*cols)
	binary.LittleEndian.PutUint32(diagVals[4*5:], math.Float32bits(-1))
	nanVals := make([]byte, 4*3*cols)
	binary.LittleEndian.PutUint32(nanVals[4*7:], math.Float32bits(float32(math.NaN())))
	fullNaN := make([]byte, 4*packedLen(cols))
	binary.LittleEndian.PutUint32(fullNaN[4*9:], math.Float32bits(float32(math.Inf(1))))
	cases := []struct {
		name, want string
		data       []byte
		values     int // call For on this weight (the structure parses), as an expert for 2
	}{
		{"short", "truncated magic", []byte("TQGR"), -1},
		{"magic", "bad magic", patch(0, 'X'), -1},
		{"version", "unsupported version 7", patch(8, u32(7)...), -1},
		{"layer", "layer -5 out of range", patch(12, u32(uint32(0xfffffffb))...), -1},
		{"weights", "exceed the limit", patch(48, u32(1<<20)...), -1},
		{"input ref", "refers to input 9", patch(w0, u32(9)...), -1},
		{"cols", "full matrices of 40000 columns", patch(in0cols, u32(40000)...), -1},
		{"cols zero", "out of range", patch(in0cols, u32(0)...), -1},
		{"kind", "unknown kind 7", patch(in0cols-2, 7), -1},
		{"truncated", "does not fit the file", b[:len(b)-20], -1},
		{"trailing", "bytes after the end marker", append(bytes.Clone(b), 0), -1},
		{"end", "bad end marker", patch(len(b)-8, 'X'), -1},
		{"nan", "input blk.3.ffn_in.experts: value 7 is NaN", replaceChunk(t, b, ix, 2, 0, nanVals), 2},
		{"negative", "diagonal value 5 is negative", replaceChunk(t, b, ix, 2, 0, diagVals), 2},
		{"inf", "input blk.3.attn_in: value 9 is +Inf", replaceChunk(t, b, ix, 0, 0, fullNaN), 0},
		{"short chunk", "input blk.3.ffn_down_in: chunk of", replaceChunk(t, b, ix, 1, 0, make([]byte, 4*47)), -1},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		writeTestSet(t, dir, tc.data, f.run)
		hs, err := OpenHessians(dir)
		if tc.values >= 0 && err == nil {
			e := -1
			if tc.values == 2 {
				e = 0
			}
			_, _, err = hs.For(f.weights[tc.values].name, e)
		}
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), filepath.Join(dir, "blk.3.gram")) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not name the file and %q", tc.name, err, tc.want)
		}
	}

	// the index: another run's file, a size mismatch, a bad name, a directory
	dir := t.TempDir()
	writeTestSet(t, dir, b, [32]byte{9})
	if _, err := OpenHessians(dir); err == nil || !strings.Contains(err.Error(), "another calibration") {
		t.Errorf("run id mismatch: %v", err)
	}
	for _, bad := range []string{`{"format":"tq-hessians","version":1,"run":"zz","files":[]}`,
		`{"format":"tq-hessians","version":1,"run":"` + hexRun(f.run) + `","files":[{"name":"../x.gram","layer":3,"bytes":1}]}`,
		`{"format":"tq-hessians","version":1,"run":"` + hexRun(f.run) + `","files":[{"name":"blk.3.gram","layer":3,"bytes":7}]}`,
		`[`} {
		if err := os.WriteFile(filepath.Join(dir, HessianIndexFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenHessians(dir); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("index %s: %v", bad, err)
		}
	}
	sub := t.TempDir()
	if err := os.Mkdir(filepath.Join(sub, HessianIndexFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHessians(sub); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory as index: %v", err)
	}
}

// FuzzHessianFile feeds arbitrary bytes to the Gram file parser and, when the structure
// parses, reads every input's values: errors are fine, panics and allocations beyond the
// limits are not.
func FuzzHessianFile(f *testing.F) {
	b, _, _ := testGramFile(f, 24)
	f.Add(b)
	f.Add(b[:200])
	b2, _, _ := testGramFileVersion(f, 24, 2)
	f.Add(b2)
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := parseGram(bytes.NewReader(data), int64(len(data)), "fuzz.gram")
		if err != nil {
			return
		}
		for _, in := range ix.inputs {
			if in.matValues() > 1<<22 {
				continue
			}
			vals := make([]float32, in.matValues())
			if readGramValues(bytes.NewReader(data), ix, in, len(in.counts)-1, vals) != nil {
				continue
			}
			for _, w := range ix.weights {
				if w.experts >= 0 && w.input >= 0 && ix.inputs[w.input].kind == GramFull && ix.inputs[w.input] == in &&
					in.cols <= 256 {
					d := make([]float64, in.cols)
					expertHessian(vals, in.cols, d, 1)
				}
			}
		}
	})
}

func TestLayerList(t *testing.T) {
	for _, tc := range []struct {
		ls   []int
		want string
	}{{[]int{0}, "block 0"}, {[]int{-1}, "output head"}, {[]int{0, 1, 2, 5, 7, 8}, "blocks 0-2,5,7-8"},
		{[]int{3, -1}, "block 3, output head"}, {[]int{0, 1, -1}, "blocks 0-1, output head"}} {
		if got := layerList(tc.ls); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.ls, got, tc.want)
		}
	}
}

// TestRound24 checks version 3's value rounding against float64: nearest with ties to even at
// 15 mantissa bits (relative change at most 2⁻¹⁶ for normal numbers), exact for values that fit, finite values
// at the top of the range truncated instead of becoming infinite, and NaN/Inf kept.
func TestRound24(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for k := 0; k < 200000; k++ {
		v := float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*20))
		got := stored24(v)
		// the two neighbours of v at 15 mantissa bits, and the nearer one (ties: even)
		lo := math.Float32frombits(math.Float32bits(v) &^ 0xff)
		hi := math.Float32frombits(math.Float32bits(lo) + 0x100)
		want := lo
		dlo, dhi := math.Abs(float64(v)-float64(lo)), math.Abs(float64(hi)-float64(v))
		if dhi < dlo || (dhi == dlo && (math.Float32bits(lo)>>8)&1 == 1) {
			want = hi
		}
		normal := math.Abs(float64(v)) >= math.Exp2(-126) // subnormals: an absolute step
		if got != want || (normal && math.Abs(float64(got)-float64(v)) > math.Abs(float64(v))*math.Exp2(-16)) {
			t.Fatalf("%v (%#x): got %v, want %v", v, math.Float32bits(v), got, want)
		}
	}
	for _, v := range []float32{0, 1, -2.5, 1 << 20, float32(math.Copysign(0, -1))} {
		if got := stored24(v); math.Float32bits(got) != math.Float32bits(v) {
			t.Errorf("%v stored as %v", v, got)
		}
	}
	if got := stored24(math.MaxFloat32); math.IsInf(float64(got), 0) || got < math.MaxFloat32*(1-1.0/32768) {
		t.Errorf("MaxFloat32 stored as %v", got)
	}
	if got := stored24(float32(math.Inf(-1))); !math.IsInf(float64(got), -1) {
		t.Errorf("-Inf stored as %v", got)
	}
	if got := stored24(float32(math.NaN())); !math.IsNaN(float64(got)) {
		t.Errorf("NaN stored as %v", got)
	}
}
