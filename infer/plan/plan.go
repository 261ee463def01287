package plan

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tq-project/tq/gguf"
)

// Options describe the run to plan for.
type Options struct {
	Ctx        int           // context size (tokens)
	CacheTypeK gguf.GGMLType // KV cache types (llama.cpp default f16)
	CacheTypeV gguf.GGMLType
	UBatch     int  // llama.cpp micro-batch (n_ubatch, default 512)
	FlashAttn  bool // llama.cpp -fa: no n_kv×n_head score matrix in the compute buffer

	VRAM       int64 // GPU memory budget in bytes (0: CPU only)
	GPUReserve int64 // bytes of the budget kept free (driver, context, fragmentation)
	// AllExpertsOnCPU keeps the experts of every block on the CPU (llama.cpp --cpu-moe): the
	// planner then chooses only -ngl.
	AllExpertsOnCPU bool

	CPUBandwidth float64 // GB/s of memory bandwidth available to decode on the CPU
	GPUBandwidth float64 // GB/s of GPU memory bandwidth
	CPUGFLOPS    float64 // sustained CPU GFLOP/s for prompt processing (0: no prompt prediction)
	GPUTFLOPS    float64 // sustained GPU TFLOP/s for prompt processing (0: no prompt prediction)
	Depth        int     // tokens already in the KV cache when predicting decode speed
	// Overheads are the decode costs that do not scale with the bytes read.
	Overheads Overheads
}

// Overheads are the parts of a decode step that bandwidth does not account for. Without them
// a small model's prediction is absurd (a 1 MB model at 900 GB/s would decode a million
// tokens per second); with them every model is bounded by the fixed costs of a step. The
// defaults are round figures for llama.cpp's structure, not measurements of any machine:
// per block it runs about 20 graph nodes, and the CPU backend ends each node with a barrier
// of its threads (ggml_graph_compute_thread in ggml/src/ggml-cpu/ggml-cpu.c) while the CUDA
// backend launches about 20 kernels (ggml_backend_cuda_graph_compute in
// ggml/src/ggml-cuda/ggml-cuda.cu); each step also builds and schedules a graph
// (llama_context::decode), copies logits back and samples from the whole vocabulary.
type Overheads struct {
	TokenUS    float64 `json:"token_us"`            // per step: graph build and scheduling, embedding lookup, logits
	SampleNS   float64 `json:"sample_ns_per_vocab"` // sampling, per vocabulary entry
	CPUBlockUS float64 `json:"cpu_block_us"`        // per block (or expert part of a block) computed on the CPU
	GPUBlockUS float64 `json:"gpu_block_us"`        // per block on the GPU: kernel launches
	GPUTokenUS float64 `json:"gpu_token_us"`        // per step with any GPU work: launch of the graph, synchronisation
	SwitchUS   float64 `json:"switch_us"`           // per hand-over of the hidden state between CPU and GPU
	CPUGFLOPS  float64 `json:"cpu_decode_gflops"`   // CPU arithmetic rate of decode (mat-vec, attention)
}

// DefaultOverheads: 100 µs per step, 2 ns per vocabulary entry, 20 µs per CPU block, 30 µs per
// GPU block, 50 µs per step using the GPU, 20 µs per CPU↔GPU hand-over, 400 GFLOP/s of CPU
// arithmetic.
func DefaultOverheads() Overheads {
	return Overheads{TokenUS: 100, SampleNS: 2, CPUBlockUS: 20, GPUBlockUS: 30, GPUTokenUS: 50, SwitchUS: 20, CPUGFLOPS: 400}
}

// DefaultOptions: 4096 context, f16 cache, 512 micro-batch, no GPU, 40 GB/s CPU and 900 GB/s
// GPU bandwidth, 512 MiB GPU reserve, DefaultOverheads.
func DefaultOptions() Options {
	return Options{Ctx: 4096, CacheTypeK: gguf.TypeF16, CacheTypeV: gguf.TypeF16, UBatch: 512,
		GPUReserve: 512 << 20, CPUBandwidth: 40, GPUBandwidth: 900, Overheads: DefaultOverheads()}
}

