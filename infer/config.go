package infer

import (
	"fmt"
	"math"
)

// RopeMode is the pairing of dimensions RoPE rotates (ggml's rope "mode").
type RopeMode int

const (
	// RopeNorm rotates adjacent pairs (x[2i], x[2i+1]); llama.
	RopeNorm RopeMode = 0
	// RopeNeox rotates (x[i], x[i+n_rot/2]); qwen2, qwen3, qwen3moe.
	RopeNeox RopeMode = 2
)

// RopeScaling is the context-extension scheme read from {arch}.rope.scaling.*.
type RopeScaling struct {
	Type        string  // "none", "linear" or "yarn"
	Factor      float64 // scaling factor (>= 1); 1 when unscaled
	OrigCtx     int     // original training context (YaRN correction dims)
	AttnFactor  float64 // rope.scaling.attn_factor multiplier (1 when absent)
	YarnBetaFst float64 // YaRN beta_fast (32)
	YarnBetaSlw float64 // YaRN beta_slow (1)
}

// Config holds the hyperparameters of a model, read from metadata as llama.cpp reads them.
type Config struct {
	Arch       string
	NLayer     int
	NEmbd      int
	NFF        int // dense FFN width (feed_forward_length)
	NHead      int
	NHeadKV    int
	HeadDim    int // key_length
	HeadDimV   int // value_length
	NRot       int // rope.dimension_count
	NVocab     int
	CtxTrain   int
	RMSEps     float64
	RopeBase   float64
	RopeMode   RopeMode
	Rope       RopeScaling
	NExpert    int
	NExpertUse int
	NFFExp     int // expert FFN width
	// Hybrid holds the Gated DeltaNet / MTP hyperparameters of qwen35 and qwen35moe (nil for
	// other architectures); NLayer then counts the decoder blocks the forward pass runs,
	// without the MTP blocks (arch_qwen35moe.go).
	Hybrid *HybridConfig
}

// maxDim bounds every size read from metadata so that hostile files cannot make us allocate
// absurd buffers before tensor shapes are checked.
const maxDim = 1 << 24

// ReadConfig reads the hyperparameters of the architecture named by general.architecture.
func ReadConfig(src Source) (*Config, error) {
	r := metaReader{src}
	arch, err := r.str("general.architecture", true, "")
	if err != nil {
		return nil, err
	}
	spec, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("unsupported architecture %q (supported: %s)", arch, supportedArchs())
	}
	c := &Config{Arch: arch, RopeMode: spec.rope}
	k := func(s string) string { return arch + "." + s }
	geti := func(key string, req bool, def int64, dst *int) {
		if err != nil {
			return
		}
		var v int64
		v, err = r.int(k(key), req, def)
		if err == nil && (v < 0 || v > maxDim) {
			err = fmt.Errorf("metadata key %q = %d is out of range", k(key), v)
		}
		*dst = int(v)
	}
	geti("block_count", true, 0, &c.NLayer)
	geti("embedding_length", true, 0, &c.NEmbd)
	geti("feed_forward_length", !spec.moe, 0, &c.NFF)
	geti("attention.head_count", true, 0, &c.NHead)
	geti("context_length", false, 4096, &c.CtxTrain)
	if err != nil {
		return nil, err
	}
	geti("attention.head_count_kv", false, int64(c.NHead), &c.NHeadKV)
	hd := int64(0)
	if c.NHead > 0 {
		hd = int64(c.NEmbd / c.NHead)
	}
	geti("attention.key_length", false, hd, &c.HeadDim)
	if err != nil {
		return nil, err
	}
	geti("attention.value_length", false, int64(c.HeadDim), &c.HeadDimV)
	geti("rope.dimension_count", false, int64(c.HeadDim), &c.NRot)
	if spec.moe {
		geti("expert_count", true, 0, &c.NExpert)
		geti("expert_used_count", true, 0, &c.NExpertUse)
		geti("expert_feed_forward_length", false, 0, &c.NFFExp)
	}
	if err != nil {
		return nil, err
	}
	if c.RMSEps, err = r.float(k("attention.layer_norm_rms_epsilon"), true, 0); err != nil {
		return nil, err
	}
	if c.RopeBase, err = r.float(k("rope.freq_base"), false, 10000); err != nil {
		return nil, err
	}
	if err := c.readRopeScaling(r); err != nil {
		return nil, err
	}
	if spec.moe && c.NFFExp == 0 && c.NExpertUse > 0 {
		c.NFFExp = c.NFF / c.NExpertUse
	}
	if spec.readExtra != nil {
		if err := spec.readExtra(r, c); err != nil {
			return nil, err
		}
	}
	return c, c.validate(spec)
}

