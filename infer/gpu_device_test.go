package infer

import (
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
			src := srcs[i]
			prompt := randTokens(7, nPrompt, tc.spec.Vocab)
			steps := randTokens(8, nSteps, tc.spec.Vocab)
			load := func(o Options) *Model {
				o.CtxSize = 256
				o.CacheTypeK, o.CacheTypeV = tc.cacheK, tc.cacheV
				m, err := Load(src, o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			cpuFull := load(Options{FullPrecision: true})
			cpuDef := load(Options{})
			gm := load(Options{Backend: dev, GPULayers: tc.gpuLayers, CPUMoE: tc.cpuMoE, FullPrecision: true})
			rf, rd, rg := evalScript(t, cpuFull, prompt, steps), evalScript(t, cpuDef, prompt, steps), evalScript(t, gm, prompt, steps)
			dFull, dDef := maxProbDiff(rg, rf), maxProbDiff(rg, rd)
			same := compareGreedy(t, cpuFull, gm, prompt, nGreedy, gpuTolDevice)
			t.Logf("%s: placement %+v; max|Δp| vs CPU full precision %.2e, vs CPU default %.2e; greedy: %d/%d tokens identical",
				tc.name, gm.GPUPlacement(), dFull, dDef, same, nGreedy)
			if dFull > gpuTolDevice {
				t.Errorf("device vs CPU FullPrecision: max |Δp| %.3e > %.0e", dFull, gpuTolDevice)
			}
			if dDef > gpuTolDefault {
				t.Errorf("device vs CPU default: max |Δp| %.3e > %.0e", dDef, gpuTolDefault)
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
		rows := int64(1)
		for _, d := range dims[1:] {
			rows *= d
		}
		rb, err := t.RowBytes(dims[0])
		if err != nil {
			panic(err)
		}
		data := make([]byte, rb*rows)
		if t == gguf.TypeF32 {
			for i := range data {
				if i%4 == 3 {
					data[i] = 0x3f // 1.0 (norm weights)
				} else if i%4 == 2 {
					data[i] = 0x80
				}
			}
		} else {
			for i := 0; i+8 <= len(data); i += 8 {
				v := r.Uint64() & 0x2b7f2b7f2b7f2b7f // every 16-bit word below 2^-4 in magnitude as f16
				for j := range 8 {
					data[i+j] = byte(v >> (8 * j))
				}
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

// decodeBench is the state BenchmarkGPUDecode keeps across its runs (the testing package calls
// it once with b.N = 1 before the real run).
var decodeBench struct {
	once       sync.Once
	dev        *cuda.Device
	gm         *Model
	s          *Session
	prompt     int
	promptTokS float64
	cpuTokS    float64
	copyGBs    float64
	bytes      int64
	err        error
}

// BenchmarkGPUDecode measures single-token decode with every block and the LM head on the
// device: tokens/s, weight bytes read per token over the time (GB/s), that as a percentage of
// the device copy bandwidth, and the speed-up over the CPU decoding the same model in the same
// process; prompt processing (128 tokens in one batch) is reported as prompt-tok/s.
func BenchmarkGPUDecode(b *testing.B) {
	if os.Getenv("TQ_GPU") != "1" {
		b.Skip("device benchmark: set TQ_GPU=1 to run it on a CUDA GPU")
	}
	st := &decodeBench
	st.once.Do(func() {
		st.dev = gpuDeviceBackend(b)
		sh := decodeBenchShape()
		src := randomSource(sh, gguf.TypeQ4_K, gguf.TypeQ6_K)
		st.copyGBs = copyBandwidth(b, st.dev)
		st.prompt = 128
		if testing.Short() {
			st.prompt = 16
		}
		prompt := randTokens(5, st.prompt, sh.V)
		// CPU baseline: a 16-token prompt, then 4 timed decode steps
		cpu, err := Load(src, Options{CtxSize: 64})
		if err != nil {
			st.err = err
			return
		}
		cs, _ := cpu.NewSession()
		if _, err := cs.Eval(prompt[:16], LogitsNone); err != nil {
			st.err = err
			return
		}
		start := time.Now()
		for i := range 4 {
			if _, err := cs.Eval(prompt[i:i+1], LogitsLast); err != nil {
				st.err = err
				return
			}
		}
		st.cpuTokS = 4 / time.Since(start).Seconds()
		cpu.Close()

		st.gm, err = Load(src, Options{CtxSize: 1024, Backend: st.dev, GPULayers: sh.L + 1})
		if err != nil {
			st.err = err
			return
		}
		st.bytes = st.gm.GPUPlacement().WeightBytes
		st.s, _ = st.gm.NewSession()
		if _, err := st.s.Eval(prompt, LogitsLast); err != nil { // warm-up: allocates the buffers
			st.err = err
			return
		}
		st.s.Reset()
		start = time.Now()
		if _, err := st.s.Eval(prompt, LogitsLast); err != nil {
			st.err = err
			return
		}
		st.promptTokS = float64(st.prompt) / time.Since(start).Seconds()
	})
	if st.err != nil {
		b.Fatal(st.err)
	}
	s := st.s
	tok := []int32{1}
	b.ResetTimer()
	for i := range b.N {
		if s.Pos() >= s.CtxSize() {
			s.Truncate(st.prompt)
		}
		tok[0] = int32(i % 200)
		if _, err := s.Eval(tok, LogitsLast); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	tokS := float64(b.N) / b.Elapsed().Seconds()
	gbs := float64(st.bytes) * tokS / 1e9
	b.ReportMetric(tokS, "tok/s")
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(100*gbs/st.copyGBs, "%copy-bw")
	b.ReportMetric(tokS/st.cpuTokS, "x-cpu")
	b.ReportMetric(st.promptTokS, "prompt-tok/s")
	b.ReportMetric(st.cpuTokS, "cpu-tok/s")
	b.ReportMetric(float64(st.bytes)/(1<<20), "MiB-weights")
	if math.IsNaN(gbs) {
		b.Fatal("no time measured")
	}
}
