// Package infer runs decoder-only transformer models (llama, qwen2, qwen3, qwen3moe, and the
// hybrid linear/full-attention qwen35 and qwen35moe) on the CPU, reading weights in place from a
// GGUF file (or any other [Source]) and computing the forward pass the way llama.cpp's CPU
// backend does: activations are converted to each weight type's "vec_dot" type (f16, bf16, q8_0,
// q8_K) before a matrix product, the KV cache is f16 by default, and attention probabilities are
// rounded to f16 before they weight the values. With Options.Backend (package infer/cuda) the
// last Options.GPULayers blocks run on an NVIDIA GPU instead.
//
// The main entry points are [Load] (weights + options -> [Model]), [Model.NewSession] and
// [Session.Eval]. [Observer] receives the inputs of every linear layer for calibration. The
// tests check the forward pass against a slow float64 reference (reference_test.go) and against
// llama.cpp itself.
package infer
