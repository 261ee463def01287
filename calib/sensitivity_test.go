package calib

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/testenv"
)

// TestSensitivityMatchesWholeModel checks the streamed sensitivity pass against the plain
// definition: for a few tensors of the trained Qwen3.5 hybrid (a DeltaNet projection, a
// full-attention projection, the experts, the embedding and the LM head), the whole model is
// loaded with that tensor alone round-tripped through the reference container with its
// importance, and the mean KL of the next-token distributions over the same tokens is
// computed by tq's runner. The two compute the same function in float32 with different
// summation orders (the pass runs its own LM head), so they agree to rounding: required
// within 2 % relative (measured: 1e-5 relative or closer on all five). The ranking the budget relies on is checked
// too: the first block's DeltaNet projection costs more than the full-attention q projection.
func TestSensitivityMatchesWholeModel(t *testing.T) {
	if testing.Short() {
		t.Skip("calibrates and evaluates a trained model")
	}
	// The pass runs in the calibration forward's arithmetic: float32 products, or, for a
	// model without routed experts on a CPU with AVX512-BF16 and no AMX, bf16 matrices times
	// activations rounded to bf16 (each probe of a bf16 tensor rounded to bf16). Each is
	// checked against the whole model run in the same arithmetic; the rounded one also
	// against the float32 definition. The hybrid MoE takes float32 products on every CPU.
	trained := func(m string) string { return filepath.Join(testenv.RepoRoot(t), "testdata", "trained", m) }
	hybrid := []string{"blk.0.attn_qkv.weight", "blk.3.attn_q.weight", "blk.1.ffn_up_exps.weight", "token_embd.weight", "output.weight"}
	got := sensitivityMatchesWholeModel(t, trained("qwen35moe"), hybrid, false)
	if !(got["blk.0.attn_qkv.weight"] > got["blk.3.attn_q.weight"]) {
		t.Errorf("DeltaNet attn_qkv (%.3g) not above attention q (%.3g)", got["blk.0.attn_qkv.weight"], got["blk.3.attn_q.weight"])
	}
	dense := []string{"blk.0.attn_q.weight", "blk.1.ffn_up.weight", "blk.3.ffn_down.weight", "token_embd.weight", "output.weight"}
	if bf16Rounded(false) {
		sensitivityMatchesWholeModel(t, trained("qwen3"), dense, true)
	} else {
		t.Log("no rounded bf16 products here (the CPU, AMX or a purego build): the dense model's pass in float32")
		sensitivityMatchesWholeModel(t, trained("qwen3"), dense, false)
	}
}

