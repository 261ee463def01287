package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/infer/plan"
	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/chat"
)

type runOptions struct {
	prompt, promptFile, system string
	toolsFile                  string
	noThink                    bool
	n                          int
	ctx, threads, batch        int
	cacheK, cacheV             string
	temp, topP, minP, repeat   float32
	topK, repeatN              int
	seed                       int64
	chat, ignoreEOS, json      bool
	interactive                bool
	ngl                        int
	nglSet                     bool // --n-gpu-layers/--ngl given (else the placement is planned)
	vram                       string
	backend                    string
	cpuMoE                     bool
	nCPUMoE                    int
	cudaGraphs                 bool
	cudaGraphsSet              bool // --cuda-graphs given (else a failed recording is silent)
	verbose                    bool
	cacheKSet, cacheVSet       bool // --cache-type-k/-v given (else the file's turboquant.kv_cache_dtype, else f16)
}

func init() {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run MODEL.gguf",
		Short: "Generate text with a GGUF model on the CPU and, where present, an NVIDIA GPU",
		Long: `run loads a GGUF model (llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe; weights used in
place from the memory-mapped file), evaluates the prompt in one batch and streams the
generated text. The closing line reports prompt and generation speed, time to first token
and peak RSS.

The forward pass on the CPU follows llama.cpp's CPU backend (activations rounded to each
weight type's vec_dot type); sampling follows llama.cpp's default chain (repetition penalty,
top-k, top-p, min-p, temperature). --temp 0 is greedy decoding.

KV cache: --cache-type-k/-v when given, else the type a turboquant file records
(turboquant.kv_cache_dtype, from tq calibrate), else f16; a line says when the file's type is
used (--json: kv_cache). GPU blocks keep f16 or q8_0 caches: another type the file records
becomes f16 there.

GPU: --backend auto (default) uses an NVIDIA GPU when the driver (libcuda.so.1) reports one,
and otherwise runs on the CPU, saying why in one line when a GPU was asked for (--n-gpu-layers
above 0, --vram, --cpu-moe) or with --verbose; --backend cuda fails instead, --backend cpu
never touches the driver. The last --n-gpu-layers blocks run on the GPU (more than the
model's block count also moves the LM head there), as llama.cpp's -ngl counts them. Without
--n-gpu-layers the placement is planned (as tq plan does) for --vram, or for the device's free
memory, and printed in one line; --cpu-moe keeps every routed expert tensor on the CPU,
--n-cpu-moe N those of the first N blocks (shared experts stay with their block). GPU layers
compute in float32 without activation rounding and keep an f16 or q8_0 KV cache on the
device; the Qwen3.5/3.6 hybrids (qwen35, qwen35moe) keep their Gated DeltaNet states there
too. Models the GPU backend cannot run (weight types without a CUDA kernel, a KV cache other
than f16 or q8_0) run on the CPU with one line saying why. The GPU blocks' kernel launches of
one generated token are recorded once and replayed as a CUDA graph for every later token (same
kernels and results, less launch time: 1.1-1.6x the decode speed on an H200);
--cuda-graphs=false launches them one by one. Blocks whose experts stay on the CPU cannot be
recorded and run kernel by kernel (said in one line with --cuda-graphs or --verbose).`,
		Example: `  tq run model.gguf -p "The capital of France is" -n 32
  tq run model.gguf -p "Write a haiku about Go." --chat --temp 0.7 --seed 1
  tq run model.gguf -i --system "You are terse." --no-think
  tq run model.gguf -f prompt.txt --ctx 8192 --cache-type-k q8_0 --cache-type-v q8_0 --json
  tq run model.gguf -p "Hello" -ngl 99           # every block and the LM head on the GPU
  tq run moe.gguf -p "Hello" --vram 8GiB --cpu-moe
  tq run qwen36-35b-a3b.gguf -p "Hello" -ngl 41 --n-cpu-moe 27`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.nglSet = cmd.Flags().Changed("n-gpu-layers") || cmd.Flags().Changed("ngl")
			o.cacheKSet, o.cacheVSet = cmd.Flags().Changed("cache-type-k"), cmd.Flags().Changed("cache-type-v")
			o.cudaGraphsSet = cmd.Flags().Changed("cuda-graphs")
			if o.interactive {
				_, err := runChat(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], o, cmd.Flags().Changed("seed"))
				return err
			}
			return runRun(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], o, cmd.Flags().Changed("seed"))
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.prompt, "prompt", "p", "", "prompt text")
	f.StringVarP(&o.promptFile, "file", "f", "", "read the prompt from a file")
	f.StringVar(&o.system, "system", "", "system message (with --chat)")
	f.BoolVar(&o.chat, "chat", false, "wrap the prompt in the model's chat template as a user message")
	f.StringVar(&o.toolsFile, "tools", "", "JSON file with an array of tool definitions (OpenAI/transformers form) for the chat template (implies --chat)")
	f.BoolVarP(&o.interactive, "interactive", "i", false, "chat: read user turns line by line from stdin (/reset clears, /exit ends), reusing the cached prefix each turn")
	f.BoolVar(&o.noThink, "no-think", false, "render the template with enable_thinking=false (implies --chat)")
	f.IntVarP(&o.n, "n-predict", "n", 128, "tokens to generate (-1: until end of text or a full context)")
	f.IntVarP(&o.ctx, "ctx", "c", 4096, "context size in tokens")
	f.IntVarP(&o.threads, "threads", "t", 0, "worker threads (0: all CPUs)")
	f.IntVarP(&o.batch, "batch-size", "b", 512, "prompt tokens evaluated per batch")
	f.StringVar(&o.cacheK, "cache-type-k", "f16", "KV cache type for K: f32, f16, bf16, q8_0, q4_0 (default: the file's turboquant.kv_cache_dtype, else f16)")
	f.StringVar(&o.cacheV, "cache-type-v", "f16", "KV cache type for V: f32, f16, bf16, q8_0, q4_0 (default: the file's turboquant.kv_cache_dtype, else f16)")
	f.Float32Var(&o.temp, "temp", 0.8, "temperature (0: greedy)")
	f.IntVar(&o.topK, "top-k", 40, "top-k sampling (0: off)")
	f.Float32Var(&o.topP, "top-p", 0.95, "top-p sampling (1: off)")
	f.Float32Var(&o.minP, "min-p", 0.05, "min-p sampling (0: off)")
	f.Float32Var(&o.repeat, "repeat-penalty", 1.0, "repetition penalty (1: off)")
	f.IntVar(&o.repeatN, "repeat-last-n", 64, "tokens the repetition penalty looks back")
	f.Int64Var(&o.seed, "seed", -1, "sampling seed (-1: random)")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating after end-of-text tokens")
	f.BoolVar(&o.json, "json", false, "print one JSON document (text, tokens, timings) instead of streaming")
	f.StringVar(&o.backend, "backend", "auto", "compute backend: auto (CUDA when a GPU is usable, else CPU), cuda, cpu")
	f.IntVarP(&o.ngl, "n-gpu-layers", "g", 0, "blocks to run on the GPU, counted from the last (> block count: also the LM head; default: planned from --vram)")
	f.IntVar(&o.ngl, "ngl", 0, "alias of --n-gpu-layers (llama.cpp's single-dash -ngl is accepted too)")
	f.StringVar(&o.vram, "vram", "", "GPU memory budget for the planned placement, e.g. 8GiB (default: the device's free memory)")
	f.BoolVar(&o.cpuMoE, "cpu-moe", false, "keep every MoE expert tensor on the CPU (llama.cpp --cpu-moe)")
	f.IntVar(&o.nCPUMoE, "n-cpu-moe", 0, "keep the routed experts of the first N blocks on the CPU (llama.cpp --n-cpu-moe; with a planned placement, at least N)")
	f.BoolVar(&o.cudaGraphs, "cuda-graphs", true, "replay each generated token's GPU kernels as one recorded CUDA graph (false: launch them one by one)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "also say which backend was chosen when it is the CPU and no GPU was asked for")
	rootCmd.AddCommand(cmd)
	if len(os.Args) > 1 && slices.Contains(os.Args[1:], "run") {
		os.Args = dashNGL(os.Args)
	}
}

