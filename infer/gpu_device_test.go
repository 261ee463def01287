package infer

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

// The device checks of the GPU layer executor run only with TQ_GPU=1 (CI has no GPU; then a
// missing or unusable GPU is a failure, not a skip). scripts/gpu-check.sh runs them on the device
// machine from a prebuilt test binary: -test.run GPUDevice, then -test.bench GPUDecode. With
// -test.short they use the emulator-sized models (and TQ_CUDA_LIB may point at the emulator, to
// check this file without a GPU).

func gpuDeviceBackend(t testing.TB) *cuda.Device {
	t.Helper()
	if os.Getenv("TQ_GPU") != "1" {
		t.Skip("device test: set TQ_GPU=1 to run it on a CUDA GPU")
	}
	d, line, err := cuda.Select("cuda")
	if err != nil {
		t.Fatalf("TQ_GPU=1 but CUDA is unusable: %v", err)
	}
	t.Log(line)
	return d
}

// deviceCases are the emulator comparisons at a larger size: n_embd 1024 (512 for MoE), head_dim
// 128, 4 blocks, a 2048-token vocabulary, a 64-token prompt (eight 8-row mat-mul launches per
// product), 8 decode steps and 32 greedy tokens.
func deviceCases() []gpuCase {
	big := func(arch string, typ gguf.GGMLType) testmodel.Spec {
		s := testmodel.Default(arch)
		s.Types = typesAll(typ)
		if testing.Short() {
			return s
		}
		s.Embd, s.Layers, s.Heads, s.HeadsKV, s.HeadDim, s.FF, s.Vocab = 1024, 4, 8, 2, 128, 2816, 2048
		if arch == "qwen3moe" {
			s.Embd, s.Heads, s.HeadDim, s.Experts, s.ExpertsUsed, s.FFExp = 512, 8, 64, 16, 4, 512
		}
		return s
	}
	L := 4
	if testing.Short() {
		L = 2
	}
	return []gpuCase{
		{"llama-q4_K-all", big("llama", gguf.TypeQ4_K), L + 1, 0, 0, "", ""},
		{"qwen3-q6_K-split", big("qwen3", gguf.TypeQ6_K), L / 2, 0, 0, "", ""},
		{"qwen2-q8_0-layers", big("qwen2", gguf.TypeQ8_0), L, 0, 0, "", ""},
		{"qwen3-f16-all", big("qwen3", gguf.TypeF16), L + 1, 0, 0, "", ""},
		{"qwen3moe-q8_0-all", big("qwen3moe", gguf.TypeQ8_0), L + 1, 0, 0, "", ""},
		{"qwen3moe-q4_K-cpu-experts", big("qwen3moe", gguf.TypeQ4_K), L + 1, L, 0, "", ""},
		{"qwen3-q4_K-all-q8_0-cache", big("qwen3", gguf.TypeQ4_K), L + 1, 0, 0, "q8_0", "q8_0"},
	}
}

// gpuTolDevice is the device's tolerance against the CPU FullPrecision run: the emulator's
// bound, doubled for the larger sizes and the GPU's fused multiply-adds.
const gpuTolDevice = 2 * gpuTolFull

// gpuTolDeviceQ8Cache replaces gpuTolDevice with q8_0 K/V caches. Both sides round the same keys,
// values and queries to q8_0 blocks, but those come out of float32 sums taken in another order,
// and a value on the other side of a rounding boundary moves by a whole q8_0 step (1/127 of the
// block's largest value) where an f16 one moves by 1/2048 of itself: each such event weighs up
// to 16 times more. Measured on an H200 (2026-12-04): 1.27e-3 on qwen3 Q4_K with q8_0 K and V at
// n_embd 1024, 64 prompt tokens; greedy continuations identical.
const gpuTolDeviceQ8Cache = 3 * gpuTolDevice

