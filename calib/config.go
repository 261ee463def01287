package calib

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/convert/policy"
)

// Defaults of `tq calibrate` (the design card).
var (
	// DefaultLayersToQuantize are the module roles searched and stored in weight_dtype.
	DefaultLayersToQuantize = []string{"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
	// DefaultSkipLayers stay in F16: the attention output and FFN down projections (whose
	// inputs have the heaviest-tailed activations) and the LM head.
	DefaultSkipLayers = []string{"o_proj", "down_proj", "lm_head"}
)

const (
	// DefaultGroupSize is the number of weights sharing one scale.
	DefaultGroupSize = 128
	// DefaultWeightDType is the weight type of layers_to_quantize.
	DefaultWeightDType = "int4"
	// DefaultKVCacheDType is the KV cache type recorded for the runtime.
	DefaultKVCacheDType = "f16"
	// MethodMSE is the only calibration method: importance-weighted MSE.
	MethodMSE = "mse"
)

// QuantizeConfig is quantize_config.json as `tq calibrate` writes it. The first block of
// fields is what internal/convert's turboquant policy reads (policy.TurboConfig); Calibration
// and Tensors carry the calibration record and the per-tensor search results.
type QuantizeConfig struct {
	QuantMethod       string   `json:"quant_method"`
	WeightDType       string   `json:"weight_dtype"`
	KVCacheDType      string   `json:"kv_cache_dtype"`
	GroupSize         int      `json:"group_size"`
	Symmetric         bool     `json:"symmetric"`
	CalibrationMethod string   `json:"calibration_method"`
	LayersToQuantize  []string `json:"layers_to_quantize"`
	SkipLayers        []string `json:"skip_layers"`
	NumPrompts        int      `json:"num_prompts"`
	CalibrationHash   string   `json:"calibration_hash"`
	TQVersion         string   `json:"tq_version"`
	// Imatrix names the llama.cpp GGUF imatrix written beside the config (relative path), from
	// which convert takes the importance weights.
	Imatrix string `json:"imatrix,omitempty"`

	Calibration *CalibrationRecord       `json:"calibration,omitempty"`
	Tensors     map[string]*TensorChoice `json:"tensors,omitempty"`
}

// CalibrationRecord describes the calibration run.
type CalibrationRecord struct {
	Model string `json:"model"`
	Arch  string `json:"arch"`
	// Prompts is the number of calibration sequences, Tokens the tokens whose statistics were
	// collected (padding excluded), PaddedTokens the tokens evaluated.
	Prompts      int      `json:"prompts"`
	Tokens       int64    `json:"tokens"`
	PaddedTokens int64    `json:"padded_tokens"`
	PadMultiple  int      `json:"pad_multiple"`
	Datasets     []string `json:"datasets,omitempty"`
	// TokenHash is calibration_hash (see CalibrationHash).
	TokenHash string `json:"token_hash"`
	// Stats, IMatrix and Routing are the files written beside the config.
	Stats   string `json:"stats"`
	IMatrix string `json:"imatrix"`
	Routing string `json:"routing,omitempty"`
	// UncoveredExperts counts (layer, expert) pairs that were never routed to and got
	// statistics from the fallback.
	UncoveredExperts int     `json:"uncovered_experts,omitempty"`
	Seconds          float64 `json:"seconds"`
	// TokensPerSecond is the forward throughput (padded tokens through all layers per second).
	TokensPerSecond float64 `json:"tokens_per_second"`
	Threads         int     `json:"threads"`
	// Precision describes the forward pass ("f32 weights, f32 activations, f32 KV cache").
	Precision string `json:"precision"`
	// Hessians describes the input Gram matrices (absent when not collected).
	Hessians *HessianRecord `json:"hessians,omitempty"`
	// Sensitivity names the measured-sensitivity file (absent when the pass did not run).
	Sensitivity string `json:"sensitivity,omitempty"`
}

// HessianRecord describes the input Gram matrices written beside the config (HessianDir).
type HessianRecord struct {
	// Dir is the directory (relative to the config) holding the index and the Gram files.
	Dir string `json:"dir"`
	// Tokens is the number of calibration tokens accumulated (padding excluded).
	Tokens int64 `json:"tokens"`
	// Files and Bytes count the Gram files and their total size.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// FullInputs counts inputs with a full matrix, DiagonalInputs those kept diagonal-only
	// (routed experts' per-expert diagonals included).
	FullInputs     int `json:"full_inputs"`
	DiagonalInputs int `json:"diagonal_inputs"`
	// MaxCols is the column limit of a full matrix.
	MaxCols int `json:"max_cols"`
	// Run is the run id every Gram file carries.
	Run string `json:"run"`
	// Seconds is the time spent accumulating and writing the matrices (by this process, when
	// resumed).
	Seconds float64 `json:"seconds"`
}

// TurboConfig returns the policy view of c.
func (c *QuantizeConfig) TurboConfig() *policy.TurboConfig {
	sym := c.Symmetric
	return &policy.TurboConfig{
		QuantMethod: c.QuantMethod, WeightDType: c.WeightDType, KVCacheDType: c.KVCacheDType,
		GroupSize: c.GroupSize, Symmetric: &sym, CalibrationMethod: c.CalibrationMethod,
		NumPrompts: c.NumPrompts, CalibrationHash: c.CalibrationHash,
		LayersToQuantize: c.LayersToQuantize, SkipLayers: c.SkipLayers, Imatrix: c.Imatrix,
		TQVersion: c.TQVersion,
	}
}

// NormalizeKVCacheDType maps accepted spellings ("fp16", "float16", "FP8"...) to the names
// quantize_config.json uses (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl) and returns a
// warning for types that hurt accuracy (q4_0).
func NormalizeKVCacheDType(s string) (string, string, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	switch v {
	case "", "fp16", "float16", "half":
		v = "f16"
	case "fp32", "float32", "float":
		v = "f32"
	case "bfloat16":
		v = "bf16"
	}
	switch v {
	case "f32", "f16", "bf16", "q8_0", "q4_1", "q5_0", "q5_1", "iq4_nl":
		return v, "", nil
	case "q4_0":
		return v, "kv_cache_dtype q4_0 stores keys and values in 4.5 bits: attention over long contexts loses accuracy noticeably (q8_0 is nearly lossless); use it only when memory forces it", nil
	}
	return "", "", fmt.Errorf("kv_cache_dtype %q: want f16 (default), f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl", s)
}

// Validate checks c the way internal/convert will when it reads the file.
func (c *QuantizeConfig) Validate() error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = policy.ParseTurboConfig(b)
	return err
}

// WriteConfig encodes c as indented JSON.
func WriteConfig(w io.Writer, c *QuantizeConfig) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// SaveConfig validates c and writes it to path atomically.
func SaveConfig(path string, c *QuantizeConfig) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("calib: quantize config: %w", err)
	}
	return writeAtomic(path, func(w io.Writer) error { return WriteConfig(w, c) })
}

// LoadConfig reads a quantize_config.json written by SaveConfig (or by hand: the policy
// fields alone are enough).
func LoadConfig(path string) (*QuantizeConfig, error) {
	b, err := boundedread.ReadFile(path, "quantize config", policy.MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	c := &QuantizeConfig{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("calib: %s: %w", path, err)
	}
	if _, err := policy.ParseTurboConfig(b); err != nil {
		return nil, fmt.Errorf("calib: %s: %w", path, err)
	}
	return c, nil
}