// dashNGL rewrites llama.cpp's single-dash -ngl N (which the flag parser would read as -n "gl")
// to --ngl N, up to a "--" that ends the flags.
func dashNGL(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a == "-ngl" {
			out[i] = "--ngl"
		} else if v, ok := strings.CutPrefix(a, "-ngl="); ok {
			out[i] = "--ngl=" + v
		}
	}
	return out
}

// runResult is the --json output of tq run.
type runResult struct {
	Model        string              `json:"model"`
	Arch         string              `json:"arch"`
	Prompt       string              `json:"prompt"`
	PromptTokens []int32             `json:"prompt_tokens"`
	Text         string              `json:"text"`
	Tokens       []int32             `json:"tokens"`
	Stats        infer.GenerateStats `json:"stats"`
	PromptTokS   float64             `json:"prompt_tok_s"`
	GenTokS      float64             `json:"gen_tok_s"`
	TTFTMs       float64             `json:"ttft_ms"`
	PeakRSS      int64               `json:"peak_rss_bytes,omitempty"`
	Threads      int                 `json:"threads"`
	Kernels      string              `json:"kernels"`
	MathLib      string              `json:"math_library"` // where RoPE's cosf/sinf come from
	Seed         uint64              `json:"seed"`
	Device       string              `json:"device"`
	Backend      string              `json:"backend"`   // the backend selection line
	Placement    runPlacement        `json:"placement"` // where the blocks ran
	KVCache      kvCacheChoice       `json:"kv_cache"`  // the KV cache types and where they come from
}

