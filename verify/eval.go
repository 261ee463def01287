package verify

import (
	"context"
	"fmt"
	"math"

	"github.com/tq-project/tq/verify/reflogits"
)

// Windows are the evaluation chunks of llama-perplexity: the token stream of the text (BOS
// prepended when the vocabulary adds it) cut into consecutive windows of NCtx tokens; a
// leftover shorter than NCtx is ignored.
type Windows struct {
	NCtx   int
	AddBOS bool  // the first token of every window is replaced by BOS
	BOS    int32 // BOS id (when AddBOS)
	Tokens []int32
}

// CutWindows cuts tokens into at most maxWindows (<= 0: all) windows of nCtx tokens. Like
// llama-perplexity it needs at least 2·nCtx tokens.
func CutWindows(tokens []int32, nCtx, maxWindows int, addBOS bool, bos int32) (*Windows, error) {
	if nCtx < 4 || nCtx%2 != 0 {
		return nil, fmt.Errorf("context %d: must be an even number >= 4", nCtx)
	}
	if len(tokens) < 2*nCtx {
		return nil, fmt.Errorf("the text has %d tokens; perplexity with a context of %d needs at least %d (2·ctx), use a longer text or a smaller --ctx",
			len(tokens), nCtx, 2*nCtx)
	}
	n := len(tokens) / nCtx
	if maxWindows > 0 {
		n = min(n, maxWindows)
	}
	return &Windows{NCtx: nCtx, AddBOS: addBOS, BOS: bos, Tokens: append([]int32(nil), tokens[:n*nCtx]...)}, nil
}

// N is the number of windows.
func (w *Windows) N() int { return len(w.Tokens) / w.NCtx }

// First is the first scored position of a window: NCtx/2.
func (w *Windows) First() int { return w.NCtx / 2 }

// Scored is the number of scored positions per window: NCtx − 1 − NCtx/2.
func (w *Windows) Scored() int { return w.NCtx - 1 - w.NCtx/2 }

// Original returns the tokens of window i as cut from the text.
func (w *Windows) Original(i int) []int32 { return w.Tokens[i*w.NCtx : (i+1)*w.NCtx] }

// Input returns the tokens evaluated for window i: the original tokens with the first
// replaced by BOS when AddBOS.
func (w *Windows) Input(i int) []int32 {
	in := append([]int32(nil), w.Original(i)...)
	if w.AddBOS {
		in[0] = w.BOS
	}
	return in
}

// PerplexityReport is the perplexity of the model on the evaluation text, computed like
// llama-perplexity (docs/verify.md "Perplexity").
type PerplexityReport struct {
	Text       string `json:"text"`        // file name, or "built-in"
	TextSHA256 string `json:"text_sha256"` // of the text's bytes
	TextTokens int    `json:"text_tokens"` // tokens of the whole text (BOS included when added)
	// Tokenizer says whose tokenizer cut the text: "model" or "reference".
	Tokenizer string `json:"tokenizer"`
	Ctx       int    `json:"ctx"`
	Windows   int    `json:"windows"`
	Positions int    `json:"positions"` // scored positions: windows·(ctx − 1 − ctx/2)
	AddBOS    bool   `json:"add_bos"`
	// PPL = exp(mean NLL) with llama.cpp's standard error PPL·sqrt((mean(nll²) − mean²)/(n − 1)).
	PPL     ValueErr `json:"ppl"`
	MeanNLL float64  `json:"mean_nll"`
	// Running is the running perplexity after each window (llama-perplexity's "[k]ppl" line).
	Running []float64 `json:"running"`
}

// evalInput is one perplexity / KL-divergence run.
type evalInput struct {
	Model    LogitsModel     // model under test (nil: reference only, for SaveTopK)
	Ref      LogitsModel     // live reference, or nil
	RefFile  *reflogits.File // stored reference, or nil
	Windows  *Windows
	SaveTopK int // > 0: build a reference file from Ref with this many tokens per position
	Progress func(done, total int)
}

type evalOutput struct {
	ppl   *PerplexityReport // of Model (nil without Model)
	kld   *KLDReport        // nil without a reference
	saved *reflogits.File   // when SaveTopK > 0
}

