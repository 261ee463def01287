package infer

import (
	"fmt"
	"runtime"
	"strings"
)

// LayerRunner evaluates a model one transformer block at a time, the access pattern of
// layer-by-layer calibration: every calibration sequence goes through block i (its hidden
// states kept by the caller), then block i+1, so that only one block's weights need to be in
// memory. It reuses the building blocks of Session (the same attention, FFN, MoE routing and
// observer calls), so a sequence pushed through all blocks in order produces exactly the hidden
// states Session.Eval computes for it from an empty cache.
//
// Embedding lookup and the output head are left to the caller (the caller holds the hidden
// states). A LayerRunner is not safe for concurrent use.
type LayerRunner struct {
	full *Config // the model's hyperparameters
	m    *Model  // a one-block model (cfg.NLayer == 1) holding the loaded block
	s    *Session
	il   int // index of the loaded block, -1 when none
	b    *block
	spec *archSpec
}

// NewLayerRunner reads the hyperparameters from src and prepares a runner. src needs the
// metadata and, where the architecture has them, the global tensors read at load time besides
// the blocks (rope_freqs.weight for llama; optional); token_embd, output_norm and output are
// not read. Options.CtxSize bounds the sequence length Forward accepts (<= 0: the training
// context, capped at 4096); BatchSize, FullPrecision, Threads and the cache types apply as for Load.
func NewLayerRunner(src Source, opts Options) (*LayerRunner, error) {
	cfg, err := ReadConfig(src)
	if err != nil {
		return nil, fmt.Errorf("infer: %w", err)
	}
	spec := archs[cfg.Arch]
	if spec == nil {
		return nil, fmt.Errorf("infer: unsupported architecture %q (supported: %s)", cfg.Arch, supportedArchs())
	}
	one := *cfg
	one.NLayer = 1
	if one.Hybrid != nil {
		// the one-block model has no MTP blocks, and its KV cache and recurrent state serve
		// whichever kind of block is loaded
		h := *one.Hybrid
		h.Linear, h.NextN = nil, 0
		one.Hybrid = &h
	}
	m := &Model{cfg: &one, src: src, opts: opts}
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
	if spec.loadGlobal != nil {
		spec.loadGlobal(ld, &one, m)
	}
	if ld.err != nil {
		return nil, fmt.Errorf("infer: %s: %w", cfg.Arch, ld.err)
	}
	m.rope = newRopeParams(&one, m.ropeFreqs)
	m.pool = newPool(opts.Threads)
	m.maxRow = max(cfg.NEmbd, cfg.NFF, cfg.NFFExp, cfg.QDim(), m.opts.CtxSize)
	m.wscratch = make([][]float32, m.pool.threads())
	for i := range m.wscratch {
		m.wscratch[i] = make([]float32, m.maxRow)
	}
	runtime.AddCleanup(m, func(p *pool) { p.close() }, m.pool)
	s, err := m.NewSession()
	if err != nil {
		m.pool.close()
		return nil, err
	}
	return &LayerRunner{full: cfg, m: m, s: s, il: -1, spec: spec}, nil
}

// Config returns the model's hyperparameters (NLayer is the model's full depth).
func (r *LayerRunner) Config() *Config { return r.full }

// SetPackWeights turns Options.PackWeights on or off for the products that follow (the
// caller accounts for the memory: twice the loaded block's 16-bit matrices).
func (r *LayerRunner) SetPackWeights(on bool) { r.m.opts.PackWeights = on }

// SetBF16Products turns Options.BF16Products on or off for the products that follow.
func (r *LayerRunner) SetBF16Products(on bool) { r.m.opts.BF16Products = on }

// Options returns the options in effect (defaults filled in).
func (r *LayerRunner) Options() Options { return r.m.opts }

// Threads is the number of worker goroutines.
func (r *LayerRunner) Threads() int { return r.m.pool.threads() }

// Layer is the index of the loaded block, or -1.
func (r *LayerRunner) Layer() int { return r.il }

// LoadBlock loads block il from src, which must hold every tensor of that block ("blk.IL.*")
// and no tensor named "blk.IL.*" that the architecture does not use (llama.cpp rejects such
// files); tensors of other blocks are ignored. The tensors' bytes are used in place until the
// next LoadBlock or Release. The previously loaded block is dropped.
func (r *LayerRunner) LoadBlock(il int, src Source) error {
	r.Release()
	if il < 0 || il >= r.full.NLayer {
		return fmt.Errorf("infer: block %d out of range (model has %d)", il, r.full.NLayer)
	}
	ld := &loader{src: src, used: map[string]bool{}}
	b := r.spec.loadBlock(ld, r.full, il)
	if ld.err == nil {
		prefix := fmt.Sprintf("blk.%d.", il)
		for _, n := range src.TensorNames() {
			if strings.HasPrefix(n, prefix) && !ld.used[n] {
				ld.fail(fmt.Errorf("unexpected tensor %q for this architecture", n))
				break
			}
		}
	}
	if ld.err != nil {
		return fmt.Errorf("infer: %s: %w", r.full.Arch, ld.err)
	}
	r.b, r.il = b, il
	return nil
}

// Release drops the loaded block's weights.
func (r *LayerRunner) Release() {
	r.b, r.il = nil, -1
}

// layerObserver reports MoE routing under the real block index (the one-block model numbers
// its only block 0).
type layerObserver struct {
	o  Observer
	il int
}

func (l layerObserver) Linear(name string, expert int, x []float32, n, cols int) {
	l.o.Linear(name, expert, x, n, cols)
}

func (l layerObserver) Route(_ int, experts []int32, weights []float32, n, k int) {
	l.o.Route(l.il, experts, weights, n, k)
}

// DeltaNet passes the trace on under the real block index when the observer wants it.
func (l layerObserver) DeltaNet(_ int, tr *DeltaNetTrace) {
	if d, ok := l.o.(DeltaNetObserver); ok {
		d.DeltaNet(l.il, tr)
	}
}

// Forward runs the loaded block over one whole sequence: x holds T rows of n_embd (the
// residual stream entering the block, positions 0..T-1) and is replaced by the stream leaving
// it. The sequence is processed in batches of Options.BatchSize tokens with a fresh KV cache,
// exactly as Session.Eval processes a prompt. obs (may be nil) sees the inputs of the block's
// linear layers and its MoE routing.
func (r *LayerRunner) Forward(x []float32, T int, obs Observer) error {
	if r.b == nil {
		return fmt.Errorf("infer: no block loaded")
	}
	E := r.full.NEmbd
	if T <= 0 || len(x) != T*E {
		return fmt.Errorf("infer: forward: %d values for %d rows of %d", len(x), T, E)
	}
	if T > r.s.kv.ctx {
		return fmt.Errorf("infer: sequence of %d tokens exceeds the runner's context size %d", T, r.s.kv.ctx)
	}
	s := r.s
	if obs != nil {
		s.obs = layerObserver{o: obs, il: r.il}
	} else {
		s.obs = nil
	}
	defer func() { s.obs = nil }()
	s.pos = 0
	B := r.m.opts.BatchSize
	for off := 0; off < T; off += B {
		n := min(B, T-off)
		s.beginBatch(n)
		copy(s.x[:n*E], x[off*E:(off+n)*E])
		s.layer(r.b, 0, n, off)
		copy(x[off*E:(off+n)*E], s.x[:n*E])
		s.pos = off + n
	}
	s.pos = 0
	return nil
}

// Close stops the worker goroutines. The runner must not be used afterwards.
func (r *LayerRunner) Close() error {
	r.Release()
	r.m.pool.close()
	return nil
}