func runRun(stdout, stderr io.Writer, path string, o *runOptions, seedSet bool) error {
	prompt := o.prompt
	if o.promptFile != "" {
		b, err := boundedread.ReadFile(o.promptFile, "prompt file", boundedread.MaxPromptFile)
		if err != nil {
			return err
		}
		prompt = string(b)
	}
	if prompt == "" {
		return fmt.Errorf("no prompt: give -p TEXT or -f FILE")
	}
	if o.n == 0 || o.n < -1 {
		return fmt.Errorf("-n %d: give a positive token count, or -1 to generate until end of text", o.n)
	}
	seed := uint64(o.seed)
	if !seedSet || o.seed < 0 {
		seed = rand.Uint64() >> 1
	}
	tok, err := tokenizer.LoadGGUF(path)
	if err != nil {
		return fmt.Errorf("%s: tokenizer: %w", path, err)
	}
	text := prompt
	enc := tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: false}
	if o.toolsFile != "" || o.noThink {
		o.chat = true
	}
	if o.chat {
		copts := chat.Options{AddGenerationPrompt: true, BOS: tok.TokenText(tok.BOS()), EOS: tok.TokenText(tok.EOS())}
		if o.toolsFile != "" {
			tools, err := readToolsFile(o.toolsFile)
			if err != nil {
				return err
			}
			copts.ToolsJSON = tools
		}
		if o.noThink {
			off := false
			copts.EnableThinking = &off
		}
		tmpl := tok.ChatTemplate()
		if tmpl == "" {
			return fmt.Errorf("%s: --chat: the model has no chat template (tokenizer.chat_template)", path)
		}
		var msgs []chat.Message
		if o.system != "" {
			msgs = append(msgs, chat.Message{Role: "system", Content: o.system})
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: prompt})
		text, err = chat.Render(tmpl, msgs, copts)
		if err != nil {
			return fmt.Errorf("%s: chat template: %w", path, err)
		}
		enc = tokenizer.EncodeOptions{AddSpecial: false, ParseSpecial: true}
	}
	ids := tok.Encode(text, enc)
	if len(ids) == 0 {
		return fmt.Errorf("the prompt encodes to no tokens")
	}
	if len(ids) >= o.ctx {
		return fmt.Errorf("the prompt has %d tokens, which does not fit the context of %d (raise --ctx)", len(ids), o.ctx)
	}
	var logw io.Writer = stderr
	if o.json {
		logw = io.Discard // the backend and placement are in the JSON document
	}
	rm, err := loadRunModel(logw, path, o)
	if err != nil {
		return err
	}
	defer rm.Close()
	m := rm.m
	sess, err := m.NewSession()
	if err != nil {
		return err
	}
	var stop []int32
	if !o.ignoreEOS {
		for _, id := range []int32{tok.EOS(), tok.EOT()} {
			if id >= 0 {
				stop = append(stop, id)
			}
		}
	}
	gen := infer.GenerateOptions{MaxTokens: o.n, Stop: stop, Sampler: infer.SamplerOptions{
		Temperature: o.temp, TopK: o.topK, TopP: o.topP, MinP: o.minP, RepeatPenalty: o.repeat,
		RepeatLastN: o.repeatN, Seed: seed}}
	if o.n == -1 {
		gen.MaxTokens = 0 // until a stop token or a full context
	}
	var stream *textStream
	if !o.json {
		bw := bufio.NewWriter(stdout)
		defer bw.Flush()
		stream = &textStream{tok: tok, w: bw}
		gen.OnToken = stream.add
	}
	out, st, err := sess.Generate(ids, gen)
	if err != nil {
		return err
	}
	if o.cudaGraphs && rm.dev != nil {
		steps, gerr := sess.GPUGraphSteps()
		rm.placement.GraphSteps = steps
		if gerr != nil {
			rm.placement.GraphError = gerr.Error()
			if o.cudaGraphsSet || o.verbose {
				fmt.Fprintf(logw, "tq run: CUDA graphs not used: %v\n", gerr)
			}
		}
	}
	rss := peakRSS()
	if o.json {
		return writeJSON(stdout, runResult{Model: path, Arch: m.Config().Arch, Prompt: prompt, PromptTokens: ids,
			Text: tok.Decode(out), Tokens: out, Stats: st, PromptTokS: st.PromptTokS(), GenTokS: st.GenTokS(),
			TTFTMs: float64(st.TTFT) / 1e6, PeakRSS: rss, Threads: m.Threads(), Kernels: infer.KernelImplementation(),
			MathLib: infer.MathLibrary(), Seed: seed, Device: rm.device, Backend: rm.backend, Placement: rm.placement,
			KVCache: rm.kv})
	}
	stream.flush()
	fmt.Fprintln(stream.w)
	stream.w.Flush()
	fmt.Fprintf(stderr, "prompt %d tok %.1f tok/s | gen %d tok %.1f tok/s | TTFT %.0f ms | peak RSS %s | %d threads, %s, stop: %s\n",
		st.PromptTokens, st.PromptTokS(), st.GenTokens, st.GenTokS(), float64(st.TTFT)/1e6, rssString(rss),
		m.Threads(), infer.KernelImplementation(), st.StopReason)
	return nil
}

