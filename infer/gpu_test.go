package infer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/infer/cuda/cudatest"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

// The GPU layer executor is tested on the CPU emulator of the CUDA execution model
// (infer/cuda/testdata/cuemu, loaded through the real purego driver path): the same host code and
// the same kernel sources a GPU runs, so these tests check the wiring (uploads, buffer sizes,
// hidden-state hand-off, device KV cache positions, MoE routing and both expert placements, the
// device LM head) and the numerics end to end. gpu_device_test.go repeats the comparisons at a
// larger size on a real GPU (TQ_GPU=1).
//
// Tolerances (next-token probabilities, max |Δp| over the vocabulary and over every compared
// position):
//   - against the CPU with Options.FullPrecision (the same float32 products on the same weights,
//     the same f16 KV cache and f16 rounding of query and attention probabilities; only the float32
//     summation order differs): gpuTolFull;
//     Measured on the emulator: at most 1.2e-4, from K/V values, queries and attention
//     probabilities that land on the other side of an f16 rounding boundary.
//   - against the default CPU run (activations rounded to q8_0/q8_K/f16 before each product, as
//     llama.cpp's CPU backend): gpuTolDefault, the bound TestLlamaCppParity allows between our CPU
//     run and llama.cpp's on quantized MoE models (measured here: at most 2.5e-2).
const (
	gpuTolFull    = 5e-4
	gpuTolDefault = 5e-2
)

var (
	emuOnce sync.Once
	emuDev  *cuda.Device
	emuErr  error
)

// emulatorBackend opens the emulator once per test binary (it is closed by TestMain's exit; the
// emulator's memory is process-wide).
func emulatorBackend(t testing.TB) *cuda.Device {
	t.Helper()
	if !cuda.Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib := cudatest.EmulatorLibrary(t)
	emuOnce.Do(func() { emuDev, emuErr = cuda.Open(cuda.Options{Library: lib}) })
	if emuErr != nil {
		t.Fatalf("opening the CUDA emulator: %v", emuErr)
	}
	return emuDev
}

// gpuRun is one evaluation: the probabilities of every prompt position and of each decode step.
type gpuRun struct {
	probs [][]float64
}

