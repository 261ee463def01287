package calib

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/testenv"
	"github.com/tq-project/tq/quant"
)

// quantizedCopy returns a source whose searched tensors are replaced by their quantize-
// dequantize round trip (the container calibration chose), with or without importance
// weights, or (hs not nil) by the error-compensating search with the calibration's Gram
// matrices where it has them, as convert --calibration does.
func quantizedCopy(t testing.TB, ms *metaSource, res *Result, weighted bool, hs *HessianSet) *metaSource {
	t.Helper()
	out := &metaSource{md: ms.md, tensors: map[string]*infer.Tensor{}}
	for name, tt := range ms.tensors {
		ch, ok := res.Config.Tensors[name]
		if !ok {
			out.tensors[name] = tt
			continue
		}
		typ, err := gguf.ParseType(ch.Type)
		if err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, len(bytesAsF32(tt.Data)))
		eachMatrix(tt, deq, func(e, nmat, rows, cols int, x, y []float32) {
			var imp []float32
			if weighted {
				imp, _ = res.Stats.Importance(name, e)
			}
			if hs != nil && gptqRoundTrip(t, hs, name, e, nmat > 1, typ, x, rows, cols, y) {
				return
			}
			if _, err := quantizeRows(typ, quant.ModeImproved, x, rows, cols, imp, 0, name, nil, y); err != nil {
				t.Fatal(err)
			}
		})
		out.tensors[name] = &infer.Tensor{Name: name, Type: gguf.TypeF32, Dims: tt.Dims, Data: f32Bytes(deq)}
	}
	return out
}

// gptqRoundTrip quantizes matrix e of tensor name with quant.QuantizeGPTQ and the calibration's
// Gram matrix of its input (the call convert makes) and writes the dequantized values into deq;
// false when the calibration has no full matrix for it.
func gptqRoundTrip(t testing.TB, hs *HessianSet, name string, e int, stacked bool, typ gguf.GGMLType, x []float32, rows, cols int, deq []float32) bool {
	t.Helper()
	expert := -1
	if stacked {
		expert = e
	}
	sd, ok, err := hs.For(name, expert)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return false
	}
	g := make([]float64, cols*cols)
	for i := 0; i < cols; i++ {
		for j := 0; j < cols; j++ {
			g[i*cols+j] = sd.At(i, j)
		}
	}
	h, err := quant.NewHessianFromGram(cols, g)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := quant.RowSize(typ, cols)
	if err != nil {
		t.Fatal(err)
	}
	q := make([]byte, rows*rs)
	if err := quant.QuantizeGPTQ(typ, q, x, rows, cols, h, &quant.GPTQOptions{Refine: true, TensorName: name}); err != nil {
		t.Fatal(err)
	}
	if err := quant.Dequantize(typ, deq, q); err != nil {
		t.Fatal(err)
	}
	return true
}

func bytesAsF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	copy(f32Bytes(out), b)
	return out
}

// meanKL is the mean over positions of KL(P_ref || P_q) of next-token distributions.
func meanKL(t testing.TB, ref, q *infer.Model, seqs []Sequence) float64 {
	t.Helper()
	var sum float64
	var n int
	for _, s := range seqs {
		toks := s.Tokens[:s.Valid]
		lr := evalAll(t, ref, toks)
		lq := evalAll(t, q, toks)
		for i := range lr {
			sum += klLogits(lr[i], lq[i])
			n++
		}
	}
	return sum / float64(n)
}

func evalAll(t testing.TB, m *infer.Model, toks []int32) [][]float32 {
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Eval(toks, infer.LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func klLogits(p, q []float32) float64 {
	lp, lq := make([]float64, len(p)), make([]float64, len(q))
	logSoftmax(lp, p)
	logSoftmax(lq, q)
	var kl float64
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return kl
}

// TestCalibrationLowersKL is the acceptance check of calibration on a trained model
// (testdata/trained/qwen3: 3.9M parameters trained on real text; random weights say nothing
// about quantization): every linear layer in Q4_K (o_proj and down_proj included, their inputs
// being the heavy-tailed ones), quantized three ways — without importance, with the
// calibration's importance (the diagonal: what llama.cpp's imatrix gives), and with the
// error-compensating search over the calibration's Gram matrices (what convert --calibration
// does). The calibration text and the evaluation text are disjoint parts of the model's
// held-out set. Measured: the Gram matrices give 0.32x the mean KL divergence of the
// unweighted search, while the diagonal importance alone gives 1.009x — on this trained model
// the per-column importance does not lower the KL divergence of Q4_K at all (it did on the
// random fixtures this test used before, which say nothing about quantization). Required: the
// Gram matrices' KL below 0.7x the better of the other two.
func TestCalibrationLowersKL(t *testing.T) {
	if testing.Short() {
		t.Skip("calibrates and evaluates a trained model")
	}
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "qwen3")
	cal, held := heldoutSplit(t, 4, 256, 4, 128)
	out := filepath.Join(t.TempDir(), "out")
	res := calibrate(t, dir, Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, OutDir: out,
		LayersToQuantize: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, SkipLayers: []string{"lm_head"}})
	hs, err := OpenHessians(filepath.Join(out, HessianDir))
	if err != nil {
		t.Fatal(err)
	}
	ms := fullSource(t, dir)
	load := func(s infer.Source) *infer.Model { return loadF32(t, s, 256) }
	ref := load(ms)
	klU := meanKL(t, ref, load(quantizedCopy(t, ms, res, false, nil)), held)
	klW := meanKL(t, ref, load(quantizedCopy(t, ms, res, true, nil)), held)
	klG := meanKL(t, ref, load(quantizedCopy(t, ms, res, true, hs)), held)
	t.Logf("mean KL on held-out tokens: unweighted %.6g, importance-weighted %.6g (%.3fx), Gram matrices %.6g (%.3fx)",
		klU, klW, klW/klU, klG, klG/klU)
	if best := min(klU, klW); !(klG < 0.7*best) {
		t.Errorf("the error-compensating search gives %.6g, not below 0.7x the diagonal searches' %.6g", klG, best)
	}
}

// heldoutSplit reads testdata/trained/data/heldout-tokens.json and returns nCal sequences of
// calLen tokens from the start of its text (for calibration) and nEval of evalLen tokens from
// the text after them (for evaluation), padded to multiples of 64.
func heldoutSplit(t testing.TB, nCal, calLen, nEval, evalLen int) (cal, eval []Sequence) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "data", "heldout-tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Documents []struct {
			IDs []int32 `json:"ids"`
		} `json:"documents"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	seq := func(ids []int32, n int) Sequence {
		ids = ids[:min(n, len(ids))]
		p := (len(ids) + 63) / 64 * 64
		toks := make([]int32, p)
		copy(toks, ids)
		return Sequence{Tokens: toks, Valid: len(ids)}
	}
	var stream []int32
	for _, d := range f.Documents {
		stream = append(stream, d.IDs...)
	}
	for len(cal) < nCal && len(stream) >= calLen {
		cal, stream = append(cal, seq(stream, calLen)), stream[calLen:]
	}
	for len(eval) < nEval && len(stream) >= evalLen {
		eval, stream = append(eval, seq(stream, evalLen)), stream[evalLen:]
	}
	if len(cal) < nCal || len(eval) < nEval {
		t.Fatalf("held-out set too small: %d/%d calibration, %d/%d evaluation windows", len(cal), nCal, len(eval), nEval)
	}
	return cal, eval
}
