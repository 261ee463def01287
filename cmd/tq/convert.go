package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/tq-project/tq/internal/convert"
)

type convertFlags struct {
	writeFlags
	out, outType, config, embType, name string
	calibration                         string
	splitMaxTensors                     int
	turbo, force, noManifest, rotate    bool
	rotateSeed                          uint64
}

func init() {
	f := &convertFlags{}
	cmd := &cobra.Command{
		Use:   "convert MODEL_DIR",
		Short: "Convert a Hugging Face model folder to GGUF (presets, turboquant, size budgets)",
		Long: `convert reads a Hugging Face folder (config.json, *.safetensors or a sharded index,
tokenizer files) of a llama, Mistral, qwen2, qwen3 or qwen3moe model and writes a GGUF file
that llama.cpp loads unchanged: the same tensor names, q/k permutation, expert stacking and
metadata keys as llama.cpp's convert_hf_to_gguf.py. BF16, F16, F32 and FP8 (F8_E4M3 with
weight_scale_inv block scales) checkpoints are decoded on the fly.

Tensor types:
  --outtype PRESET     f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k_s q3_k_m q3_k_l
                       q4_k_s q4_k_m q5_k_s q5_k_m q6_k iq4_nl iq4_xs, with llama-quantize's
                       mixture rules (auto = bf16 or f16 like the source)
  --use-turboquant     the calibrated policy of quantize_config.json (tq calibrate): listed
                       layers int4/int8 with importance-weighted search, o_proj/down_proj
                       Q8_0, lm_head F16, norms F32
  --target-bpw/--max-size  choose per-tensor types to meet a size budget with the least
                       predicted error (with --calibration: predicted KL from the measured sensitivity of each tensor)

Calibration: --calibration DIR takes everything tq calibrate wrote to DIR: the policy
(quantize_config.json, for --use-turboquant), the importance matrix, and the input Gram
matrices (hessians/), with which every quantized tensor is encoded by an error-compensating
search (GPTQ-style, inside the same ggml block formats). --imatrix takes a llama.cpp imatrix.

Rotation: --rotate multiplies the residual stream by a fixed orthogonal (randomised
Hadamard) matrix, folded exactly into the embedding, every weight that reads or writes the
residual, and the norms (set to 1): llama.cpp computes the same function, but outlier channels
are spread over all columns, so the 4-bit layers lose less. The calibration's matrices are
rotated with the weights; the GGUF records the rotation (tq.rotation). Not for tied embeddings
or multi-token-prediction layers.

Streaming: memory stays bounded whatever the model size; the output is written atomically
(and split with --split-max-size, with a SHA256SUMS manifest). Ctrl-C leaves no partial file.`,
		Example: `  tq convert ./Qwen3-0.6B -o qwen3-f16.gguf --outtype f16
  tq convert ./Qwen3-0.6B -o qwen3-q4km.gguf --outtype q4_k_m --imatrix imatrix.gguf
  tq convert ./Qwen3-0.6B --use-turboquant -o model.gguf
  tq convert ./Qwen3-0.6B --use-turboquant --calibration calib/ -o model.gguf
  tq convert ./Qwen3-0.6B --target-bpw 4.9 --calibration calib/ -o qwen3-4.9bpw.gguf
  tq convert ./Qwen3-0.6B --use-turboquant --config calib/quantize_config.json --dry-run
  tq convert ./Llama-3-8B -o llama.gguf --target-bpw 4.5 --split-max-size 5G`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer lowerGCHeadroom()()
			return runConvert(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "output GGUF path (default: <folder name>-<type>.gguf in the current directory)")
	fl.StringVar(&f.outType, "outtype", "auto", "output preset (f32, f16, bf16, q8_0, q4_k_m, ...; auto = source precision)")
	fl.BoolVar(&f.turbo, "use-turboquant", false, "apply the turboquant policy from quantize_config.json")
	fl.StringVar(&f.config, "config", "", "quantize_config.json for --use-turboquant (default: MODEL_DIR/quantize_config.json)")
	fl.BoolVar(&f.force, "force", false, "accept a turboquant config whose skip_layers lacks lm_head")
	fl.StringVar(&f.embType, "embedding-type", "", "turboquant: type of token_embd.weight (default q8_0)")
	f.writeFlags.register(fl, "presets: ")
	fl.StringVar(&f.calibration, "calibration", "", "the folder tq calibrate wrote: its quantize_config.json (turboquant), imatrix and input Gram matrices (error-compensating search)")
	fl.BoolVar(&f.rotate, "rotate", false, "rotate the residual stream by a fixed orthogonal matrix folded exactly into the weights (same function, lower quantization error; docs/rotation.md)")
	fl.Uint64Var(&f.rotateSeed, "rotate-seed", 1, "--rotate: seed of the rotation's random signs")
	fl.IntVar(&f.splitMaxTensors, "split-max-tensors", 0, "split the output after this many tensors per shard")
	fl.BoolVar(&f.noManifest, "no-manifest", false, "do not write SHA256SUMS")
	fl.StringVar(&f.name, "name", "", "general.name (default: the folder name)")
	rootCmd.AddCommand(cmd)
}

func runConvert(cmd *cobra.Command, dir string, f *convertFlags) error {
	if f.turbo && cmd.Flags().Changed("outtype") {
		return fmt.Errorf("--outtype and --use-turboquant are exclusive")
	}
	if f.turbo {
		// these adjust a preset's mixture; turboquant's types come from quantize_config.json
		for _, name := range []string{"tensor-type", "pure", "output-tensor-type", "token-embedding-type"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s adjusts an --outtype preset and does not apply to --use-turboquant: its types come from quantize_config.json (per-tensor types go in its \"tensor_types\"; --embedding-type sets token_embd)", name)
			}
		}
	}
	opts, err := f.options(f.outType)
	if err != nil {
		return err
	}
	opts.Types.TurboQuant, opts.Types.ConfigPath, opts.Types.Force, opts.Types.EmbeddingType = f.turbo, f.config, f.force, f.embType
	opts.Output.SplitMaxTensors, opts.Output.NoManifest = f.splitMaxTensors, f.noManifest
	opts.Name = f.name
	opts.Types.Rotate, opts.Types.RotateSeed = f.rotate, f.rotateSeed
	if cmd.Flags().Changed("rotate-seed") && !f.rotate {
		return fmt.Errorf("--rotate-seed needs --rotate")
	}
	if f.rotateSeed == 0 {
		return fmt.Errorf("--rotate-seed 0: give a positive seed")
	}
	calibUsed, err := calibrationInputs(f.calibration, &opts, func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), "warning:", msg) })
	if err != nil {
		return err
	}
	out := f.out
	checkOutput := func() error {
		if out == "" {
			t := f.outType
			if f.turbo {
				t = "turboquant"
			}
			abs, _ := filepath.Abs(dir)
			out = filepath.Base(abs) + "-" + strings.ToLower(t) + ".gguf"
		}
		inputs := append(append(hfInputs(dir), f.imatrix), calibUsed...)
		if f.turbo {
			inputs = append(inputs, turboInputs(dir, f.config)...)
		}
		return checkGGUFOutput(inputs, out, f.splitMaxSize != "" || f.splitMaxTensors > 0, !f.noManifest)
	}
	return f.execute(cmd, opts, "converting",
		func(o convert.Options) (*convert.Plan, error) { return convert.PlanConvert(dir, o) },
		checkOutput,
		func(ctx context.Context, o convert.Options) (*convert.Result, error) {
			return convert.Convert(ctx, dir, out, o)
		})
}

