// Command qualitybench measures what quantization costs on a trained model, with llama.cpp
// itself as the engine: next-token distributions of quantized GGUF files against the F16 file
// (KL divergence, same top-1, perplexity) over held-out text, and the parity of a converted
// model with a torch reference, and the layer-wise error GPTQ minimises (herr, from a
// calibration's Gram matrices, no llama.cpp). It drives llama.cpp (node-llama-cpp 3.21.1) through
// testdata/llamacpp/llama.mjs, so it needs the references `make refs` installs; it is a
// development tool and not part of the tq binary.
//
//	go run ./internal/qualitybench kld --f16 m-f16.gguf --baseline m-q4km-ref.gguf m-q4km-ref.gguf m-tq.gguf
//	go run ./internal/qualitybench parity --torch torch-probs.json m-f32.gguf
//	go run ./internal/qualitybench herr --f16 m-f16.gguf --calibration CALIB m-tq.gguf
//
// See testdata/trained/README.md and docs/results.md ("Quality on trained models").
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "qualitybench:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: qualitybench kld|parity|herr [flags] ... (-h for the flags)")
	}
	switch args[0] {
	case "kld":
		return runKLD(args[1:], w)
	case "parity":
		return runParity(args[1:], w)
	case "herr":
		return runHErr(args[1:], w)
	}
	return fmt.Errorf("unknown command %q: want kld, parity or herr", args[0])
}

// fileResult is one row of the kld report.
type fileResult struct {
	File string `json:"file"`
	fileInfo
	*quality
	// RatioToBaseline is mean KLD / the baseline's mean KLD, with the 95% interval of the
	// paired per-window ratio (delta method).
	RatioToBaseline *float64 `json:"kld_ratio_to_baseline,omitempty"`
	RatioLow        *float64 `json:"kld_ratio_ci95_low,omitempty"`
	RatioHigh       *float64 `json:"kld_ratio_ci95_high,omitempty"`
}

type kldReport struct {
	Reference string        `json:"reference"`
	Baseline  string        `json:"baseline,omitempty"`
	Heldout   string        `json:"heldout"`
	Ctx       int           `json:"ctx"`
	Windows   int           `json:"windows"`
	Positions int           `json:"positions"`
	Engine    string        `json:"engine"`
	Files     []*fileResult `json:"files"`
}

func runKLD(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("kld", flag.ContinueOnError)
	f16 := fs.String("f16", "", "reference GGUF (the model's F16 conversion; required)")
	baseline := fs.String("baseline", "", "file (path or base name, one of the compared files) whose mean KLD the others are divided by")
	held := fs.String("heldout", "testdata/trained/data/heldout-tokens.json", "held-out token file (prepare_data.py)")
	ctx := fs.Int("ctx", 256, "tokens per window (the models' training context)")
	nwin := fs.Int("windows", 10, "number of windows (0: all the held-out text gives)")
	threads := fs.Int("threads", 2, "llama.cpp threads")
	asJSON := fs.Bool("json", false, "print JSON")
	jsonOut := fs.String("json-out", "", "also write the JSON report to this file")
	llamaDir := fs.String("llama-dir", "", "testdata/llamacpp folder (default: the repository's)")
	timeout := fs.Duration("timeout", 20*time.Minute, "limit per llama.cpp run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *f16 == "" || fs.NArg() == 0 {
		return errors.New("kld: --f16 and at least one compared GGUF are required")
	}
	bridge, err := bridgeDir(*llamaDir)
	if err != nil {
		return err
	}
	ref, err := readInfo(*f16)
	if err != nil {
		return err
	}
	wins, err := loadWindows(*held, *ctx, *nwin, ref.Vocab)
	if err != nil {
		return err
	}
	p, err := llamaLogProbs(bridge, *f16, wins, ref.Vocab, *threads, "", *timeout)
	if err != nil {
		return err
	}
	rep := &kldReport{Reference: *f16, Heldout: *held, Ctx: *ctx, Windows: len(wins), Positions: len(wins) * *ctx,
		Engine: "llama.cpp (node-llama-cpp 3.21.1, CPU, f16 KV cache)"}
	self, err := compare(p, p, wins)
	if err != nil {
		return err
	}
	rep.Files = append(rep.Files, &fileResult{File: *f16, fileInfo: *ref, quality: self})
	for _, path := range fs.Args() {
		fi, err := readInfo(path)
		if err != nil {
			return err
		}
		if fi.Vocab != ref.Vocab {
			return fmt.Errorf("%s: vocabulary %d, the reference has %d", path, fi.Vocab, ref.Vocab)
		}
		q, err := llamaLogProbs(bridge, path, wins, fi.Vocab, *threads, "", *timeout)
		if err != nil {
			return err
		}
		res, err := compare(p, q, wins)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rep.Files = append(rep.Files, &fileResult{File: path, fileInfo: *fi, quality: res})
	}
	if *baseline != "" {
		var base *fileResult
		for _, r := range rep.Files[1:] {
			if r.File == *baseline || filepath.Base(r.File) == *baseline {
				base = r
			}
		}
		if base == nil {
			return fmt.Errorf("--baseline %s is not one of the compared files", *baseline)
		}
		rep.Baseline = base.File
		for _, r := range rep.Files[1:] {
			ratio, half := ratioCI(r.seqKLD, base.seqKLD)
			if math.IsNaN(ratio) {
				continue
			}
			lo, hi := ratio-half, ratio+half
			r.RatioToBaseline, r.RatioLow, r.RatioHigh = &ratio, &lo, &hi
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printKLD(w, rep)
	return nil
}

func printKLD(w io.Writer, rep *kldReport) {
	fmt.Fprintf(w, "reference %s; %d held-out windows of %d tokens (%d positions); %s\n",
		rep.Reference, rep.Windows, rep.Ctx, rep.Positions, rep.Engine)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "file\tftype\tbpw\tmean KLD\t95% CI\tp99 KLD\tsame top-1\tPPL\t"
	if rep.Baseline != "" {
		head += "KLD / " + filepath.Base(rep.Baseline) + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rep.Files {
		line := fmt.Sprintf("%s\t%s\t%.3f\t%.5f\t[%.5f, %.5f]\t%.4f\t%.2f%%\t%.3f\t", filepath.Base(r.File), r.FileType, r.BPW,
			r.MeanKLD, r.KLDLow, r.KLDHigh, r.P99KLD, 100*r.SameTop1, r.PPL)
		if rep.Baseline != "" {
			if r.RatioToBaseline != nil {
				line += fmt.Sprintf("%.3f [%.3f, %.3f]\t", *r.RatioToBaseline, *r.RatioLow, *r.RatioHigh)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, r := range rep.Files {
		if r.Floored > 0 {
			fmt.Fprintf(w, "note: %s: %d probabilities were 0 in float32 where the reference's were not (log q floored at %.1f)\n",
				filepath.Base(r.File), r.Floored, minLogProb)
		}
	}
}

func bridgeDir(flagValue string) (string, error) {
	if flagValue != "" {
		return checkBridge(flagValue)
	}
	return findBridge()
}