// sensitivityMatchesWholeModel calibrates dir with a 256-token sensitivity pass and compares
// the KL of the named tensors with whole-model runs: in float32, and with rounded set in the
// rounded bf16 arithmetic too. It returns the pass's figures.
func sensitivityMatchesWholeModel(t *testing.T, dir string, names []string, rounded bool) map[string]float64 {
	t.Helper()
	cal, _ := heldoutSplit(t, 2, 128, 0, 0)
	out := filepath.Join(t.TempDir(), "out")
	res := calibrate(t, dir, Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true,
		OutDir: out, SensitivityTokens: 256})
	if res.SensitivityPath == "" {
		t.Fatalf("no sensitivity file; warnings: %q", res.Warnings)
	}
	sens, err := LoadSensitivity(res.SensitivityPath)
	if err != nil {
		t.Fatal(err)
	}
	if sens.Tokens != 256 || sens.Sequences != 2 {
		t.Fatalf("scored %d tokens of %d sequences, want 256 of 2", sens.Tokens, sens.Sequences)
	}
	if f32 := sens.Arithmetic == "float32 products"; f32 == rounded || sens.Arithmetic == "" {
		t.Fatalf("the file records arithmetic %q; rounded products: %v", sens.Arithmetic, rounded)
	}
	ms := fullSource(t, dir)
	exact := func(s infer.Source) *infer.Model { return loadF32(t, s, 256) }
	ref := exact(ms)
	// the rounded arithmetic: the blocks' bf16 matrices kept bf16 (the embedding and the LM
	// head stay float32, as the pass reads them)
	var ms16 *metaSource
	var ref16 *infer.Model
	roundedModel := func(s infer.Source) *infer.Model {
		o := forwardOptions(false)
		o.Threads, o.CtxSize = 2, 256
		m, err := infer.Load(s, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	if rounded {
		ms16 = loadSource(t, dir, true)
		ref16 = roundedModel(ms16)
	}
	got := map[string]float64{}
	for _, name := range names {
		typ, kl, _, ok := sens.Sensitivity(name)
		if !ok {
			t.Fatalf("%s: not measured", name)
		}
		if typ != gguf.TypeQ4_K {
			t.Fatalf("%s: reference type %v, want q4_K", name, typ)
		}
		tt := ms.tensors[name]
		src := bytesAsF32(tt.Data)
		cols, rows := int(tt.Dims[0]), int(tt.Dims[1])
		nmat := 1
		if len(tt.Dims) > 2 {
			nmat = int(tt.Dims[2])
		}
		deq := make([]float32, len(src))
		for e := 0; e < nmat; e++ {
			var imp []float32
			if name != "token_embd.weight" {
				imp, _ = res.Stats.Importance(name, e)
			}
			if _, err := quantizeRows(typ, sensitivityMode, src[e*rows*cols:(e+1)*rows*cols], rows, cols, imp, 0, name, nil, deq[e*rows*cols:(e+1)*rows*cols]); err != nil {
				t.Fatal(err)
			}
		}
		want := meanKL(t, ref, exact(withTensor(ms, name, deq)), cal)
		got[name] = kl
		if !rounded {
			t.Logf("%-26s pass %.6g, whole model %.6g (%.4f)", name, kl, want, kl/want)
			if !(want > 0) || math.Abs(kl-want) > 0.02*want {
				t.Errorf("%s: the pass measured KL %.6g, the whole model gives %.6g", name, kl, want)
			}
			continue
		}
		var q *infer.Model
		if ms16.tensors[name].Type == gguf.TypeBF16 {
			q = roundedModel(withTensor16(ms16, name, deq))
		} else {
			q = roundedModel(withTensor(ms16, name, deq))
		}
		want16 := meanKL(t, ref16, q, cal)
		t.Logf("%-26s rounded pass %.6g, whole model rounded %.6g (%.4f), float32 %.6g (%.4f)", name, kl, want16, kl/want16, want, kl/want)
		if !(want16 > 0) || math.Abs(kl-want16) > 0.02*want16 {
			t.Errorf("%s: the rounded pass measured KL %.6g, the whole model in the same arithmetic gives %.6g", name, kl, want16)
		}
		// against the float32 definition the rounding adds what two rounded streams differ
		// by besides the probe (docs/calibration.md, "Measured sensitivity")
		if math.Abs(kl-want) > 0.35*want {
			t.Errorf("%s: the rounded pass measured KL %.6g, the float32 definition gives %.6g", name, kl, want)
		}
	}
	return got
}

// TestSensitivitySkipped: a calibration set below MinSensitivityTokens and a disabled pass
// write no file, and a stale sensitivity.json from an earlier run does not survive.
func TestSensitivitySkipped(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "qwen3")
	cal, _ := heldoutSplit(t, 1, 64, 0, 0)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(out, SensitivityFile)
	if err := os.WriteFile(stale, []byte(`{"format":"tq-sensitivity/1","tensors":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := calibrate(t, dir, Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, OutDir: out})
	if res.SensitivityPath != "" {
		t.Fatalf("sensitivity written from %d tokens", cal[0].Valid)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale %s left behind (err %v): convert --calibration would use another run's measurements", SensitivityFile, err)
	}
	// a search on imported statistics (no forward pass) removes it too
	if err := os.WriteFile(stale, []byte(`{"format":"tq-sensitivity/1","tensors":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	calibrate(t, dir, Options{Import: res.Stats, ImportHash: "sha256:test", NoBaseline: true, NoSensitivity: true, OutDir: out})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("imported statistics: stale %s left behind (err %v)", SensitivityFile, err)
	}
}

func FuzzParseSensitivity(f *testing.F) {
	f.Add([]byte(`{"format":"tq-sensitivity/1","tokens":2,"tensors":[{"name":"a.weight","type":"q4_K","kl":0.1,"rel_error":0.01}]}`))
	f.Add([]byte(`{"format":"tq-sensitivity/1","tensors":[{"name":"a","type":"f16","kl":-1}]}`))
	f.Add([]byte(`{"format":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSensitivity(b, "fuzz")
		if err != nil {
			return
		}
		for _, ts := range s.Tensors {
			typ, kl, _, ok := s.Sensitivity(ts.Name)
			if !ok || kl < 0 || math.IsNaN(kl) {
				t.Fatalf("%s: %v %v %v", ts.Name, typ, kl, ok)
			}
			if tr, _ := typ.Traits(); !tr.Quantized {
				t.Fatalf("%s: type %v", ts.Name, typ)
			}
		}
	})
}

// TestSensitivityTopK: large vocabularies are scored over the reference's most probable
// tokens plus a sample of the rest (topKKL). On the trained hybrid (1,536 tokens, scored whole
// by default) the estimate with the top 256 and 256 tail samples is compared with the
// whole-vocabulary figures of the same run: every tensor's KL within 5 % (measured: at most
// 0.8 %; without the tail sample the top 256 alone were up to 56 % low on this flat
// distribution), and the order of the tensors by KL, which is what the budget uses across
// tensors, unchanged (Spearman ρ ≥ 0.99; measured 1.0000).
func TestSensitivityTopK(t *testing.T) {
	if testing.Short() {
		t.Skip("calibrates a trained model twice")
	}
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "qwen35moe")
	cal, _ := heldoutSplit(t, 2, 128, 0, 0)
	run := func() *Sensitivity {
		res := calibrate(t, dir, Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, SensitivityTokens: 256})
		s, err := LoadSensitivity(res.SensitivityPath)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := run()
	defer func(v int) { sensitivityFullVocab = v }(sensitivityFullVocab)
	sensitivityFullVocab = 1000
	top := run()
	if full.TopK != 0 || top.TopK != sensitivityTopK {
		t.Fatalf("top_k %d and %d, want 0 and %d", full.TopK, top.TopK, sensitivityTopK)
	}
	var worst float64
	var a, b []float64
	for _, ts := range full.Tensors {
		_, kt, _, ok := top.Sensitivity(ts.Name)
		if !ok {
			t.Fatalf("%s missing from the top-k run", ts.Name)
		}
		rel := math.Abs(kt-ts.KL) / ts.KL
		worst = max(worst, rel)
		if rel > 0.05 {
			t.Errorf("%s: top-%d KL %.4g, whole vocabulary %.4g", ts.Name, sensitivityTopK, kt, ts.KL)
		}
		a, b = append(a, ts.KL), append(b, kt)
	}
	rho := spearman(a, b)
	t.Logf("%d tensors: worst relative difference %.3f, Spearman %.4f", len(a), worst, rho)
	if rho < 0.99 {
		t.Errorf("Spearman correlation %.4f of the tensors' KL order", rho)
	}
}

func spearman(a, b []float64) float64 {
	rank := func(v []float64) []float64 {
		idx := make([]int, len(v))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(i, j int) bool { return v[idx[i]] < v[idx[j]] })
		r := make([]float64, len(v))
		for k, i := range idx {
			r[i] = float64(k)
		}
		return r
	}
	ra, rb := rank(a), rank(b)
	n := float64(len(a))
	var d2 float64
	for i := range ra {
		d := ra[i] - rb[i]
		d2 += d * d
	}
	return 1 - 6*d2/(n*(n*n-1))
}

// TestSensitivityDefaultBound: by default the pass's block work stays within twice the
// statistics pass's. On the trained qwen3 (4 blocks, 28 block tensors + embedding + head)
// with 16 sequences of 256 tokens, that is 2·4096·4 / (4 + 7·(4+3+2+1) + 4) = 420 tokens;
// an explicit token count is not bounded by it.
func TestSensitivityDefaultBound(t *testing.T) {
	if testing.Short() {
		t.Skip("calibrates a trained model")
	}
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "qwen3")
	cal, _ := heldoutSplit(t, 16, 256, 0, 0)
	for _, c := range []struct{ opt, want int }{{0, 420}, {1000, 1000}} {
		res := calibrate(t, dir, Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, SearchRows: 8, SensitivityTokens: c.opt})
		s, err := LoadSensitivity(res.SensitivityPath)
		if err != nil {
			t.Fatalf("SensitivityTokens %d: %v (warnings %q)", c.opt, err, res.Warnings)
		}
		if s.Tokens != c.want {
			t.Errorf("SensitivityTokens %d: scored %d tokens, want %d", c.opt, s.Tokens, c.want)
		}
	}
}

// TestSensitivityTiedEmbeddings: with tied embeddings token_embd.weight is both the input
// lookup and the LM head, so its probe perturbs both; the pass must agree with the whole model
// run with the round-tripped matrix in that one place (generated qwen3 fixture; same 2 %
// bound as TestSensitivityMatchesWholeModel).
func TestSensitivityTiedEmbeddings(t *testing.T) {
	o := fixtures.Preset("qwen3")
	o.Layers = 2
	o.TieEmbeddings = true
	dir := genModel(t, o)
	seqs := randSeqs(31, 3, vocabOf(t, dir), 64, 64, 64)
	res := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, SensitivityTokens: 192})
	sens, err := LoadSensitivity(res.SensitivityPath)
	if err != nil {
		t.Fatalf("%v (warnings %q)", err, res.Warnings)
	}
	if _, _, _, ok := sens.Sensitivity("output.weight"); ok {
		t.Fatal("a tied model measured output.weight")
	}
	typ, kl, _, ok := sens.Sensitivity("token_embd.weight")
	if !ok {
		t.Fatal("token_embd.weight not measured")
	}
	ms := fullSource(t, dir)
	tt := ms.tensors["token_embd.weight"]
	src := bytesAsF32(tt.Data)
	cols, rows := int(tt.Dims[0]), int(tt.Dims[1])
	deq := make([]float32, len(src))
	if _, err := quantizeRows(typ, sensitivityMode, src, rows, cols, nil, 0, "token_embd.weight", nil, deq); err != nil {
		t.Fatal(err)
	}
	q := withTensor(ms, "token_embd.weight", deq)
	load := func(s infer.Source) *infer.Model { return loadF32(t, s, 64) }
	want := meanKL(t, load(ms), load(q), seqs)
	t.Logf("tied token_embd: pass %.6g, whole model %.6g", kl, want)
	if !(want > 0) || math.Abs(kl-want) > 0.02*want {
		t.Errorf("the pass measured KL %.6g, the whole model gives %.6g", kl, want)
	}
}

// TestSensitivitySampleShapes checks the pass's default sample size on the shape of the model
// this toolchain is for, Qwen3.6-35B-A3B (40 blocks, every fourth full attention; vocabulary
// 248,320, n_embd 2,048; 9 probes per DeltaNet block — attn_qkv, attn_gate, ssm_out and the
// routed and shared experts' three matrices — 10 per attention block, plus the embedding and
// the LM head; about 2.44·10⁹ block multiply-adds per token with 8 of 256 experts), after a
// statistics pass over 25,000 tokens. A fixed LM-head bound of 10¹¹ multiply-adds left 111
// tokens there, so the pass was skipped; by default the head may take a quarter of the
// blocks' work, so the block bound (twice the statistics pass) decides. And where the head is
// the larger part (a huge vocabulary on tiny blocks), the head bound still shrinks the sample.
func TestSensitivitySampleShapes(t *testing.T) {
	const L = 40
	hybrid := sampleShape{layers: L, statsTokens: 25000, blockMACs: 2.44e9, vocab: 248320, embd: 2048}
	for l := 0; l < L; l++ {
		n := 9
		if l%4 == 3 {
			n = 10
		}
		for i := 0; i < n; i++ {
			hybrid.runs = append(hybrid.runs, L-l)
		}
	}
	hybrid.runs = append(hybrid.runs, L, 0) // token_embd, output
	perTokBlocks := L
	for _, r := range hybrid.runs {
		perTokBlocks += r
	}
	blockBound := int(sensitivityWorkRatio * 25000 * L / float64(perTokBlocks))
	headPerTok := 248320*2048.0 + float64(len(hybrid.runs))*float64(sensitivityTopK+sensitivityTail)*2048
	if old, _ := sensitivitySample(hybrid, 0, DefaultSensitivityMACs); old >= MinSensitivityTokens {
		t.Fatalf("with the fixed head bound: %d tokens (the shape no longer shows why the bound is relative)", old)
	}
	want, topK := sensitivitySample(hybrid, 0, 0)
	if want != blockBound || want < MinSensitivityTokens || topK != sensitivityTopK {
		t.Fatalf("35B-A3B shape: %d tokens (top-k %d), want the block bound %d (≥ %d), top-k %d", want, topK, blockBound, MinSensitivityTokens, sensitivityTopK)
	}
	t.Logf("35B-A3B shape: %d probes, %d tokens, head %.2g of the blocks' %.2g multiply-adds", len(hybrid.runs), want,
		float64(want)*headPerTok, float64(want)*float64(perTokBlocks)*2.44e9/L)
	// an explicit bound and an explicit token count are kept
	if n, _ := sensitivitySample(hybrid, 0, 50*headPerTok); n != 50 {
		t.Errorf("explicit head bound of 50 tokens: %d", n)
	}
	if n, _ := sensitivitySample(hybrid, 1000, 0); n != 1000 {
		t.Errorf("explicit 1000 tokens: %d", n)
	}
	// tiny blocks under a huge vocabulary: the head decides, at the larger of the fixed bound
	// and a quarter of the blocks' work
	for _, c := range []struct {
		blockMACs float64
		macs      float64
	}{{1e6, DefaultSensitivityMACs}, {1e9, 0.25 * 2048 * 5 * 1e9 / 2}} {
		s := sampleShape{layers: 2, runs: []int{2, 1, 0}, statsTokens: 1e6, blockMACs: c.blockMACs, vocab: 1 << 20, embd: 1024}
		perTok := float64(1<<20)*1024 + 3*float64(sensitivityTopK+sensitivityTail)*1024
		if n, _ := sensitivitySample(s, 0, 0); n != int(c.macs/perTok) || n >= DefaultSensitivityTokens {
			t.Errorf("block MACs %g: %d tokens, want %d", c.blockMACs, n, int(c.macs/perTok))
		}
	}
}

// TestSensitivityProgress: the pass reports every block's work as it goes (the streams that
// run through it — the earlier probes, the clean one and the block's new probes — each over
// the sample), so a long pass shows a progress bar; the last event of a block has done it all.
func TestSensitivityProgress(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "qwen3")
	cal, _ := heldoutSplit(t, 2, 128, 0, 0)
	type blk struct{ last, total, events int64 }
	blocks := map[int]*blk{}
	o := Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, SensitivityTokens: 192}
	o.Progress = func(p Progress) {
		if p.Stage != "sensitivity" || p.Layer >= p.NLayer {
			return
		}
		b := blocks[p.Layer]
		if b == nil {
			b = &blk{total: p.TotalTokens}
			blocks[p.Layer] = b
		}
		if p.TotalTokens != b.total || p.Tokens < b.last || p.Tokens > p.TotalTokens {
			t.Errorf("block %d: %d of %d tokens after %d of %d", p.Layer, p.Tokens, p.TotalTokens, b.last, b.total)
		}
		b.last = p.Tokens
		b.events++
	}
	res := calibrate(t, dir, o)
	s, err := LoadSensitivity(res.SensitivityPath)
	if err != nil {
		t.Fatal(err)
	}
	L := len(blocks)
	started := make([]int, L+1) // probes started before block l
	for _, ts := range s.Tensors {
		if l := Layer(ts.Name); l >= 0 {
			started[l+1]++
		} else if ts.Name == "token_embd.weight" {
			started[0]++
		}
	}
	before := 0
	for l := 0; l < L; l++ {
		before += started[l]
		b := blocks[l]
		want := int64(before+1+started[l+1]) * int64(s.Tokens)
		if b == nil || b.total != want || b.last != want || b.events < 3 {
			t.Errorf("block %d: %+v, want %d tokens in all (%d earlier probes, the clean stream, %d new, %d tokens)", l, b, want, before, started[l+1], s.Tokens)
		}
	}
	if L == 0 {
		t.Fatal("no sensitivity progress")
	}
}

// TestBlockMACs: the statistics pass's multiply-adds per token, which the pass's head bound is
// relative to, count every block matrix once and routed experts at n_expert_used/n_expert; not
// the embedding, the LM head or the norms.
func TestBlockMACs(t *testing.T) {
	r := &run{cfg: &infer.Config{NExpert: 8, NExpertUse: 2}, descs: map[string]modelsrc.TensorDesc{
		"token_embd.weight":           {Name: "token_embd.weight", Shape: []int64{256, 1000}},
		"output.weight":               {Name: "output.weight", Shape: []int64{256, 1000}},
		"blk.0.attn_norm.weight":      {Name: "blk.0.attn_norm.weight", Shape: []int64{256}},
		"blk.0.attn_q.weight":         {Name: "blk.0.attn_q.weight", Shape: []int64{256, 512}},
		"blk.1.ffn_gate_inp.weight":   {Name: "blk.1.ffn_gate_inp.weight", Shape: []int64{256, 8}},
		"blk.1.ffn_gate_exps.weight":  {Name: "blk.1.ffn_gate_exps.weight", Shape: []int64{256, 128, 8}},
		"blk.1.ffn_down_exps.weight":  {Name: "blk.1.ffn_down_exps.weight", Shape: []int64{128, 256, 8}},
		"blk.1.ffn_gate_shexp.weight": {Name: "blk.1.ffn_gate_shexp.weight", Shape: []int64{256, 128}},
		"blk.1.ssm_conv1d.weight":     {Name: "blk.1.ssm_conv1d.weight", Shape: []int64{4, 64}},
		"output_norm.weight":          {Name: "output_norm.weight", Shape: []int64{256}},
		"blk.1.attn_k_norm.weight":    {Name: "blk.1.attn_k_norm.weight", Shape: []int64{64}},
	}}
	want := 256.0*512 + 256*8 + 2*(256*128*8)*2/8 + 256*128 + 4*64
	if got := r.blockMACs(); got != want {
		t.Fatalf("blockMACs %g, want %g", got, want)
	}
}

// TestSensitivityHalfHead: with top-k KL a BF16 LM head stays 16-bit and its rows are widened
// where they are multiplied, and the head's own probe stays in its container (rows
// dequantized where scored); both give exactly the figures of the float32 head (trained qwen3,
// BF16 checkpoint, top-k forced).
func TestSensitivityHalfHead(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "trained", "qwen3")
	cal, _ := heldoutSplit(t, 2, 128, 0, 0)
	defer func(v int) { sensitivityFullVocab = v }(sensitivityFullVocab)
	sensitivityFullVocab = 1000
	run := func(half bool) map[string]TensorSensitivity {
		defer func(v bool) { sensitivityHalfHead = v }(sensitivityHalfHead)
		sensitivityHalfHead = half
		res := calibrate(t, dir, Options{Sequences: cal, Threads: 2, NoBaseline: true, NoSensitivity: true, NoHessians: true, SensitivityTokens: 256})
		s, err := LoadSensitivity(res.SensitivityPath)
		if err != nil {
			t.Fatal(err)
		}
		if s.TopK != sensitivityTopK {
			t.Fatalf("top_k %d", s.TopK)
		}
		m := map[string]TensorSensitivity{}
		for _, ts := range s.Tensors {
			m[ts.Name] = ts
		}
		return m
	}
	a, b := run(true), run(false)
	if _, ok := a["output.weight"]; !ok || len(a) != len(b) {
		t.Fatalf("%d and %d tensors, output.weight measured: %v", len(a), len(b), ok)
	}
	for name, x := range a {
		if y := b[name]; x != y {
			t.Errorf("%s: 16-bit head %+v, float32 head %+v", name, x, y)
		}
	}
}
