package infer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/llamacppref"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

// benchSpec is the generated benchmark model: a llama-shaped network of ~360M parameters
// (hidden 2048, 8 layers, FFN 5632, 16 heads, 4 KV heads), big enough that decode is bound by
// memory bandwidth rather than per-token overhead. TQ_BENCH_LAYERS overrides the layer count.
// TQ_BENCH_ARCH=qwen3moe makes it a qwen3moe network instead (32 experts of 768, 4 used per
// token: ~1.2B parameters, ~190M active).
func benchSpec(typ gguf.GGMLType) testmodel.Spec {
	s := testmodel.Default(benchArch())
	s.Embd, s.Layers, s.FF, s.Heads, s.HeadsKV, s.HeadDim = 2048, 8, 5632, 16, 4, 128
	s.Vocab, s.Ctx = 4096, 4096
	if s.Arch == "qwen3moe" {
		s.Experts, s.ExpertsUsed, s.FFExp = 32, 4, 768
	}
	if n, err := strconv.Atoi(os.Getenv("TQ_BENCH_LAYERS")); err == nil && n > 0 {
		s.Layers = n
	}
	s.Types = typesAll(typ)
	s.Seed = 77
	return s
}

// benchArch is the benchmark model's architecture: llama, or TQ_BENCH_ARCH.
func benchArch() string {
	if a := os.Getenv("TQ_BENCH_ARCH"); a == "qwen3moe" {
		return a
	}
	return "llama"
}