func TestGPUDeviceMatchesCPU(t *testing.T) {
	dev := gpuDeviceBackend(t)
	defer dev.Close()
	nPrompt, nSteps, nGreedy := 64, 8, 32
	if testing.Short() {
		nPrompt, nSteps, nGreedy = 12, 4, 16
	}
	cases := deviceCases()
	// build the models in parallel (testmodel quantizes on one thread each)
	srcs := make([]*MapSource, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Go(func() {
			m, err := testmodel.Build(tc.spec)
			if err == nil {
				srcs[i] = mapSourceOf(m)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			tol := gpuTolDevice
			if tc.cacheK == "q8_0" || tc.cacheV == "q8_0" {
				tol = gpuTolDeviceQ8Cache
			}
			base := Options{CtxSize: 256, CacheTypeK: tc.cacheK, CacheTypeV: tc.cacheV}
			r := compareDevice(t, srcs[i], base, Options{Backend: dev, GPULayers: tc.gpuLayers, CPUMoE: tc.cpuMoE, GPUGraphs: true},
				randTokens(7, nPrompt, tc.spec.Vocab), randTokens(8, nSteps, tc.spec.Vocab), nGreedy, tol)
			t.Logf("%s: %s", tc.name, r)
			if r.dFull > tol {
				t.Errorf("device vs CPU FullPrecision: max |Δp| %.3e > %.0e", r.dFull, tol)
			}
			// The device computes the FullPrecision products; the CPU's default run rounds the
			// activations first, and its distance from its own FullPrecision run (cpuGap) is
			// measured, not assumed: the device may be that far from it plus its own tolerance
			// (on an H200, qwen3moe Q4_K: gap 5.28e-2, device 5.28e-2).
			if lim := max(gpuTolDefault, r.cpuGap+tol); r.dDef > lim {
				t.Errorf("device vs CPU default: max |Δp| %.3e > %.3e", r.dDef, lim)
			}
		})
	}
}

// benchShape is the decode benchmark's model: a llama of n_embd 4096, 16 blocks of 32 heads (8 KV
// heads) of 128 and FFN 11008, Q4_K weights and a Q6_K LM head over 32000 tokens (~1.7 GB; the
// size of half a 7B model, far beyond any L2 cache). -test.short: 512 wide, 2 blocks.
type benchShape struct{ E, L, H, HKV, HD, FF, V int }

func decodeBenchShape() benchShape {
	if testing.Short() {
		return benchShape{512, 2, 8, 2, 64, 1536, 1024}
	}
	return benchShape{4096, 16, 32, 8, 128, 11008, 32000}
}

// randomSource builds a llama source of shape sh with random weight bytes (every fp16 scale kept
// small and finite): only the speed of the forward pass is measured, not its output.
func randomSource(sh benchShape, typ, head gguf.GGMLType) *MapSource {
	s := NewMapSource()
	a := "llama"
	for k, v := range map[string]any{"block_count": sh.L, "context_length": 4096, "embedding_length": sh.E,
		"feed_forward_length": sh.FF, "attention.head_count": sh.H, "attention.head_count_kv": sh.HKV,
		"attention.key_length": sh.HD, "attention.value_length": sh.HD, "rope.dimension_count": sh.HD} {
		s.Metadata[a+"."+k] = uint32(v.(int))
	}
	s.Metadata["general.architecture"] = a
	s.Metadata[a+".attention.layer_norm_rms_epsilon"] = 1e-6
	r := rand.New(rand.NewPCG(3, 4))
	add := func(name string, t gguf.GGMLType, dims ...int64) {
		data := randomWeightBytes(r, t, dims)
		if t == gguf.TypeF32 {
			for i := range data {
				data[i] = [4]byte{0, 0, 0x80, 0x3f}[i%4] // 1.0 (norm weights)
			}
		}
		s.Add(&Tensor{Name: name, Type: t, Dims: dims, Data: data})
	}
	E, qd, kd := int64(sh.E), int64(sh.H*sh.HD), int64(sh.HKV*sh.HD)
	add("token_embd.weight", typ, E, int64(sh.V))
	add("output_norm.weight", gguf.TypeF32, E)
	add("output.weight", head, E, int64(sh.V))
	for il := range sh.L {
		n := func(x string) string { return blkName(il, x) }
		add(n("attn_norm.weight"), gguf.TypeF32, E)
		add(n("attn_q.weight"), typ, E, qd)
		add(n("attn_k.weight"), typ, E, kd)
		add(n("attn_v.weight"), typ, E, kd)
		add(n("attn_output.weight"), typ, qd, E)
		add(n("ffn_norm.weight"), gguf.TypeF32, E)
		add(n("ffn_gate.weight"), typ, E, int64(sh.FF))
		add(n("ffn_up.weight"), typ, E, int64(sh.FF))
		add(n("ffn_down.weight"), typ, int64(sh.FF), E)
	}
	return s
}

// randomWeightBytes returns the bytes of a tensor of type t and ggml dims with random content
// whose every 16-bit word is below 2^-4 in magnitude as an f16 (so block scales are small and
// finite): only the speed of a forward pass is measured, not its output.
func randomWeightBytes(r *rand.Rand, t gguf.GGMLType, dims []int64) []byte {
	rows := int64(1)
	for _, d := range dims[1:] {
		rows *= d
	}
	rb, err := t.RowBytes(dims[0])
	if err != nil {
		panic(err)
	}
	data := make([]byte, rb*rows)
	for i := 0; i+8 <= len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], r.Uint64()&0x2b7f2b7f2b7f2b7f)
	}
	return data
}

