package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/tq-project/tq/infer"
)

// torchDump is what train.py --eval --dump writes: a token window and torch's next-token
// probabilities (float64 forward of the BF16 weights) after every prefix of it.
type torchDump struct {
	Tokens []int32     `json:"tokens"`
	Probs  [][]float64 `json:"probs"`
}

// maxDumpBytes bounds the torch dump read into memory.
const maxDumpBytes = 256 << 20

// parityResult compares three engines' distributions on the same window.
type parityResult struct {
	Model     string  `json:"model"`
	Positions int     `json:"positions"`
	TorchTQ   float64 `json:"max_abs_dp_torch_tq"`
	TorchLl   float64 `json:"max_abs_dp_torch_llamacpp"`
	TQLl      float64 `json:"max_abs_dp_tq_llamacpp"`
	// Near*: positions whose max |Δp| is within the tolerance.
	NearTQ    int     `json:"positions_within_tol_torch_tq"`
	NearLl    int     `json:"positions_within_tol_torch_llamacpp"`
	Top1TQ    int     `json:"same_top1_torch_tq"`
	Top1Ll    int     `json:"same_top1_torch_llamacpp"`
	Tolerance float64 `json:"tolerance"`
	Pass      bool    `json:"pass"`
}

func runParity(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("parity", flag.ContinueOnError)
	dumpPath := fs.String("torch", "", "train.py --eval --dump output (required)")
	tol := fs.Float64("tol", 1e-4, "largest |Δp| accepted between any two engines")
	threads := fs.Int("threads", 2, "threads for tq and llama.cpp")
	asJSON := fs.Bool("json", false, "print JSON")
	llamaDir := fs.String("llama-dir", "", "testdata/llamacpp folder (default: the repository's)")
	kv := fs.String("kv", "F32", "KV cache type of tq and llama.cpp (F32 or F16)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dumpPath == "" || fs.NArg() != 1 {
		return errors.New("parity: --torch DUMP and one GGUF are required")
	}
	model := fs.Arg(0)
	b, err := readRegular(*dumpPath, maxDumpBytes)
	if err != nil {
		return err
	}
	var d torchDump
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", *dumpPath, err)
	}
	fi, err := readInfo(model)
	if err != nil {
		return err
	}
	n := len(d.Tokens)
	if n == 0 || n > 1<<14 || len(d.Probs) != n {
		return fmt.Errorf("%s: %d tokens and %d distributions", *dumpPath, n, len(d.Probs))
	}
	for i, p := range d.Probs {
		if len(p) != fi.Vocab {
			return fmt.Errorf("%s: position %d has %d probabilities, the model's vocabulary is %d", *dumpPath, i, len(p), fi.Vocab)
		}
	}
	for i, t := range d.Tokens {
		if t < 0 || int(t) >= fi.Vocab {
			return fmt.Errorf("%s: token %d at position %d is outside the vocabulary", *dumpPath, t, i)
		}
	}
	ours, err := tqProbs(model, d.Tokens, *threads, strings.ToLower(*kv))
	if err != nil {
		return err
	}
	bridge, err := bridgeDir(*llamaDir)
	if err != nil {
		return err
	}
	lp, err := llamaLogProbs(bridge, model, [][]int32{d.Tokens}, fi.Vocab, *threads, *kv, 10*time.Minute)
	if err != nil {
		return err
	}
	r := &parityResult{Model: model, Positions: n, Tolerance: *tol}
	for i := 0; i < n; i++ {
		ll := make([]float64, fi.Vocab)
		for v, x := range lp[0][i] {
			ll[v] = math.Exp(x)
		}
		a, b := maxAbsDiff(d.Probs[i], ours[i]), maxAbsDiff(d.Probs[i], ll)
		if a <= *tol {
			r.NearTQ++
		}
		if b <= *tol {
			r.NearLl++
		}
		if os.Getenv("QB_DEBUG") != "" && (a > *tol || b > *tol) {
			fmt.Fprintf(w, "  pos %d token %d: |Δp| torch-tq %.2e torch-llama.cpp %.2e\n", i, d.Tokens[i], a, b)
		}
		r.TorchTQ = math.Max(r.TorchTQ, a)
		r.TorchLl = math.Max(r.TorchLl, b)
		r.TQLl = math.Max(r.TQLl, maxAbsDiff(ours[i], ll))
		if argmax(d.Probs[i]) == argmax(ours[i]) {
			r.Top1TQ++
		}
		if argmax(d.Probs[i]) == argmax(ll) {
			r.Top1Ll++
		}
	}
	r.Pass = r.TorchTQ <= *tol && r.TorchLl <= *tol && r.TQLl <= *tol
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "%s: %d positions, max |Δp| torch-tq %.2e, torch-llama.cpp %.2e, tq-llama.cpp %.2e (KV cache %s)\n",
			model, n, r.TorchTQ, r.TorchLl, r.TQLl, *kv)
		fmt.Fprintf(w, "  positions within %.0e of torch: tq %d/%d, llama.cpp %d/%d; same top-1 as torch: tq %d/%d, llama.cpp %d/%d\n",
			*tol, r.NearTQ, n, r.NearLl, n, r.Top1TQ, n, r.Top1Ll, n)
	}
	if !r.Pass {
		return fmt.Errorf("parity: max |Δp| above the tolerance %g", *tol)
	}
	return nil
}

// tqProbs runs tq's own runner (package infer, KV cache type kv) over tokens and returns the
// next-token probabilities after every prefix (softmax of the float32 logits in float64).
func tqProbs(path string, tokens []int32, threads int, kv string) ([][]float64, error) {
	src, err := infer.OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	m, err := infer.Load(src, infer.Options{Threads: threads, CtxSize: len(tokens), CacheTypeK: kv, CacheTypeV: kv})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s, err := m.NewSession()
	if err != nil {
		return nil, err
	}
	logits, err := s.Eval(tokens, infer.LogitsAll)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, len(logits))
	for i, l := range logits {
		out[i] = softmax(l)
	}
	return out, nil
}

func softmax(l []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range l {
		m = math.Max(m, float64(v))
	}
	p := make([]float64, len(l))
	var s float64
	for i, v := range l {
		p[i] = math.Exp(float64(v) - m)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

func maxAbsDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}
