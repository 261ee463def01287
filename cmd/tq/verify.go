package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/verify"
)

type verifyFlags struct {
	reference, refLogits, saveRef, text, suite, cacheType, config, report, markdown, imatrix string
	quantConfig                                                                              string
	topK, ctx, chunks, sampleRows, toolMax, threads                                          int
	full, requireManifest, json, noConfig                                                    bool
	skip                                                                                     []string
	thresholds                                                                               map[string]*float64
}

// verifyExit is the error of a finished verification: ExitCode 1 when the gate failed.
type verifyExit struct{ rep *verify.Report }

func (e *verifyExit) Error() string {
	return fmt.Sprintf("verification failed (%d failure(s)): %s", len(e.rep.Failures), strings.Join(e.rep.Failures, "; "))
}
func (e *verifyExit) ExitCode() int { return 1 }

// verifyError marks an error as "could not verify" (exit status 2).
type verifyError struct{ err error }

func (e *verifyError) Error() string { return e.err.Error() }
func (e *verifyError) Unwrap() error { return e.err }
func (e *verifyError) ExitCode() int { return 2 }

var thresholdHelp = map[string]string{
	"max_kld":               "largest mean KL divergence from the reference, nats (default 0.05)",
	"max_kld_p99":           "largest 99th-percentile per-token KLD",
	"min_top1":              "least top-1 agreement with the reference (fraction)",
	"max_mean_abs_delta_p":  "largest mean |Δp| of the correct token (fraction)",
	"max_ppl_ratio":         "largest PPL(model)/PPL(reference) (default 1.05)",
	"max_ppl":               "largest perplexity (no reference needed)",
	"min_toolcall_valid":    "least fraction of tool-call cases with only valid calls (default 0.95)",
	"min_toolcall_answered": "least fraction of cases whose turn ends with an answer or a call",
	"min_toolcall_exact":    "least fraction of cases whose calls equal the reference's",
}