// LayerBytes is the weight memory of one block by group.
type LayerBytes struct {
	Layer     int   `json:"layer"`
	Attention int64 `json:"attention"`
	FFN       int64 `json:"ffn"`
	Router    int64 `json:"router,omitempty"`
	Experts   int64 `json:"experts,omitempty"`
	Norms     int64 `json:"norms"`
	Total     int64 `json:"total"`
	KV        int64 `json:"kv_cache"`
}

// Breakdown is the memory of the model at the options' context and cache types.
type Breakdown struct {
	Params        int64            `json:"params"`
	ActiveParams  int64            `json:"active_params"`
	Weights       int64            `json:"weights_bytes"`
	BitsPerWeight float64          `json:"bits_per_weight"`
	ByGroup       map[string]int64 `json:"by_group"`
	ByType        []TypeBytes      `json:"by_type"`
	Layers        []LayerBytes     `json:"layers"`
	Embedding     int64            `json:"embedding_bytes"`
	Output        int64            `json:"output_bytes"` // LM head + output norm (tied: the head is token_embd, counted in Embedding)
	KVPerToken    int64            `json:"kv_bytes_per_token"`
	KV            int64            `json:"kv_bytes"`
	Compute       int64            `json:"compute_bytes"` // estimated compute buffer of one backend
	// MTPBytes are the MTP blocks of a hybrid model, in the file but not loaded by llama.cpp
	// for plain inference (not in Weights).
	MTPBytes int64 `json:"mtp_bytes,omitempty"`
	Total    int64 `json:"total_bytes"` // weights + KV + compute
}

// Placement is a split of the model between GPU and CPU.
type Placement struct {
	GPULayers   int        `json:"gpu_layers"`    // blocks on the GPU (the last ones, as -ngl offloads)
	OutputOnGPU bool       `json:"output_on_gpu"` // LM head on the GPU (-ngl > n_layer)
	CPUMoE      int        `json:"cpu_moe"`       // blocks (the first ones) whose experts stay on the CPU
	GPUBytes    int64      `json:"gpu_bytes"`
	CPUBytes    int64      `json:"cpu_bytes"`
	Fits        bool       `json:"fits"`
	DecodeTokS  float64    `json:"decode_tok_s"`
	Decode      DecodeTime `json:"decode"` // what DecodeTokS is made of
	// DecodeFullTokS is the decode speed with the whole context in the KV cache.
	DecodeFullTokS float64 `json:"decode_full_ctx_tok_s"`
	PromptTokS     float64 `json:"prompt_tok_s,omitempty"`
	NGL            int     `json:"ngl"` // the -ngl value
	Args           string  `json:"llama_args"`
	OverrideArg    string  `json:"override_tensor,omitempty"` // the -ot form of --n-cpu-moe
}

// DecodeTime is the predicted time of one decode step, in milliseconds, by cause. The CPU's
// reads and arithmetic overlap (the longer of the two counts); everything else adds up.
type DecodeTime struct {
	Depth        int     `json:"depth"`          // tokens in the KV cache
	CPUReadMS    float64 `json:"cpu_read_ms"`    // weights and KV cache read on the CPU at CPUBandwidth
	GPUReadMS    float64 `json:"gpu_read_ms"`    // the same on the GPU at GPUBandwidth
	CPUComputeMS float64 `json:"cpu_compute_ms"` // 2 FLOP per active CPU-side weight + attention over the depth
	OverheadMS   float64 `json:"overhead_ms"`    // Overheads: per step, sampling, per block, hand-overs
	TotalMS      float64 `json:"total_ms"`
	KVReadBytes  int64   `json:"kv_read_bytes"` // KV cache read per token at Depth
	CPUFLOP      float64 `json:"cpu_flop"`      // arithmetic per token on the CPU
	CPUBlocks    int     `json:"cpu_blocks"`    // blocks (or their experts) computed on the CPU
	GPUBlocks    int     `json:"gpu_blocks"`
	GPUUsed      bool    `json:"gpu_used"`
	Switches     int     `json:"switches"` // CPU↔GPU hand-overs per token
	Bound        string  `json:"bound"`    // the largest term: "bandwidth", "compute" or "overhead"
}

// Report is a complete plan.
type Report struct {
	Source    string    `json:"source"`
	Shape     Shape     `json:"shape"`
	Options   optJSON   `json:"options"`
	Memory    Breakdown `json:"memory"`
	Placement Placement `json:"placement"`
}

