package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/infer"
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
	vram                       string
}

func init() {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run MODEL.gguf",
		Short: "Generate text with a GGUF model on the CPU",
		Long: `run loads a GGUF model (llama, qwen2, qwen3, qwen3moe; weights used in place from the
memory-mapped file), evaluates the prompt in one batch and streams the generated text.
The closing line reports prompt and generation speed, time to first token and peak RSS.

The forward pass follows llama.cpp's CPU backend (activations rounded to each weight type's
vec_dot type, f16 KV cache by default); sampling follows llama.cpp's default chain
(repetition penalty, top-k, top-p, min-p, temperature). --temp 0 is greedy decoding.
This build has no GPU backend: --n-gpu-layers and --vram are accepted and ignored.`,
		Example: `  tq run model.gguf -p "The capital of France is" -n 32
  tq run model.gguf -p "Write a haiku about Go." --chat --temp 0.7 --seed 1
  tq run model.gguf -i --system "You are terse." --no-think
  tq run model.gguf -f prompt.txt --ctx 8192 --cache-type-k q8_0 --cache-type-v q8_0 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	f.StringVar(&o.cacheK, "cache-type-k", "f16", "KV cache type for K: f32, f16, bf16, q8_0, q4_0")
	f.StringVar(&o.cacheV, "cache-type-v", "f16", "KV cache type for V: f32, f16, bf16, q8_0, q4_0")
	f.Float32Var(&o.temp, "temp", 0.8, "temperature (0: greedy)")
	f.IntVar(&o.topK, "top-k", 40, "top-k sampling (0: off)")
	f.Float32Var(&o.topP, "top-p", 0.95, "top-p sampling (1: off)")
	f.Float32Var(&o.minP, "min-p", 0.05, "min-p sampling (0: off)")
	f.Float32Var(&o.repeat, "repeat-penalty", 1.0, "repetition penalty (1: off)")
	f.IntVar(&o.repeatN, "repeat-last-n", 64, "tokens the repetition penalty looks back")
	f.Int64Var(&o.seed, "seed", -1, "sampling seed (-1: random)")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating after end-of-text tokens")
	f.BoolVar(&o.json, "json", false, "print one JSON document (text, tokens, timings) instead of streaming")
	f.IntVarP(&o.ngl, "n-gpu-layers", "g", 0, "layers to offload to a GPU (accepted; this build runs on the CPU)")
	f.IntVar(&o.ngl, "ngl", 0, "alias of --n-gpu-layers")
	f.StringVar(&o.vram, "vram", "", "GPU memory budget (accepted; this build runs on the CPU)")
	rootCmd.AddCommand(cmd)
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
	Seed         uint64              `json:"seed"`
	Device       string              `json:"device"`
}

func runRun(stdout, stderr io.Writer, path string, o *runOptions, seedSet bool) error {
	prompt := o.prompt
	if o.promptFile != "" {
		b, err := os.ReadFile(o.promptFile)
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
	device := "CPU"
	if o.ngl != 0 || o.vram != "" {
		device = "CPU (no CUDA backend in this build: --n-gpu-layers/--vram ignored)"
		if !o.json {
			fmt.Fprintln(stderr, "tq run: no CUDA backend in this build/no GPU: running on CPU")
		}
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
	src, err := infer.OpenGGUF(path)
	if err != nil {
		return err
	}
	defer src.Close()
	m, err := infer.Load(src, infer.Options{Threads: o.threads, CtxSize: o.ctx, CacheTypeK: o.cacheK, CacheTypeV: o.cacheV, BatchSize: o.batch})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer m.Close()
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
	rss := peakRSS()
	if o.json {
		return writeJSON(stdout, runResult{Model: path, Arch: m.Config().Arch, Prompt: prompt, PromptTokens: ids,
			Text: tok.Decode(out), Tokens: out, Stats: st, PromptTokS: st.PromptTokS(), GenTokS: st.GenTokS(),
			TTFTMs: float64(st.TTFT) / 1e6, PeakRSS: rss, Threads: m.Threads(), Kernels: infer.KernelImplementation(),
			Seed: seed, Device: device})
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
	b, err := os.ReadFile(path)
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
