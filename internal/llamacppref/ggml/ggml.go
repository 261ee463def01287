//go:build linux && amd64

// Package ggml is test support: it calls single ggml operations of llama.cpp's own CPU
// backend (node-llama-cpp's prebuilt libggml-base.so and libggml-cpu-haswell.so, the AVX2
// variant the parity tests run against) through purego, so that tests can require our
// implementations of individual operations (RoPE, RMSNorm, softmax, ...) to reproduce
// llama.cpp bit for bit. A missing library skips the calling test, or fails it when
// TQ_REQUIRE_REFS=1.
package ggml

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/cpu"

	"github.com/tq-project/tq/internal/llamacppref"
)

// Type is a ggml_type.
type Type int32

const (
	F32 Type = 0
	F16 Type = 1
	I32 Type = 26
)

type initParams struct {
	memSize   uintptr
	memBuffer unsafe.Pointer
	noAlloc   bool
	_         [7]byte
}

type lib struct {
	init         func(p initParams) unsafe.Pointer
	free         func(ctx unsafe.Pointer)
	newTensor    func(ctx unsafe.Pointer, typ Type, ndims int32, ne *int64) unsafe.Pointer
	getData      func(t unsafe.Pointer) unsafe.Pointer
	nbytes       func(t unsafe.Pointer) uintptr
	newGraph     func(ctx unsafe.Pointer) unsafe.Pointer
	buildForward func(g, t unsafe.Pointer)
	computeCtx   func(ctx, g unsafe.Pointer, threads int32) int32
	ropeExt      func(ctx, a, b, c unsafe.Pointer, nDims, mode, nCtxOrig int32, base, scale, extFactor, attnFactor, betaFast, betaSlow float32) unsafe.Pointer
	rmsNorm      func(ctx, a unsafe.Pointer, eps float32) unsafe.Pointer
	mul          func(ctx, a, b unsafe.Pointer) unsafe.Pointer
	softMaxExt   func(ctx, a, mask unsafe.Pointer, scale, maxBias float32) unsafe.Pointer
	swigluSplit  func(ctx, a, b unsafe.Pointer) unsafe.Pointer
	cpuInit      func()
	// operations of the Qwen3.5 hybrid graph
	add           func(ctx, a, b unsafe.Pointer) unsafe.Pointer
	mulMat        func(ctx, a, b unsafe.Pointer) unsafe.Pointer
	silu          func(ctx, a unsafe.Pointer) unsafe.Pointer
	sigmoid       func(ctx, a unsafe.Pointer) unsafe.Pointer
	softplus      func(ctx, a unsafe.Pointer) unsafe.Pointer
	exp           func(ctx, a unsafe.Pointer) unsafe.Pointer
	l2Norm        func(ctx, a unsafe.Pointer, eps float32) unsafe.Pointer
	ssmConv       func(ctx, sx, c unsafe.Pointer) unsafe.Pointer
	gatedDeltaNet func(ctx, q, k, v, g, beta, state unsafe.Pointer, snapshots int64) unsafe.Pointer
	ropeMulti     func(ctx, a, b, c unsafe.Pointer, nDims int32, sections *int32, mode, nCtxOrig int32, base, scale, extFactor, attnFactor, betaFast, betaSlow float32) unsafe.Pointer
}

var (
	once    sync.Once
	theLib  *lib
	loadErr error
)

// Lib is the loaded ggml library.
type Lib struct{ l *lib }