// writeFlags are the flags tq convert and tq quantize share: the adjustments of a preset, the
// size budget, splitting by size, threads and what is printed.
type writeFlags struct {
	imatrix, outputType, tokEmbType, maxSize, splitMaxSize string
	overrides                                              []string
	pure, improved, dryRun, json                           bool
	targetBPW                                              float64
	threads                                                int
}

// register adds the shared flags. only prefixes the help of the flags that adjust a preset
// ("presets: " where another policy exists).
func (f *writeFlags) register(fl *pflag.FlagSet, only string) {
	fl.StringVar(&f.imatrix, "imatrix", "", "llama.cpp importance matrix (imatrix.gguf or .dat)")
	fl.StringArrayVar(&f.overrides, "tensor-type", nil, only+"PATTERN=TYPE: force the type of tensors whose name matches the regexp (repeatable)")
	fl.BoolVar(&f.pure, "pure", false, only+"disable the mixture rules (one type for all quantized tensors)")
	fl.StringVar(&f.outputType, "output-tensor-type", "", only+"type of output.weight")
	fl.StringVar(&f.tokEmbType, "token-embedding-type", "", only+"type of token_embd.weight")
	fl.BoolVar(&f.improved, "improved", false, "use tq's improved (lower-error) search for preset types instead of llama-quantize's exact algorithms")
	fl.Float64Var(&f.targetBPW, "target-bpw", 0, "choose per-tensor types to reach this many bits per weight")
	fl.StringVar(&f.maxSize, "max-size", "", "choose per-tensor types so that tensor data fits this size (e.g. 4G, 3500M)")
	fl.StringVar(&f.splitMaxSize, "split-max-size", "", "split the output into shards of at most this size (e.g. 5G; G = 10^9 bytes)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the per-tensor plan and totals without writing")
	fl.BoolVar(&f.json, "json", false, "print the plan / summary as JSON")
	fl.IntVar(&f.threads, "threads", 0, "encoding threads (0 = all CPUs)")
}

