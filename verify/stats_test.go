package verify

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tq-project/tq/verify/reflogits"
)

func studentT(r *rand.Rand, nu int) float64 {
	var chi2 float64
	for range nu {
		g := r.NormFloat64()
		chi2 += g * g
	}
	return r.NormFloat64() / math.Sqrt(chi2/float64(nu))
}

// randLogits returns n logits: Gaussian with standard deviation scale, or Student-t (3 dof)
// when heavy.
func randLogits(r *rand.Rand, n int, scale float64, heavy bool) []float32 {
	l := make([]float32, n)
	for i := range l {
		if heavy {
			l[i] = float32(scale * studentT(r, 3))
		} else {
			l[i] = float32(scale * r.NormFloat64())
		}
	}
	return l
}

// probs64 is an independent float64 softmax (shift by the mean, not the max).
func probs64(l []float32) []float64 {
	var mean float64
	for _, v := range l {
		mean += float64(v)
	}
	mean /= float64(len(l))
	p := make([]float64, len(l))
	var z float64
	for i, v := range l {
		p[i] = math.Exp(float64(v) - mean)
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	return p
}

func TestStatsHelpers(t *testing.T) {
	s := []float64{1, 2, 3, 4}
	for _, c := range []struct{ f, want float64 }{{0, 1}, {1, 4}, {0.5, 2.5}, {0.99, 3.97}, {0.1, 1.3}} {
		if got := percentile(s, c.f); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("percentile(%v) = %v, want %v", c.f, got, c.want)
		}
	}
	if median(s) != 2.5 || median([]float64{3, 5, 9}) != 5 {
		t.Error("median")
	}
	// mean and standard error against a direct two-pass computation
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{5, 11, 1000} {
		var xs []float64
		var sum, sum2 float64
		for range n {
			x := 3 + studentT(r, 4)
			xs = append(xs, x)
			sum += x
			sum2 += x * x
		}
		m, u := meanAndUncertainty(sum, sum2, n)
		var mean, ss float64
		for _, x := range xs {
			mean += x
		}
		mean /= float64(n)
		for _, x := range xs {
			ss += (x - mean) * (x - mean)
		}
		want := math.Sqrt(ss / float64(n) / float64(n-1))
		if n <= 10 {
			want = 0 // llama.cpp reports no uncertainty for n <= 10
		}
		if math.Abs(m-mean) > 1e-12 || math.Abs(u-want) > 1e-9*math.Max(want, 1) {
			t.Errorf("n=%d: mean %v ± %v, want %v ± %v", n, m, u, mean, want)
		}
	}
}

// compareFull against float64 restatements on Gaussian and heavy-tailed logits.
func TestCompareFull(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for trial := range 200 {
		n := 2 + r.IntN(2000)
		heavy := trial%2 == 1
		base := randLogits(r, n, 0.5+3*r.Float64(), heavy)
		cur := slices.Clone(base)
		for i := range cur {
			cur[i] += float32(0.3 * r.NormFloat64())
		}
		tok := int32(r.IntN(n))
		c := compareFull(base, cur, tok, nil)
		p, q := probs64(base), probs64(cur)
		var kld float64
		for i := range p {
			if math.Log(p[i]) > -16 {
				kld += p[i] * (math.Log(p[i]) - math.Log(q[i]))
			}
		}
		tol := 1e-9 + 1e-7*math.Abs(kld)
		if math.Abs(c.kld-kld) > tol {
			t.Fatalf("trial %d: KLD %v, want %v", trial, c.kld, kld)
		}
		if math.Abs(c.nll+math.Log(q[tok])) > 1e-9 || math.Abs(c.nllBase+math.Log(p[tok])) > 1e-9 {
			t.Fatalf("trial %d: nll %v/%v, want %v/%v", trial, c.nll, c.nllBase, -math.Log(q[tok]), -math.Log(p[tok]))
		}
		if math.Abs(c.dp-(q[tok]-p[tok])) > 1e-12 {
			t.Fatalf("trial %d: Δp %v, want %v", trial, c.dp, q[tok]-p[tok])
		}
		if c.sameTop != (argmax64(p) == argmax64(q)) {
			t.Fatalf("trial %d: sameTop %v", trial, c.sameTop)
		}
		if self := compareFull(base, base, tok, make([]float64, n)); math.Abs(self.kld) > 1e-12 || self.dp != 0 || !self.sameTop {
			t.Fatalf("trial %d: self comparison %+v", trial, self)
		}
	}
}

