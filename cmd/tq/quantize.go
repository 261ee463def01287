package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/internal/convert"
)

type quantizeFlags struct {
	writeFlags
	include, exclude          []string
	leaveOutput, allowRequant bool
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
	f.writeFlags.register(fl, "")
	fl.StringArrayVar(&f.include, "include-weights", nil, "use importance only for tensors whose name contains this (repeatable)")
	fl.StringArrayVar(&f.exclude, "exclude-weights", nil, "do not use importance for tensors whose name contains this (repeatable)")
	fl.BoolVar(&f.leaveOutput, "leave-output-tensor", false, "do not quantize output.weight")
	fl.BoolVar(&f.allowRequant, "allow-requantize", false, "allow re-encoding tensors that are already quantized")
	rootCmd.AddCommand(cmd)
}

func runQuantize(cmd *cobra.Command, in, out, typ string, f *quantizeFlags) error {
	if len(f.include) > 0 && len(f.exclude) > 0 {
		return fmt.Errorf("--include-weights and --exclude-weights cannot be combined")
	}
	opts, err := f.options(typ)
	if err != nil {
		return err
	}
	opts.Types.LeaveOutput, opts.Types.IMatrixInclude, opts.Types.IMatrixExclude = f.leaveOutput, f.include, f.exclude
	requantize := func(o convert.Options) convert.RequantizeOptions {
		return convert.RequantizeOptions{Options: o, AllowRequantize: f.allowRequant}
	}
	return f.execute(cmd, opts, "quantizing",
		func(o convert.Options) (*convert.Plan, error) { return convert.PlanRequantize(in, requantize(o)) },
		func() error {
			return checkGGUFOutput(append(modelInputs(in), f.imatrix), out, f.splitMaxSize != "", true)
		},
		func(ctx context.Context, o convert.Options) (*convert.Result, error) {
			return convert.Requantize(ctx, in, out, requantize(o))
		})
}
