package infer

import (
	"fmt"
	"runtime"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
)

// Options configure a loaded model and the sessions it makes.
type Options struct {
	// Threads is the number of worker goroutines (<= 0: all CPUs).
	Threads int
	// CtxSize is the KV cache length in tokens (<= 0: the training context, capped at 4096).
	CtxSize int
	// CacheTypeK and CacheTypeV are the KV cache types as llama.cpp names them: "f16" (default),
	// "f32", "bf16", "q8_0", "q4_0".
	CacheTypeK, CacheTypeV string
	// BatchSize is the most tokens evaluated together through each layer (<= 0: 512).
	BatchSize int
	// FullPrecision computes every matrix product in float32 on dequantized weights without
	// rounding the activations to the weight type's vec_dot type (f16, q8_0, q8_K) first, as
	// calibration and reference runs want. By default activations are rounded as llama.cpp's
	// CPU backend rounds them, for parity.
	FullPrecision bool
	// PackWeights (with FullPrecision) keeps every BF16/F16 weight tile widened and packed for
	// the GEMM after its first product, so that later batches through the same weights skip
	// that work: twice the matrices' memory, for as long as they are loaded. Calibration runs
	// every sequence through a block's weights and sets it when its memory budget allows.
	PackWeights bool
	// BF16Products (with FullPrecision) multiplies bf16 weights by activations rounded to the
	// nearest bf16, as ggml does for bf16 weights, where the CPU has AMX or AVX512-BF16
	// (kernels.SgemmHalfRounded: twice the float32 GEMM's speed on AMD Zen 5, twice the exact
	// three-piece AMX path's on Sapphire Rapids), for batches of at least kernels.AMXMinRows
	// rows; elsewhere it changes nothing. Each activation moves by
	// at most 2⁻⁹ of itself; products and sums stay exact float32. Calibration sets it unless
	// asked for an exact forward.
	BF16Products bool
	// BatchGEMM also runs multi-token products of quantized weights as a float32 GEMM on
	// dequantized weight tiles (activations still rounded): about twice as fast for long
	// prompts with the AVX2 kernels, but a long float32 accumulation moves activations across
	// rounding boundaries of the next q8 conversion more often than ggml's block-exact integer
	// sums, so agreement with llama.cpp is looser. Float weights always use the GEMM for batches.
	BatchGEMM bool

	// Backend runs the last GPULayers blocks on a device (nil: everything on the CPU). The
	// caller owns it: Model.Close frees what the model uploaded but does not close the backend.
	Backend cuda.Backend
	// GPULayers is how many blocks run on the Backend, counted from the last one as llama.cpp's
	// -ngl counts them; a value above n_layer also puts the output norm and the LM head on the
	// device (n_layer+1 and larger: everything but the embedding lookup). 0: CPU only. Device
	// layers compute in float32 on the weights in their GGUF encoding (no activation rounding),
	// keep an f16 KV cache on the device, and exchange only the hidden state with the CPU
	// layers. See docs/cuda.md and gpu.go for what they support.
	GPULayers int
	// CPUMoE keeps the expert tensors of the first CPUMoE blocks on the CPU, as llama.cpp's
	// --n-cpu-moe does: a device block among them routes on the device, runs the selected
	// experts on the CPU and adds their output back on the device. >= n_layer keeps every
	// expert on the CPU (--cpu-moe).
	CPUMoE int
	// GPUGraphs makes each session record the device blocks' kernel launches of one
	// single-token step once (at the first such step after position 0) and replay that CUDA
	// graph for every later one, instead of launching kernel by kernel: the same kernels with
	// the same results, without the per-launch host cost that bounds the decode speed of small
	// and medium models. Off by default until measured on real GPUs (see docs/cuda.md).
	GPUGraphs bool

	// gemmMin is the smallest batch that uses the tiled f32 GEMM (0: defaultGemmMin; < 0:
	// never). Tests use it to force one path.
	gemmMin int
}

// defaultGemmMin: from this many rows on, a product dequantizes weight tiles and runs the f32
// GEMM kernel instead of one integer dot product per (row, token).
const defaultGemmMin = 8

