// Package cuda runs the transformer operations of package infer on an NVIDIA GPU.
//
// # Driver loading
//
// There is no cgo requirement: the CUDA driver library (libcuda.so.1, installed with the NVIDIA
// driver) is opened at run time with github.com/ebitengine/purego, so CGO_ENABLED=0 builds work
// and a machine without the driver simply falls back to the CPU. [Select] ("auto", "cpu", "cuda")
// makes that choice and returns one line describing it. The library path can be overridden with
// $TQ_CUDA_LIB (tests point it at a missing file or at a fake driver). Only driver API functions
// are called (the _v2 entry points where several exist); no CUDA runtime or toolkit is needed.
// Kernels launch through cuLaunchKernel with a pinned kernelParams block (runtime.Pinner).
//
// # Kernels
//
// The kernels are CUDA C in kernels/*.cu, compiled ahead of time to PTX for compute_75 (Turing
// and newer) by scripts/ptx.sh and embedded; the driver JIT-compiles them for the actual GPU when
// a device is opened. The PTX is committed, so building needs no CUDA toolkit. Every kernel reads
// GGUF data in place: mat-vec and small-batch mat-mul for Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, F16, BF16
// and F32 weights; RMSNorm; RoPE (NORM and NEOX, linear and YaRN scaling, frequency factors);
// causal softmax attention over an f16 or q8_0 KV cache on the device; SwiGLU; residual and bias adds;
// mixture-of-experts routing (softmax, top-k, optional renormalisation), gather/scatter of
// routed rows and the weighted combination of expert outputs; the Qwen3.5 hybrid blocks' Gated
// DeltaNet (causal convolution with its rolling state, L2 norms, gates, the delta rule with a
// per-head state on the device), the gated attention's sigmoid gate and the shared expert's gate.
// Numerics follow the CPU runner:
// f32 activations; the query rounded to the key cache's type (f16, or q8_0 blocks) and, with an f16
// value cache, the attention probabilities to f16.
//
// # Backend
//
// [Backend] is the interface package infer programs against; [*Device] implements it. The
// intended integration, with the planner (infer/plan) deciding the placement:
//
//   - weights of GPU layers are uploaded once with Upload straight from the GGUF mmap slice
//     (norm weights and biases, already float32 in infer, with UploadF32);
//   - a GPU layer range keeps its hidden state on the device; only the hidden state (T × n_embd
//     floats) crosses between CPU and GPU layers, with Write and Read;
//   - each GPU layer owns its slice of a device [KVCache];
//   - MoE expert tensors may stay on the CPU: MoERoute returns the routing to the host, which runs
//     the selected experts wherever their weights live (GatherRows/MatMul/SwiGLU/ScatterRows/
//     MoECombine on the device).
package cuda

import "github.com/tq-project/tq/gguf"

// Backend is the set of device operations a model runner needs. All buffers hold float32 rows;
// row-major batches of T tokens are contiguous. Operations are queued in call order; Read and
// MoERoute return completed results.
type Backend interface {
	// Info describes the device.
	Info() Info
	// MemInfo returns free and total device memory in bytes.
	MemInfo() (free, total int64, err error)

	// Upload copies a GGUF tensor (ggml ne dims, encoded bytes) to the device once.
	Upload(name string, t gguf.GGMLType, dims []int64, data []byte) (*Tensor, error)
	// UploadF32 copies a float32 vector (norm weight, bias, RoPE factors) to the device.
	UploadF32(v []float32) (Buffer, error)
	// FreeTensor releases an uploaded tensor.
	FreeTensor(t *Tensor) error
	// Alloc allocates n float32 elements; Free releases an allocation.
	Alloc(n int) (Buffer, error)
	Free(b Buffer) error
	// Write copies host floats to the device; Read copies device floats back when queued work is
	// done; Copy copies between device buffers.
	Write(dst Buffer, src []float32) error
	Read(dst []float32, src Buffer) error
	Copy(dst, src Buffer) error

	// MatMul: y[t] = W[mat]·x[t] for T rows (W: Rows × Cols in a MatVecTypes encoding).
	MatMul(y Buffer, w *Tensor, mat int, x Buffer, T int) error
	// RMSNorm: y[r] = x[r]/sqrt(mean(x[r]²)+eps)·w over rows of n (w optional; y may be x).
	RMSNorm(y, x, w Buffer, n, rows int, eps float32) error
	// RoPE rotates T rows of nHeads heads in place at positions pos0...
	RoPE(x Buffer, T, nHeads, headDim, pos0 int, r *Rope) error
	// SwiGLU: g = silu(g)·u; Add: y += x; AddRows: y[t] += b.
	SwiGLU(g, u Buffer, n int) error
	Add(y, x Buffer, n int) error
	AddRows(y, b Buffer, n, T int) error

	// NewKVCache allocates a cache (keys and values each f16 or q8_0); KVStore appends T rotated
	// K/V rows at pos0; Attention computes causal attention of T query rows at pos0.. against it.
	NewKVCache(layers, ctx, kvDim int, k, v gguf.GGMLType) (*KVCache, error)
	FreeKVCache(c *KVCache) error
	KVStore(c *KVCache, layer, pos0, T int, k, v Buffer) error
	Attention(out, q Buffer, c *KVCache, layer, pos0, T, nHead, nHeadKV, headDim int) error

	// MoERoute: softmax over nExpert logits per token, top-k experts and weights to the host.
	MoERoute(logits Buffer, T, nExpert, k int, renorm bool, sel []int32, w []float32) error
	// GatherRows/ScatterRows move rows by index; MoECombine sums k weighted expert outputs.
	GatherRows(dst, src Buffer, idx []int32, n int) error
	ScatterRows(dst, src Buffer, idx []int32, n int) error
	MoECombine(out, slot Buffer, w []float32, T, k, n int) error
	// MoERouteDevice, MatMulExperts and MoECombineDevice run the routed experts of a batch
	// without the host: the selection stays on the device and one launch multiplies every
	// (token, slot) pair by its expert.
	MoERouteDevice(logits Buffer, T, nExpert, k int, renorm bool, sel, w Buffer) error
	MatMulExperts(y Buffer, w *Tensor, x, sel Buffer, npairs, k int) error
	MoECombineDevice(out, slot, w Buffer, T, k, n int) error

	// Hybrid (qwen35, qwen35moe) blocks: the Gated DeltaNet's convolution (SSMConv), query/key
	// L2 norms, gates and delta rule with its state, the gated attention's query/gate split and
	// sigmoid gate, the shared expert's per-row gate, and clearing a state (Zero).
	SSMConv(out, x, state, w Buffer, T, C, K int) error
	L2NormHeads(x Buffer, d, heads, T, stride int, eps float32) error
	DeltaNetGates(beta, g, dtBias, ssmA Buffer, hv, T int) error
	DeltaRule(out, qkv, beta, g, state Buffer, T int, s DeltaNetShape, scale float32) error
	SplitHeads(a, b, src Buffer, hd, heads, T int) error
	SigmoidMul(y, g Buffer, n int) error
	RowSigmoidScale(y, s Buffer, n, T int) error
	Zero(b Buffer, n int) error

	// Sync waits for queued work and reports asynchronous failures; Close frees everything.
	Sync() error
	Close() error
}

var _ Backend = (*Device)(nil)
