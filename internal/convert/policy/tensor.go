package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tq-project/tq/gguf"
)

// Tensor is what a policy sees of one tensor: its GGUF name, its shape in ggml order
// (ne[0] = row length first) and the type it has in the input (for GGUF inputs) or the type the
// converter would give it unquantized (F32 for norms, biases and routers; F16 otherwise).
type Tensor struct {
	Name  string
	Shape []int64
	Type  gguf.GGMLType
	// Sources optionally lists the Hugging Face names the tensor was built from (without the
	// ".weight" suffix, e.g. "model.layers.3.self_attn.q_proj"); turboquant's layer lists
	// match them as well as the GGUF name and the module role.
	Sources []string
}

// NDims is ggml_n_dims: 1 + index of the last dimension larger than 1 (minimum 1).
func (t Tensor) NDims() int {
	n := 1
	for i, d := range t.Shape {
		if d > 1 {
			n = i + 1
		}
	}
	return n
}

// Elements is the number of elements.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Cols is ne[0], the row length quantization blocks run along.
func (t Tensor) Cols() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[0]
}

// Model carries the hyper-parameters the mixture rules look at.
type Model struct {
	Arch    string // general.architecture
	NLayer  int    // block_count (all blocks, incl. NextN/MTP)
	NHead   int
	NHeadKV int
	NExpert int // expert_count, 0 for dense models
}

func (m Model) nGQA() int {
	if m.NHeadKV <= 0 {
		return 1
	}
	return m.NHead / m.NHeadKV
}

// Category is llama-quant.cpp's tensor_category (by name, first match wins).
type Category int

// Tensor categories.
const (
	CatOther Category = iota
	CatOutput
	CatTokenEmbd
	CatAttnQKV
	CatAttnKVB
	CatAttnV
	CatAttnK
	CatAttnQ
	CatAttnOutput
	CatFFNUp
	CatFFNGate
	CatFFNDown
)

var catNames = [...]string{"other", "output", "token_embd", "attn_qkv", "attn_kv_b", "attn_v", "attn_k",
	"attn_q", "attn_output", "ffn_up", "ffn_gate", "ffn_down"}

func (c Category) String() string {
	if int(c) < len(catNames) {
		return catNames[c]
	}
	return "category(" + strconv.Itoa(int(c)) + ")"
}

// CategoryOf classifies a GGUF tensor name as llama-quantize does.
func CategoryOf(name string) Category {
	switch {
	case name == "output.weight":
		return CatOutput
	case name == "token_embd.weight" || name == "per_layer_token_embd.weight":
		return CatTokenEmbd
	case strings.Contains(name, "attn_qkv.weight"):
		return CatAttnQKV
	case strings.Contains(name, "attn_kv_b.weight"):
		return CatAttnKVB
	case strings.Contains(name, "attn_v.weight"):
		return CatAttnV
	case strings.Contains(name, "attn_k.weight"):
		return CatAttnK
	case strings.Contains(name, "attn_q.weight"):
		return CatAttnQ
	case strings.Contains(name, "attn_output.weight"):
		return CatAttnOutput
	case strings.Contains(name, "ffn_up"):
		return CatFFNUp
	case strings.Contains(name, "ffn_gate"):
		return CatFFNGate
	case strings.Contains(name, "ffn_down"):
		return CatFFNDown
	}
	return CatOther
}

func (c Category) isAttnV() bool { return c == CatAttnV || c == CatAttnQKV || c == CatAttnKVB }

// notQuantized lists name fragments llama-quantize never quantizes (tensor_allows_quantization).
var notQuantized = []string{
	"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
	"per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
	"indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
	"time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
	"time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
	"time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
	"time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
	"sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
	"mm.a.code_embd",
}

// AllowsQuantization is tensor_allows_quantization: only 2-D/3-D tensors whose name ends in
// "weight" and that are not norms, MoE routers, conv1d kernels, position embeddings, ….
// leaveOutput is --leave-output-tensor.
func AllowsQuantization(t Tensor, leaveOutput bool) bool {
	if t.NDims() < 2 || !strings.HasSuffix(t.Name, "weight") {
		return false
	}
	if leaveOutput && t.Name == "output.weight" {
		return false
	}
	if t.Name == "position_embd.weight" || t.Name == "token_types.weight" {
		return false
	}
	for _, s := range notQuantized {
		if strings.Contains(t.Name, s) {
			return false
		}
	}
	return true
}

// ConverterFloatType is the type convert_hf_to_gguf.py gives a tensor for a float --outtype:
// 1-D tensors, *_norm.weight, MoE routers (ffn_gate_inp*), conv1d kernels and anything not
// ending in ".weight" stay F32; everything else gets outtype.
func ConverterFloatType(t Tensor, outtype gguf.GGMLType) gguf.GGMLType {
	n := t.Name
	if len(t.Shape) <= 1 || strings.HasSuffix(n, "_norm.weight") || !strings.HasSuffix(n, ".weight") ||
		strings.Contains(n, "ffn_gate_inp") || strings.Contains(n, "ssm_conv1d") ||
		n == "position_embd.weight" || n == "token_types.weight" {
		return gguf.TypeF32
	}
	return outtype
}

// LayerOf returns N for a name "blk.N.…", or -1.
func LayerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 {
		return -1
	}
	n, err := strconv.Atoi(rest[:i])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// SortTensors orders tensors as llama-quantize processes and writes them: by layer (tensors
// outside blk.N first), then by byte-wise name. The order drives the mixture counters.
func SortTensors(ts []Tensor) {
	sort.SliceStable(ts, func(i, j int) bool { return tensorLess(ts[i].Name, ts[j].Name) })
}

// SortNames orders names like SortTensors.
func SortNames(names []string) {
	sort.SliceStable(names, func(i, j int) bool { return tensorLess(names[i], names[j]) })
}

func tensorLess(a, b string) bool {
	la, lb := LayerOf(a), LayerOf(b)
	if la != lb {
		return la < lb
	}
	return a < b
}

// Fallback is tensor_type_fallback: when the row length ne[0] is not a multiple of the type's
// block size, 256-block types fall back to a 32-block type and, if that does not fit either,
// to F16. It returns the type to use and whether a fallback happened.
func Fallback(t gguf.GGMLType, cols int64) (gguf.GGMLType, bool, error) {
	tr, ok := t.Traits()
	if !ok {
		return 0, false, fmt.Errorf("unknown ggml type %d", uint32(t))
	}
	if cols%int64(tr.BlockSize) == 0 {
		return t, false, nil
	}
	ret := t
	switch t {
	case gguf.TypeIQ1_S, gguf.TypeIQ1_M, gguf.TypeIQ2_XXS, gguf.TypeIQ2_XS, gguf.TypeIQ2_S,
		gguf.TypeIQ3_XXS, gguf.TypeIQ3_S, gguf.TypeIQ4_XS:
		ret = gguf.TypeIQ4_NL
	case gguf.TypeQ2_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeTQ1_0, gguf.TypeTQ2_0:
		ret = gguf.TypeQ4_0
	case gguf.TypeQ4_K:
		ret = gguf.TypeQ5_0
	case gguf.TypeQ5_K:
		ret = gguf.TypeQ5_1
	case gguf.TypeQ6_K:
		ret = gguf.TypeQ8_0
	default:
		if tr.BlockSize > 32 {
			return 0, false, fmt.Errorf("no fallback type is defined for %s (row length %d)", t, cols)
		}
	}
	rtr, _ := ret.Traits()
	if cols%int64(rtr.BlockSize) != 0 {
		ret = gguf.TypeF16
	}
	return ret, true, nil
}
