package convert

import (
	"path/filepath"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/imatrix"
)

// TurboProvenanceVersion is the version of the turboquant.* key set (turboquant.version).
const TurboProvenanceVersion = 1

// addTurboProvenance records the turboquant policy in the output (docs/formats-convert.md).
func addTurboProvenance(md *gguf.Metadata, c *policy.TurboConfig, cfgPath, tqVersion string) {
	md.Set("turboquant.version", gguf.Uint32(TurboProvenanceVersion))
	md.Set("turboquant.quant_method", gguf.String(c.QuantMethod))
	md.Set("turboquant.weight_dtype", gguf.String(c.WeightDType))
	md.Set("turboquant.kv_cache_dtype", gguf.String(c.KVCacheDType))
	md.Set("turboquant.group_size", gguf.Uint32(uint32(c.GroupSize)))
	md.Set("turboquant.symmetric", gguf.Bool(c.Symmetric == nil || *c.Symmetric))
	method := c.CalibrationMethod
	if method == "" {
		method = "none"
	}
	md.Set("turboquant.calibration_method", gguf.String(method))
	md.Set("turboquant.num_prompts", gguf.Uint32(uint32(max(0, c.NumPrompts))))
	if c.CalibrationHash != "" {
		md.Set("turboquant.calibration_hash", gguf.String(c.CalibrationHash))
	}
	if len(c.LayersToQuantize) > 0 {
		md.Set("turboquant.layers_to_quantize", gguf.Array(append([]string(nil), c.LayersToQuantize...)))
	}
	if len(c.SkipLayers) > 0 {
		md.Set("turboquant.skip_layers", gguf.Array(append([]string(nil), c.SkipLayers...)))
	}
	if cfgPath != "" && c.FileSHA256 != "" {
		md.Set("turboquant.config_sha256", gguf.String(c.FileSHA256))
		md.Set("turboquant.config_file", gguf.String(filepath.Base(cfgPath)))
	}
	if c.TQVersion != "" {
		md.Set("turboquant.calibrated_with", gguf.String(c.TQVersion))
	}
	if tqVersion == "" {
		tqVersion = "unknown"
	}
	md.Set("turboquant.tq_version", gguf.String(tqVersion))
}

// imatrixProvenance returns the quantize.imatrix.* keys llama-quantize writes.
func imatrixProvenance(im *imatrix.Means) gguf.Metadata {
	var md gguf.Metadata
	trunc := func(s string) string {
		if len(s) > 127 {
			return s[:127]
		}
		return s
	}
	md.Set("quantize.imatrix.file", gguf.String(trunc(im.Path)))
	if len(im.Datasets) > 0 {
		md.Set("quantize.imatrix.dataset", gguf.String(trunc(im.Datasets[0])))
	}
	md.Set("quantize.imatrix.entries_count", gguf.Uint32(uint32(im.Len())))
	if im.ChunkCount > 0 {
		md.Set("quantize.imatrix.chunks_count", gguf.Uint32(im.ChunkCount))
	}
	return md
}