func argmax64(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

// zipfLogits returns logits of a power-law distribution p ∝ rank^−s over n tokens (ranks
// randomly permuted) with Gaussian jitter: the shape of trained language models' next-token
// distributions.
func zipfLogits(r *rand.Rand, n int, s float64) []float32 {
	l := make([]float32, n)
	for i, rank := range r.Perm(n) {
		l[i] = float32(-s*math.Log(float64(rank+1)) + 0.3*r.NormFloat64())
	}
	return l
}

// f32tol is the tolerance for KLDs computed from float32-rounded stored log-probabilities
// (|δ log p| <= 6e-8·|log p| per token).
func f32tol(kld float64) float64 { return 2e-6 + 1e-4*math.Abs(kld) }

// Top-k KLD. Properties checked on Gaussian, heavy-tailed and power-law logits:
//   - chain rule: exact KLD = top-k KLD + r_p · KL(p_tail ‖ q_tail), so the top-k value never
//     exceeds the exact one and grows with k;
//   - k = n reproduces compareFull;
//   - nll, Δp and same-top are unaffected by k.
//
// The relative errors of the mean KLD logged here for power-law distributions are the ones
// quoted in docs/verify.md.
func TestTopKApproximation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	const n = 1536
	mark := make([]bool, n)
	ks := []int{8, 16, 64, 256}
	shapes := []struct {
		name string
		gen  func() []float32
	}{
		{"gaussian", func() []float32 { return randLogits(r, n, 2.5, false) }},
		{"student-t", func() []float32 { return randLogits(r, n, 2.5, true) }},
		{"zipf-1.2", func() []float32 { return zipfLogits(r, n, 1.2) }},
		{"zipf-1.6", func() []float32 { return zipfLogits(r, n, 1.6) }},
	}
	for _, sh := range shapes {
		var fullSum float64
		approxSum := make([]float64, len(ks))
		restSum := make([]float64, len(ks))
		const trials = 40
		for trial := range trials {
			base := sh.gen()
			cur := slices.Clone(base)
			for i := range cur {
				if trial%2 == 0 {
					cur[i] += float32(0.2 * r.NormFloat64())
				} else {
					cur[i] += float32(0.1 * studentT(r, 3))
				}
			}
			tok := int32(r.IntN(n))
			full := compareFull(base, cur, tok, nil)
			fullSum += full.kld
			p, q := probs64(base), probs64(cur)
			var exact float64 // without llama.cpp's −16 cutoff
			for i := range p {
				if p[i] > 0 {
					exact += p[i] * (math.Log(p[i]) - math.Log(q[i]))
				}
			}
			recN := reflogits.NewRecord(base, tok, n)
			if c := compareTopK(&recN, cur, tok, mark); math.Abs(c.kld-full.kld) > f32tol(full.kld) {
				t.Fatalf("%s: k = n: top-k KLD %v, full %v", sh.name, c.kld, full.kld)
			}
			prev := -1.0
			for j, k := range ks {
				rec := reflogits.NewRecord(base, tok, k)
				c := compareTopK(&rec, cur, tok, mark)
				// chain rule: exact − top-k = r_p · KL(p_tail ‖ q_tail)
				in := map[int32]bool{}
				for _, id := range rec.IDs {
					in[id] = true
				}
				var rp, rq float64
				for i := range p {
					if !in[int32(i)] {
						rp += p[i]
						rq += q[i]
					}
				}
				var tailKL float64
				for i := range p {
					if !in[int32(i)] && p[i] > 0 {
						tailKL += p[i] / rp * (math.Log(p[i]/rp) - math.Log(q[i]/rq))
					}
				}
				cutoffTerms := exact - full.kld // tokens below the cutoff, not in any top-k here
				if got, want := exact-c.kld, rp*tailKL; math.Abs(got-want) > f32tol(exact)+math.Abs(cutoffTerms) {
					t.Fatalf("%s k=%d: exact − top-k = %v, r_p·KL(tail) = %v", sh.name, k, got, want)
				}
				if c.kld > exact+f32tol(exact)+math.Abs(cutoffTerms) {
					t.Fatalf("%s k=%d: top-k KLD %v exceeds the exact KLD %v", sh.name, k, c.kld, exact)
				}
				if c.kld < prev-f32tol(prev) {
					t.Fatalf("%s: top-%d KLD %v below top-%d %v", sh.name, k, c.kld, ks[j-1], prev)
				}
				prev = c.kld
				if math.Abs(c.nll-full.nll) > 1e-9 || math.Abs(c.nllBase-full.nllBase) > 1e-5 || c.sameTop != full.sameTop {
					t.Fatalf("%s k=%d: nll/same-top differ from the full comparison", sh.name, k)
				}
				approxSum[j] += c.kld
				restSum[j] += rp
				if slices.Contains(mark, true) {
					t.Fatal("scratch not restored")
				}
			}
		}
		for j, k := range ks {
			re := math.Abs(approxSum[j]-fullSum) / fullSum
			rest := restSum[j] / trials
			t.Logf("%-9s k=%3d: mean KLD %.5f vs full %.5f, relative error %.4f, mean rest mass %.4f", sh.name, k, approxSum[j]/trials, fullSum/trials, re, rest)
			// with noise independent of the token, the tail diverges about as much as the head:
			// the relative error tracks the rest mass
			if re > 2*rest+0.01 {
				t.Errorf("%s k=%d: mean KLD off by %.1f%% with %.1f%% rest mass", sh.name, k, 100*re, 100*rest)
			}
		}
	}
}

