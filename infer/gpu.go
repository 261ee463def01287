package infer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
)

// Hybrid CPU/GPU execution (Options.Backend, GPULayers, CPUMoE).
//
// The last GPULayers blocks run on the device: their weights are uploaded once at Load, straight
// from the tensors' bytes (the GGUF memory map), norms and biases as float32. A batch runs the CPU
// blocks as usual, writes the hidden state (T × n_embd floats) to the device, runs the device
// blocks there and reads it back, or, when the LM head is on the device too, keeps it there and
// reads back only the logits of the rows asked for. Nothing else crosses between host and device,
// except for MoE blocks whose experts stay on the CPU (CPUMoE): the router runs on the device, the
// routing (experts and weights) comes back to the host, the host runs the selected experts on the
// normalised rows it reads back and writes their combined output to the device.
//
// Device blocks compute in float32 on weights in their GGUF encoding (no activation rounding to
// q8/f16, unlike the CPU default; the CPU's Options.FullPrecision computes the same products), with
// an f16 or q8_0 KV cache on the device (the query rounded to the key type and, for an f16 value
// cache, the attention probabilities to f16, as on the CPU).
//
// The hybrid blocks of qwen35 / qwen35moe run on the device too (gpu_hybrid.go): a Gated
// DeltaNet block keeps its convolution and delta-rule states in device memory per session; only
// the gated-attention blocks have a slice of the device KV cache.
//
// Not supported on the device, each reported by Load as one error wrapping ErrGPUUnsupported:
// weight types outside cuda.MatVecTypes, KV cache types other than f16 and q8_0, head_dim > 256, a
// DeltaNet state size > 256, more than 1024 experts or more than 64 used. An Observer cannot watch device blocks:
// Session.Eval returns an error when one is set on a model with GPU layers.

// ErrGPUUnsupported is wrapped by the Load error when the requested GPU layers need something the
// device backend cannot do; the same model loads on the CPU (GPULayers 0).
var ErrGPUUnsupported = errors.New("not supported on the GPU")

// errObserverGPU is returned by Eval when an Observer is set on a model with device blocks.
var errObserverGPU = errors.New("infer: an Observer cannot watch GPU layers: load the model with GPULayers 0 to observe activations")

// GPUPlacement describes where a loaded model runs.
type GPUPlacement struct {
	Layers      int   `json:"gpu_layers"`    // blocks on the device (the last ones)
	First       int   `json:"first_gpu"`     // index of the first device block (n_layer when none)
	OutputOnGPU bool  `json:"output_on_gpu"` // output norm and LM head on the device
	CPUMoE      int   `json:"cpu_moe"`       // device blocks whose experts stay on the CPU
	WeightBytes int64 `json:"gpu_weight_bytes"`
}

// GPUPlacement returns the model's device placement (zero Layers: CPU only).
func (m *Model) GPUPlacement() GPUPlacement {
	g := m.gpu
	if g == nil {
		return GPUPlacement{First: m.cfg.NLayer}
	}
	p := GPUPlacement{Layers: m.cfg.NLayer - g.first, First: g.first, OutputOnGPU: g.head, WeightBytes: g.bytes}
	for _, b := range g.blocks {
		if b.moe != nil && b.gateExp == nil {
			p.CPUMoE++
		}
	}
	return p
}

// gpuModel holds the device side of a model: the weights of the device blocks and, with head,
// of the output norm and LM head.
type gpuModel struct {
	be      cuda.Backend
	first   int         // first device block
	head    bool        // output norm + LM head on the device
	blocks  []*gpuBlock // blocks first..n_layer-1
	outNorm cuda.Buffer
	output  *cuda.Tensor
	rope    cuda.Rope
	nKV     int   // device blocks with a KV cache slice
	nState  int   // device Gated DeltaNet blocks (recurrent states per session)
	bytes   int64 // device memory of the uploaded weights
	graphs  bool  // Options.GPUGraphs: replay recorded single-token steps

	tensors []*cuda.Tensor // everything uploaded, for Close
	buffers []cuda.Buffer

	mu       sync.Mutex
	closed   bool
	sessions map[*gpuSession]struct{}
}

