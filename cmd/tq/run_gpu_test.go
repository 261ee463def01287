package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/infer/cuda/cudatest"
	"github.com/tq-project/tq/internal/llamacppref"
	"github.com/tq-project/tq/tokenizer"
)

const lisbonPrompt = "What's the weather like in Lisbon right now?"

// gpuRunOptions are chatOptions with the Lisbon prompt as a one-shot run.
func gpuRunOptions(t *testing.T) *runOptions {
	o := chatOptions(t)
	o.prompt, o.backend = lisbonPrompt, "auto"
	return o
}

func runCapture(t *testing.T, model string, o *runOptions) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = runRun(&out, &errb, model, o, true)
	return out.String(), errb.String(), err
}

// runJSON runs o (o.json set) and decodes the JSON document it printed.
func runJSON(t *testing.T, model string, o *runOptions) runResult {
	t.Helper()
	js, _, err := runCapture(t, model, o)
	if err != nil {
		t.Fatal(err)
	}
	var r runResult
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Without a usable driver, auto runs on the CPU after one line saying why, whatever GPU flags
// were given; --backend cuda is an error; an unknown backend is an error.
func TestRunGPUFallback(t *testing.T) {
	model := toolModelQ8(t)
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	t.Setenv(cuda.EnvLibrary, missing)
	o := gpuRunOptions(t)
	o.ngl, o.nglSet, o.vram, o.cpuMoE = 99, true, "8GiB", true
	stdout, stderr, err := runCapture(t, model, o)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	want := "tq run: backend: cpu (cuda unavailable: " + missing + " could not be loaded (no NVIDIA driver installed?))"
	if !cuda.Available() {
		want = "tq run: backend: cpu (cuda unavailable: not supported by this build or platform)"
	}
	if len(lines) != 2 || lines[0] != want || !strings.HasPrefix(lines[1], "prompt ") {
		t.Fatalf("stderr:\n%s\nwant the line %q and the speed line", stderr, want)
	}
	if got := strings.TrimSpace(stdout); got != wantLisbonCall {
		t.Errorf("CPU fallback generated %q, want %q", got, wantLisbonCall)
	}

	o.json = true
	r := runJSON(t, model, o)
	if r.Device != "CPU" || r.Backend != strings.TrimPrefix(want, "tq run: ") || r.Placement.GPULayers != 0 {
		t.Errorf("--json: device %q, backend %q, placement %+v", r.Device, r.Backend, r.Placement)
	}

	o = gpuRunOptions(t)
	o.backend = "cuda"
	if _, _, err := runCapture(t, model, o); err == nil || !strings.Contains(err.Error(), "backend cuda unavailable") {
		t.Errorf("--backend cuda without a driver: %v", err)
	}
	o.backend = "tpu"
	if _, _, err := runCapture(t, model, o); err == nil || !strings.Contains(err.Error(), `--backend "tpu"`) {
		t.Errorf("--backend tpu: %v", err)
	}
	o.backend, o.ngl, o.nglSet = "auto", -1, true
	if _, _, err := runCapture(t, model, o); err == nil || !strings.Contains(err.Error(), "--n-gpu-layers -1") {
		t.Errorf("--n-gpu-layers -1: %v", err)
	}
}

// With the CUDA emulator as the driver, tq run offloads (a split by -ngl, and the planned
// placement: every block and the LM head) and prints the same greedy text as the CPU
// FullPrecision run of the same model, which the device computes up to float32 summation order.
// The emulator runs a CUDA thread per coroutine, so the prompt is short and plain (14 tokens)
// and 12 tokens are generated.
func TestRunGPUEmulator(t *testing.T) {
	if !cuda.Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib := cudatest.EmulatorLibrary(t)
	model := toolModelQ8(t)
	plain := func() *runOptions {
		return &runOptions{prompt: "What's the weather like in Lisbon?", backend: "auto", n: 12, ctx: 256, batch: 512,
			cacheK: "f16", cacheV: "f16", temp: 0, topK: 40, topP: 0.95, minP: 0.05, repeat: 1, repeatN: 64, seed: 1, ignoreEOS: true}
	}
	want := fullPrecisionGreedy(t, model, plain())
	t.Setenv(cuda.EnvLibrary, lib)

	o := plain()
	o.ngl, o.nglSet = 1, true
	stdout, stderr, err := runCapture(t, model, o)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "tq run: backend: cuda tq CPU emulator (device 0, sm_75") ||
		lines[1] != "tq run: placement: 1 of 2 blocks on the GPU (-ngl 1), 154.50 KiB of weights uploaded; --n-gpu-layers 1" {
		t.Fatalf("stderr:\n%s\nwant the backend line, the placement line and the speed line", stderr)
	}
	if stdout != want+"\n" {
		t.Errorf("-ngl 1 generated %q, the CPU FullPrecision run %q", stdout, want)
	}

	// planned for the emulator's free memory: everything on the device; --json carries the
	// backend and the placement
	o = plain()
	o.json = true
	r := runJSON(t, model, o)
	p := r.Placement
	if !strings.HasPrefix(r.Backend, "backend: cuda tq CPU emulator") || !strings.HasPrefix(r.Device, "tq CPU emulator") ||
		p.GPULayers != 2 || !p.OutputOnGPU || p.NGL != 3 || p.GPUWeightBytes <= 0 ||
		!strings.HasPrefix(p.Source, "planned for the free device memory") {
		t.Errorf("--json: backend %q, device %q, placement %+v", r.Backend, r.Device, p)
	}
	if r.Text != want {
		t.Errorf("planned placement generated %q, the CPU FullPrecision run %q", r.Text, want)
	}
	t.Logf("greedy text on the device, identical to the CPU FullPrecision run: %q", r.Text)

	// --cuda-graphs: the generated tokens replay one recorded graph; same text, and --json says so
	o.cudaGraphs = true
	r = runJSON(t, model, o)
	// 12 tokens: the first comes from the prompt's batch, the other 11 replay the graph
	if r.Text != want || !r.Placement.CUDAGraphs || r.Placement.GraphSteps != o.n-1 || r.Placement.GraphError != "" {
		t.Errorf("--cuda-graphs generated %q (placement %+v), the CPU FullPrecision run %q", r.Text, r.Placement, want)
	}

	// a KV cache type the device does not have: one line, then the CPU; an error with cuda
	o = plain()
	o.cacheK, o.ngl, o.nglSet, o.n = "q4_0", 3, true, 2
	_, stderr, err = runCapture(t, model, o)
	if err != nil || !strings.Contains(stderr, "takes f16 and q8_0") || !strings.Contains(stderr, "running on CPU") {
		t.Errorf("q4_0 K cache with GPU layers: %v\n%s", err, stderr)
	}
	o.backend = "cuda"
	if _, _, err := runCapture(t, model, o); err == nil || !strings.Contains(err.Error(), "takes f16 and q8_0") {
		t.Errorf("q4_0 K cache with --backend cuda: %v", err)
	}
}