// fakeLM is a deterministic model whose logits at a position depend on the whole prefix, so
// that any slip in windows, BOS replacement or scored positions changes the result.
type fakeLM struct {
	nv, ctx int
	hist    []int32
	evals   int
}

func (f *fakeLM) NVocab() int  { return f.nv }
func (f *fakeLM) CtxSize() int { return f.ctx }
func (f *fakeLM) Reset()       { f.hist = f.hist[:0] }

func (f *fakeLM) Eval(tokens []int32, nOut int) ([][]float32, error) {
	f.evals++
	f.hist = append(f.hist, tokens...)
	var out [][]float32
	for i := len(f.hist) - nOut; i < len(f.hist); i++ {
		out = append(out, fakeLogits(f.hist[:i+1], f.nv))
	}
	return out, nil
}

func fakeLogits(prefix []int32, nv int) []float32 {
	h := fnv.New64a()
	for _, t := range prefix {
		h.Write([]byte{byte(t), byte(t >> 8), byte(t >> 16)})
	}
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(len(prefix))))
	l := randLogits(r, nv, 2, true)
	// make the next token somewhat predictable: favour (last+1) mod nv
	l[(int(prefix[len(prefix)-1])+1)%nv] += 4
	return l
}

func TestEvaluatePerplexity(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	const nv, nCtx = 50, 16
	text := make([]int32, 5*nCtx+7)
	for i := range text {
		if r.IntN(3) == 0 {
			text[i] = int32(r.IntN(nv))
		} else if i > 0 {
			text[i] = (text[i-1] + 1) % nv
		}
	}
	for _, addBOS := range []bool{false, true} {
		w, err := CutWindows(text, nCtx, 0, addBOS, 7)
		if err != nil {
			t.Fatal(err)
		}
		if w.N() != 5 {
			t.Fatalf("%d windows", w.N())
		}
		m := &fakeLM{nv: nv, ctx: nCtx}
		out, err := evaluate(context.Background(), evalInput{Model: m, Windows: w})
		if err != nil {
			t.Fatal(err)
		}
		// independent restatement of llama-perplexity's loop
		var sum, sum2 float64
		var n int
		for c := range 5 {
			chunk := slices.Clone(text[c*nCtx : (c+1)*nCtx])
			if addBOS {
				chunk[0] = 7
			}
			for j := nCtx / 2; j <= nCtx-2; j++ {
				p := probs64(fakeLogits(chunk[:j+1], nv))
				v := -math.Log(p[text[c*nCtx+j+1]])
				sum += v
				sum2 += v * v
				n++
			}
		}
		mean := sum / float64(n)
		ppl := math.Exp(mean)
		unc := ppl * math.Sqrt((sum2/float64(n)-mean*mean)/float64(n-1))
		if n != 5*(nCtx-1-nCtx/2) || out.ppl.Positions != n {
			t.Fatalf("positions %d, want %d", out.ppl.Positions, n)
		}
		if math.Abs(out.ppl.PPL.Value-ppl) > 1e-9*ppl || math.Abs(out.ppl.PPL.Err-unc) > 1e-7*unc {
			t.Fatalf("addBOS=%v: PPL %v ± %v, want %v ± %v", addBOS, out.ppl.PPL.Value, out.ppl.PPL.Err, ppl, unc)
		}
		if len(out.ppl.Running) != 5 || math.Abs(out.ppl.Running[4]-ppl) > 1e-9*ppl {
			t.Fatalf("running %v", out.ppl.Running)
		}
	}
	if _, err := CutWindows(text[:2*nCtx-1], nCtx, 0, false, 0); err == nil {
		t.Error("fewer than 2·ctx tokens accepted")
	}
	if _, err := CutWindows(text, 15, 0, false, 0); err == nil {
		t.Error("odd context accepted")
	}
}