type optJSON struct {
	Ctx          int       `json:"ctx"`
	CacheTypeK   string    `json:"cache_type_k"`
	CacheTypeV   string    `json:"cache_type_v"`
	UBatch       int       `json:"ubatch"`
	FlashAttn    bool      `json:"flash_attn"`
	VRAM         int64     `json:"vram_bytes"`
	GPUReserve   int64     `json:"gpu_reserve_bytes"`
	CPUBandwidth float64   `json:"cpu_bw_gbs"`
	GPUBandwidth float64   `json:"gpu_bw_gbs"`
	CPUGFLOPS    float64   `json:"cpu_gflops,omitempty"`
	GPUTFLOPS    float64   `json:"gpu_tflops,omitempty"`
	Depth        int       `json:"depth"`
	Overheads    Overheads `json:"overheads"`
}

func (o Options) validate() error {
	switch {
	case o.Ctx <= 0 || o.Ctx > 1<<24:
		return fmt.Errorf("context size %d out of range", o.Ctx)
	case o.UBatch <= 0 || o.UBatch > 1<<20:
		return fmt.Errorf("micro-batch %d out of range", o.UBatch)
	case o.VRAM < 0 || o.GPUReserve < 0:
		return fmt.Errorf("negative memory budget")
	case o.CPUBandwidth <= 0 || o.GPUBandwidth <= 0 || math.IsNaN(o.CPUBandwidth+o.GPUBandwidth):
		return fmt.Errorf("bandwidths must be > 0")
	case o.CPUGFLOPS < 0 || o.GPUTFLOPS < 0:
		return fmt.Errorf("negative throughput")
	case o.Depth < 0 || o.Depth > o.Ctx:
		return fmt.Errorf("depth %d outside the context %d", o.Depth, o.Ctx)
	}
	h := o.Overheads
	for _, v := range []float64{h.TokenUS, h.SampleNS, h.CPUBlockUS, h.GPUBlockUS, h.GPUTokenUS, h.SwitchUS} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("overheads must be finite and >= 0")
		}
	}
	if h.CPUGFLOPS <= 0 || math.IsNaN(h.CPUGFLOPS) {
		return fmt.Errorf("the CPU decode arithmetic rate must be > 0")
	}
	for _, t := range []gguf.GGMLType{o.CacheTypeK, o.CacheTypeV} {
		switch t {
		case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeIQ4_NL:
		default:
			return fmt.Errorf("unsupported KV cache type %s", t)
		}
	}
	return nil
}

// kvRowBytes is the cache size of one token in one layer.
func kvRowBytes(s Shape, o Options) (int64, error) {
	kd := int64(s.NHeadKV * s.HeadDim)
	k, err := o.CacheTypeK.RowBytes(kd)
	if err != nil {
		return 0, fmt.Errorf("cache-type-k: %v", err)
	}
	v, err := o.CacheTypeV.RowBytes(kd)
	if err != nil {
		return 0, fmt.Errorf("cache-type-v: %v", err)
	}
	return k + v, nil
}

// computeBytes estimates the compute buffer llama.cpp reserves on a backend that runs the
// blocks (and, with head, the LM head): the largest live set of one micro-batch — hidden
// states, the FFN intermediates (k expert slots for MoE), the attention score matrix
// (n_head × n_ubatch × n_ctx f32 without flash attention) and, with head, the logits of a
// full micro-batch (n_vocab × n_ubatch f32). It is an estimate: llama.cpp's graph allocator
// decides the exact figure.
func computeBytes(s Shape, o Options, head bool) int64 {
	u := int64(o.UBatch)
	hidden := 4 * u * int64(3*s.NEmbd+s.NHead*s.HeadDim+2*s.NHeadKV*s.HeadDim)
	ffn := 4 * u * int64(2*s.NFF)
	if s.MoE() {
		ffn = 4 * u * int64(2*s.NFFExp*s.NExpertUsed+s.NExpert)
	}
	att := 4 * u * int64(s.NHead*s.HeadDim)
	if !o.FlashAttn {
		att = 2 * 4 * u * int64(s.NHead) * int64(o.Ctx)
	}
	peak := max(ffn, att)
	if head {
		peak = max(peak, 4*u*int64(s.NVocab))
	}
	return hidden + peak
}