// gpuBlock is one block's weights on the device. The dense FFN (gate, up, down) or the MoE
// router and experts are set; gateExp is nil when the experts stay on the CPU (moe then points at
// the host weights).
type gpuBlock struct {
	attnNorm, ffnNorm      cuda.Buffer
	q, k, v, o             *cuda.Tensor
	bq, bk, bv, bo         cuda.Buffer
	qNorm, kNorm           cuda.Buffer
	gate, up, down         *cuda.Tensor
	moe                    *moeFFN
	router                 *cuda.Tensor
	gateExp, upExp, downEx *cuda.Tensor
	kv                     int        // slice of the device KV cache (-1: a Gated DeltaNet block has none)
	hy                     *gpuHybrid // qwen35 / qwen35moe block parts (nil for the other architectures)
}

// setupGPU validates the GPU options and uploads the device blocks' weights.
func (m *Model) setupGPU() error {
	o := &m.opts
	c := m.cfg
	switch {
	case o.GPULayers < 0:
		return fmt.Errorf("infer: GPULayers %d is negative", o.GPULayers)
	case o.CPUMoE < 0:
		return fmt.Errorf("infer: CPUMoE %d is negative", o.CPUMoE)
	case o.GPULayers == 0:
		return nil
	case o.Backend == nil || isNilDevice(o.Backend):
		return fmt.Errorf("infer: GPULayers %d needs a Backend (Options.Backend is nil)", o.GPULayers)
	}
	unsupported := func(format string, args ...any) error {
		return fmt.Errorf("infer: GPU layers: %s: %w", fmt.Sprintf(format, args...), ErrGPUUnsupported)
	}
	if c.Hybrid != nil && c.Hybrid.DState > 256 {
		return unsupported("the Gated DeltaNet state size %d exceeds the device delta rule's limit of 256", c.Hybrid.DState)
	}
	for _, t := range []gguf.GGMLType{m.tk, m.tv} {
		if !slices.Contains(cuda.KVCacheTypes(), t) {
			return unsupported("the device KV cache takes f16 and q8_0 (cache types %s/%s requested)", m.tk, m.tv)
		}
	}
	if c.HeadDim > 256 {
		return unsupported("head_dim %d exceeds the device attention limit of 256", c.HeadDim)
	}
	if c.NExpert > 1024 || c.NExpertUse > 64 {
		return unsupported("%d experts with %d used exceed the device router's limits (1024, 64)", c.NExpert, c.NExpertUse)
	}
	g := &gpuModel{be: o.Backend, first: max(0, c.NLayer-o.GPULayers), head: o.GPULayers > c.NLayer,
		graphs: o.GPUGraphs, sessions: map[*gpuSession]struct{}{}}
	if err := g.upload(m); err != nil {
		g.free()
		return err
	}
	m.gpu = g
	return nil
}

// isNilDevice reports a nil *cuda.Device stored in the interface (cuda.Select returns one for
// the CPU).
func isNilDevice(b cuda.Backend) bool {
	d, ok := b.(*cuda.Device)
	return ok && d == nil
}

// checkMatVec reports an ErrGPUUnsupported error when the device cannot multiply by l.
func checkMatVec(l *linear) error {
	if slices.Contains(cuda.MatVecTypes(), l.t) {
		return nil
	}
	var names []string
	for _, t := range cuda.MatVecTypes() {
		names = append(names, t.String())
	}
	return fmt.Errorf("infer: GPU layers: tensor %q is %s; the CUDA mat-vec kernels take %s: %w",
		l.name, l.t, strings.Join(names, ", "), ErrGPUUnsupported)
}

