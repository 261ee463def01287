package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tq-project/tq/calib"
	"github.com/tq-project/tq/calib/prompts"
	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/tokfile"
)

type calibrateFlags struct {
	out, weightDType, kvDType, method, memBudget, exportIM, importIM string
	expertHessianLimit                                               string
	datasets, layers, skip                                           []string
	groupSize, threads, maxLen, padMultiple, uncovered, searchRows   int
	symmetric, restart, keepCkpt, json, noBaseline, exactForward     bool
	hessians, noHessians                                             bool
	hessianMaxCols                                                   int
	sensTokens                                                       int
}

func init() {
	f := &calibrateFlags{}
	cmd := &cobra.Command{
		Use:   "calibrate MODEL_DIR",
		Short: "Collect activation statistics and search quantization parameters (quantize_config.json)",
		Long: `calibrate runs a Hugging Face model in full precision (f32 arithmetic; BF16/F16 weights stay
16-bit in memory and are widened exactly in the matrix products; see below for CPUs with AMX or
AVX512-BF16) over a
calibration set, one transformer block at a time: every sequence goes through block i, its
hidden states are kept (in RAM up to --memory-budget, on disk beyond), then block i+1, so only
one block's weights are in memory. Meanwhile it accumulates, for the input of every linear layer
(per expert for MoE), the sum of squares and max |x| of every column, and the MoE routing.

Then, for every tensor of --layers-to-quantize, it searches the per-group scales (and mins for
asymmetric int4) minimising the importance-weighted squared error in the container tq convert
writes, and records the chosen format, its errors, SNR and a sensitivity figure.

Outputs in the output directory (default: MODEL_DIR, where tq convert --use-turboquant looks):
  quantize_config.json       turboquant policy + calibration record + per-tensor results
  imatrix.gguf               the statistics as a llama.cpp importance matrix
  calibration.tqstats.zst    the full statistics (docs/calibration.md)
  routing.json               MoE routing histogram and expert coverage
  hessians/                  the input Gram matrices E[x xᵀ] of every linear layer (GPTQ-style
                             quantization), one per routed expert for MoE models while the
                             whole model's stay under --expert-hessian-limit; --no-hessians
                             skips them
  sensitivity.json           per tensor, the KL divergence the model's output suffers per unit of
                             its weight error at 4.5 bits, measured on a sample of the calibration
                             tokens (--sensitivity-tokens): each block with all its tensors
                             quantized, shared among them by their effect on the block's output;
                             budgets (tq convert --target-bpw --calibration) spend bits where it
                             is large

Calibration set (default: the built-in 32 prompts: tool calls, long documents, math), rendered
through the model's own chat template with special tokens parsed as special and padded to
multiples of --pad-multiple. --calibration-dataset takes prompt files (.txt, .jsonl, .json) or
one token file written by tq tokenize; the name @builtin stands for the built-in set, so that
it can be combined with text of the model's own domain (the error-compensating search fits the
calibration text's statistics: docs/calibration.md, "Calibration set").

An interrupted run resumes from its last finished block (checkpoint in OUT/.tq-calibrate).

On CPUs with AMX-BF16 (Intel Sapphire Rapids and later, Linux) or, on AMD, AVX512-BF16
(Zen 4 and later) the products with BF16 weights multiply activations rounded to the nearest
bf16, as llama.cpp does for bf16 weights, on AMX tiles or with AVX512-BF16 at about twice the
speed of exact products, and the Gram matrices are taken from rows rounded the same way;
--exact-forward keeps the products and the Gram matrices exact (on AMX: each activation
split into three exact bf16 pieces; TQ_AMX=off keeps the AVX path). Intel CPUs without usable
AMX keep exact products: their AVX512-BF16 runs slower than the f32 FMA
(TQ_BF16DP=on|off overrides that choice). The statistics themselves are always taken in f32.`,
		Example: `  tq calibrate ./Qwen3-0.6B
  tq calibrate ./Qwen3-30B-A3B --memory-budget 24G -o calib/
  tq calibrate ./Llama-3-8B --calibration-dataset prompts.jsonl --weight-dtype int8 --group-size 64
  tq calibrate ./Qwen3-0.6B --calibration-dataset @builtin --calibration-dataset my-domain.jsonl
  tq calibrate ./Qwen3-0.6B --import-imatrix imatrix.gguf      # search only, llama.cpp statistics
  tq calibrate ./Qwen3-0.6B --export-imatrix imatrix.dat       # also write the legacy format`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCalibrate(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "output directory (default: MODEL_DIR)")
	fl.StringArrayVar(&f.datasets, "calibration-dataset", nil, "prompt files (.txt, .jsonl, .json) or one tq token file (repeatable; default: the built-in set, which @builtin names)")
	fl.StringVar(&f.weightDType, "weight-dtype", calib.DefaultWeightDType, "weight type of the quantized layers: int4 or int8")
	fl.IntVar(&f.groupSize, "group-size", calib.DefaultGroupSize, "weights per quantization group: 32, 64 or 128")
	fl.BoolVar(&f.symmetric, "symmetric", true, "symmetric groups (--symmetric=false: int4 with a min per 32 weights, Q4_K/Q4_1)")
	fl.StringVar(&f.kvDType, "kv-cache-dtype", calib.DefaultKVCacheDType, "KV cache type recorded for the runtime (f16, q8_0, q4_0, ...)")
	fl.StringVar(&f.method, "calibration-method", calib.MethodMSE, "search objective: mse (importance-weighted squared error)")
	fl.StringSliceVar(&f.layers, "layers-to-quantize", calib.DefaultLayersToQuantize, "module roles, HF module names or GGUF names stored in weight-dtype")
	fl.StringSliceVar(&f.skip, "skip-layers", calib.DefaultSkipLayers, "layers kept out of int4: lm_head F16, the others Q8_0 (must include lm_head)")
	fl.StringVar(&f.memBudget, "memory-budget", "", "bound on memory (e.g. 16G, 512M): hidden states beyond it are spilled to disk")
	fl.IntVar(&f.threads, "threads", 0, "worker threads (0 = all CPUs)")
	fl.IntVar(&f.maxLen, "max-length", 4096, "truncate calibration sequences to this many tokens (0 = no limit; default: 4096 or the model's context length if shorter)")
	fl.IntVar(&f.padMultiple, "pad-multiple", calib.DefaultPadMultiple, "pad sequences to a multiple of this many tokens")
	fl.IntVar(&f.uncovered, "uncovered-sample", calib.DefaultUncoveredSample, "MoE: tokens per layer run through never-routed experts (negative: off)")
	fl.IntVar(&f.searchRows, "search-rows", calib.DefaultSearchRows, "rows per tensor sampled for the container choice and the recorded errors (negative: all; a clear choice is made on a quarter of them)")
	fl.BoolVar(&f.exactForward, "exact-forward", false, "keep the forward's products with BF16 weights and the Gram matrices exact on CPUs with AMX, or AVX512-BF16 on AMD (slower; default: activations and Gram rows rounded to bf16 there, as llama.cpp does for bf16 weights)")
	fl.BoolVar(&f.noBaseline, "no-baseline", false, "skip measuring the unweighted search for comparison")
	fl.BoolVar(&f.hessians, "hessians", true, "write the input Gram matrices of every linear layer to OUT/hessians (full up to --hessian-max-cols columns)")
	fl.BoolVar(&f.noHessians, "no-hessians", false, "do not collect the input Gram matrices (same as --hessians=false)")
	fl.IntVar(&f.hessianMaxCols, "hessian-max-cols", calib.DefaultHessianMaxCols, "inputs wider than this keep only their diagonal in hessians/")
	fl.StringVar(&f.expertHessianLimit, "expert-hessian-limit", "4GiB", "MoE: most bytes (float32, before compression) of per-expert Gram matrices in hessians/ for the whole model; over it (or 0) experts keep diagonals")
	fl.IntVar(&f.sensTokens, "sensitivity-tokens", calib.DefaultSensitivityTokens, "calibration tokens scored by the measured-sensitivity pass, which size budgets (tq convert --target-bpw/--max-size) use (0 = off, for presets and plain --use-turboquant, which do not; by default fewer when the pass would take more than a quarter of the statistics pass, but at least 128)")
	fl.StringVar(&f.exportIM, "export-imatrix", "", "also write the statistics as a llama.cpp imatrix (.gguf, or .dat for the legacy format)")
	fl.StringVar(&f.importIM, "import-imatrix", "", "use a llama.cpp imatrix (.gguf or .dat) instead of running the model")
	fl.BoolVar(&f.restart, "restart", false, "discard any checkpoint and start over (default: resume an unfinished run with the same inputs)")
	fl.BoolVar(&f.keepCkpt, "keep-checkpoint", false, "keep the checkpoint directory after success")
	fl.BoolVar(&f.json, "json", false, "print the result as JSON")
	rootCmd.AddCommand(cmd)
}

func runCalibrate(cmd *cobra.Command, dir string, f *calibrateFlags) error {
	stderr := cmd.ErrOrStderr()
	if f.method != "" && !strings.EqualFold(f.method, calib.MethodMSE) {
		if strings.EqualFold(f.method, "kl") {
			return calib.ErrKLMethod
		}
		return fmt.Errorf("--calibration-method %q: only mse is supported", f.method)
	}
	if f.noHessians && cmd.Flags().Changed("hessians") && f.hessians {
		return fmt.Errorf("--hessians and --no-hessians are exclusive")
	}
	if f.hessianMaxCols <= 0 || f.hessianMaxCols > calib.MaxGramCols {
		return fmt.Errorf("--hessian-max-cols %d: want 1 to %d", f.hessianMaxCols, calib.MaxGramCols)
	}
	opts := calib.Options{
		OutDir: f.out, WeightDType: f.weightDType, GroupSize: f.groupSize, Asymmetric: !f.symmetric,
		KVCacheDType: f.kvDType, Method: f.method, LayersToQuantize: f.layers, SkipLayers: f.skip,
		Threads: f.threads, Restart: f.restart, KeepCheckpoint: f.keepCkpt, UncoveredSample: f.uncovered,
		SearchRows: f.searchRows, NoBaseline: f.noBaseline, ExactForward: f.exactForward, PadMultiple: f.padMultiple, Version: tqVersion(),
		NoHessians: f.noHessians || !f.hessians, HessianMaxCols: f.hessianMaxCols, SensitivityTokens: f.sensTokens,
		Warn: func(msg string) { fmt.Fprintln(stderr, "warning:", msg) },
	}
	if f.uncovered == 0 {
		opts.UncoveredSample = -1
	}
	switch {
	case f.sensTokens <= 0:
		opts.SensitivityTokens = -1
	case !cmd.Flags().Changed("sensitivity-tokens"):
		opts.SensitivityTokens = 0 // the default, bounded by the pass's cost
	}
	var err error
	if opts.MemoryBudget, err = parseSize(f.memBudget); err != nil {
		return fmt.Errorf("--memory-budget: %w", err)
	}
	if lim := strings.TrimSpace(f.expertHessianLimit); lim == "0" {
		opts.ExpertHessianBytes = -1 // none
	} else if opts.ExpertHessianBytes, err = parseSize(lim); err != nil || opts.ExpertHessianBytes == 0 {
		return fmt.Errorf("--expert-hessian-limit %q: want a size (e.g. 4GiB, 500M) or 0", f.expertHessianLimit)
	}
	outDir := f.out
	if outDir == "" {
		outDir = dir
	}
	inputs := append(append(hfInputs(dir), f.datasets...), f.importIM)
	if err := checkOutputs(inputs, filepath.Join(outDir, calib.ConfigFile), filepath.Join(outDir, calib.IMatrixFile),
		filepath.Join(outDir, calib.StatsFile), filepath.Join(outDir, calib.RoutingFile), filepath.Join(outDir, calib.SensitivityFile), f.exportIM); err != nil {
		return err
	}
	if f.importIM != "" {
		if len(f.datasets) > 0 {
			return fmt.Errorf("--import-imatrix and --calibration-dataset are exclusive")
		}
		if err := importStats(dir, f.importIM, &opts); err != nil {
			return err
		}
	} else {
		if !cmd.Flags().Changed("max-length") {
			// calibrating past the context the model was trained on measures activations the
			// model never produces in use
			if n := modelContextLength(dir); n > 0 && n < f.maxLen {
				fmt.Fprintf(stderr, "calibration sequences truncated to the model's context length, %d tokens (--max-length to change)\n", n)
				f.maxLen = n
			}
		}
		if err := calibrationSet(dir, f, &opts); err != nil {
			return err
		}
	}

	ctx, stop := signalContext()
	defer stop()
	pr := newCalibProgress(stderr)
	opts.Progress = pr.update
	res, err := calib.Calibrate(ctx, dir, opts)
	pr.finish()
	if err != nil {
		if ie := interrupted(ctx, err, "rerun the same command to resume from the last finished block"); ie != nil {
			return ie
		}
		return err
	}
	if f.exportIM != "" {
		if err := calib.SaveIMatrix(f.exportIM, res.Stats, &calib.IMatrixOptions{ChunkSize: 512}); err != nil {
			return err
		}
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	return printCalibration(cmd.OutOrStdout(), res, f.exportIM)
}

// modelContextLength is the model's trained context length (GGUF ARCH.context_length from
// config.json), or 0 when unknown.
func modelContextLength(dir string) int {
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		return 0
	}
	defer src.Close()
	md := src.Metadata()
	n, err := md.GetUint(src.Arch() + ".context_length")
	if err != nil {
		return 0
	}
	return int(min(n, 1<<30))
}

// builtinDatasetName is the dataset name the outputs record for the built-in prompts.
const builtinDatasetName = "tq built-in calibration set"

// calibrationSet tokenizes the calibration prompts (or reads a token file) into opts.
func calibrationSet(dir string, f *calibrateFlags, opts *calib.Options) error {
	tok, err := tokenizer.LoadHF(dir)
	if err != nil {
		return err
	}
	var tokFiles, promptFiles []string
	for _, p := range f.datasets {
		if isTokenFile(p) {
			tokFiles = append(tokFiles, p)
		} else {
			promptFiles = append(promptFiles, p)
		}
	}
	if len(tokFiles) > 0 {
		if len(tokFiles) > 1 || len(promptFiles) > 0 {
			return fmt.Errorf("--calibration-dataset: a token file cannot be combined with other datasets")
		}
		seqs, hdr, err := calib.SequencesFromTokenFile(tokFiles[0], tok.Hash())
		if err != nil {
			return err
		}
		opts.Sequences, opts.TokenHeader, opts.PadMultiple = seqs, hdr, int(hdr.PadMultiple)
		opts.Datasets = []string{filepath.Base(tokFiles[0])}
		return nil
	}
	var ps []prompts.Prompt
	if len(promptFiles) == 0 {
		ps, err = prompts.Default()
		opts.Datasets = []string{builtinDatasetName}
	} else {
		ps, err = prompts.LoadFiles(promptFiles...)
		for _, p := range promptFiles {
			name := filepath.Base(p)
			if p == prompts.Builtin {
				name = builtinDatasetName
			}
			opts.Datasets = append(opts.Datasets, name)
		}
	}
	if err != nil {
		return err
	}
	seqs, pad, err := calib.BuildSequences(tok, calib.FromPromptSet(ps), calib.SequenceOptions{PadMultiple: f.padMultiple, MaxLen: f.maxLen})
	if err != nil {
		return err
	}
	hdr := &tokfile.Header{PadID: pad, PadMultiple: uint32(max(f.padMultiple, 0)), MaxLen: uint32(max(f.maxLen, 0))}
	if h, err := hex.DecodeString(tok.Hash()); err == nil && len(h) == 32 {
		hdr.VocabHash = [32]byte(h)
	}
	opts.Sequences, opts.TokenHeader = seqs, hdr
	return nil
}

// isTokenFile reports whether path starts with the token-file magic. A path that is not a
// regular file is not opened (a FIFO would block); the prompt loader then reports it.
func isTokenFile(path string) bool {
	if path == prompts.Builtin {
		return false
	}
	fh, _, err := boundedread.Open(path, "calibration dataset")
	if err != nil {
		return false
	}
	defer fh.Close()
	var b [len(tokfile.Magic)]byte
	_, err = io.ReadFull(fh, b[:])
	return err == nil && string(b[:]) == tokfile.Magic
}

// importStats loads a llama.cpp imatrix for a search-only run.
func importStats(dir, path string, opts *calib.Options) error {
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		return err
	}
	shapes := map[string][2]int{}
	for _, d := range src.Tensors() {
		nmat := 1
		if len(d.Shape) > 2 {
			nmat = int(d.Shape[2])
		}
		shapes[d.Name] = [2]int{int(d.Shape[0]), nmat}
	}
	src.Close()
	im, err := calib.LoadIMatrix(path, &calib.ImportOptions{Shape: func(name string) (int, int, bool) {
		s, ok := shapes[name]
		return s[0], s[1], ok
	}})
	if err != nil {
		return err
	}
	fh, st, err := boundedread.Open(path, "imatrix")
	if err != nil {
		return err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(fh, st.Size())); err != nil {
		return fmt.Errorf("imatrix %s: %w", path, err)
	}
	opts.Import, opts.ImportHash = im, "sha256:"+hex.EncodeToString(h.Sum(nil))
	opts.Datasets = im.Meta.Datasets
	return nil
}