// fullPrecisionGreedy runs o's plain prompt greedily on the CPU with infer.Options.FullPrecision,
// tokenized as tq run tokenizes it, and returns the text.
func fullPrecisionGreedy(t *testing.T, model string, o *runOptions) string {
	t.Helper()
	tok, err := tokenizer.LoadGGUF(model)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(o.prompt, tokenizer.EncodeOptions{AddSpecial: true})
	src, err := infer.OpenGGUF(model)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := infer.Load(src, infer.Options{CtxSize: o.ctx, FullPrecision: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, _ := m.NewSession()
	out, _, err := s.Generate(ids, infer.GenerateOptions{MaxTokens: o.n, Sampler: infer.SamplerOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Decode(out)
}

func TestDashNGL(t *testing.T) {
	got := dashNGL([]string{"tq", "run", "m.gguf", "-ngl", "99", "-ngl=3", "-n", "5", "--", "-ngl"})
	want := []string{"tq", "run", "m.gguf", "--ngl", "99", "--ngl=3", "-n", "5", "--", "-ngl"}
	if !slices.Equal(got, want) {
		t.Fatalf("dashNGL = %v, want %v", got, want)
	}
}

// TestRunGPUEmulatorHybrid runs the trained Qwen3.5 MoE model converted with --use-turboquant
// (Q4_K, Q8_0, F16) through tq run on the emulator. Everything and the LM head on the device
// (given, and planned for the emulator's free memory), and -ngl 3 --n-cpu-moe 2 (one DeltaNet block on the CPU; the gated-attention block and two
// DeltaNet blocks on the device, the routed experts of one of them on the host), give the same
// greedy text as the CPU FullPrecision run. With --cpu-moe only the placement is checked: the
// host experts round their activations to q8 first (the CPU's default numerics, as llama.cpp),
// and on this small model that moves a near tie at the third token (the text is identical when
// the host parts also run FullPrecision).
func TestRunGPUEmulatorHybrid(t *testing.T) {
	if !cuda.Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib := cudatest.EmulatorLibrary(t)
	model := filepath.Join(t.TempDir(), "turbo.gguf")
	tqCmd(t, "convert", filepath.Join(llamacppref.RepoRoot(t), "testdata", "trained", "qwen35moe"), "--use-turboquant", "-o", model)
	plain := func() *runOptions {
		return &runOptions{prompt: "def read_config(path):", backend: "auto", n: 10, ctx: 128, batch: 512,
			cacheK: "f16", cacheV: "f16", temp: 0, topK: 40, topP: 0.95, minP: 0.05, repeat: 1, repeatN: 64, seed: 1, ignoreEOS: true}
	}
	want := fullPrecisionGreedy(t, model, plain())
	t.Setenv(cuda.EnvLibrary, lib)
	for _, c := range []struct {
		ngl, nCPUMoE int
		cpuMoE       bool
		exact        bool
		placement    string
	}{
		{5, 0, false, true, "4 of 4 blocks + LM head on the GPU (-ngl 5), experts of 0 of them on the CPU"},
		{3, 2, false, true, "3 of 4 blocks on the GPU (-ngl 3), experts of 1 of them on the CPU"},
		{5, 0, true, false, "4 of 4 blocks + LM head on the GPU (-ngl 5), experts of 4 of them on the CPU"},
		{-1, 0, false, true, "4 of 4 blocks + LM head on the GPU (-ngl 5), experts of 0 of them on the CPU, 5.34 MiB of weights uploaded; planned for the free device memory"},
	} {
		o := plain()
		o.ngl, o.nglSet, o.nCPUMoE, o.cpuMoE = c.ngl, c.ngl >= 0, c.nCPUMoE, c.cpuMoE
		stdout, stderr, err := runCapture(t, model, o)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if !strings.Contains(stderr, "tq run: placement: "+c.placement) {
			t.Errorf("-ngl %d --n-cpu-moe %d --cpu-moe %v: stderr\n%s\nwant the placement %q", c.ngl, c.nCPUMoE, c.cpuMoE, stderr, c.placement)
		}
		if c.exact && stdout != want+"\n" || !c.exact && strings.TrimSpace(stdout) == "" {
			t.Errorf("-ngl %d --n-cpu-moe %d --cpu-moe %v generated %q, the CPU FullPrecision run %q", c.ngl, c.nCPUMoE, c.cpuMoE, stdout, want)
		}
	}
	// Graphs (tq run's default): the same text with every block on the device; with the experts
	// on the host the recording fails once and the tokens come out of eager steps, with one line
	// saying why only when --cuda-graphs was given.
	for _, c := range []struct{ cpuMoE, set bool }{{false, true}, {true, true}, {true, false}} {
		o := plain()
		o.ngl, o.nglSet, o.cpuMoE, o.cudaGraphs, o.cudaGraphsSet = 5, true, c.cpuMoE, true, c.set
		stdout, stderr, err := runCapture(t, model, o)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		notUsed := strings.Contains(stderr, "tq run: CUDA graphs not used: cuda: operation not allowed while a graph is recorded")
		if notUsed != (c.cpuMoE && c.set) || !c.cpuMoE && stdout != want+"\n" || strings.TrimSpace(stdout) == "" {
			t.Errorf("--cuda-graphs (given %v) --cpu-moe %v: generated %q (CPU FullPrecision %q), stderr\n%s", c.set, c.cpuMoE, stdout, want, stderr)
		}
	}
	t.Logf("greedy text on the device, identical to the CPU FullPrecision run: %q", want)
}

// TestRunCUDAGraphsDefault: tq run replays recorded CUDA graphs unless --cuda-graphs=false.
func TestRunCUDAGraphsDefault(t *testing.T) {
	c, _, err := rootCmd.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	f := c.Flags().Lookup("cuda-graphs")
	if f == nil || f.DefValue != "true" {
		t.Fatalf("--cuda-graphs: %+v, want a flag defaulting to true", f)
	}
}