// upload copies the weights of the device blocks (and head) to the device. Every weight type is
// checked before anything is uploaded.
func (g *gpuModel) upload(m *Model) error {
	c := m.cfg
	var mats []*linear
	for il := g.first; il < c.NLayer; il++ {
		b := m.blocks[il]
		if hb := b.hybrid; hb != nil && hb.linear {
			mats = append(mats, hb.qkv, hb.z, hb.beta, hb.alpha, hb.out)
		} else {
			mats = append(mats, b.q, b.k, b.v, b.o)
		}
		if hb := b.hybrid; hb != nil && hb.shGate != nil {
			mats = append(mats, hb.shGate, hb.shUp, hb.shDown)
		}
		switch f := b.ffn.(type) {
		case *denseFFN:
			mats = append(mats, f.gate, f.up, f.down)
		case *moeFFN:
			mats = append(mats, f.router)
			if il >= m.opts.CPUMoE {
				mats = append(mats, f.gate, f.up, f.down)
			}
		default:
			return fmt.Errorf("infer: GPU layers: block %d has a feed-forward kind the device cannot run: %w", il, ErrGPUUnsupported)
		}
	}
	if g.head {
		mats = append(mats, m.output)
	}
	for _, l := range mats {
		if err := checkMatVec(l); err != nil {
			return err
		}
	}

	var err error
	tensor := func(l *linear) *cuda.Tensor {
		if err != nil || l == nil {
			return nil
		}
		dims := []int64{int64(l.in), int64(l.out)}
		if l.nmat > 1 {
			dims = append(dims, int64(l.nmat))
		}
		t, e := g.be.Upload(l.name, l.t, dims, l.data)
		if e != nil {
			err = fmt.Errorf("infer: GPU layers: %w", e)
			return nil
		}
		g.tensors = append(g.tensors, t)
		g.bytes += t.Bytes()
		return t
	}
	vec := func(v []float32) cuda.Buffer {
		if err != nil || v == nil {
			return cuda.Buffer{}
		}
		b, e := g.be.UploadF32(v)
		if e != nil {
			err = fmt.Errorf("infer: GPU layers: %w", e)
			return cuda.Buffer{}
		}
		g.buffers = append(g.buffers, b)
		g.bytes += int64(len(v)) * 4
		return b
	}
	for il := g.first; il < c.NLayer && err == nil; il++ {
		b := m.blocks[il]
		gb := &gpuBlock{attnNorm: vec(b.attnNorm), ffnNorm: vec(b.ffnNorm),
			q: tensor(b.q), k: tensor(b.k), v: tensor(b.v), o: tensor(b.o),
			bq: vec(b.bq), bk: vec(b.bk), bv: vec(b.bv), bo: vec(b.bo), qNorm: vec(b.qNorm), kNorm: vec(b.kNorm), kv: -1}
		if hb := b.hybrid; hb != nil {
			gb.ffnNorm = vec(hb.postNorm)
			gb.hy = g.uploadHybrid(hb, tensor, vec, &err)
		}
		if gb.hy == nil || !gb.hy.linear {
			gb.kv = g.nKV
			g.nKV++
		}
		switch f := b.ffn.(type) {
		case *denseFFN:
			gb.gate, gb.up, gb.down = tensor(f.gate), tensor(f.up), tensor(f.down)
		case *moeFFN:
			gb.moe, gb.router = f, tensor(f.router)
			if il >= m.opts.CPUMoE {
				gb.gateExp, gb.upExp, gb.downEx = tensor(f.gate), tensor(f.up), tensor(f.down)
			}
		}
		g.blocks = append(g.blocks, gb)
	}
	if g.head {
		g.outNorm = vec(m.outNorm)
		g.output = tensor(m.output)
	}
	r := m.rope
	freqs := r.freqs
	if c.Hybrid != nil {
		freqs = hybridRopeFreqs(r.freqs, c.Hybrid.RopeIdentity, r.nRot)
	}
	g.rope = cuda.Rope{NeoX: r.mode == RopeNeox, NRot: r.nRot, ThetaScale: r.thetaScale, FreqScale: r.freqScale,
		ExtFactor: r.extFactor, AttnFactor: r.attnFactor, Corr: r.corr, Freqs: vec(freqs)}
	return err
}

// free releases the uploaded weights; errors are ignored past the first.
func (g *gpuModel) free() error {
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	for _, t := range g.tensors {
		keep(g.be.FreeTensor(t))
	}
	for _, b := range g.buffers {
		keep(g.be.Free(b))
	}
	g.tensors, g.buffers = nil, nil
	return first
}

// closeGPU frees the device memory of the model and of its sessions.
func (m *Model) closeGPU() error {
	g := m.gpu
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var first error
	for s := range g.sessions {
		if err := s.release(); err != nil && first == nil {
			first = err
		}
	}
	clear(g.sessions)
	if err := g.free(); err != nil && first == nil {
		first = err
	}
	if first != nil {
		return fmt.Errorf("infer: freeing device memory: %w", first)
	}
	return nil
}