// copyBandwidth measures the device's copy bandwidth in GB/s (bytes read plus written).
func copyBandwidth(b *testing.B, d *cuda.Device) float64 {
	n := 64 << 20 // floats: 256 MiB per buffer
	if testing.Short() {
		n = 1 << 20
	}
	src, err := d.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(src)
	dst, err := d.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Free(dst)
	d.Copy(dst, src)
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	const reps = 10
	start := time.Now()
	for range reps {
		d.Copy(dst, src)
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	return reps * 2 * float64(n) * 4 / time.Since(start).Seconds() / 1e9
}

// decodeBenchState is what a device decode benchmark keeps across its runs (the testing package
// calls it once with b.N = 1 before the real run).
type decodeBenchState struct {
	once       sync.Once
	gm         *Model
	s          *Session
	eager      *Session // the same model loaded without GPUGraphs (kernel by kernel)
	prompt     []int32
	promptTokS float64
	cpuTokS    float64
	copyGBs    float64
	bytes      int64 // weight bytes one decode token reads on the device
	dev        *cuda.Device
	profiled   bool // the launch profile was printed (TQ_GPU_PROFILE=1)
	err        error
}

// setup builds the model once (mk returns its source, vocabulary size, block count and a function
// giving the weight bytes one token reads from the loaded model), measures the device copy
// bandwidth and the CPU's decode speed on it (4 timed steps after a 16-token prompt), loads it
// with every block and the LM head on the device, and times a prompt of 128 tokens (16 with
// -test.short) in one batch.
func (st *decodeBenchState) setup(b *testing.B, mk func() (src Source, vocab, layers int, bytes func(*Model) int64)) {
	st.once.Do(func() {
		src, vocab, layers, bytes := mk()
		dev := gpuDeviceBackend(b)
		st.dev = dev
		st.copyGBs = copyBandwidth(b, dev)
		n := 128
		if testing.Short() {
			n = 16
		}
		st.prompt = randTokens(5, n, vocab)
		cpu, err := Load(src, Options{CtxSize: 64})
		if err != nil {
			st.err = err
			return
		}
		cs, _ := cpu.NewSession()
		if _, err := cs.Eval(st.prompt[:16], LogitsNone); err != nil {
			st.err = err
			return
		}
		start := time.Now()
		for i := range 4 {
			if _, err := cs.Eval(st.prompt[i:i+1], LogitsLast); err != nil {
				st.err = err
				return
			}
		}
		st.cpuTokS = 4 / time.Since(start).Seconds()
		cpu.Close()
		st.gm, err = Load(src, Options{CtxSize: 1024, Backend: dev, GPULayers: layers + 1, GPUGraphs: true})
		if err != nil {
			st.err = err
			return
		}
		st.bytes = bytes(st.gm)
		em, err := Load(src, Options{CtxSize: 1024, Backend: dev, GPULayers: layers + 1})
		if err != nil {
			st.err = err
			return
		}
		st.eager, _ = em.NewSession()
		if _, err := st.eager.Eval(st.prompt, LogitsNone); err != nil {
			st.err = err
			return
		}
		st.s, _ = st.gm.NewSession()
		if _, err := st.s.Eval(st.prompt, LogitsLast); err != nil { // warm-up: allocates the buffers
			st.err = err
			return
		}
		st.s.Reset()
		start = time.Now()
		if _, err := st.s.Eval(st.prompt, LogitsLast); err != nil {
			st.err = err
			return
		}
		st.promptTokS = float64(len(st.prompt)) / time.Since(start).Seconds()
	})
	if st.err != nil {
		b.Fatal(st.err)
	}
}

// run times b.N single-token decode steps (the recorded graph replayed) and reports tokens/s,
// the weight GB/s they read, that as a percentage of the copy bandwidth, the speed-up over the
// CPU, the prompt speed, and the speed of as many steps launched kernel by kernel (no GPUGraphs) with
// the graph's speed-up over them. A full context starts again from the prompt, outside the timer
// (a recurrent state rolls back only to 0).
func (st *decodeBenchState) run(b *testing.B) {
	steps := func(s *Session, n int) time.Duration {
		tok := []int32{1}
		var total time.Duration
		for i := range n {
			if s.Pos() >= s.CtxSize() {
				s.Reset()
				if _, err := s.Eval(st.prompt, LogitsNone); err != nil {
					b.Fatal(err)
				}
			}
			tok[0] = int32(i % 200)
			start := time.Now()
			if _, err := s.Eval(tok, LogitsLast); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		return total
	}
	b.ResetTimer()
	b.StopTimer()
	elapsed := steps(st.s, b.N)
	if ds := st.s.gpu; ds.graphLaunches == 0 {
		b.Fatalf("no decode step replayed a graph: %v", ds.graphErr)
	}
	eagerTokS := float64(b.N) / steps(st.eager, b.N).Seconds()
	tokS := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(eagerTokS, "eager-tok/s")
	b.ReportMetric(tokS/eagerTokS, "x-eager")
	gbs := float64(st.bytes) * tokS / 1e9
	b.ReportMetric(tokS, "tok/s")
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(100*gbs/st.copyGBs, "%copy-bw")
	b.ReportMetric(tokS/st.cpuTokS, "x-cpu")
	b.ReportMetric(st.promptTokS, "prompt-tok/s")
	b.ReportMetric(st.cpuTokS, "cpu-tok/s")
	b.ReportMetric(float64(st.gm.GPUPlacement().WeightBytes)/(1<<20), "MiB-weights")
	b.ReportMetric(float64(st.bytes)/(1<<20), "MiB-per-token")
	if math.IsNaN(gbs) {
		b.Fatal("no time measured")
	}
	if os.Getenv("TQ_GPU_PROFILE") == "1" && !st.profiled {
		st.profiled = true // once: the benchmark function runs more than once
		// Where the eager step's time goes: 8 steps, each launch timed to its end.
		if err := st.dev.SetProfile(true); err != nil {
			b.Fatal(err)
		}
		n := 8
		d := steps(st.eager, n)
		table, floor, err := st.dev.Profile()
		if e := st.dev.SetProfile(false); err == nil {
			err = e
		}
		if err != nil {
			b.Fatal(err)
		}
		// Printed, not logged: a benchmark's log keeps only its first lines.
		fmt.Printf("%s: launch profile of %d eager steps (%v per step profiled; empty synchronisation %v):\n%s",
			b.Name(), n, (d / time.Duration(n)).Round(time.Microsecond), floor.Round(100*time.Nanosecond), cuda.FormatProfile(table))
	}
}

var decodeBench decodeBenchState

// BenchmarkGPUDecode measures single-token decode with every block and the LM head on the
// device: tokens/s, weight bytes read per token over the time (GB/s), that as a percentage of
// the device copy bandwidth, and the speed-up over the CPU decoding the same model in the same
// process; prompt processing (128 tokens in one batch) is reported as prompt-tok/s.
func BenchmarkGPUDecode(b *testing.B) {
	if os.Getenv("TQ_GPU") != "1" {
		b.Skip("device benchmark: set TQ_GPU=1 to run it on a CUDA GPU")
	}
	decodeBench.setup(b, func() (Source, int, int, func(*Model) int64) {
		sh := decodeBenchShape()
		return randomSource(sh, gguf.TypeQ4_K, gguf.TypeQ6_K), sh.V, sh.L, func(m *Model) int64 { return m.GPUPlacement().WeightBytes }
	})
	decodeBench.run(b)
}