// Open loads llama.cpp's ggml libraries once per process.
func Open(t testing.TB) *Lib {
	t.Helper()
	dir := llamacppref.Path(t, filepath.Join("node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64"))
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA || !cpu.X86.HasF16C || !cpu.X86.HasBMI2 {
		t.Skip("this CPU cannot run llama.cpp's haswell CPU variant (needs AVX2, FMA, F16C, BMI2)")
	}
	once.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				loadErr = fmt.Errorf("ggml: %v", r)
			}
		}()
		base, err := purego.Dlopen(filepath.Join(dir, "libggml-base.so"), purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			loadErr = err
			return
		}
		cpuLib, err := purego.Dlopen(filepath.Join(dir, "libggml-cpu-haswell.so"), purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			loadErr = err
			return
		}
		l := &lib{}
		purego.RegisterLibFunc(&l.init, base, "ggml_init")
		purego.RegisterLibFunc(&l.free, base, "ggml_free")
		purego.RegisterLibFunc(&l.newTensor, base, "ggml_new_tensor")
		purego.RegisterLibFunc(&l.getData, base, "ggml_get_data")
		purego.RegisterLibFunc(&l.nbytes, base, "ggml_nbytes")
		purego.RegisterLibFunc(&l.newGraph, base, "ggml_new_graph")
		purego.RegisterLibFunc(&l.buildForward, base, "ggml_build_forward_expand")
		purego.RegisterLibFunc(&l.ropeExt, base, "ggml_rope_ext")
		purego.RegisterLibFunc(&l.rmsNorm, base, "ggml_rms_norm")
		purego.RegisterLibFunc(&l.mul, base, "ggml_mul")
		purego.RegisterLibFunc(&l.softMaxExt, base, "ggml_soft_max_ext")
		purego.RegisterLibFunc(&l.swigluSplit, base, "ggml_swiglu_split")
		purego.RegisterLibFunc(&l.add, base, "ggml_add")
		purego.RegisterLibFunc(&l.mulMat, base, "ggml_mul_mat")
		purego.RegisterLibFunc(&l.silu, base, "ggml_silu")
		purego.RegisterLibFunc(&l.sigmoid, base, "ggml_sigmoid")
		purego.RegisterLibFunc(&l.softplus, base, "ggml_softplus")
		purego.RegisterLibFunc(&l.exp, base, "ggml_exp")
		purego.RegisterLibFunc(&l.l2Norm, base, "ggml_l2_norm")
		purego.RegisterLibFunc(&l.ssmConv, base, "ggml_ssm_conv")
		purego.RegisterLibFunc(&l.gatedDeltaNet, base, "ggml_gated_delta_net")
		purego.RegisterLibFunc(&l.ropeMulti, base, "ggml_rope_multi")
		purego.RegisterLibFunc(&l.computeCtx, cpuLib, "ggml_graph_compute_with_ctx")
		purego.RegisterLibFunc(&l.cpuInit, cpuLib, "ggml_cpu_init")
		l.cpuInit()
		theLib = l
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return &Lib{theLib}
}

// Ctx is a ggml context holding tensors and a graph; Free releases it.
type Ctx struct {
	l *lib
	p unsafe.Pointer
}

// Tensor is a ggml tensor in a Ctx.
type Tensor struct{ p unsafe.Pointer }

// NewCtx allocates a context with mem bytes for tensors and graph.
func (l *Lib) NewCtx(mem int) *Ctx {
	return &Ctx{l: l.l, p: l.l.init(initParams{memSize: uintptr(mem)})}
}

// Free releases the context.
func (c *Ctx) Free() { c.l.free(c.p) }

func (c *Ctx) tensor(typ Type, ne []int64) Tensor {
	return Tensor{c.l.newTensor(c.p, typ, int32(len(ne)), &ne[0])}
}

// F32 creates an f32 tensor of shape ne (ne[0] fastest) holding data.
func (c *Ctx) F32(data []float32, ne ...int64) Tensor {
	t := c.tensor(F32, ne)
	copy(unsafe.Slice((*float32)(c.l.getData(t.p)), len(data)), data)
	return t
}

// I32 creates an i32 tensor of shape ne holding data.
func (c *Ctx) I32(data []int32, ne ...int64) Tensor {
	t := c.tensor(I32, ne)
	copy(unsafe.Slice((*int32)(c.l.getData(t.p)), len(data)), data)
	return t
}

// RopeExt is ggml_rope_ext (no frequency factors when ff is the zero Tensor).
func (c *Ctx) RopeExt(a, pos, ff Tensor, nDims, mode, nCtxOrig int, base, scale, extFactor, attnFactor, betaFast, betaSlow float32) Tensor {
	return Tensor{c.l.ropeExt(c.p, a.p, pos.p, ff.p, int32(nDims), int32(mode), int32(nCtxOrig), base, scale, extFactor, attnFactor, betaFast, betaSlow)}
}

// RMSNorm is ggml_rms_norm.
func (c *Ctx) RMSNorm(a Tensor, eps float32) Tensor { return Tensor{c.l.rmsNorm(c.p, a.p, eps)} }

// Mul is ggml_mul (b broadcast over a's rows).
func (c *Ctx) Mul(a, b Tensor) Tensor { return Tensor{c.l.mul(c.p, a.p, b.p)} }