func (c *Config) readRopeScaling(r metaReader) error {
	k := func(s string) string { return c.Arch + ".rope.scaling." + s }
	typ, err := r.str(k("type"), false, "linear")
	if err != nil {
		return err
	}
	factor, err := r.float(k("factor"), false, 0)
	if err != nil {
		return err
	}
	if factor == 0 {
		// older key name
		if factor, err = r.float(c.Arch+".rope.scale_linear", false, 0); err != nil {
			return err
		}
	}
	if factor == 0 {
		factor = 1
	}
	orig, err := r.int(k("original_context_length"), false, int64(c.CtxTrain))
	if err != nil {
		return err
	}
	attn, err := r.float(k("attn_factor"), false, 1)
	if err != nil {
		return err
	}
	switch typ {
	case "none", "linear", "yarn":
	default:
		return fmt.Errorf("metadata key %q: unsupported rope scaling type %q (supported: none, linear, yarn)", k("type"), typ)
	}
	if factor < 0 || factor > 1e6 || orig < 0 || orig > maxDim || attn <= 0 || attn > 1e6 {
		return fmt.Errorf("metadata %s: out-of-range rope scaling (factor %v, original_context_length %d, attn_factor %v)", c.Arch+".rope.scaling", factor, orig, attn)
	}
	if typ == "none" {
		factor = 1
	}
	c.Rope = RopeScaling{Type: typ, Factor: factor, OrigCtx: int(orig), AttnFactor: attn, YarnBetaFst: 32, YarnBetaSlw: 1}
	return nil
}

func (c *Config) validate(spec *archSpec) error {
	pos := func(name string, v int) error {
		if v <= 0 {
			return fmt.Errorf("%s.%s must be > 0 (got %d)", c.Arch, name, v)
		}
		return nil
	}
	for _, p := range []struct {
		n string
		v int
	}{{"block_count", c.NLayer}, {"embedding_length", c.NEmbd}, {"attention.head_count", c.NHead},
		{"attention.head_count_kv", c.NHeadKV}, {"attention.key_length", c.HeadDim}, {"attention.value_length", c.HeadDimV}} {
		if err := pos(p.n, p.v); err != nil {
			return err
		}
	}
	if !spec.moe {
		if err := pos("feed_forward_length", c.NFF); err != nil {
			return err
		}
	}
	if c.NHead%c.NHeadKV != 0 {
		return fmt.Errorf("%s: attention.head_count %d is not a multiple of head_count_kv %d", c.Arch, c.NHead, c.NHeadKV)
	}
	if c.HeadDimV != c.HeadDim {
		return fmt.Errorf("%s: value_length %d != key_length %d is not supported", c.Arch, c.HeadDimV, c.HeadDim)
	}
	if c.NRot <= 0 || c.NRot > c.HeadDim || c.NRot%2 != 0 {
		return fmt.Errorf("%s: rope.dimension_count %d must be even and in (0, key_length %d]", c.Arch, c.NRot, c.HeadDim)
	}
	if c.RMSEps <= 0 || c.RMSEps > 1 {
		return fmt.Errorf("%s: attention.layer_norm_rms_epsilon %v out of range", c.Arch, c.RMSEps)
	}
	if c.RopeBase <= 1 || math.IsInf(c.RopeBase, 0) {
		return fmt.Errorf("%s: rope.freq_base %v out of range", c.Arch, c.RopeBase)
	}
	if spec.moe {
		if err := pos("expert_count", c.NExpert); err != nil {
			return err
		}
		if err := pos("expert_used_count", c.NExpertUse); err != nil {
			return err
		}
		if c.NExpertUse > c.NExpert {
			return fmt.Errorf("%s: expert_used_count %d > expert_count %d", c.Arch, c.NExpertUse, c.NExpert)
		}
		if err := pos("expert_feed_forward_length", c.NFFExp); err != nil {
			return err
		}
	}
	return nil
}

// QDim is the width of the concatenated query heads.
func (c *Config) QDim() int { return c.NHead * c.HeadDim }

// KVDim is the width of the concatenated key (or value) heads.
func (c *Config) KVDim() int { return c.NHeadKV * c.HeadDim }
