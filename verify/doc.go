// Package verify is tq's quality gate for quantized GGUF models: integrity (SHA-256 manifest,
// GGUF structure, tensor types, metadata, the turboquant policy, NaN/Inf), perplexity computed
// exactly like llama-perplexity, KL divergence against a reference model (live, or saved as
// top-k log-probabilities by package reflogits), chat-template and tokenizer fidelity, and
// tool-call validity on a suite of requests. Run produces a Report (JSON, Markdown, HTML with
// plots) whose verdict drives `tq verify`'s exit status.
//
// docs/verify.md defines every metric and threshold.
package verify
