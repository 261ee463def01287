package convert

import (
	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
)

// finalTensor is one tensor of the output as mixtureFileType sees it: its final ggml type and
// its number of weights.
type finalTensor struct {
	typ      gguf.GGMLType
	elements int64
}

// mixtureFileType is general.file_type for an output no llama.cpp preset describes (a
// turboquant policy, a --target-bpw / --max-size budget): the llama_ftype of the quantized type
// that holds the most weights, mapped as llama.cpp's loader maps a tensor type to a file type
// when a file has no general.file_type (llama_model_loader's constructor in
// src/llama-model-loader.cpp: Q4_K means Q4_K_M, Q3_K Q3_K_M, Q5_K Q5_K_M).
//
// The loader counts tensors, of every type; here only quantized tensors count, and by weights.
// Counting all types would let the F32 norm vectors (two to four per layer) outvote the
// quantized matrices, and counting tensors would let the small per-layer attention matrices
// outvote an MoE's merged expert tensors, which hold most of the weights and set the file's
// size. A file with no quantized tensor gets the float type that holds the most weights. Ties go
// to the lower ggml type id, so the result does not depend on tensor order.
func mixtureFileType(tensors []finalTensor) policy.FileType {
	quantized := map[gguf.GGMLType]int64{}
	float := map[gguf.GGMLType]int64{}
	for _, t := range tensors {
		tr, ok := t.typ.Traits()
		switch {
		case !ok:
		case tr.Quantized:
			quantized[t.typ] += t.elements
		default:
			float[t.typ] += t.elements
		}
	}
	if t, ok := mostWeights(quantized); ok {
		return policy.FileTypeFor(t)
	}
	if t, ok := mostWeights(float); ok {
		return policy.FileTypeFor(t)
	}
	return policy.FileTypeAllF32
}

// mostWeights returns the type with the largest count (the lowest type id among equals).
func mostWeights(count map[gguf.GGMLType]int64) (gguf.GGMLType, bool) {
	best, bestN, found := gguf.GGMLType(0), int64(-1), false
	for t, n := range count {
		if n > bestN || (n == bestN && t < best) {
			best, bestN, found = t, n, true
		}
	}
	return best, found
}

// decisionTypes pairs the final decisions with their tensors' weight counts.
func decisionTypes(ts []policy.Tensor, ds []policy.Decision) []finalTensor {
	out := make([]finalTensor, len(ds))
	for i, d := range ds {
		out[i] = finalTensor{typ: d.Type, elements: ts[i].Elements()}
	}
	return out
}