// Analyze computes the memory breakdown and the best placement for the options.
func Analyze(m *Model, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := m.Shape
	r := &Report{Source: m.Source, Shape: s, Options: optJSON{Ctx: o.Ctx, CacheTypeK: o.CacheTypeK.String(),
		CacheTypeV: o.CacheTypeV.String(), UBatch: o.UBatch, FlashAttn: o.FlashAttn, VRAM: o.VRAM,
		GPUReserve: o.GPUReserve, CPUBandwidth: o.CPUBandwidth, GPUBandwidth: o.GPUBandwidth,
		CPUGFLOPS: o.CPUGFLOPS, GPUTFLOPS: o.GPUTFLOPS, Depth: o.Depth, Overheads: o.Overheads}}
	b := &r.Memory
	b.Params, b.ActiveParams = m.Params()
	b.ByGroup = map[string]int64{}
	b.ByType = m.typeSummary()
	b.Layers = make([]LayerBytes, s.NLayer)
	kvRow, err := kvRowBytes(s, o)
	if err != nil {
		return nil, err
	}
	b.KVPerToken = kvRow * int64(s.NLayer)
	b.KV = b.KVPerToken * int64(o.Ctx)
	for i := range b.Layers {
		b.Layers[i].Layer = i
		b.Layers[i].KV = kvRow * int64(o.Ctx)
	}
	if s.Hybrid != nil {
		hybridKV(s, b, kvRow, o)
	}
	for _, t := range m.Tensors {
		if s.isMTP(t) {
			b.MTPBytes += t.Bytes
			continue
		}
		b.Weights += t.Bytes
		b.ByGroup[t.Group] += t.Bytes
		if t.Layer < 0 {
			switch t.Group {
			case GroupEmbedding:
				b.Embedding += t.Bytes
			default:
				b.Output += t.Bytes
			}
			continue
		}
		if t.Layer >= s.NLayer {
			return nil, fmt.Errorf("tensor %q belongs to block %d, model has %d", t.Name, t.Layer, s.NLayer)
		}
		l := &b.Layers[t.Layer]
		switch t.Group {
		case GroupAttention:
			l.Attention += t.Bytes
		case GroupFFN:
			l.FFN += t.Bytes
		case GroupRouter:
			l.Router += t.Bytes
		case GroupExperts:
			l.Experts += t.Bytes
		default:
			l.Norms += t.Bytes
		}
		l.Total += t.Bytes
	}
	if b.Params > 0 {
		b.BitsPerWeight = float64(8*b.Weights) / float64(b.Params)
	}
	b.Compute = computeBytes(s, o, true)
	b.Total = b.Weights + b.KV + b.Compute
	r.Placement = bestPlacement(m, b, o)
	return r, nil
}

// lmHeadBytes is the LM head read per token (token_embd when tied).
func lmHeadBytes(m *Model) int64 {
	var emb, out int64
	for _, t := range m.Tensors {
		switch t.Name {
		case "output.weight":
			out = t.Bytes
		case "token_embd.weight":
			emb = t.Bytes
		}
	}
	if out == 0 {
		return emb
	}
	return out
}

