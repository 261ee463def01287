package convert

// Options configures Convert and, where it applies, Requantize, by concern: what each tensor
// becomes (Types), how the file is written (Output), where progress and warnings go (Report)
// and what the output says about itself (Name, Version). Each stage takes only its part.
type Options struct {
	Types  TypeOptions
	Output OutputOptions
	Report ReportOptions
	// Name is general.name (default: the model folder's name; Requantize keeps the input's).
	Name string
	// Version is the tq version recorded in the provenance keys.
	Version string
}

// TypeOptions is the type policy: the type every tensor is written in and how it is encoded.
type TypeOptions struct {
	// OutType is the preset: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k_s q3_k_m q3_k_l
	// q4_k_s q4_k_m q5_k_s q5_k_m q6_k iq4_nl iq4_xs, or "auto"/"" (BF16 when the checkpoint's
	// weights are BF16, else F16, as convert_hf_to_gguf.py --outtype auto).
	OutType string
	// TurboQuant selects the turboquant policy (see policy.TurboPolicy).
	TurboQuant bool
	// ConfigPath is quantize_config.json; "" looks for quantize_config.json in the model
	// folder and, when absent, uses policy.DefaultTurboConfig with a warning.
	ConfigPath string
	// Force accepts a turboquant config whose skip_layers lacks lm_head.
	Force bool
	// EmbeddingType overrides the turboquant embedding type (default q8_0).
	EmbeddingType string
	// IMatrixPath is a llama.cpp imatrix (GGUF or .dat) used as importance weights.
	IMatrixPath string
	// IMatrixInclude / IMatrixExclude filter the imatrix entries by name substring
	// (llama-quantize --include-weights / --exclude-weights).
	IMatrixInclude, IMatrixExclude []string
	// Importance supplies importance weights directly (the calibration stage); it wins over
	// IMatrixPath for the tensors it knows.
	Importance ImportanceSource
	// Overrides are --tensor-type PATTERN=TYPE items (presets only).
	Overrides []string
	// Pure disables the preset mixture rules.
	Pure bool
	// OutputTensorType / TokenEmbeddingType force those tensors' types (presets only).
	OutputTensorType   string
	TokenEmbeddingType string
	// LeaveOutput keeps output.weight unquantized (requantize).
	LeaveOutput bool
	// Hessians supplies the calibration's input Gram matrices: every quantized tensor whose
	// input has one is encoded with the error-compensating search (quant.QuantizeGPTQ),
	// whatever the preset or policy (see hessian.go). nil: none.
	Hessians HessianSource
	// Sensitivity supplies measured output sensitivities (tq calibrate's sensitivity.json):
	// budgets turn each tensor's predicted weight error into predicted KL with them (see
	// budget.go). nil: the weight-error proxy alone.
	Sensitivity SensitivitySource
	// Rotate rotates the residual stream by a fixed orthogonal matrix folded exactly into the
	// weights (internal/rotate, docs/rotation.md): the same function, easier to quantize. The
	// calibration's Gram matrices and importance are rotated with it. Models it cannot rotate
	// exactly (tied embeddings, multi-token-prediction layers, other architectures) are an error.
	Rotate bool
	// RotateSeed seeds the rotation's random signs (0: rotate.DefaultSeed).
	RotateSeed uint64
	// Improved uses quant.ModeImproved for preset types too (turboquant always uses it for the
	// int4/int8 layers); the default reproduces llama-quantize's bytes.
	Improved bool
	// TargetBPW / MaxSize choose per-tensor types under a budget (bits per weight over all
	// tensors / total tensor bytes); see budget.go.
	TargetBPW float64
	MaxSize   int64
}

// OutputOptions is how the file is written.
type OutputOptions struct {
	// SplitMaxSize splits the output into shards of at most this many tensor bytes;
	// SplitMaxTensors after that many tensors.
	SplitMaxSize    int64
	SplitMaxTensors int
	// NoManifest disables SHA256SUMS.
	NoManifest bool
	// Threads bounds the encoding goroutines (0: all CPUs).
	Threads int
}

// ReportOptions is where progress and warnings go.
type ReportOptions struct {
	// Progress receives bytes written so far and the total.
	Progress func(done, total int64)
	// Warn receives warnings as they arise (they are also listed in Plan.Warnings).
	Warn func(msg string)
}