// options returns the options the shared flags set, with preset typ.
func (f *writeFlags) options(typ string) (convert.Options, error) {
	opts := convert.Options{
		Types: convert.TypeOptions{OutType: typ, IMatrixPath: f.imatrix, Overrides: f.overrides, Pure: f.pure,
			OutputTensorType: f.outputType, TokenEmbeddingType: f.tokEmbType, Improved: f.improved, TargetBPW: f.targetBPW},
		Output:  convert.OutputOptions{Threads: f.threads},
		Version: tqVersion(),
	}
	var err error
	if opts.Types.MaxSize, err = parseSize(f.maxSize); err != nil {
		return opts, fmt.Errorf("--max-size: %w", err)
	}
	if opts.Output.SplitMaxSize, err = parseSize(f.splitMaxSize); err != nil {
		return opts, fmt.Errorf("--split-max-size: %w", err)
	}
	return opts, nil
}

// execute prints warnings as they arise, then either prints the plan (--dry-run) or checks
// the output (checkOutput) and writes it with a progress bar, leaving nothing behind when
// interrupted, and prints the result.
func (f *writeFlags) execute(cmd *cobra.Command, opts convert.Options, desc string,
	plan func(convert.Options) (*convert.Plan, error), checkOutput func() error,
	write func(context.Context, convert.Options) (*convert.Result, error)) error {
	stderr := cmd.ErrOrStderr()
	opts.Report.Warn = func(msg string) { fmt.Fprintln(stderr, "warning:", msg) }
	if f.dryRun {
		p, err := plan(opts)
		if err != nil {
			return err
		}
		return printPlan(cmd.OutOrStdout(), p, f.json)
	}
	if err := checkOutput(); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	bar := newProgress(stderr, desc)
	opts.Report.Progress = bar.update
	res, err := write(ctx, opts)
	bar.finish()
	if err != nil {
		if ie := interrupted(ctx, err, "no output was written"); ie != nil {
			return ie
		}
		return err
	}
	return printResult(cmd.OutOrStdout(), res, f.json)
}

func printPlan(w io.Writer, p *convert.Plan, asJSON bool) error {
	if asJSON {
		return writeJSON(w, p)
	}
	return p.WriteTable(w)
}

