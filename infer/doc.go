// Package infer runs decoder-only transformer models (llama, qwen2, qwen3, qwen3moe) on the CPU,
// reading weights in place from a GGUF file (or any other [Source]) and computing the forward pass
// the way llama.cpp's CPU backend does: activations are converted to each weight type's
// "vec_dot" type (f16, bf16, q8_0, q8_K) before a matrix product, the KV cache is f16 by default,
// and attention probabilities are rounded to f16 before they weight the values.
//
// The main entry points are [Load] (weights + options -> [Model]), [Model.NewSession] and
// [Session.Eval]. [Observer] receives the inputs of every linear layer for calibration, and
// [Reference] is a slow float64 forward used by tests as an independent oracle.
package infer