// calibProgress draws one progress bar per block (tokens, tokens/s) on a terminal, and one
// line per finished block otherwise.
type calibProgress struct {
	w     io.Writer
	tty   bool
	bar   *progressbar.ProgressBar
	key   string
	start time.Time
	last  calib.Progress
}

func newCalibProgress(w io.Writer) *calibProgress {
	p := &calibProgress{w: w, start: time.Now()}
	if fh, ok := w.(*os.File); ok && term.IsTerminal(int(fh.Fd())) {
		p.tty = true
	}
	return p
}

func (p *calibProgress) update(ev calib.Progress) {
	if ev.Resumed {
		fmt.Fprintf(p.w, "resuming after block %d of %d\n", ev.Layer, ev.NLayer)
		return
	}
	key := fmt.Sprintf("%s/%d", ev.Stage, ev.Layer)
	if key != p.key {
		p.done()
		p.key = key
	}
	p.last = ev
	if !p.tty || ev.TotalTokens == 0 {
		return
	}
	if p.bar == nil {
		desc := "embedding"
		switch ev.Stage {
		case "layer":
			desc = fmt.Sprintf("block %d/%d", ev.Layer+1, ev.NLayer)
		case "head":
			desc = "output head"
		case "sensitivity":
			desc = fmt.Sprintf("sensitivity %d/%d", ev.Layer+1, ev.NLayer)
		}
		p.bar = progressbar.NewOptions64(ev.TotalTokens, progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(desc),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("tok"), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	p.bar.Set64(ev.Tokens)
}

// done closes the current stage: the bar, or a summary line when not on a terminal.
func (p *calibProgress) done() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
	ev := p.last
	if ev.Stage == "layer" && ev.TotalTokens > 0 && ev.Tokens == ev.TotalTokens {
		fmt.Fprintf(p.w, "block %d/%d: %d tokens in %.1fs (%.0f tok/s)\n", ev.Layer+1, ev.NLayer, ev.Tokens,
			ev.Elapsed.Seconds(), float64(ev.Tokens)/max(ev.Elapsed.Seconds(), 1e-9))
	}
	if ev.Stage == "sensitivity" && ev.Layer < ev.NLayer && ev.TotalTokens > 0 && ev.Tokens == ev.TotalTokens {
		fmt.Fprintf(p.w, "sensitivity pass, block %d/%d: %d tokens through its streams in %.1fs\n", ev.Layer+1, ev.NLayer, ev.Tokens, ev.Elapsed.Seconds())
	}
	if ev.Stage == "sensitivity" && ev.Layer == ev.NLayer && ev.NSeq > 0 && ev.Seq == ev.NSeq {
		noun := "sequences"
		if ev.NSeq == 1 {
			noun = "sequence"
		}
		fmt.Fprintf(p.w, "sensitivity pass: every stream scored over %d %s, %.1fs in all\n", ev.NSeq, noun, ev.Elapsed.Seconds())
	}
	p.last = calib.Progress{}
}

func (p *calibProgress) finish() { p.done() }

func printCalibration(w io.Writer, res *calib.Result, exported string) error {
	c := res.Config
	rec := c.Calibration
	fmt.Fprintf(w, "wrote %s\n", res.ConfigPath)
	fmt.Fprintf(w, "wrote %s\n", res.IMatrixPath)
	fmt.Fprintf(w, "wrote %s\n", res.StatsPath)
	if res.RoutingPath != "" {
		fmt.Fprintf(w, "wrote %s\n", res.RoutingPath)
	}
	if exported != "" {
		fmt.Fprintf(w, "wrote %s\n", exported)
	}
	if h := rec.Hessians; h != nil && res.HessianDir != "" {
		fmt.Fprintf(w, "wrote %s (%d Gram files, %s: %d inputs full, %d diagonal-only)\n", res.HessianDir, h.Files,
			fmtBytes(h.Bytes), h.FullInputs, h.DiagonalInputs)
	}
	if res.SensitivityPath != "" {
		fmt.Fprintf(w, "wrote %s\n", res.SensitivityPath)
	}
	fmt.Fprintf(w, "%s: %d prompts, %d tokens (%d with padding), %.1fs, %.0f tok/s through the model, %d threads\n",
		rec.Arch, rec.Prompts, rec.Tokens, rec.PaddedTokens, rec.Seconds, rec.TokensPerSecond, rec.Threads)
	if res.ResumedAt > 0 {
		fmt.Fprintf(w, "resumed from a checkpoint at step %d\n", res.ResumedAt)
	}
	var gain, n float64
	for _, ch := range c.Tensors {
		if ch.UnweightedWeightedRMSE > 0 && ch.WeightedRMSE > 0 {
			gain += ch.UnweightedWeightedRMSE / ch.WeightedRMSE
			n++
		}
	}
	fmt.Fprintf(w, "%d tensors searched (%s, group %d, symmetric %v)", len(c.Tensors), c.WeightDType, c.GroupSize, c.Symmetric)
	if n > 0 {
		fmt.Fprintf(w, "; importance weighting lowers the weighted error %.1f%% on average", 100*(1-n/gain))
	}
	fmt.Fprintln(w)
	if len(res.Coverage) > 0 {
		uncovered := 0
		for _, cv := range res.Coverage {
			uncovered += len(cv.Uncovered)
		}
		fmt.Fprintf(w, "MoE expert coverage (%d never routed, given statistics from sampled tokens):\n", uncovered)
		var rs []*calib.LayerRouting
		rs = append(rs, res.Stats.Routing...)
		fmt.Fprint(w, calib.CoverageReport(rs))
	}
	return nil
}