// Model is a loaded model: hyperparameters, weights (in place) and a worker pool.
type Model struct {
	cfg       *Config
	src       Source
	opts      Options
	tk, tv    gguf.GGMLType
	tokEmbd   *linear
	outNorm   []float32
	output    *linear
	ropeFreqs []float32
	blocks    []*block
	rope      ropeParams
	pool      *pool
	wscratch  [][]float32 // per-worker scratch (dequantized rows etc.)
	maxRow    int
	gpu       *gpuModel // device placement and uploaded weights (gpu.go); nil: CPU only
}

// Load checks the source's hyperparameters and tensors and prepares a model. The tensors' bytes
// are used in place; Source must keep them valid until the model is closed.
func Load(src Source, opts Options) (*Model, error) {
	cfg, err := ReadConfig(src)
	if err != nil {
		return nil, fmt.Errorf("infer: %w", err)
	}
	spec := archs[cfg.Arch]
	m := &Model{cfg: cfg, src: src, opts: opts}
	if m.tk, err = ParseCacheType(opts.CacheTypeK); err != nil {
		return nil, fmt.Errorf("infer: cache-type-k: %w", err)
	}
	if m.tv, err = ParseCacheType(opts.CacheTypeV); err != nil {
		return nil, fmt.Errorf("infer: cache-type-v: %w", err)
	}
	if m.opts.CtxSize <= 0 {
		m.opts.CtxSize = min(cfg.CtxTrain, 4096)
		if m.opts.CtxSize <= 0 {
			m.opts.CtxSize = 4096
		}
	}
	if m.opts.CtxSize > maxDim {
		return nil, fmt.Errorf("infer: context size %d is too large", m.opts.CtxSize)
	}
	if m.opts.BatchSize <= 0 {
		m.opts.BatchSize = 512
	}
	ld := &loader{src: src, used: map[string]bool{}}
	emb, ok := src.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("infer: tensor %q is missing", "token_embd.weight")
	}
	if len(emb.Dims) < 2 || emb.Dims[1] <= 0 || emb.Dims[1] > 1<<28 {
		return nil, fmt.Errorf("infer: tensor %q has shape %v, want [%d n_vocab]", "token_embd.weight", emb.Dims, cfg.NEmbd)
	}
	cfg.NVocab = int(emb.Dims[1])
	m.tokEmbd = ld.linear("token_embd.weight", cfg.NEmbd, cfg.NVocab, 1, true)
	m.outNorm = ld.vector("output_norm.weight", cfg.NEmbd, true)
	m.output = ld.linear("output.weight", cfg.NEmbd, cfg.NVocab, 1, false)
	if m.output == nil && ld.err == nil {
		m.output = m.tokEmbd
	}
	if spec.loadGlobal != nil {
		spec.loadGlobal(ld, cfg, m)
	}
	for il := 0; il < cfg.NLayer && ld.err == nil; il++ {
		m.blocks = append(m.blocks, spec.loadBlock(ld, cfg, il))
	}
	ld.checkAllUsed()
	if ld.err != nil {
		return nil, fmt.Errorf("infer: %s: %w", cfg.Arch, ld.err)
	}
	m.rope = newRopeParams(cfg, m.ropeFreqs)
	m.pool = newPool(opts.Threads)
	m.maxRow = max(cfg.NEmbd, cfg.NFF, cfg.NFFExp, cfg.QDim(), cfg.NVocab, m.opts.CtxSize)
	m.wscratch = make([][]float32, m.pool.threads())
	for i := range m.wscratch {
		m.wscratch[i] = make([]float32, m.maxRow)
	}
	if err := m.setupGPU(); err != nil {
		m.pool.close()
		return nil, err
	}
	// stop the workers when the model becomes unreachable
	runtime.AddCleanup(m, func(p *pool) { p.close() }, m.pool)
	return m, nil
}

// Config returns the model's hyperparameters.
func (m *Model) Config() *Config { return m.cfg }

// Options returns the options in effect (defaults filled in).
func (m *Model) Options() Options { return m.opts }

// Threads is the number of worker goroutines.
func (m *Model) Threads() int { return m.pool.threads() }

// Close stops the worker goroutines and frees the device memory of the model and its sessions
// (not the Backend itself). The model must not be used afterwards.
func (m *Model) Close() error {
	m.pool.close()
	return m.closeGPU()
}