// evalScript evaluates prompt (all logits), then each of steps one token at a time.
func evalScript(t *testing.T, m *Model, prompt, steps []int32) gpuRun {
	t.Helper()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var r gpuRun
	lg, err := s.Eval(prompt, LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lg {
		r.probs = append(r.probs, softmax32(l))
	}
	for _, tok := range steps {
		lg, err := s.Eval([]int32{tok}, LogitsLast)
		if err != nil {
			t.Fatal(err)
		}
		r.probs = append(r.probs, softmax32(lg[0]))
	}
	return r
}

func maxProbDiff(a, b gpuRun) float64 {
	var m float64
	for i := range a.probs {
		m = math.Max(m, maxAbsDiff(a.probs[i], b.probs[i]))
	}
	return m
}

func gpuGreedy(t *testing.T, m *Model, prompt []int32, n int) []int32 {
	t.Helper()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := s.Generate(prompt, GenerateOptions{MaxTokens: n, Sampler: SamplerOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareGreedy generates n greedy tokens after prompt with cpu and gpu and returns how many
// leading tokens agree. A divergence fails the test unless it is a near tie: at the first
// differing position the CPU's probabilities of the two tokens must be within 2·tol (the
// probability tolerance), otherwise the device changed a clear decision.
func compareGreedy(t *testing.T, cpu, gpu *Model, prompt []int32, n int, tol float64) int {
	t.Helper()
	gc, gg := gpuGreedy(t, cpu, prompt, n), gpuGreedy(t, gpu, prompt, n)
	same := 0
	for same < len(gc) && same < len(gg) && gc[same] == gg[same] {
		same++
	}
	if same == len(gc) && len(gc) == len(gg) {
		return same
	}
	if same == len(gc) || same == len(gg) {
		t.Errorf("greedy continuations of different lengths: cpu %v, gpu %v", gc, gg)
		return same
	}
	s, err := cpu.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	lg, err := s.Eval(append(slices.Clone(prompt), gc[:same]...), LogitsLast)
	if err != nil {
		t.Fatal(err)
	}
	p := softmax32(lg[0])
	margin := p[gc[same]] - p[gg[same]]
	if margin > 2*tol {
		t.Errorf("greedy continuation differs from the CPU one at token %d (CPU p %.4f for %d, %.4f for the device's %d):\n cpu %v\n gpu %v",
			same, p[gc[same]], gc[same], p[gg[same]], gg[same], gc, gg)
	} else {
		t.Logf("greedy continuations part at token %d on a near tie (CPU p %.5f vs %.5f)", same, p[gc[same]], p[gg[same]])
	}
	return same
}

type gpuCase struct {
	name      string
	spec      testmodel.Spec
	gpuLayers int // Options.GPULayers (n_layer+1: everything incl. the head)
	cpuMoE    int
	batch     int
	cacheK    string // KV cache types ("": f16)
	cacheV    string
}

func gpuCases() []gpuCase {
	spec := func(arch string, typ gguf.GGMLType) testmodel.Spec {
		s := testmodel.Default(arch)
		s.Types = typesAll(typ)
		return s
	}
	mixed := testmodel.Default("llama")
	mixed.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ4_K, "attn_v": gguf.TypeQ6_K,
		"ffn_down": gguf.TypeQ8_0, "output": gguf.TypeQ6_K, "token_embd": gguf.TypeF16}
	return []gpuCase{
		{"llama-q4_K-all", spec("llama", gguf.TypeQ4_K), 3, 0, 0, "", ""},
		{"qwen3-q6_K-all", spec("qwen3", gguf.TypeQ6_K), 3, 0, 0, "", ""},
		{"qwen3-f16-split", spec("qwen3", gguf.TypeF16), 1, 0, 5, "", ""},
		{"qwen2-q8_0-layers", spec("qwen2", gguf.TypeQ8_0), 2, 0, 0, "", ""},
		{"llama-mixed-split", mixed, 1, 0, 0, "", ""},
		{"qwen3moe-q8_0-all", spec("qwen3moe", gguf.TypeQ8_0), 3, 0, 0, "", ""},
		{"qwen3moe-q4_K-cpu-experts", spec("qwen3moe", gguf.TypeQ4_K), 3, 2, 0, "", ""},
		{"qwen3moe-f32-split-cpu-experts", spec("qwen3moe", gguf.TypeF32), 1, 2, 0, "", ""},
		{"qwen3-q4_K-all-q8_0-cache", spec("qwen3", gguf.TypeQ4_K), 3, 0, 0, "q8_0", "q8_0"},
		{"llama-q8_0-split-q8_0-k-cache", spec("llama", gguf.TypeQ8_0), 1, 0, 5, "q8_0", "f16"},
	}
}

// TestGPUEmulatedMatchesCPU compares next-token probabilities of a 12-token prompt and 4 decode
// steps between the CPU and device layers on the emulator, and 16-token greedy continuations.
func TestGPUEmulatedMatchesCPU(t *testing.T) {
	dev := emulatorBackend(t)
	for _, tc := range gpuCases() {
		t.Run(tc.name, func(t *testing.T) {
			src := buildSource(t, tc.spec)
			base := Options{Threads: 2, CtxSize: 64, BatchSize: tc.batch, CacheTypeK: tc.cacheK, CacheTypeV: tc.cacheV}
			r := compareDevice(t, src, base, Options{Backend: dev, GPULayers: tc.gpuLayers, CPUMoE: tc.cpuMoE},
				randTokens(7, 12, tc.spec.Vocab), randTokens(8, 4, tc.spec.Vocab), 16, gpuTolFull)
			p := r.placement
			wantFirst := max(0, tc.spec.Layers-tc.gpuLayers)
			if p.First != wantFirst || p.OutputOnGPU != (tc.gpuLayers > tc.spec.Layers) || p.WeightBytes <= 0 {
				t.Fatalf("placement %+v", p)
			}
			t.Logf("%s: %s", tc.name, r)
			if r.dFull > gpuTolFull {
				t.Errorf("device vs CPU FullPrecision: max |Δp| %.3e > %.0e", r.dFull, gpuTolFull)
			}
			if r.dDef > gpuTolDefault {
				t.Errorf("device vs CPU default: max |Δp| %.3e > %.0e", r.dDef, gpuTolDefault)
			}
		})
	}
}

// deviceComparison is one model evaluated three ways: on the CPU with FullPrecision, on the CPU
// with its default numerics, and with device blocks.
type deviceComparison struct {
	placement           GPUPlacement
	dFull, dDef, cpuGap float64 // max |Δp|: device vs CPU FullPrecision, device vs CPU default, CPU FullPrecision vs default
	same, greedy        int     // leading greedy tokens identical to the CPU FullPrecision run, of greedy
}

func (r deviceComparison) String() string {
	return fmt.Sprintf("placement %+v; max|Δp| vs CPU full precision %.2e, vs CPU default %.2e (CPU full vs default %.2e); greedy: %d/%d tokens identical",
		r.placement, r.dFull, r.dDef, r.cpuGap, r.same, r.greedy)
}

// compareDevice loads src three times with base's options (the CPU in FullPrecision, the CPU by
// default, and with gpu's Backend, GPULayers and CPUMoE in FullPrecision, so that the CPU parts
// of the hybrid run compute the same products and the tight comparison measures the device
// alone), evaluates prompt (all logits) then steps one at a time on each (evalScript), and
// compares nGreedy-token greedy continuations of the device run with the CPU FullPrecision one
// (compareGreedy with tolerance tol).
func compareDevice(t *testing.T, src Source, base, gpu Options, prompt, steps []int32, nGreedy int, tol float64) deviceComparison {
	t.Helper()
	load := func(o Options) *Model {
		o.Threads, o.CtxSize, o.BatchSize = base.Threads, base.CtxSize, base.BatchSize
		o.CacheTypeK, o.CacheTypeV = base.CacheTypeK, base.CacheTypeV
		m, err := Load(src, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	cpuFull := load(Options{FullPrecision: true})
	cpuDef := load(Options{})
	gm := load(Options{Backend: gpu.Backend, GPULayers: gpu.GPULayers, CPUMoE: gpu.CPUMoE, FullPrecision: true, GPUGraphs: gpu.GPUGraphs})
	rf, rd, rg := evalScript(t, cpuFull, prompt, steps), evalScript(t, cpuDef, prompt, steps), evalScript(t, gm, prompt, steps)
	return deviceComparison{placement: gm.GPUPlacement(), dFull: maxProbDiff(rg, rf), dDef: maxProbDiff(rg, rd),
		cpuGap: maxProbDiff(rf, rd), same: compareGreedy(t, cpuFull, gm, prompt, nGreedy, tol), greedy: nGreedy}
}

// TestGPUEmulatedSessions checks the device KV cache positions: Truncate and Reset only move
// the position, a later batch larger than the first regrows the device buffers, more than
// headRows logits come back through the chunked device LM head, and two sessions on one model
// keep separate caches.
func TestGPUEmulatedSessions(t *testing.T) {
	dev := emulatorBackend(t)
	spec := testmodel.Default("qwen3")
	spec.Types = typesAll(gguf.TypeQ8_0)
	src := buildSource(t, spec)
	defer func(n int) { headRows = n }(headRows)
	headRows = 5 // the device LM head returns 12 rows in 3 chunks
	m, err := Load(src, Options{Threads: 2, CtxSize: 64, Backend: dev, GPULayers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := randTokens(11, 16, spec.Vocab)
	s1, _ := m.NewSession()
	s2, _ := m.NewSession()
	// s1: 4 tokens, then 12 (a larger batch: the buffers grow), every position's logits
	var all [][]float32
	for _, part := range [][]int32{toks[:4], toks[4:]} {
		lg, err := s1.Eval(part, LogitsAll)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, lg...)
	}
	// s2 in between, on other tokens: must not disturb s1's cache
	if _, err := s2.Eval(randTokens(12, 6, spec.Vocab), LogitsNone); err != nil {
		t.Fatal(err)
	}
	// the whole sequence in one batch on a fresh CPU FullPrecision model: same probabilities
	cpu, err := Load(src, Options{Threads: 2, CtxSize: 64, FullPrecision: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	cs, _ := cpu.NewSession()
	// every block is on the device: no host KV cache (the CPU model's holds both layers)
	if s1.KVBytes() != 0 || cs.KVBytes() == 0 {
		t.Errorf("host KV bytes: all-GPU session %d, CPU session %d", s1.KVBytes(), cs.KVBytes())
	}
	want, err := cs.Eval(toks, LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i := range want {
		worst = math.Max(worst, maxAbsDiff(softmax32(all[i]), softmax32(want[i])))
	}
	t.Logf("16 positions (4 + 12 tokens, LM head in chunks of %d): max |Δp| vs CPU full precision %.2e", headRows, worst)
	if worst > gpuTolFull {
		t.Fatalf("max |Δp| %.3e > %.0e", worst, gpuTolFull)
	}
	// Truncate to 10 and re-evaluate the tail, then Reset and re-evaluate a prefix: the device
	// computes the same thing again (deterministic kernels), so the logits are identical.
	same := func(what string, got, ref [][]float32) {
		t.Helper()
		for i := range got {
			for j := range got[i] {
				if got[i][j] != ref[i][j] {
					t.Fatalf("%s: row %d logit %d = %v, first evaluation %v", what, i, j, got[i][j], ref[i][j])
				}
			}
		}
	}
	if err := s1.Truncate(10); err != nil {
		t.Fatal(err)
	}
	lg, err := s1.Eval(toks[10:], LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	same("after Truncate(10)", lg, all[10:])
	s1.Reset()
	lg, err = s1.Eval(toks[:4], LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	same("after Reset", lg, all[:4])
	if s1.Pos() != 4 {
		t.Fatalf("Pos %d after Reset and 4 tokens", s1.Pos())
	}
}

// TestGPUEmulatedErrors checks the option errors and every ErrGPUUnsupported case, the Observer
// refusal, and that Model.Close returns all device memory.
func TestGPUEmulatedErrors(t *testing.T) {
	dev := emulatorBackend(t)
	free0, _, err := dev.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	spec := testmodel.Default("qwen3")
	spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ8_0, "ffn_down": gguf.TypeQ5_0, "output": gguf.TypeQ4_1}
	spec.Layers = 3
	src := buildSource(t, spec)
	for _, tc := range []struct {
		o           Options
		unsupported bool
		want        string
	}{
		{Options{GPULayers: 1}, false, "needs a Backend"},
		{Options{GPULayers: 1, Backend: (*cuda.Device)(nil)}, false, "needs a Backend"},
		{Options{GPULayers: -1, Backend: dev}, false, "GPULayers -1 is negative"},
		{Options{GPULayers: 1, CPUMoE: -2, Backend: dev}, false, "CPUMoE -2 is negative"},
		{Options{GPULayers: 1, Backend: dev}, true, `tensor "blk.2.ffn_down.weight" is q5_0`},
		{Options{GPULayers: 4, Backend: dev, CacheTypeV: "q4_0"}, true, "takes f16 and q8_0"},
	} {
		_, err := Load(src, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrGPUUnsupported) != tc.unsupported {
			t.Errorf("Load(GPULayers %d, CPUMoE %d, backend %v): %v; want %q (ErrGPUUnsupported %v)",
				tc.o.GPULayers, tc.o.CPUMoE, tc.o.Backend != nil, err, tc.want, tc.unsupported)
		}
	}
	// the q4_1 LM head is only checked when it goes to the device
	spec.Types["ffn_down"] = gguf.TypeQ8_0
	src = buildSource(t, spec)
	if _, err := Load(src, Options{GPULayers: 4, Backend: dev}); !errors.Is(err, ErrGPUUnsupported) ||
		!strings.Contains(err.Error(), `tensor "output.weight" is q4_1`) {
		t.Errorf("q4_1 head on the device: %v", err)
	}
	m, err := Load(src, Options{Threads: 2, CtxSize: 32, GPULayers: 2, Backend: dev})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.NewSession()
	s.SetObserver(newRec())
	if _, err := s.Eval([]int32{1, 2, 3}, LogitsLast); err == nil || !strings.Contains(err.Error(), "Observer") || s.Pos() != 0 {
		t.Errorf("Eval with an Observer and GPU layers: %v (pos %d)", err, s.Pos())
	}
	s.SetObserver(nil)
	if _, err := s.Eval([]int32{1, 2, 3}, LogitsLast); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := dev.MemInfo(); free >= free0 {
		t.Fatalf("no device memory in use with a loaded model and a session (%d of %d free)", free, free0)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := dev.MemInfo(); free != free0 {
		t.Fatalf("after Close: %d bytes free, %d before Load: device memory leaked", free, free0)
	}

	// a hybrid model (Gated DeltaNet states on the device): Close returns the weights' and the
	// session's device memory, recurrent states included
	hsrc := hybridSource(t, "qwen35moe")
	hm, err := Load(hsrc, Options{Threads: 2, CtxSize: 32, GPULayers: 5, Backend: dev})
	if err != nil {
		t.Fatalf("qwen35moe with GPU layers: %v", err)
	}
	hs, _ := hm.NewSession()
	if _, err := hs.Eval([]int32{1, 2, 3}, LogitsLast); err != nil {
		t.Fatal(err)
	}
	if err := hm.Close(); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := dev.MemInfo(); free != free0 {
		t.Fatalf("after closing the hybrid model: %d bytes free, %d before", free, free0)
	}
}
