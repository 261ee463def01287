package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/internal/convert"
)

type quantizeFlags struct {
	imatrix, outputType, tokEmbType, splitMaxSize, maxSize  string
	overrides, include, exclude                             []string
	pure, leaveOutput, allowRequant, improved, dryRun, json bool
	targetBPW                                               float64
	threads                                                 int
}

func init() {
	f := &quantizeFlags{}
	cmd := &cobra.Command{
		Use:   "quantize IN.gguf OUT.gguf TYPE",
		Short: "Requantize a GGUF file to a llama.cpp preset (like llama-quantize)",
		Long: `quantize rewrites a GGUF model with one of llama.cpp's presets (q8_0, q4_0, q4_1, q5_0,
q5_1, q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k, iq4_nl, iq4_xs, f16, bf16, f32), using
llama-quantize's per-tensor mixture rules, block-size fallbacks and output order. Tensors
whose type does not change are copied byte for byte; with --imatrix the importance-weighted
algorithms llama-quantize uses are applied and the quantize.imatrix.* keys recorded.`,
		Example: `  tq quantize model-f16.gguf model-q4km.gguf q4_k_m
  tq quantize model-f16.gguf model-q4km.gguf Q4_K_M --imatrix imatrix.gguf
  tq quantize model-f16.gguf out.gguf q4_k_m --tensor-type 'ffn_down=q6_k' --dry-run`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runQuantize(cmd, args[0], args[1], args[2], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.imatrix, "imatrix", "", "llama.cpp importance matrix (imatrix.gguf or .dat)")
	fl.StringArrayVar(&f.include, "include-weights", nil, "use importance only for tensors whose name contains this (repeatable)")
	fl.StringArrayVar(&f.exclude, "exclude-weights", nil, "do not use importance for tensors whose name contains this (repeatable)")
	fl.StringArrayVar(&f.overrides, "tensor-type", nil, "PATTERN=TYPE: force the type of tensors whose name matches the regexp (repeatable)")
	fl.BoolVar(&f.pure, "pure", false, "disable the mixture rules")
	fl.StringVar(&f.outputType, "output-tensor-type", "", "type of output.weight")
	fl.StringVar(&f.tokEmbType, "token-embedding-type", "", "type of token_embd.weight")
	fl.BoolVar(&f.leaveOutput, "leave-output-tensor", false, "do not quantize output.weight")
	fl.BoolVar(&f.allowRequant, "allow-requantize", false, "allow re-encoding tensors that are already quantized")
	fl.BoolVar(&f.improved, "improved", false, "use tq's improved (lower-error) search instead of llama-quantize's exact algorithms")
	fl.Float64Var(&f.targetBPW, "target-bpw", 0, "choose per-tensor types to reach this many bits per weight")
	fl.StringVar(&f.maxSize, "max-size", "", "choose per-tensor types so that tensor data fits this size")
	fl.StringVar(&f.splitMaxSize, "split-max-size", "", "split the output into shards of at most this size (e.g. 5G)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the per-tensor plan and totals without writing")
	fl.BoolVar(&f.json, "json", false, "print the plan / summary as JSON")
	fl.IntVar(&f.threads, "threads", 0, "encoding threads (0 = all CPUs)")
	rootCmd.AddCommand(cmd)
}

func runQuantize(cmd *cobra.Command, in, out, typ string, f *quantizeFlags) error {
	if len(f.include) > 0 && len(f.exclude) > 0 {
		return fmt.Errorf("--include-weights and --exclude-weights cannot be combined")
	}
	opts := convert.RequantizeOptions{Options: convert.Options{
		Types: convert.TypeOptions{OutType: typ, IMatrixPath: f.imatrix, Overrides: f.overrides, Pure: f.pure,
			OutputTensorType: f.outputType, TokenEmbeddingType: f.tokEmbType, LeaveOutput: f.leaveOutput, Improved: f.improved,
			TargetBPW: f.targetBPW, IMatrixInclude: f.include, IMatrixExclude: f.exclude},
		Output:  convert.OutputOptions{Threads: f.threads},
		Version: tqVersion(),
	}, AllowRequantize: f.allowRequant}
	var err error
	if opts.Types.MaxSize, err = parseSize(f.maxSize); err != nil {
		return fmt.Errorf("--max-size: %w", err)
	}
	if opts.Output.SplitMaxSize, err = parseSize(f.splitMaxSize); err != nil {
		return fmt.Errorf("--split-max-size: %w", err)
	}
	stderr := cmd.ErrOrStderr()
	opts.Report.Warn = func(msg string) { fmt.Fprintln(stderr, "warning:", msg) }
	if f.dryRun {
		plan, err := convert.PlanRequantize(in, opts)
		if err != nil {
			return err
		}
		return printPlan(cmd.OutOrStdout(), plan, f.json)
	}
	if err := checkGGUFOutput(append(modelInputs(in), f.imatrix), out, f.splitMaxSize != "", true); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	bar := newProgress(stderr, "quantizing")
	opts.Report.Progress = bar.update
	res, err := convert.Requantize(ctx, in, out, opts)
	bar.finish()
	if err != nil {
		if ie := interrupted(ctx, err, "no output was written"); ie != nil {
			return ie
		}
		return err
	}
	return printResult(cmd.OutOrStdout(), res, f.json)
}