// evaluate fills in a placement's memory and speed.
func evaluate(m *Model, b *Breakdown, o Options, ngl, cpuMoE int) Placement {
	s := m.Shape
	L := s.NLayer
	p := Placement{GPULayers: min(ngl, L), OutputOnGPU: ngl > L, CPUMoE: cpuMoE, NGL: ngl}
	first := L - p.GPULayers // first block on the GPU
	var st decodeState
	kvRow := float64(b.KVPerToken / int64(L)) // KV bytes of one cached token in one block
	for i, l := range b.Layers {
		dense := l.Total - l.Experts
		activeExp := float64(l.Experts)
		if s.MoE() {
			activeExp = float64(l.Experts) * float64(s.NExpertUsed) / float64(s.NExpert)
		}
		if i >= first {
			st.gpuBlocks++
			p.GPUBytes += dense + l.KV
			st.gpuWeights += float64(dense)
			st.gpuKVRow += kvRow
			if i < cpuMoE {
				p.CPUBytes += l.Experts
				st.cpuWeights += activeExp
				st.cpuBlocks++
				st.switches += 2 // to the CPU for the experts and back
			} else {
				p.GPUBytes += l.Experts
				st.gpuWeights += activeExp
			}
		} else {
			p.CPUBytes += l.Total + l.KV
			st.cpuWeights += float64(dense) + activeExp
			st.cpuKVRow += kvRow
			st.cpuBlocks++
			st.cpuAttnBlocks++
		}
	}
	head := lmHeadBytes(m)
	tiedHead := m.Shape.Tied
	// the output norm and LM head
	if p.OutputOnGPU {
		p.GPUBytes += b.Output
		if tiedHead {
			p.GPUBytes += head // llama.cpp duplicates a tied head onto the output device
		}
		st.gpuWeights += float64(head)
	} else {
		p.CPUBytes += b.Output
		st.cpuWeights += float64(head)
	}
	p.CPUBytes += b.Embedding
	if p.GPULayers > 0 || p.OutputOnGPU {
		p.GPUBytes += computeBytes(s, o, p.OutputOnGPU) + o.GPUReserve
		p.CPUBytes += computeBytes(s, o, !p.OutputOnGPU) / 4 // host staging buffers; estimate
		// the token embedding is looked up on the CPU and the hidden state goes to the GPU;
		// with the head on the CPU, the hidden state comes back before it
		st.switches++
		if !p.OutputOnGPU {
			st.switches++
		}
	} else {
		p.CPUBytes += computeBytes(s, o, true)
	}
	p.Fits = p.GPUBytes == 0 || p.GPUBytes <= o.VRAM
	p.Decode = st.time(s, b, o, o.Depth)
	p.DecodeTokS = 1e3 / p.Decode.TotalMS
	p.DecodeFullTokS = 1e3 / st.time(s, b, o, o.Ctx).TotalMS
	if o.CPUGFLOPS > 0 && (o.GPUTFLOPS > 0 || (p.GPULayers == 0 && !p.OutputOnGPU)) {
		// prompt: 2 FLOP per active weight per token, split by where the weights live
		gpuFrac := st.gpuWeights / max(st.gpuWeights+st.cpuWeights, 1)
		flops := 2 * float64(b.ActiveParams)
		t := flops * (1 - gpuFrac) / (o.CPUGFLOPS * 1e9)
		if o.GPUTFLOPS > 0 {
			t += flops * gpuFrac / (o.GPUTFLOPS * 1e12)
		}
		if t > 0 {
			p.PromptTokS = 1 / t
		}
	}
	p.Args, p.OverrideArg = llamaArgs(s, p, o)
	return p
}

// workMS is the time the step spends reading memory and computing, without the overheads.
func (d DecodeTime) workMS() float64 { return max(d.CPUReadMS, d.CPUComputeMS) + d.GPUReadMS }

// decodeState is what one decode step does on each device under a placement.
type decodeState struct {
	cpuWeights, gpuWeights float64 // weight bytes read per token
	cpuKVRow, gpuKVRow     float64 // KV bytes read per cached token
	cpuBlocks, gpuBlocks   int     // blocks (or their expert parts) computed on each device
	cpuAttnBlocks          int     // blocks whose attention runs on the CPU
	switches               int     // CPU↔GPU hand-overs of the hidden state
}