// evaluate runs the windows through the model(s) and scores the second half of each window.
func evaluate(ctx context.Context, in evalInput) (*evalOutput, error) {
	w := in.Windows
	if in.Model == nil && (in.Ref == nil || in.SaveTopK <= 0) {
		return nil, fmt.Errorf("verify: nothing to evaluate")
	}
	var nv int
	for _, m := range []LogitsModel{in.Model, in.Ref} {
		if m == nil {
			continue
		}
		if m.CtxSize() < w.NCtx {
			return nil, fmt.Errorf("model context %d is smaller than --ctx %d", m.CtxSize(), w.NCtx)
		}
		if nv != 0 && m.NVocab() != nv {
			return nil, fmt.Errorf("the model has %d logits per token and the reference %d: vocabularies differ", nv, m.NVocab())
		}
		nv = m.NVocab()
	}
	if f := in.RefFile; f != nil {
		if f.Header.NCtx != w.NCtx || f.Header.NWindows != w.N() {
			return nil, fmt.Errorf("reference logits: %d windows of %d tokens, evaluation wants %d of %d", f.Header.NWindows, f.Header.NCtx, w.N(), w.NCtx)
		}
		if in.Model != nil && f.Header.NVocab != in.Model.NVocab() {
			return nil, fmt.Errorf("reference logits have %d logits per token, the model %d: vocabularies differ", f.Header.NVocab, in.Model.NVocab())
		}
	}
	for _, t := range w.Tokens {
		if int(t) < 0 || int(t) >= nv && in.Model != nil {
			return nil, fmt.Errorf("token %d out of range for a vocabulary of %d", t, nv)
		}
	}
	out := &evalOutput{}
	var acc kldAcc
	var sum, sum2 float64
	var count int
	var running []float64
	if in.SaveTopK > 0 {
		h := reflogits.Header{NCtx: w.NCtx, NVocab: in.Ref.NVocab(), NWindows: w.N(), TopK: min(in.SaveTopK, in.Ref.NVocab()),
			AddBOS: w.AddBOS, BOS: w.BOS}
		if !w.AddBOS {
			h.BOS = -1
		}
		out.saved = &reflogits.File{Header: h, Tokens: append([]int32(nil), w.Tokens...)}
	}
	var mark []bool
	if in.RefFile != nil && in.Model != nil {
		mark = make([]bool, in.Model.NVocab())
	}
	var scratch []float64
	if in.Ref != nil && in.Model != nil {
		scratch = make([]float64, nv)
	}
	first, scored := w.First(), w.Scored()
	for i := range w.N() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		input := w.Input(i)[:w.NCtx-1]
		orig := w.Original(i)
		var rows, refRows [][]float32
		var err error
		if in.Model != nil {
			in.Model.Reset()
			if rows, err = in.Model.Eval(input, scored); err != nil {
				return nil, fmt.Errorf("window %d: %w", i, err)
			}
		}
		if in.Ref != nil {
			in.Ref.Reset()
			if refRows, err = in.Ref.Eval(input, scored); err != nil {
				return nil, fmt.Errorf("reference, window %d: %w", i, err)
			}
		}
		for j := range scored {
			tok := orig[first+j+1]
			if in.Model != nil {
				row := rows[j]
				if bad := nonFinite(row); bad >= 0 {
					return nil, fmt.Errorf("window %d position %d: logit %d is %v", i, first+j, bad, row[bad])
				}
				v := nll(row, tok)
				sum += v
				sum2 += v * v
				count++
				switch {
				case refRows != nil:
					acc.add(compareFull(refRows[j], row, tok, scratch))
				case in.RefFile != nil:
					rec := in.RefFile.Record(i, j)
					acc.add(compareTopK(rec, row, tok, mark))
					acc.sumRest += math.Exp(float64(rec.LogRest))
				}
			}
			if out.saved != nil {
				if bad := nonFinite(refRows[j]); bad >= 0 {
					return nil, fmt.Errorf("reference, window %d position %d: logit %d is %v", i, first+j, bad, refRows[j][bad])
				}
				out.saved.Records = append(out.saved.Records, reflogits.NewRecord(refRows[j], tok, out.saved.Header.TopK))
			}
		}
		if count > 0 {
			running = append(running, expf(sum/float64(count)))
		}
		if in.Progress != nil {
			in.Progress(i+1, w.N())
		}
	}
	if in.Model != nil {
		// llama-perplexity's final estimate: no n > 10 rule here, unlike its KLD statistics
		mean := sum / float64(max(count, 1))
		var unc float64
		if d := sum2/float64(max(count, 1)) - mean*mean; d > 0 && count > 1 {
			unc = math.Sqrt(d / float64(count-1))
		}
		ppl := expf(mean)
		out.ppl = &PerplexityReport{Ctx: w.NCtx, Windows: w.N(), Positions: count, AddBOS: w.AddBOS,
			PPL: ValueErr{ppl, finite(ppl * unc)}, MeanNLL: mean, Running: running}
		if in.Ref != nil || in.RefFile != nil {
			out.kld = acc.report()
			if in.RefFile != nil {
				out.kld.TopK = in.RefFile.Header.TopK
			}
		}
	}
	return out, nil
}

// nonFinite returns the index of the first NaN or infinite value, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return i
		}
	}
	return -1
}