// benchModelPath builds the benchmark GGUF once per type and caches it under the user cache
// directory (or TQ_BENCH_DIR).
func benchModelPath(b testing.TB, typ gguf.GGMLType) string {
	b.Helper()
	dir := benchDir(b)
	spec := benchSpec(typ)
	p := filepath.Join(dir, fmt.Sprintf("bench-%s-%s-L%d-v1.gguf", spec.Arch, typ, spec.Layers))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	m, err := testmodel.Build(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.WriteGGUF(p); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchDir is the benchmark files' cache directory: TQ_BENCH_DIR, else tq-bench under the user
// cache directory.
func benchDir(b testing.TB) string {
	b.Helper()
	dir := os.Getenv("TQ_BENCH_DIR")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = os.TempDir()
		}
		dir = filepath.Join(c, "tq-bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return dir
}

// benchQ4KMPath is the benchmark model as llama.cpp's own Q4_K_M mixture (Q4_K with Q6_K for
// the LM head and some attn_v and ffn_down tensors, llama-quantize's choice): the F16 model
// requantized by bin's llama-quantize, cached beside the other files.
func benchQ4KMPath(b testing.TB, bin string) string {
	b.Helper()
	f16 := benchModelPath(b, gguf.TypeF16)
	spec := benchSpec(gguf.TypeF16)
	p := filepath.Join(benchDir(b), fmt.Sprintf("bench-%s-q4_k_m-L%d-v1.gguf", spec.Arch, spec.Layers))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	tmp := p + ".tmp"
	cmd := exec.Command(filepath.Join(bin, "llama-quantize"), f16, tmp, "Q4_K_M", "2")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		tail := string(out)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		b.Fatalf("llama-quantize %s Q4_K_M: %v\n%s", f16, err, tail)
	}
	if err := os.Rename(tmp, p); err != nil {
		b.Fatal(err)
	}
	return p
}

func benchTypes() []gguf.GGMLType {
	if v := os.Getenv("TQ_BENCH_TYPE"); v != "" {
		t, err := gguf.ParseType(v)
		if err == nil {
			return []gguf.GGMLType{t}
		}
	}
	return []gguf.GGMLType{gguf.TypeQ8_0, gguf.TypeQ4_K}
}

func loadBench(b *testing.B, typ gguf.GGMLType, opts Options) (*Model, func()) {
	return loadBenchPath(b, benchModelPath(b, typ), opts)
}

func loadBenchPath(b *testing.B, path string, opts Options) (*Model, func()) {
	src, err := OpenGGUF(path)
	if err != nil {
		b.Fatal(err)
	}
	m, err := Load(src, opts)
	if err != nil {
		b.Fatal(err)
	}
	return m, func() { m.Close(); src.Close() }
}

// BenchmarkDecode measures single-token decode after a 64-token prompt (tokens/s reported).
func BenchmarkDecode(b *testing.B) {
	for _, typ := range benchTypes() {
		b.Run(typ.String(), func(b *testing.B) {
			m, done := loadBench(b, typ, Options{CtxSize: 1024})
			defer done()
			s, _ := m.NewSession()
			prompt := randTokens(1, 64, 4096)
			if _, err := s.Eval(prompt, LogitsLast); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			tok := int32(1)
			for i := 0; i < b.N; i++ {
				if s.Pos() >= s.CtxSize()-1 {
					s.Truncate(64)
				}
				l, err := s.Eval([]int32{tok}, LogitsLast)
				if err != nil {
					b.Fatal(err)
				}
				tok = argmax(l[0])
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkPrompt measures a 256-token prompt evaluated in one batch (tokens/s reported), in
// three product paths: "default" (quantized weights: one integer dot product per row and
// token, as ggml), "batchgemm" (rounded activations, dequantized weight tiles, f32 GEMM) and
// "fullprec" (GEMM without activation rounding).
func BenchmarkPrompt(b *testing.B) {
	modes := []struct {
		name string
		o    Options
	}{
		{"default", Options{CtxSize: 512}},
		{"batchgemm", Options{CtxSize: 512, BatchGEMM: true}},
		{"fullprec", Options{CtxSize: 512, FullPrecision: true}},
	}
	for _, typ := range benchTypes() {
		for _, mode := range modes {
			b.Run(fmt.Sprintf("%s/%s", typ, mode.name), func(b *testing.B) {
				m, done := loadBench(b, typ, mode.o)
				defer done()
				s, _ := m.NewSession()
				prompt := randTokens(2, 256, 4096)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s.Reset()
					if _, err := s.Eval(prompt, LogitsLast); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkVsLlamaCpp times llama.cpp (node-llama-cpp, CPU) and this package on the same GGUF
// in the same run: a 128-token prompt batch and 32 greedy decode steps, alternating the two
// engines over two rounds and keeping each one's best time, for 1 and 2 threads
// (TQ_BENCH_THREADS overrides). It reports both speeds and their ratio (ours/llama.cpp). Use
// -benchtime=1x.
func BenchmarkVsLlamaCpp(b *testing.B) {
	llamacppref.Bridge(b)
	threadCounts := []int{1, 2}
	if v, err := strconv.Atoi(os.Getenv("TQ_BENCH_THREADS")); err == nil && v > 0 {
		threadCounts = []int{v}
	}
	const nPrompt, nGen, rounds = 128, 32, 2
	for _, typ := range benchTypes() {
		for _, threads := range threadCounts {
			b.Run(fmt.Sprintf("%s/threads=%d", typ, threads), func(b *testing.B) {
				path := benchModelPath(b, typ)
				for i := 0; i < b.N; i++ {
					bestLP, bestLG := math.Inf(1), math.Inf(1)
					bestP, bestG, bestPG := math.Inf(1), math.Inf(1), math.Inf(1)
					for r := 0; r < rounds; r++ {
						var lr struct {
							PromptMs float64 `json:"prompt_ms"`
							GenMs    float64 `json:"gen_ms"`
						}
						llamacppref.Run(b, map[string]any{"op": "bench", "model": path, "prompt": nPrompt, "gen": nGen, "threads": threads, "ctx": 512}, &lr)
						bestLP, bestLG = math.Min(bestLP, lr.PromptMs/1000), math.Min(bestLG, lr.GenMs/1000)
						tp, tg := oursPromptGen(b, path, Options{CtxSize: 512, Threads: threads}, nPrompt, nGen)
						bestP, bestG = math.Min(bestP, tp), math.Min(bestG, tg)
						tpg, _ := oursPromptGen(b, path, Options{CtxSize: 512, Threads: threads, BatchGEMM: true}, nPrompt, 0)
						bestPG = math.Min(bestPG, tpg)
					}
					b.ReportMetric(nPrompt/bestP, "prompt-tok/s")
					b.ReportMetric(nGen/bestG, "gen-tok/s")
					b.ReportMetric(nPrompt/bestLP, "llama-prompt-tok/s")
					b.ReportMetric(nGen/bestLG, "llama-gen-tok/s")
					b.ReportMetric(bestLP/bestP, "prompt-ratio")
					b.ReportMetric(bestLP/bestPG, "prompt-ratio-batchgemm")
					b.ReportMetric(bestLG/bestG, "gen-ratio")
				}
			})
		}
	}
}

// oursPromptGen times one prompt batch and nGen greedy decode steps (seconds).
func oursPromptGen(b *testing.B, path string, o Options, nPrompt, nGen int) (prompt, gen float64) {
	m, done := loadBenchPath(b, path, o)
	defer done()
	s, _ := m.NewSession()
	toks := make([]int32, nPrompt)
	for i := range toks {
		toks[i] = int32((i*7919 + 13) % 256) // the prompt llama.mjs uses
	}
	t0 := time.Now()
	l, err := s.Eval(toks, LogitsLast)
	if err != nil {
		b.Fatal(err)
	}
	prompt = time.Since(t0).Seconds()
	t0 = time.Now()
	for j := 0; j < nGen; j++ {
		if l, err = s.Eval([]int32{argmax(l[0])}, LogitsLast); err != nil {
			b.Fatal(err)
		}
	}
	return prompt, time.Since(t0).Seconds()
}

// llamaBenchResult is one row of `llama-bench -o json`.
type llamaBenchResult struct {
	NPrompt int     `json:"n_prompt"`
	NGen    int     `json:"n_gen"`
	AvgTS   float64 `json:"avg_ts"`
}

// BenchmarkVsNativeLlamaCpp compares tq with llama.cpp built natively for this CPU
// (scripts/llamacpp-native.sh; `make bench` sets TQ_LLAMACPP_NATIVE to its bin directory):
// prompt processing of 128 and 512 tokens and decoding of 32 tokens, llama-bench's figures
// (`-p 128,512 -n 32 -r 3`, mean tokens/s) against tq's best of three, alternating over two
// rounds, each side keeping its best. Files: every weight in q8_0, q4_K or q4_0, and
// llama.cpp's Q4_K_M mixture of the same model made by the native llama-quantize ("q4_k_m");
// TQ_BENCH_TYPE picks one. Threads: 2 (TQ_BENCH_THREADS). Ratios are tq's speed over
// llama.cpp's. Use -benchtime=1x.
func BenchmarkVsNativeLlamaCpp(b *testing.B) {
	bin := os.Getenv("TQ_LLAMACPP_NATIVE")
	if bin == "" {
		b.Skip("TQ_LLAMACPP_NATIVE (the native llama.cpp bin directory, scripts/llamacpp-native.sh) not set")
	}
	threads := 2
	if v, err := strconv.Atoi(os.Getenv("TQ_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	type file struct {
		name string
		path func(b *testing.B) string
	}
	pure := func(t gguf.GGMLType) file {
		return file{t.String(), func(b *testing.B) string { return benchModelPath(b, t) }}
	}
	q4km := file{"q4_k_m", func(b *testing.B) string { return benchQ4KMPath(b, bin) }}
	files := []file{pure(gguf.TypeQ8_0), pure(gguf.TypeQ4_K), pure(gguf.TypeQ4_0), q4km}
	switch v := os.Getenv("TQ_BENCH_TYPE"); {
	case strings.EqualFold(v, "q4_k_m"):
		files = []file{q4km}
	case v != "":
		files = nil
		for _, t := range benchTypes() {
			files = append(files, pure(t))
		}
	}
	const rounds, nGen = 2, 32
	prompts := []int{128, 512}
	for _, f := range files {
		b.Run(fmt.Sprintf("%s/threads=%d", f.name, threads), func(b *testing.B) {
			path := f.path(b)
			for i := 0; i < b.N; i++ {
				llama := map[int]float64{} // n_prompt (0: decode) → best tok/s
				ours := map[int]float64{}
				for r := 0; r < rounds; r++ {
					cmd := exec.Command(filepath.Join(bin, "llama-bench"), "-m", path, "-p", "128,512", "-n", strconv.Itoa(nGen),
						"-t", strconv.Itoa(threads), "-r", "3", "-o", "json")
					var stderr strings.Builder
					cmd.Stderr = &stderr
					out, err := cmd.Output()
					if err != nil {
						tail := stderr.String()
						if len(tail) > 2000 {
							tail = tail[len(tail)-2000:]
						}
						hint := ""
						if strings.Contains(err.Error(), "signal") {
							hint = " (on a CPU with AMX, ggml's AMX matmul crashes on quantized models, llama.cpp issue " +
								"#20824: scripts/llamacpp-native.sh builds the baseline without it)"
						}
						b.Fatalf("llama-bench on %s: %v%s\n%s", path, err, hint, tail)
					}
					var rows []llamaBenchResult
					if err := json.Unmarshal(out, &rows); err != nil {
						b.Fatalf("llama-bench output: %v\n%s", err, out)
					}
					for _, row := range rows {
						k := row.NPrompt
						if row.NGen > 0 {
							k = 0
						}
						llama[k] = math.Max(llama[k], row.AvgTS)
					}
					for rep := 0; rep < 3; rep++ {
						for _, np := range prompts {
							tp, _ := oursPromptGen(b, path, Options{CtxSize: 1024, Threads: threads}, np, 0)
							ours[np] = math.Max(ours[np], float64(np)/tp)
						}
						_, tg := oursPromptGen(b, path, Options{CtxSize: 1024, Threads: threads}, 1, nGen)
						ours[0] = math.Max(ours[0], float64(nGen)/tg)
					}
				}
				for _, np := range prompts {
					b.ReportMetric(ours[np], fmt.Sprintf("pp%d-tok/s", np))
					b.ReportMetric(llama[np], fmt.Sprintf("native-pp%d-tok/s", np))
					b.ReportMetric(ours[np]/llama[np], fmt.Sprintf("pp%d-ratio", np))
				}
				b.ReportMetric(ours[0], "tg-tok/s")
				b.ReportMetric(llama[0], "native-tg-tok/s")
				b.ReportMetric(ours[0]/llama[0], "tg-ratio")
			}
		})
	}
}