func init() {
	f := &verifyFlags{thresholds: map[string]*float64{}}
	cmd := &cobra.Command{
		Use:   "verify [MODEL.gguf]",
		Short: "Prove a quantized GGUF is good: integrity, perplexity, KL divergence, template fidelity, tool calls",
		Long: `verify checks a GGUF model (one file or any shard of a split model) and exits with
0 when it passes the gate, 1 when it fails, 2 when it could not be verified.

Checks (docs/verify.md defines every metric):
  integrity   SHA256SUMS / .sha256 manifest of every shard; GGUF layout (offsets, sizes,
              alignment); tensor types llama.cpp runs; architecture and tokenizer metadata;
              turboquant.* keys and the policy actually applied (lm_head F16, attn_output /
              ffn_down >= 8 bit, kv_cache_dtype); with --quantize-config, every tensor
              that quantize_config.json records is in its recorded container and the
              file records that config's SHA-256; no NaN/Inf in dequantized tensors
              (sampled rows, --full for all)
  ppl         perplexity on --text (built-in text by default) exactly as llama-perplexity
              computes it: windows of --ctx tokens, second half scored, ± standard error
  kld         with --reference (HF folder or F16/BF16 GGUF) or --reference-logits: mean,
              median, p99, max KLD, top-1 agreement, Δp of the correct token, PPL ratio
  template    the GGUF chat template and tokenizer reproduce the reference's byte for byte
  toolcalls   a suite of tool-calling requests, greedy-decoded; calls must parse, name a
              known tool, carry the required arguments with the right types

Thresholds come from flags, else from --config (or ./verify.yaml, ./verify.yml,
./verify.json), else the defaults (--max-kld 0.05 --max-ppl-ratio 1.05
--min-toolcall-valid 0.95). A default threshold whose metric cannot be measured (no
reference) is reported as skipped; an explicit one fails.

Output: a Markdown summary on stdout (--json for the full report), --markdown FILE appends
the summary (e.g. $GITHUB_STEP_SUMMARY), --report DIR writes an HTML page with plots.`,
		Example: `  tq verify model.gguf --reference ./Qwen3-0.6B
  tq verify model-00001-of-00003.gguf --reference ./Qwen3-0.6B-f16.gguf --max-kld 0.03 --report out/
  tq verify --reference ./Qwen3-0.6B --save-reference qwen3.tqlogits        # once, on a big machine
  tq verify model.gguf --reference-logits qwen3.tqlogits --json > report.json
  tq verify model.gguf --skip toolcalls --max-ppl 20 --text wiki.test.raw --ctx 512`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			model := ""
			if len(args) == 1 {
				model = args[0]
			}
			return runVerify(cmd, model, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.reference, "reference", "", "reference model: Hugging Face folder or F16/BF16/F32 GGUF")
	fl.StringVar(&f.refLogits, "reference-logits", "", "saved reference (from --save-reference) instead of --reference")
	fl.StringVar(&f.saveRef, "save-reference", "", "save the reference's top-k log-probs, template and tool calls to FILE (zstd)")
	fl.IntVar(&f.topK, "top-k", verify.DefaultTopK, "tokens per position kept by --save-reference")
	fl.StringVar(&f.text, "text", "", "evaluation text file (default: tq's built-in text)")
	fl.IntVar(&f.ctx, "ctx", verify.DefaultCtx, "perplexity window in tokens (llama-perplexity -c)")
	fl.IntVar(&f.chunks, "chunks", 0, "evaluate at most this many windows (0 = all)")
	fl.BoolVar(&f.full, "full", false, "decode every row of every tensor in the NaN/Inf check")
	fl.IntVar(&f.sampleRows, "sample-rows", verify.DefaultSampleRows, "rows decoded per tensor without --full")
	fl.BoolVar(&f.requireManifest, "require-manifest", false, "fail when no SHA-256 manifest is found")
	fl.StringVar(&f.imatrix, "imatrix", "", "calibration statistics (llama.cpp imatrix) for per-layer sensitivity")
	fl.StringVar(&f.quantConfig, "quantize-config", "", "the quantize_config.json a turboquant file was converted from: check that the file holds every recorded tensor in its recorded container")
	fl.StringVar(&f.suite, "toolcalls", "", "tool-call suite JSON (default: built-in)")
	fl.IntVar(&f.toolMax, "toolcall-max-tokens", verify.DefaultToolCallMaxTokens, "token cap per tool-call case")
	fl.StringVar(&f.cacheType, "cache-type", "f16", "KV cache type of the model: f16, f32, bf16, q8_0, q4_0, or auto (turboquant.kv_cache_dtype)")
	fl.StringSliceVar(&f.skip, "skip", nil, "sections to skip: "+strings.Join(verify.Sections, ", "))
	for _, name := range verify.ThresholdNames() {
		v := new(float64)
		f.thresholds[name] = v
		fl.Float64Var(v, strings.ReplaceAll(name, "_", "-"), 0, thresholdHelp[name])
	}
	fl.StringVar(&f.config, "config", "", "thresholds file verify.json / verify.yaml (default: ./verify.{yaml,yml,json} if present)")
	fl.BoolVar(&f.noConfig, "no-config", false, "ignore ./verify.{yaml,yml,json}")
	fl.BoolVar(&f.json, "json", false, "print the full report as JSON instead of the Markdown summary")
	fl.StringVar(&f.markdown, "markdown", "", "append the Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)")
	fl.StringVar(&f.report, "report", "", "write an HTML report with PNG plots to DIR")
	fl.IntVar(&f.threads, "threads", 0, "worker threads (0 = all CPUs)")
	rootCmd.AddCommand(cmd)
}

func runVerify(cmd *cobra.Command, model string, f *verifyFlags) error {
	o, err := verifyOptions(cmd, model, f)
	if err != nil {
		return &verifyError{err}
	}
	if err := checkVerifyOutputs(model, f); err != nil {
		return &verifyError{err}
	}
	stderr := cmd.ErrOrStderr()
	if fh, ok := stderr.(*os.File); ok && term.IsTerminal(int(fh.Fd())) {
		o.Progress = stderr
	}
	o.Log = stderr
	ctx, stop := signalContext()
	defer stop()
	rep, err := verify.Run(ctx, o)
	if err != nil {
		if ie := interrupted(ctx, err, "not verified"); ie != nil {
			return ie
		}
		return &verifyError{err}
	}
	if err := writeVerifyOutputs(cmd.OutOrStdout(), rep, f); err != nil {
		return &verifyError{err}
	}
	if !rep.Passed() {
		return &verifyExit{rep}
	}
	return nil
}

// checkVerifyOutputs refuses --save-reference, --report and --markdown outputs that are
// files verify reads.
func checkVerifyOutputs(model string, f *verifyFlags) error {
	inputs := append(modelInputs(model), modelInputs(f.reference)...)
	if model != "" {
		inputs = append(inputs, model+gguf.ManifestSuffix, filepath.Join(filepath.Dir(model), gguf.ManifestName))
	}
	cfg := f.config
	if cfg == "" && !f.noConfig {
		cfg = verify.FindConfig(".")
	}
	inputs = append(inputs, f.refLogits, f.text, f.suite, f.imatrix, cfg, f.quantConfig)
	outputs := []string{f.saveRef, f.markdown}
	if f.report != "" {
		for _, n := range []string{"index.html", "report.json", verify.PlotQuantError, verify.PlotKLDHist, verify.PlotSensitivity, verify.PlotRunningPPL} {
			outputs = append(outputs, filepath.Join(f.report, n))
		}
	}
	return checkOutputs(inputs, outputs...)
}

// verifyOptions merges defaults, the config file and the flags.
func verifyOptions(cmd *cobra.Command, model string, f *verifyFlags) (verify.Options, error) {
	fl := cmd.Flags()
	o := verify.Options{
		Model: model, Reference: f.reference, ReferenceLogits: f.refLogits, SaveReference: f.saveRef, TopK: f.topK,
		TextPath: f.text, Ctx: f.ctx, Chunks: f.chunks, Full: f.full, SampleRows: f.sampleRows,
		RequireManifest: f.requireManifest, Imatrix: f.imatrix, QuantizeConfig: f.quantConfig, SuitePath: f.suite, ToolCallMaxTokens: f.toolMax,
		CacheType: f.cacheType, Skip: f.skip, Threads: f.threads, TQVersion: tqVersion(),
	}
	th := verify.DefaultThresholds()
	cfgPath := f.config
	if cfgPath == "" && !f.noConfig {
		cfgPath = verify.FindConfig(".")
	}
	if cfgPath != "" {
		c, err := verify.LoadConfig(cfgPath)
		if err != nil {
			return o, fmt.Errorf("--config: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "using thresholds from %s\n", cfgPath)
		th = th.Merge(c.Thresholds)
		o.Explicit = append(o.Explicit, c.Thresholds.SetNames()...)
		setInt := func(flag string, dst *int, v *int) {
			if v != nil && !fl.Changed(flag) {
				*dst = *v
			}
		}
		setInt("ctx", &o.Ctx, c.Ctx)
		setInt("chunks", &o.Chunks, c.Chunks)
		setInt("toolcall-max-tokens", &o.ToolCallMaxTokens, c.ToolCallMaxTokens)
		setInt("sample-rows", &o.SampleRows, c.SampleRows)
		setInt("top-k", &o.TopK, c.TopK)
		if c.CacheType != nil && !fl.Changed("cache-type") {
			o.CacheType = *c.CacheType
		}
		if c.RequireManifest != nil && !fl.Changed("require-manifest") {
			o.RequireManifest = *c.RequireManifest
		}
	}
	for name, v := range f.thresholds {
		if fl.Changed(strings.ReplaceAll(name, "_", "-")) {
			if err := th.Set(name, *v); err != nil {
				return o, fmt.Errorf("--%s: %w", strings.ReplaceAll(name, "_", "-"), err)
			}
			o.Explicit = append(o.Explicit, name)
		}
	}
	o.Thresholds = th
	return o, nil
}

func writeVerifyOutputs(w io.Writer, rep *verify.Report, f *verifyFlags) error {
	if f.json {
		if err := writeJSON(w, rep); err != nil {
			return err
		}
	} else if err := rep.WriteMarkdown(w); err != nil {
		return err
	}
	if f.markdown != "" {
		fh, err := os.OpenFile(f.markdown, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
		werr := rep.WriteMarkdown(fh)
		if err := errors.Join(werr, fh.Close()); err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
	}
	if f.report != "" {
		if err := verify.WriteHTML(f.report, rep); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return nil
}