// KLD against a live reference and against saved top-k records: identical top-1, Δp and
// PPLs; KLD within the approximation.
func TestEvaluateKLD(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const nv, nCtx = 300, 32
	text := make([]int32, 8*nCtx)
	for i := range text {
		text[i] = int32(r.IntN(nv))
	}
	w, _ := CutWindows(text, nCtx, 0, true, 1)
	model := &fakeLM{nv: nv, ctx: 64}
	ref := &perturbedLM{fakeLM{nv: nv, ctx: 64}, 0.3}
	live, err := evaluate(context.Background(), evalInput{Model: model, Ref: ref, Windows: w, SaveTopK: 32})
	if err != nil {
		t.Fatal(err)
	}
	k := live.kld
	if k.Positions != 8*(nCtx-1-nCtx/2) || k.KLD.Mean <= 0 || k.SameTop.Value <= 0 || k.SameTop.Value >= 1 {
		t.Fatalf("implausible KLD report %+v", k)
	}
	if math.Abs(k.PPL.Value-live.ppl.PPL.Value) > 1e-9*k.PPL.Value {
		t.Fatalf("PPL(Q) %v differs from the perplexity %v", k.PPL.Value, live.ppl.PPL.Value)
	}
	if !(k.KLD.Min <= k.KLD.P1 && k.KLD.P1 <= k.KLD.Median && k.KLD.Median <= k.KLD.P99 && k.KLD.P99 <= k.KLD.Max) {
		t.Fatalf("percentiles out of order: %+v", k.KLD)
	}
	saved := live.saved
	if saved == nil || len(saved.Records) != k.Positions {
		t.Fatal("no saved reference")
	}
	stored, err := evaluate(context.Background(), evalInput{Model: model, RefFile: saved, Windows: w})
	if err != nil {
		t.Fatal(err)
	}
	s := stored.kld
	if s.SameTop != k.SameTop || math.Abs(s.PPLBase.Value-k.PPLBase.Value) > 1e-5*k.PPLBase.Value ||
		math.Abs(s.MeanAbsDeltaP-k.MeanAbsDeltaP) > 1e-6 {
		t.Fatalf("saved reference: top-1 %v vs %v, PPL(base) %v vs %v, |Δp| %v vs %v", s.SameTop, k.SameTop,
			s.PPLBase.Value, k.PPLBase.Value, s.MeanAbsDeltaP, k.MeanAbsDeltaP)
	}
	rel := math.Abs(s.KLD.Mean-k.KLD.Mean) / k.KLD.Mean
	t.Logf("mean KLD: full %.5f, top-32 %.5f (relative error %.4f)", k.KLD.Mean, s.KLD.Mean, rel)
	if s.KLD.Mean > k.KLD.Mean*(1+1e-6) || rel > 0.15 {
		t.Fatalf("top-32 mean KLD %v vs full %v", s.KLD.Mean, k.KLD.Mean)
	}
	// mismatched windows are refused
	w2, _ := CutWindows(text, 16, 0, true, 1)
	if _, err := evaluate(context.Background(), evalInput{Model: model, RefFile: saved, Windows: w2}); err == nil {
		t.Error("reference with other windows accepted")
	}
}

// perturbedLM is fakeLM with noise added to the logits (a "quantized" copy).
type perturbedLM struct {
	fakeLM
	amp float64
}

func (p *perturbedLM) Eval(tokens []int32, nOut int) ([][]float32, error) {
	rows, err := p.fakeLM.Eval(tokens, nOut)
	for i, row := range rows {
		r := rand.New(rand.NewPCG(uint64(len(p.hist)), uint64(i)))
		for j := range row {
			row[j] += float32(p.amp * r.NormFloat64())
		}
	}
	return rows, err
}

// hugeLM puts the true next tokens at −1e6: perplexity overflows float64.
type hugeLM struct{ fakeLM }

func (h *hugeLM) Eval(tokens []int32, nOut int) ([][]float32, error) {
	rows, err := h.fakeLM.Eval(tokens, nOut)
	for _, row := range rows {
		for i := range row {
			row[i] = -1e6
		}
		row[0] = 1e6
	}
	return rows, err
}

// A broken model's infinite perplexity stays representable (JSON has no Inf) and fails gates.
func TestPerplexityOverflow(t *testing.T) {
	text := make([]int32, 64)
	for i := range text {
		text[i] = int32(1 + i%5)
	}
	w, _ := CutWindows(text, 16, 0, false, 0)
	out, err := evaluate(context.Background(), evalInput{Model: &hugeLM{fakeLM{nv: 8, ctx: 16}}, Windows: w})
	if err != nil {
		t.Fatal(err)
	}
	if out.ppl.PPL.Value != math.MaxFloat64 {
		t.Fatalf("PPL %v", out.ppl.PPL.Value)
	}
	rep := &Report{Perplexity: out.ppl, Skipped: map[string]string{}}
	limit := 100.0
	rep.evaluateGates(Thresholds{MaxPPL: &limit}, nil)
	if _, err := json.Marshal(rep); err != nil || rep.Verdict != VerdictFail {
		t.Fatalf("JSON: %v, verdict %s", err, rep.Verdict)
	}
}