func printResult(w io.Writer, res *convert.Result, asJSON bool) error {
	if asJSON {
		return writeJSON(w, res)
	}
	p := res.Plan
	var total int64
	for _, f := range res.Files {
		fmt.Fprintf(w, "wrote %s (%s)\n", f.Path, fmtBytes(f.Size))
		total += f.Size
	}
	if res.Manifest != "" {
		fmt.Fprintf(w, "manifest %s\n", res.Manifest)
	}
	fmt.Fprintf(w, "%s, %s policy, file type %s: %d tensors, %.3f bpw, %s in %.1fs (%.0f MB/s written)\n",
		p.Arch, p.Policy, p.FileType, len(p.Tensors), p.BPW, fmtBytes(total), res.Seconds,
		float64(total)/1e6/max(res.Seconds, 1e-9))
	return writeTypeMix(w, p.Types)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

// parseSize parses sizes like llama-gguf-split: 5G = 5·10^9, 500M = 5·10^8 bytes; also K, T,
// the binary Ki/Mi/Gi/Ti suffixes and plain byte counts. "" is 0.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	u := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s, "B"), "b"))
	mult := int64(1)
	for _, sfx := range []struct {
		s string
		m int64
	}{{"KI", 1 << 10}, {"MI", 1 << 20}, {"GI", 1 << 30}, {"TI", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(u, sfx.s) {
			u, mult = strings.TrimSuffix(u, sfx.s), sfx.m
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(u), 64)
	if err != nil || v <= 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("bad size %q (want e.g. 5G, 500M, 4GiB)", s)
	}
	return int64(v * float64(mult)), nil
}

// progress draws a throttled progress bar on stderr when it is a terminal. Otherwise (a log,
// a CI job) it prints a plain line at most every progressLineEvery: nothing for a short
// conversion, and a sign of life with the share done and an estimate of the time left for a
// long one (a calibrated 1 B model takes minutes).
type progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	desc  string
	tty   bool
	now   func() time.Time
	start time.Time
	last  time.Time
}

// progressLineEvery is the interval between the plain progress lines written to a
// non-terminal.
const progressLineEvery = 30 * time.Second

func newProgress(w io.Writer, desc string) *progress {
	p := &progress{w: w, desc: desc, now: time.Now}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
	}
	p.start = p.now()
	p.last = p.start
	return p
}

func (p *progress) update(done, total int64) {
	if !p.tty {
		t := p.now()
		if total <= 0 || done <= 0 || done >= total || t.Sub(p.last) < progressLineEvery {
			return
		}
		p.last = t
		el := t.Sub(p.start)
		left := time.Duration(float64(el) * float64(total-done) / float64(done))
		fmt.Fprintf(p.w, "%s: %.0f%% (%s of %s) after %s, about %s left\n", p.desc, 100*float64(done)/float64(total),
			fmtBytes(done), fmtBytes(total), el.Round(time.Second), left.Round(time.Second))
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(p.w), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription(p.desc), progressbar.OptionThrottle(150*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	p.bar.Set64(done)
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// convertGCPercent is the garbage collector's target (GOGC) while tq convert runs. A
// conversion's heap is a few large float buffers without pointers (tensors being encoded, a
// wide input's Hessian and its factor), which a collection marks at almost no cost, while the
// default target of 100 lets the heap grow to twice what is live before collecting. With the
// calibration's Gram matrices on the 1.01 B benchmark model, 25 took the peak RSS from 1,301
// to 801 MiB in the same time (docs/formats-convert.md, section 6).
const convertGCPercent = 25

// lowerGCHeadroom sets the collector's target to convertGCPercent unless the user set GOGC,
// and returns the function that restores the previous target.
func lowerGCHeadroom() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	prev := debug.SetGCPercent(convertGCPercent)
	return func() { debug.SetGCPercent(prev) }
}