// time is one decode step with depth tokens in the cache: the bytes each device reads at its
// bandwidth, the CPU's arithmetic (overlapping its reads: the longer counts) and the
// Overheads.
func (st decodeState) time(s Shape, b *Breakdown, o Options, depth int) DecodeTime {
	h := o.Overheads
	d := DecodeTime{Depth: depth, CPUBlocks: st.cpuBlocks, GPUBlocks: st.gpuBlocks, Switches: st.switches}
	cpuKV, gpuKV := st.cpuKVRow*float64(depth), st.gpuKVRow*float64(depth)
	d.KVReadBytes = int64(cpuKV + gpuKV)
	d.CPUReadMS = (st.cpuWeights + cpuKV) / (o.CPUBandwidth * 1e9) * 1e3
	d.GPUReadMS = (st.gpuWeights + gpuKV) / (o.GPUBandwidth * 1e9) * 1e3
	// 2 FLOP per active weight, the CPU's share by bytes; attention: q·k and p·v over the
	// cached tokens, 2 FLOP each per head dimension, in the CPU's blocks
	if w := st.cpuWeights + st.gpuWeights; w > 0 {
		d.CPUFLOP = 2 * float64(b.ActiveParams) * st.cpuWeights / w
	}
	d.CPUFLOP += float64(st.cpuAttnBlocks) * 4 * float64(s.NHead*s.HeadDim) * float64(depth)
	d.CPUComputeMS = d.CPUFLOP / (h.CPUGFLOPS * 1e9) * 1e3
	us := h.TokenUS + h.SampleNS*float64(s.NVocab)/1e3 + h.CPUBlockUS*float64(st.cpuBlocks) +
		h.GPUBlockUS*float64(st.gpuBlocks) + h.SwitchUS*float64(st.switches)
	if st.gpuBlocks > 0 || st.switches > 0 {
		d.GPUUsed = true
		us += h.GPUTokenUS
	}
	d.OverheadMS = us / 1e3
	d.TotalMS = max(d.CPUReadMS, d.CPUComputeMS) + d.GPUReadMS + d.OverheadMS
	// the bound is the largest of the three terms that make up the total
	memory, compute := d.CPUReadMS+d.GPUReadMS, 0.0
	if d.CPUComputeMS > d.CPUReadMS {
		memory, compute = d.GPUReadMS, d.CPUComputeMS
	}
	switch {
	case d.OverheadMS >= memory && d.OverheadMS >= compute:
		d.Bound = "overhead"
	case compute > memory:
		d.Bound = "compute"
	default:
		d.Bound = "bandwidth"
	}
	return d
}

// bestPlacement tries every (-ngl, --n-cpu-moe) pair and keeps the fastest that fits; with no
// VRAM it returns the CPU-only placement. Fastest means the least time reading memory and
// computing on the CPU: the fixed overheads are rough figures, and letting them decide would
// keep a small model off a GPU that holds it on a guess.
func bestPlacement(m *Model, b *Breakdown, o Options) Placement {
	L := m.Shape.NLayer
	best := evaluate(m, b, o, 0, 0)
	if o.VRAM <= 0 {
		return best
	}
	maxMoE := 0
	if m.Shape.MoE() {
		maxMoE = L
	}
	minMoE := 0
	if o.AllExpertsOnCPU {
		minMoE = maxMoE
	}
	for ngl := 0; ngl <= L+1; ngl++ {
		for k := minMoE; k <= maxMoE; k++ {
			if k > minMoE && k <= L-min(ngl, L) {
				continue // experts of CPU blocks are on the CPU anyway
			}
			p := evaluate(m, b, o, ngl, k)
			if !p.Fits {
				continue
			}
			if p.Decode.workMS() < best.Decode.workMS()*(1-1e-9) {
				best = p
			}
			break // larger k only moves more to the CPU
		}
	}
	return best
}

func llamaArgs(s Shape, p Placement, o Options) (args, ot string) {
	var a []string
	a = append(a, "-ngl", strconv.Itoa(p.NGL))
	if p.CPUMoE > 0 {
		a = append(a, "--n-cpu-moe", strconv.Itoa(p.CPUMoE))
		var ids []string
		for i := 0; i < p.CPUMoE; i++ {
			ids = append(ids, strconv.Itoa(i))
		}
		ot = fmt.Sprintf(`blk\.(%s)\.ffn_(up|down|gate)_exps=CPU`, strings.Join(ids, "|"))
	}
	a = append(a, "-c", strconv.Itoa(o.Ctx))
	if o.CacheTypeK != gguf.TypeF16 {
		a = append(a, "--cache-type-k", o.CacheTypeK.String())
	}
	if o.CacheTypeV != gguf.TypeF16 {
		a = append(a, "--cache-type-v", o.CacheTypeV.String())
	}
	if o.FlashAttn {
		a = append(a, "-fa", "on")
	}
	if o.UBatch != 512 {
		a = append(a, "-ub", strconv.Itoa(o.UBatch))
	}
	return strings.Join(a, " "), ot
}