// SoftMaxExt is ggml_soft_max_ext (mask may be the zero Tensor).
func (c *Ctx) SoftMaxExt(a, mask Tensor, scale, maxBias float32) Tensor {
	return Tensor{c.l.softMaxExt(c.p, a.p, mask.p, scale, maxBias)}
}

// SwigluSplit is ggml_swiglu_split: silu(a)·b.
func (c *Ctx) SwigluSplit(a, b Tensor) Tensor { return Tensor{c.l.swigluSplit(c.p, a.p, b.p)} }

// Add is ggml_add (b broadcast over a's rows).
func (c *Ctx) Add(a, b Tensor) Tensor { return Tensor{c.l.add(c.p, a.p, b.p)} }

// MulMat is ggml_mul_mat: for a {k, m} and b {k, n} the {m, n} tensor of dot products
// of a's rows with b's rows.
func (c *Ctx) MulMat(a, b Tensor) Tensor { return Tensor{c.l.mulMat(c.p, a.p, b.p)} }

// Silu is ggml_silu: x·σ(x) element-wise.
func (c *Ctx) Silu(a Tensor) Tensor { return Tensor{c.l.silu(c.p, a.p)} }

// Sigmoid is ggml_sigmoid: 1/(1+e^−x) element-wise.
func (c *Ctx) Sigmoid(a Tensor) Tensor { return Tensor{c.l.sigmoid(c.p, a.p)} }

// Softplus is ggml_softplus: log(1+e^x) element-wise (x above 20 passes through).
func (c *Ctx) Softplus(a Tensor) Tensor { return Tensor{c.l.softplus(c.p, a.p)} }

// Exp is ggml_exp element-wise.
func (c *Ctx) Exp(a Tensor) Tensor { return Tensor{c.l.exp(c.p, a.p)} }

// L2Norm is ggml_l2_norm: every row divided by max(its Euclidean norm, eps).
func (c *Ctx) L2Norm(a Tensor, eps float32) Tensor { return Tensor{c.l.l2Norm(c.p, a.p, eps)} }

// SSMConv is ggml_ssm_conv: sx {K−1+T, channels, seqs} holds per channel the K−1 state
// columns followed by the T inputs, w {K, channels} the taps; the result {channels, T, seqs}
// is Σ_i sx[t+i]·w[i] per channel (no activation).
func (c *Ctx) SSMConv(sx, w Tensor) Tensor { return Tensor{c.l.ssmConv(c.p, sx.p, w.p)} }

// GatedDeltaNet is ggml_gated_delta_net with q, k {S, Hk, T, seqs}, v {S, Hv, T, seqs},
// g and beta {1, Hv, T, seqs}, state {S, S, Hv, seqs} and snapshots (K) state slots. The
// result holds the outputs {S, Hv, T, seqs} followed by the new state(s).
func (c *Ctx) GatedDeltaNet(q, k, v, g, beta, state Tensor, snapshots int) Tensor {
	return Tensor{c.l.gatedDeltaNet(c.p, q.p, k.p, v.p, g.p, beta.p, state.p, int64(snapshots))}
}

// RopeMulti is ggml_rope_multi (multi-section RoPE; pos holds 4 position streams of the
// tokens, one after the other; no frequency factors when ff is the zero Tensor).
func (c *Ctx) RopeMulti(a, pos, ff Tensor, nDims int, sections [4]int32, mode, nCtxOrig int, base, scale, extFactor, attnFactor, betaFast, betaSlow float32) Tensor {
	return Tensor{c.l.ropeMulti(c.p, a.p, pos.p, ff.p, int32(nDims), &sections[0], int32(mode), int32(nCtxOrig), base, scale, extFactor, attnFactor, betaFast, betaSlow)}
}

// Compute evaluates out (and what it depends on) with n threads and returns its n floats.
func (c *Ctx) Compute(out Tensor, threads, n int) []float32 {
	g := c.l.newGraph(c.p)
	c.l.buildForward(g, out.p)
	if st := c.l.computeCtx(c.p, g, int32(threads)); st != 0 {
		panic(fmt.Sprintf("ggml_graph_compute_with_ctx: status %d", st))
	}
	if int(c.l.nbytes(out.p)) < 4*n {
		panic("ggml: result smaller than requested")
	}
	res := make([]float32, n)
	copy(res, unsafe.Slice((*float32)(c.l.getData(out.p)), n))
	return res
}