// textStream prints generated text as it arrives, holding back an incomplete UTF-8 sequence
// at the end (a character split across tokens).
type textStream struct {
	tok     *tokenizer.Tokenizer
	w       *bufio.Writer
	ids     []int32
	printed int
}

func (s *textStream) add(id int32) error {
	s.ids = append(s.ids, id)
	text := s.tok.Decode(s.ids)
	end := len(text)
	// hold back the last character when its bytes are not all there yet
	for i := 1; i <= 3 && end-i >= s.printed; i++ {
		if utf8.RuneStart(text[end-i]) {
			if !utf8.FullRuneInString(text[end-i:]) {
				end -= i
			}
			break
		}
	}
	if end > s.printed {
		if _, err := s.w.WriteString(text[s.printed:end]); err != nil {
			return err
		}
		s.printed = end
	}
	return s.w.Flush()
}

func (s *textStream) flush() {
	text := s.tok.Decode(s.ids)
	if len(text) > s.printed {
		s.w.WriteString(text[s.printed:])
		s.printed = len(text)
	}
}

// peakRSS reads the peak resident set size (Linux /proc/self/status VmHWM); 0 elsewhere.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

func rssString(n int64) string {
	if n <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// readToolsFile reads a JSON array of tool definitions, keeping each one's key order (the
// template serialises them with tojson, and models are trained on that exact text).
func readToolsFile(path string) ([]json.RawMessage, error) {
	b, err := boundedread.ReadFile(path, "tools file", boundedread.MaxJSONConfig)
	if err != nil {
		return nil, err
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(b, &tools); err != nil {
		return nil, fmt.Errorf("%s: --tools wants a JSON array of tool definitions: %w", path, err)
	}
	for i, t := range tools {
		var obj map[string]any
		if json.Unmarshal(t, &obj) != nil {
			return nil, fmt.Errorf("%s: tool %d is not a JSON object", path, i)
		}
	}
	return tools, nil
}

// runPlacement is where tq run put the model (--json "placement").
type runPlacement struct {
	GPULayers      int    `json:"gpu_layers"`                 // blocks on the GPU (the last ones)
	OutputOnGPU    bool   `json:"output_on_gpu"`              // output norm and LM head on the GPU
	CPUMoE         int    `json:"cpu_moe"`                    // GPU blocks whose experts stay on the CPU
	CUDAGraphs     bool   `json:"cuda_graphs"`                // --cuda-graphs
	GraphSteps     int    `json:"cuda_graph_steps"`           // generated tokens that replayed the recorded graph
	GraphError     string `json:"cuda_graph_error,omitempty"` // why graphs were not used, when asked for
	NGL            int    `json:"ngl"`                        // the equivalent -ngl
	GPUWeightBytes int64  `json:"gpu_weight_bytes"`           // uploaded weights
	Source         string `json:"source"`                     // how the placement was chosen
}

// runModel is a model loaded for tq run, with the device it uses (nil: CPU).
type runModel struct {
	src       *infer.GGUFSource
	m         *infer.Model
	dev       *cuda.Device
	backend   string // the backend selection line
	device    string // "CPU" or the device description
	placement runPlacement
	kv        kvCacheChoice
}

// Close frees the model, then closes the device and the file.
func (r *runModel) Close() {
	r.m.Close()
	if r.dev != nil {
		r.dev.Close()
	}
	r.src.Close()
}

// loadRunModel selects the backend (--backend), decides the placement (--n-gpu-layers, else
// planned with infer/plan for --vram or the device's free memory; --cpu-moe), loads the model
// and writes to logw one line about the backend (about a CPU backend only when a GPU was asked
// for or with --verbose) and, with a GPU, one about the placement. A model the GPU backend
// cannot run (infer.ErrGPUUnsupported, a driver error while uploading, a
// failed plan) is loaded on the CPU with one line saying why (an error with --backend cuda).
func loadRunModel(logw io.Writer, path string, o *runOptions) (*runModel, error) {
	if o.nglSet && o.ngl < 0 {
		return nil, fmt.Errorf("--n-gpu-layers %d: give 0 or more blocks", o.ngl)
	}
	var budget int64
	if o.vram != "" {
		v, err := plan.ParseSize(o.vram)
		if err != nil {
			return nil, fmt.Errorf("--vram: %w", err)
		}
		budget = v
	}
	opts := infer.Options{Threads: o.threads, CtxSize: o.ctx, CacheTypeK: o.cacheK, CacheTypeV: o.cacheV, BatchSize: o.batch}
	r := &runModel{device: "CPU"}
	name := strings.ToLower(strings.TrimSpace(o.backend))
	var line string
	switch {
	case name != "" && name != "auto" && name != "cpu" && name != "cuda":
		return nil, fmt.Errorf("--backend %q: want auto, cpu or cuda", o.backend)
	case o.nglSet && o.ngl == 0 && name != "cuda":
		line = "backend: cpu (--n-gpu-layers 0)"
	default:
		d, l, err := cuda.Select(o.backend)
		if err != nil {
			return nil, err
		}
		r.dev, line = d, l
	}
	r.backend = line
	// Without a GPU, the CPU is the expected backend: say why only when a GPU was asked for.
	if o.nCPUMoE < 0 {
		return nil, fmt.Errorf("--n-cpu-moe %d: give 0 or more blocks", o.nCPUMoE)
	}
	gpuAsked := o.nglSet && o.ngl > 0 || o.vram != "" || o.cpuMoE || o.nCPUMoE > 0
	if r.dev != nil || gpuAsked || o.verbose {
		fmt.Fprintln(logw, "tq run: "+line)
	}
	fail := func(err error) (*runModel, error) {
		if r.dev != nil {
			r.dev.Close()
		}
		if r.src != nil {
			r.src.Close()
		}
		return nil, err
	}
	src, err := infer.OpenGGUF(path)
	if err != nil {
		return fail(err)
	}
	r.src = src
	kv, warning := chooseKVCache(src.GGUF().Metadata(), o)
	if warning != "" {
		fmt.Fprintln(logw, "tq run: "+warning)
	}
	opts.CacheTypeK, opts.CacheTypeV, r.kv = kv.K, kv.V, kv
	loaded := func() (*runModel, error) {
		if r.kv.worthALine() {
			fmt.Fprintf(logw, "tq run: KV cache %s/%s, %s\n", r.kv.K, r.kv.V, r.kv.Source)
		}
		return r, nil
	}
	if r.dev != nil {
		r.device = r.dev.Info().String()
		cfg, err := infer.ReadConfig(src)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", path, err))
		}
		gkv := kv.forGPU()
		ngl, cpuMoE, how, err := choosePlacement(path, cfg, r.dev, o, budget, gkv)
		if err != nil {
			if name == "cuda" {
				return fail(err)
			}
			ngl, how = 0, err.Error() // planning failed: the CPU still runs the model
		}
		r.placement.Source = how
		if ngl == 0 {
			fmt.Fprintf(logw, "tq run: placement: CPU only (%s)\n", how)
			r.dev.Close()
			r.dev, r.device = nil, "CPU"
		} else {
			g := opts
			g.Backend, g.GPULayers, g.CPUMoE, g.GPUGraphs = r.dev, ngl, cpuMoE, o.cudaGraphs
			g.CacheTypeK, g.CacheTypeV = gkv.K, gkv.V
			m, err := infer.Load(src, g)
			var ce *cuda.Error // a driver failure while uploading (out of memory, ...)
			switch {
			case err == nil:
				r.m, r.kv = m, gkv
				p := m.GPUPlacement()
				r.placement = runPlacement{GPULayers: p.Layers, OutputOnGPU: p.OutputOnGPU, CPUMoE: p.CPUMoE, NGL: ngl,
					GPUWeightBytes: p.WeightBytes, Source: how, CUDAGraphs: o.cudaGraphs}
				fmt.Fprintln(logw, "tq run: placement: "+placementLine(cfg, r.placement))
				return loaded()
			case (errors.Is(err, infer.ErrGPUUnsupported) || errors.As(err, &ce)) && name != "cuda":
				fmt.Fprintf(logw, "tq run: %v: running on CPU\n", err)
				r.dev.Close()
				r.dev, r.device = nil, "CPU"
				r.placement.Source = "CPU fallback: " + err.Error()
			default:
				return fail(fmt.Errorf("%s: %w", path, err))
			}
		}
	}
	m, err := infer.Load(src, opts)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	r.m = m
	return loaded()
}

// choosePlacement returns the GPU blocks (-ngl) and the blocks whose experts stay on the CPU:
// --n-gpu-layers as given (with --cpu-moe: every expert on the CPU), else the fastest placement
// infer/plan finds for the budget (--vram, else the device's free memory). how describes the
// choice in words.
func choosePlacement(path string, cfg *infer.Config, dev *cuda.Device, o *runOptions, budget int64, kv kvCacheChoice) (ngl, cpuMoE int, how string, err error) {
	if o.nglSet {
		ngl = o.ngl
		how = fmt.Sprintf("--n-gpu-layers %d", o.ngl)
		switch {
		case o.cpuMoE:
			cpuMoE = cfg.NLayer
			how += " --cpu-moe"
		case o.nCPUMoE > 0:
			cpuMoE = o.nCPUMoE
			how += fmt.Sprintf(" --n-cpu-moe %d", o.nCPUMoE)
		}
		return ngl, cpuMoE, how, nil
	}
	what := "--vram"
	if budget == 0 {
		free, _, err := dev.MemInfo()
		if err != nil {
			return 0, 0, "", err
		}
		budget, what = free, "the free device memory,"
	}
	pm, err := plan.FromGGUF(path)
	if err != nil {
		return 0, 0, "", err
	}
	po := plan.DefaultOptions()
	po.Ctx, po.UBatch, po.VRAM, po.AllExpertsOnCPU = o.ctx, o.batch, budget, o.cpuMoE
	if po.CacheTypeK, err = infer.ParseCacheType(kv.K); err != nil {
		return 0, 0, "", fmt.Errorf("--cache-type-k: %w", err)
	}
	if po.CacheTypeV, err = infer.ParseCacheType(kv.V); err != nil {
		return 0, 0, "", fmt.Errorf("--cache-type-v: %w", err)
	}
	rep, err := plan.Analyze(pm, po)
	if err != nil {
		return 0, 0, "", fmt.Errorf("%s: planning the placement: %w", path, err)
	}
	p := rep.Placement
	how = fmt.Sprintf("planned for %s %s (tq plan: %s on the GPU with the %s reserve, fits: %v)", what,
		plan.HumanBytes(budget), plan.HumanBytes(p.GPUBytes), plan.HumanBytes(po.GPUReserve), p.Fits)
	cpuMoE = p.CPUMoE
	if o.nCPUMoE > cpuMoE { // more experts on the host never needs more device memory
		cpuMoE = o.nCPUMoE
		how += fmt.Sprintf(", experts of the first %d blocks on the CPU (--n-cpu-moe)", cpuMoE)
	}
	return p.NGL, cpuMoE, how, nil
}

// placementLine describes a placement in one line.
func placementLine(cfg *infer.Config, p runPlacement) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d blocks", p.GPULayers, cfg.NLayer)
	if p.OutputOnGPU {
		b.WriteString(" + LM head")
	}
	fmt.Fprintf(&b, " on the GPU (-ngl %d)", p.NGL)
	if cfg.NExpert > 0 {
		fmt.Fprintf(&b, ", experts of %d of them on the CPU", p.CPUMoE)
	}
	fmt.Fprintf(&b, ", %s of weights uploaded; %s", plan.HumanBytes(p.GPUWeightBytes), p.Source)
	return b.String()
}
