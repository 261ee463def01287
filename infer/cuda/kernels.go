package cuda

import (
	"embed"
	"fmt"

	"github.com/tq-project/tq/gguf"
)

// The PTX of every kernel module, generated from kernels/*.cu by scripts/ptx.sh (nvcc --ptx
// -arch=compute_75) and committed, so that building tq never needs the CUDA toolkit.
//
//go:embed kernels/*.ptx
var ptxFS embed.FS

// modules lists the kernel modules: kernels/<name>.cu compiles to kernels/<name>.ptx.
var modules = []string{"matvec", "ops", "attention", "moe", "hybrid"}

// ptxSource returns the embedded PTX of module m.
func ptxSource(m string) (string, error) {
	b, err := ptxFS.ReadFile("kernels/" + m + ".ptx")
	if err != nil {
		return "", fmt.Errorf("cuda: embedded PTX for module %q: %w", m, err)
	}
	return string(b), nil
}

// paramKind is the type of one kernel parameter as the host packs it.
type paramKind uint8

const (
	pPtr paramKind = iota + 1 // device pointer: 8 bytes (.u64)
	pI32                      // int: 4 bytes (.u32/.s32)
	pF32                      // float: 4 bytes (.f32)
)

func (k paramKind) String() string {
	switch k {
	case pPtr:
		return "ptr"
	case pI32:
		return "i32"
	case pF32:
		return "f32"
	}
	return fmt.Sprintf("paramKind(%d)", uint8(k))
}

// kernelSpec describes one kernel the host launches: its entry name, the module holding it and the
// parameters in order, which must match the .param list of the .entry in the PTX.
type kernelSpec struct {
	name   string
	module string
	params []paramKind
}

// kernelID indexes kernelTable.
type kernelID int

const (
	kRMSNorm kernelID = iota
	kRoPE
	kSwiGLU
	kAdd
	kAddRows
	kKVStore
	kGatherRows
	kScatterRows
	kMoECombine
	kAttn
	kMoERoute
	kSSMConv
	kL2Norm
	kDeltaNetGates
	kDeltaRule
	kDeltaRuleChunked
	kSplitHeads
	kSigmoidMul
	kRowSigmoidScale
	kZero
	kMatVecBase // followed by three matvec kernels (t1, t8, ids) per entry of mvTypes
)

// Launch constants mirrored from the .cu sources (a test checks them against the #defines).
const (
	mvWarps        = 4    // MV_WARPS: warps per matvec block
	mvRows         = 2    // MV_R: rows per warp of the quantized single-row and routed-expert mat-vecs
	mvMaxT         = 8    // MV_MAX_T: activation rows per batched matvec launch
	attnThreads    = 512  // ATTN_THREADS
	attnMaxHeadDim = 256  // ATTN_MAX_HD
	moeThreads     = 256  // MOE_THREADS
	moeMaxExperts  = 1024 // MOE_MAX_EXPERTS
	moeMaxK        = 64   // MOE_MAX_K
	drMaxDState    = 256  // DR_MAX_DS: the delta rule's largest head size
	drSplit        = 4    // DR_SPLIT: threads per state column of the recurrent delta rule
	drChunk        = 16   // DR_CHUNK: tokens per chunk of tq_delta_rule_chunked
	rowThreads     = 256  // block size of the row-wise and element-wise kernels
)

// mvTypes are the weight types with a matvec kernel, and mvNames their kernel name parts.
var (
	mvTypes = []gguf.GGMLType{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ4_0, gguf.TypeQ8_0,
		gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}
	mvNames = []string{"f32", "f16", "bf16", "q4_0", "q8_0", "q4_k", "q5_k", "q6_k"}
)

// kernelTable lists every kernel the host launches, indexed by kernelID.
var kernelTable = buildKernelTable()

func buildKernelTable() []kernelSpec {
	P, I, F := pPtr, pI32, pF32
	t := []kernelSpec{
		kRMSNorm:          {"tq_rmsnorm", "ops", []paramKind{P, P, P, I, I, F}},
		kRoPE:             {"tq_rope", "ops", []paramKind{P, I, I, I, I, I, I, F, F, F, F, F, F, P, P}},
		kSwiGLU:           {"tq_swiglu", "ops", []paramKind{P, P, I}},
		kAdd:              {"tq_add", "ops", []paramKind{P, P, I}},
		kAddRows:          {"tq_add_rows", "ops", []paramKind{P, P, I, I}},
		kKVStore:          {"tq_kv_store", "ops", []paramKind{P, P, P, P, I, I, I, I, I, P, I}},
		kGatherRows:       {"tq_gather_rows", "ops", []paramKind{P, P, P, I, I}},
		kScatterRows:      {"tq_scatter_rows", "ops", []paramKind{P, P, P, I, I}},
		kMoECombine:       {"tq_moe_combine", "ops", []paramKind{P, P, P, I, I, I}},
		kAttn:             {"tq_attn", "attention", []paramKind{P, P, P, P, P, I, I, I, I, I, I, F, I, I, P}},
		kMoERoute:         {"tq_moe_route", "moe", []paramKind{P, P, P, I, I, I, I}},
		kSSMConv:          {"tq_ssm_conv", "hybrid", []paramKind{P, P, P, P, I, I, I}},
		kL2Norm:           {"tq_l2norm", "hybrid", []paramKind{P, I, I, I, I, F}},
		kDeltaNetGates:    {"tq_deltanet_gates", "hybrid", []paramKind{P, P, P, P, I, I}},
		kDeltaRule:        {"tq_delta_rule", "hybrid", []paramKind{P, P, P, P, P, I, I, I, I, I, F}},
		kDeltaRuleChunked: {"tq_delta_rule_chunked", "hybrid", []paramKind{P, P, P, P, P, I, I, I, I, I, F}},
		kSplitHeads:       {"tq_split_heads", "hybrid", []paramKind{P, P, P, I, I, I}},
		kSigmoidMul:       {"tq_sigmoid_mul", "hybrid", []paramKind{P, P, I}},
		kRowSigmoidScale:  {"tq_row_sigmoid_scale", "hybrid", []paramKind{P, P, I, I}},
		kZero:             {"tq_zero", "hybrid", []paramKind{P, I}},
	}
	for _, n := range mvNames {
		for _, suffix := range []string{"_t1", "_t8"} {
			t = append(t, kernelSpec{"tq_mv_" + n + suffix, "matvec", []paramKind{P, P, P, I, I, I}})
		}
		t = append(t, kernelSpec{"tq_mv_" + n + "_ids", "matvec", []paramKind{P, P, P, P, I, I, I, I, I}})
	}
	return t
}

// matvecKernel returns the matvec kernel for weight type t, batched (T up to mvMaxT) or not.
func matvecKernel(t gguf.GGMLType, batched bool) (kernelID, bool) {
	for i, mt := range mvTypes {
		if mt == t {
			id := kMatVecBase + kernelID(3*i)
			if batched {
				id++
			}
			return id, true
		}
	}
	return 0, false
}

// matvecIDsKernel returns the routed-experts matvec kernel (tq_mv_<type>_ids) for weight type t.
func matvecIDsKernel(t gguf.GGMLType) (kernelID, bool) {
	for i, mt := range mvTypes {
		if mt == t {
			return kMatVecBase + kernelID(3*i+2), true
		}
	}
	return 0, false
}

// MatVecTypes lists the weight types [Device.MatMul] supports.
func MatVecTypes() []gguf.GGMLType { return append([]gguf.GGMLType(nil), mvTypes...) }
