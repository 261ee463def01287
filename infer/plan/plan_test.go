package plan

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
	"github.com/tq-project/tq/internal/hf"
)

const (
	qwen3_8b   = "testdata/qwen3-8b.json"
	qwen3_30b  = "testdata/qwen3-30b-a3b.json"
	gib        = int64(1) << 30
	mib        = int64(1) << 20
	vocabQwen3 = 151936
)

func mustHF(t *testing.T, path, mix string) *Model {
	t.Helper()
	tm, err := ParseTypeMix(mix)
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromHF(path, tm)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Parameter counts of the real configurations, derived by hand from the shapes:
//
// Qwen3-8B: per layer q/o 4096·4096 each, k/v 4096·1024 each, FFN 3·4096·12288, norms
// 2·4096 + 2·128 = 192,946,432; ×36 = 6,946,071,552; embeddings + LM head 2·151936·4096 =
// 1,244,659,712; output norm 4096: total 8,190,735,360.
//
// Qwen3-30B-A3B: per layer attention 2·2048·4096 + 2·2048·512 = 18,874,368, router 2048·128
// = 262,144, experts 128·3·2048·768 = 603,979,776, norms 2·2048 + 2·128 = 4,352; ×48 =
// 29,893,394,432 + 2·151936·2048 + 2048 = 30,532,122,624 total. Active: 8 of 128 experts
// (37,748,736 per layer) → 48·56,889,600 + 622,331,904 = 3,353,032,704.
func TestParamCounts(t *testing.T) {
	cases := []struct {
		path          string
		total, active int64
	}{
		{qwen3_8b, 8_190_735_360, 8_190_735_360},
		{qwen3_30b, 30_532_122_624, 3_353_032_704},
	}
	for _, c := range cases {
		m := mustHF(t, c.path, "bf16")
		total, active := m.Params()
		if total != c.total || active != c.active {
			t.Errorf("%s: params %d total / %d active, want %d / %d", c.path, total, active, c.total, c.active)
		}
		// independent count by internal/hf from the same config
		cfg, err := hf.LoadConfig(c.path)
		if err != nil {
			t.Fatal(err)
		}
		ht, ha, err := cfg.ParamCount()
		if err != nil {
			t.Fatal(err)
		}
		if ht != total || ha != active {
			t.Errorf("%s: internal/hf counts %d / %d, plan %d / %d", c.path, ht, ha, total, active)
		}
	}
}

func TestMemoryBreakdown(t *testing.T) {
	m := mustHF(t, qwen3_8b, "f16")
	o := DefaultOptions()
	r, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Memory
	// f16 weights: 2 bytes per parameter except the f32 norms (2·4096+2·128 per layer, output norm)
	norms := int64(36*(2*4096+2*128) + 4096)
	if want := 2*(b.Params-norms) + 4*norms; b.Weights != want {
		t.Errorf("f16 weights %d bytes, want %d", b.Weights, want)
	}
	// KV cache: 36 layers · 4096 tokens · (1024 k + 1024 v) · 2 bytes = 576 MiB (llama.cpp prints the same)
	if b.KV != 576*mib {
		t.Errorf("KV cache %d bytes, want 576 MiB", b.KV)
	}
	var sum int64
	for _, l := range b.Layers {
		sum += l.Total
		if l.Total != b.Layers[0].Total {
			t.Fatalf("layer %d size %d differs from layer 0 %d", l.Layer, l.Total, b.Layers[0].Total)
		}
	}
	if sum+b.Embedding+b.Output != b.Weights {
		t.Errorf("layers %d + embedding %d + output %d != weights %d", sum, b.Embedding, b.Output, b.Weights)
	}
	var groups int64
	for _, v := range b.ByGroup {
		groups += v
	}
	if groups != b.Weights {
		t.Errorf("groups sum to %d, weights %d", groups, b.Weights)
	}
	// q8_0 cache halves... to 34/64 of f16
	o.CacheTypeK, o.CacheTypeV = gguf.TypeQ8_0, gguf.TypeQ8_0
	r2, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Memory.KV != b.KV*34/64 {
		t.Errorf("q8_0 KV %d, want %d", r2.Memory.KV, b.KV*34/64)
	}
	// A Q4_K mix: 144 bytes per 256 weights for every 2-D tensor (all rows are multiples of 256)
	q := mustHF(t, qwen3_8b, "q4_K")
	rq, _ := Analyze(q, DefaultOptions())
	if want := (rq.Memory.Params-norms)/256*144 + 4*norms; rq.Memory.Weights != want {
		t.Errorf("q4_K weights %d, want %d", rq.Memory.Weights, want)
	}
	if bpw := rq.Memory.BitsPerWeight; bpw < 4.49 || bpw > 4.51 {
		t.Errorf("q4_K bits/weight %.3f", bpw)
	}
}

func TestTypeMixFallbackAndOverrides(t *testing.T) {
	mix, err := ParseTypeMix("q4_K, token_embd=q8_0,ffn_down_exps=q6_K")
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromHF(qwen3_30b, mix)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range m.Tensors {
		switch {
		case tn.Name == "token_embd.weight" && tn.Type != gguf.TypeQ8_0,
			strings.HasSuffix(tn.Name, "ffn_down_exps.weight") && tn.Type != gguf.TypeQ6_K,
			strings.HasSuffix(tn.Name, "ffn_gate_exps.weight") && tn.Type != gguf.TypeQ4_K,
			strings.HasSuffix(tn.Name, "ffn_gate_inp.weight") && tn.Type != gguf.TypeF32,
			strings.HasSuffix(tn.Name, "_norm.weight") && tn.Type != gguf.TypeF32:
			t.Errorf("%s has type %s", tn.Name, tn.Type)
		}
	}
	// rows of 768 cannot hold 256-blocks of q4_K... 768 = 3·256 can; 2880 could not: check the
	// fallback with a shape whose expert FFN is not a multiple of 256
	s, _ := ShapeFromHF(qwen3_30b)
	s.NFFExp = 800
	m2, err := FromShape(s, mix)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range m2.Tensors {
		if strings.HasSuffix(tn.Name, "ffn_down_exps.weight") && tn.Type != gguf.TypeQ8_0 {
			t.Fatalf("q6_K rows of 800 should fall back to q8_0, got %s", tn.Type)
		}
	}
	for _, bad := range []string{"q9_9", "q4_K,ffn_down", "q8_K", "q4_K,attn_q=iq2_xxs"} {
		if _, err := ParseTypeMix(bad); err == nil {
			t.Errorf("type mix %q accepted", bad)
		}
	}
}

// The planner must return a maximal placement: one more GPU layer (or one fewer CPU-MoE
// layer) must not fit.
func TestPlacementDense(t *testing.T) {
	m := mustHF(t, qwen3_8b, "q4_K")
	o := DefaultOptions()
	o.VRAM = 24 * gib
	r, _ := Analyze(m, o)
	p := r.Placement
	if p.GPULayers != 36 || !p.OutputOnGPU || p.NGL != 37 || !p.Fits || !strings.Contains(p.Args, "-ngl 37") {
		t.Fatalf("24 GiB: %+v", p)
	}
	// a small budget: some layers on the GPU, maximal
	o.VRAM = 3 * gib
	r, _ = Analyze(m, o)
	p = r.Placement
	if p.GPULayers <= 0 || p.GPULayers >= 36 || !p.Fits || p.GPUBytes > o.VRAM {
		t.Fatalf("3 GiB: %+v", p)
	}
	if more := evaluate(m, &r.Memory, o, p.NGL+1, 0); more.Fits {
		t.Fatalf("3 GiB: -ngl %d also fits (%d bytes)", p.NGL+1, more.GPUBytes)
	}
	// CPU only: a big model is bandwidth-bound: the read term is the bytes read per token over
	// the bandwidth, and the overheads and arithmetic cost it little
	o.VRAM = 0
	r, _ = Analyze(m, o)
	p = r.Placement
	read := float64(0)
	for _, l := range r.Memory.Layers {
		read += float64(l.Total)
	}
	read += float64(lmHeadBytes(m))
	bw := o.CPUBandwidth * 1e9 / read
	if got, w := p.Decode.CPUReadMS, 1e3/bw; got < w*0.999 || got > w*1.001 {
		t.Errorf("CPU read time %.3f ms, want %.3f", got, w)
	}
	if p.Decode.Bound != "bandwidth" || p.DecodeTokS > bw || p.DecodeTokS < 0.95*bw {
		t.Errorf("CPU decode %.2f tok/s (%s-bound), want bandwidth-bound near %.2f", p.DecodeTokS, p.Decode.Bound, bw)
	}
	if p.NGL != 0 || p.GPUBytes != 0 || !strings.HasPrefix(p.Args, "-ngl 0") {
		t.Errorf("CPU only: %+v", p)
	}
}

func TestPlacementMoE(t *testing.T) {
	m := mustHF(t, qwen3_30b, "q4_K")
	o := DefaultOptions()
	o.VRAM = 12 * gib
	r, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Placement
	// ~17 GiB of weights: everything but some expert tensors goes to the GPU
	if p.NGL != 49 || p.CPUMoE <= 0 || p.CPUMoE >= 48 || !p.Fits {
		t.Fatalf("12 GiB: %+v", p)
	}
	if fewer := evaluate(m, &r.Memory, o, 49, p.CPUMoE-1); fewer.Fits {
		t.Fatalf("--n-cpu-moe %d also fits", p.CPUMoE-1)
	}
	if !strings.Contains(p.Args, "--n-cpu-moe") || !strings.Contains(p.OverrideArg, `blk\.(0|1|`) || !strings.HasSuffix(p.OverrideArg, "_exps=CPU") {
		t.Fatalf("args %q / %q", p.Args, p.OverrideArg)
	}
	// active bytes per token are far below the total: MoE decode beats a dense model of the
	// same size on the same bandwidth
	dense := o.CPUBandwidth * 1e9 / float64(r.Memory.Weights)
	o.VRAM = 0
	cpu, _ := Analyze(m, o)
	if cpu.Placement.DecodeTokS < 4*dense {
		t.Errorf("MoE CPU decode %.2f tok/s is not well above the dense figure %.2f", cpu.Placement.DecodeTokS, dense)
	}
	// plenty of VRAM: no expert stays on the CPU
	o.VRAM = 40 * gib
	r, _ = Analyze(m, o)
	if r.Placement.CPUMoE != 0 || r.Placement.NGL != 49 {
		t.Fatalf("40 GiB: %+v", r.Placement)
	}
}

func TestFromGGUFMatchesFile(t *testing.T) {
	spec := testmodel.Default("qwen3moe")
	spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ4_K, "ffn_down_exps": gguf.TypeQ6_K, "token_embd": gguf.TypeQ8_0}
	tm, err := testmodel.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := tm.WriteGGUF(path); err != nil {
		t.Fatal(err)
	}
	m, err := FromGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	var fileBytes int64
	for _, tn := range tm.Tensors {
		fileBytes += int64(len(tn.Data))
	}
	r, err := Analyze(m, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if r.Memory.Weights != fileBytes {
		t.Errorf("weights %d bytes, file holds %d", r.Memory.Weights, fileBytes)
	}
	// the same shape typed by the same mix gives the same inventory
	mix := TypeMix{Default: gguf.TypeQ4_K, Overrides: map[string]gguf.GGMLType{"ffn_down_exps": gguf.TypeQ6_K, "token_embd": gguf.TypeQ8_0}}
	m2, err := FromShape(m.Shape, mix)
	if err != nil {
		t.Fatal(err)
	}
	if len(m2.Tensors) != len(m.Tensors) {
		t.Fatalf("inventory from shape has %d tensors, file %d", len(m2.Tensors), len(m.Tensors))
	}
	r2, _ := Analyze(m2, DefaultOptions())
	if r2.Memory.Weights != fileBytes {
		t.Errorf("inventory from shape: %d bytes, file %d", r2.Memory.Weights, fileBytes)
	}
	if _, err := FromGGUF(filepath.Join(t.TempDir(), "missing.gguf")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestReportOutput(t *testing.T) {
	m := mustHF(t, qwen3_30b, "q4_K")
	o := DefaultOptions()
	o.VRAM, o.CPUGFLOPS, o.GPUTFLOPS = 8*gib, 200, 50
	r, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	if err := r.WriteTable(&tb, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"30.53B total, 3.35B active", "experts", "KV cache (4096 ctx, f16/f16)", "-ngl 49 --n-cpu-moe", "predicted decode", "predicted prompt", "0-47",
		"at depth 0", "-bound", "with the 4096-token context full", "at 40 GB/s", "at 900 GB/s", "GFLOP/s", "µs per step", "CPU↔GPU hand-overs"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	var jb bytes.Buffer
	if err := r.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Memory.Params != r.Memory.Params || back.Placement.Args != r.Placement.Args || len(back.Memory.Layers) != 48 {
		t.Errorf("JSON round trip lost data")
	}
}

func TestOptionErrors(t *testing.T) {
	m := mustHF(t, qwen3_8b, "q8_0")
	bad := []func(*Options){
		func(o *Options) { o.Ctx = 0 },
		func(o *Options) { o.CacheTypeK = gguf.TypeQ4_K },
		func(o *Options) { o.CPUBandwidth = 0 },
		func(o *Options) { o.VRAM = -1 },
		func(o *Options) { o.Depth = o.Ctx + 1 },
	}
	for i, f := range bad {
		o := DefaultOptions()
		f(&o)
		if _, err := Analyze(m, o); err == nil {
			t.Errorf("case %d: bad options accepted", i)
		}
	}
	if _, err := FromHF("testdata/missing.json", TypeMix{Default: gguf.TypeF16}); err == nil {
		t.Error("missing config accepted")
	}
}

func FuzzParseTypeMix(f *testing.F) {
	for _, s := range []string{"q4_K", "q4_K,token_embd=q8_0", "f16,ffn_down=q6_K,output=f32", ",,", "=", "q4_K,=q8_0", "bf16,a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mix, err := ParseTypeMix(s)
		if err != nil {
			return
		}
		sh := Shape{Arch: "qwen3", NLayer: 1, NEmbd: 256, NFF: 512, NHead: 2, NHeadKV: 1, HeadDim: 128, NVocab: 1000, QKNorm: true}
		m, err := FromShape(sh, mix)
		if err != nil {
			return
		}
		if _, err := Analyze(m, DefaultOptions()); err != nil {
			t.Fatalf("valid mix %q: %v", s, err)
		}
	})
}

func FuzzShape(f *testing.F) {
	f.Add(36, 4096, 12288, 32, 8, 128, 151936, 0, 0, 0, int64(8)<<30)
	f.Add(48, 2048, 6144, 32, 4, 128, 151936, 128, 8, 768, int64(12)<<30)
	f.Add(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, int64(0))
	f.Fuzz(func(t *testing.T, L, E, F, H, KV, HD, V, X, XU, FX int, vram int64) {
		s := Shape{Arch: "qwen3moe", NLayer: L, NEmbd: E, NFF: F, NHead: H, NHeadKV: KV, HeadDim: HD, NVocab: V,
			NExpert: X, NExpertUsed: XU, NFFExp: FX, QKNorm: true}
		if L > 64 || X > 64 {
			return // keep each input fast; sizes are bounded by validate anyway
		}
		m, err := FromShape(s, TypeMix{Default: gguf.TypeQ8_0})
		if err != nil {
			return
		}
		o := DefaultOptions()
		o.VRAM = vram
		r, err := Analyze(m, o)
		if err != nil {
			return
		}
		if r.Placement.Fits && r.Placement.GPUBytes > max(vram, 0) {
			t.Fatalf("placement uses %d bytes of %d", r.Placement.GPUBytes, vram)
		}
	})
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{"24": 24 * gib, "24GiB": 24 * gib, "8G": 8 * gib, "512MiB": 512 * mib, "16GB": 16e9,
		"1.5g": 3 * gib / 2, "100b": 100, "2 TiB": 2 << 40, "0": 0}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "12XB", "-1G", "1e400", "1.2.3G"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

// AllExpertsOnCPU (--cpu-moe) keeps every block's experts on the CPU: with the same 12 GiB the
// planner offloads every block and the head (the dense part is small) and --n-cpu-moe covers all
// 48 blocks; with a budget below the dense part it offloads fewer blocks, still with every
// expert on the CPU.
func TestPlacementAllExpertsOnCPU(t *testing.T) {
	m := mustHF(t, qwen3_30b, "q4_K")
	o := DefaultOptions()
	o.VRAM = 12 * gib
	o.AllExpertsOnCPU = true
	r, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Placement
	if p.NGL != 49 || p.CPUMoE != 48 || !p.Fits || !strings.Contains(p.Args, "--n-cpu-moe 48") {
		t.Fatalf("12 GiB, experts on the CPU: %+v", p)
	}
	var experts int64
	for _, l := range r.Memory.Layers {
		experts += l.Experts
	}
	if p.CPUBytes < experts {
		t.Fatalf("CPU holds %d bytes, less than the %d bytes of experts", p.CPUBytes, experts)
	}
	o.VRAM = 1 * gib
	r, err = Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	if p := r.Placement; p.GPULayers > 0 && p.CPUMoE != 48 {
		t.Fatalf("1 GiB, experts on the CPU: %+v", p)
	} else {
		t.Logf("1 GiB: -ngl %d, --n-cpu-moe %d, fits %v", p.NGL, p.CPUMoE, p.Fits)
	}
}

// Bandwidth alone is not a prediction: a small model at any bandwidth is bounded by the fixed
// costs of a decode step (a 2-layer model once predicted a million tokens per second), while a
// big model stays bandwidth-bound, on the CPU and fully offloaded.
func TestDecodeOverheads(t *testing.T) {
	small, err := FromShape(Shape{Arch: "qwen3", NLayer: 2, NEmbd: 128, NFF: 256, NHead: 2, NHeadKV: 1, HeadDim: 64,
		NVocab: 1536, Tied: true, QKNorm: true, CtxTrain: 4096}, TypeMix{Default: gguf.TypeQ8_0})
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	for _, bw := range []float64{40, 1e6} {
		for _, vram := range []int64{0, 8 * gib} {
			o.CPUBandwidth, o.GPUBandwidth, o.VRAM = bw, bw*20, vram
			r, err := Analyze(small, o)
			if err != nil {
				t.Fatal(err)
			}
			p := r.Placement
			if p.DecodeTokS >= 1e4 || p.Decode.Bound != "overhead" || p.Decode.OverheadMS < o.Overheads.TokenUS/1e3 {
				t.Errorf("small model, %g GB/s, VRAM %d: %.0f tok/s (%s-bound, %+v), want < 10k and overhead-bound",
					bw, vram, p.DecodeTokS, p.Decode.Bound, p.Decode)
			}
			if d := p.Decode; d.TotalMS < d.OverheadMS+d.GPUReadMS+max(d.CPUReadMS, d.CPUComputeMS)-1e-12 {
				t.Errorf("total %.4f ms is less than its terms %+v", d.TotalMS, d)
			}
		}
	}
	// attention over a full context costs the small model time
	o = DefaultOptions()
	r, _ := Analyze(small, o)
	if r.Placement.DecodeFullTokS >= r.Placement.DecodeTokS {
		t.Errorf("decode with the context full (%.0f tok/s) is not slower than at depth 0 (%.0f)", r.Placement.DecodeFullTokS, r.Placement.DecodeTokS)
	}

	big := mustHF(t, qwen3_8b, "q4_K")
	o.VRAM = 24 * gib
	r, err = Analyze(big, o)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Placement
	bwOnly := 1e3 / p.Decode.GPUReadMS
	if p.GPULayers != 36 || p.Decode.Bound != "bandwidth" || p.Decode.GPUReadMS < 0.6*p.Decode.TotalMS {
		t.Errorf("Qwen3-8B on a 24 GiB GPU: %.1f tok/s (%s-bound), bandwidth alone %.1f", p.DecodeTokS, p.Decode.Bound, bwOnly)
	}
	// the KV cache read at depth is part of the reads
	o.Depth = o.Ctx
	rd, _ := Analyze(big, o)
	if want := r.Memory.KVPerToken * int64(o.Ctx); rd.Placement.Decode.KVReadBytes != want || rd.Placement.Decode.GPUReadMS <= p.Decode.GPUReadMS {
		t.Errorf("depth %d: KV read %d bytes (want %d), GPU read %.3f ms vs %.3f at depth 0",
			o.Ctx, rd.Placement.Decode.KVReadBytes, want, rd.Placement.Decode.GPUReadMS, p.Decode.GPUReadMS)
	}
	if rd.Placement.DecodeTokS != rd.Placement.DecodeFullTokS {
		t.Errorf("at depth = ctx the two figures differ: %.3f vs %.3f", rd.Placement.DecodeTokS, rd.Placement.DecodeFullTokS)
	}
}
