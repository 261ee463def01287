package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/infer/plan"
)

type planOptions struct {
	types          string
	ctx, ubatch    int
	cacheK, cacheV string
	flashAttn      bool
	vram, reserve  string
	cpuBW, gpuBW   float64
	cpuGF, gpuTF   float64
	depth          int
	json, perLayer bool
}

func init() {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan MODEL",
		Short: "Memory breakdown and GPU/CPU placement for a VRAM budget, with llama.cpp arguments",
		Long: `plan computes the exact weight memory of a model (per layer and per tensor group), its
KV cache at a context size and cache type, an estimate of the compute buffer, and the best
split for a VRAM budget: how many layers go to the GPU (-ngl) or, for a mixture of experts,
which layers keep their expert tensors on the CPU (--n-cpu-moe / -ot). It predicts decode
speed from the bytes read per token at the given bandwidths, the CPU's arithmetic and fixed
per-token overheads (graph scheduling, sampling, per-block synchronisation or kernel
launches, CPU/GPU hand-overs), at --depth cached tokens and with the context full, and prints
what the figure assumes (docs/infer.md); prompt speed from throughput, when given.

MODEL is a GGUF file (real tensor types) or a Hugging Face folder / config.json, typed by
--type: one ggml type for every weight, optionally with per-role overrides, e.g.
"q4_K,token_embd=q8_0,ffn_down=q6_K". Norms stay f32; rows a K-quant cannot split fall back
as llama-quantize does.

Sizes take units: 24GiB, 8G (binary), 16GB (decimal); a bare number is GiB.`,
		Example: `  tq plan model.gguf --vram 12GiB
  tq plan ./Qwen3-30B-A3B --type q4_K --vram 16G --ctx 32768 --cache-type-k q8_0 --cache-type-v q8_0 -fa
  tq plan ./Qwen3-8B/config.json --type q8_0 --vram 8G --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd.OutOrStdout(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.types, "type", "f16", "type mix for a Hugging Face model (ignored for GGUF)")
	f.IntVarP(&o.ctx, "ctx", "c", 4096, "context size in tokens")
	f.IntVar(&o.ubatch, "ubatch", 512, "llama.cpp micro-batch size (compute buffer)")
	f.StringVar(&o.cacheK, "cache-type-k", "f16", "KV cache type for K")
	f.StringVar(&o.cacheV, "cache-type-v", "f16", "KV cache type for V")
	f.BoolVarP(&o.flashAttn, "flash-attn", "a", false, "plan for llama.cpp flash attention (-fa on)")
	f.StringVar(&o.vram, "vram", "", "GPU memory budget (empty: CPU only)")
	f.StringVar(&o.reserve, "gpu-reserve", "512MiB", "part of the budget kept free for the driver and fragmentation")
	f.Float64Var(&o.cpuBW, "cpu-bw", 40, "CPU memory bandwidth in GB/s (decode prediction)")
	f.Float64Var(&o.gpuBW, "gpu-bw", 900, "GPU memory bandwidth in GB/s (decode prediction)")
	f.Float64Var(&o.cpuGF, "cpu-gflops", 0, "sustained CPU GFLOP/s (prompt prediction; 0: none)")
	f.Float64Var(&o.gpuTF, "gpu-tflops", 0, "sustained GPU TFLOP/s (prompt prediction)")
	f.IntVar(&o.depth, "depth", 0, "tokens already in the cache for the decode prediction")
	f.BoolVar(&o.json, "json", false, "print JSON instead of tables")
	f.BoolVar(&o.perLayer, "per-layer", false, "list every layer (default: identical layers summarised)")
	rootCmd.AddCommand(cmd)
}

func runPlan(w io.Writer, path string, o *planOptions) error {
	po := plan.DefaultOptions()
	po.Ctx, po.UBatch, po.FlashAttn, po.Depth = o.ctx, o.ubatch, o.flashAttn, o.depth
	po.CPUBandwidth, po.GPUBandwidth, po.CPUGFLOPS, po.GPUTFLOPS = o.cpuBW, o.gpuBW, o.cpuGF, o.gpuTF
	var err error
	if po.CacheTypeK, err = infer.ParseCacheType(o.cacheK); err != nil {
		return fmt.Errorf("--cache-type-k: %w", err)
	}
	if po.CacheTypeV, err = infer.ParseCacheType(o.cacheV); err != nil {
		return fmt.Errorf("--cache-type-v: %w", err)
	}
	if o.vram != "" {
		if po.VRAM, err = plan.ParseSize(o.vram); err != nil {
			return fmt.Errorf("--vram: %w", err)
		}
	}
	if po.GPUReserve, err = plan.ParseSize(o.reserve); err != nil {
		return fmt.Errorf("--gpu-reserve: %w", err)
	}
	m, err := loadPlanModel(path, o.types)
	if err != nil {
		return err
	}
	r, err := plan.Analyze(m, po)
	if err != nil {
		return err
	}
	if o.json {
		return r.WriteJSON(w)
	}
	return r.WriteTable(w, o.perLayer)
}

// loadPlanModel opens a GGUF file, a Hugging Face folder or a config.json.
func loadPlanModel(path, types string) (*plan.Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	cfg := path
	if st.IsDir() {
		cfg = filepath.Join(path, "config.json")
	} else if !strings.HasSuffix(strings.ToLower(path), ".json") {
		return plan.FromGGUF(path)
	}
	mix, err := plan.ParseTypeMix(types)
	if err != nil {
		return nil, fmt.Errorf("--type: %w", err)
	}
	return plan.FromHF(cfg, mix)
}
