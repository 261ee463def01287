package modelsrc

import (
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
)

// u32 converts a config integer to a UINT32 metadata value.
func u32(key string, v int64) (gguf.Value, error) {
	if v < 0 || v > math.MaxUint32 {
		return gguf.Value{}, fmt.Errorf("metadata %s = %d does not fit UINT32", key, v)
	}
	return gguf.Uint32(uint32(v)), nil
}

// commonHParams writes the keys TextModel.set_gguf_parameters writes for every text model,
// each only when config.json has the corresponding key (block_count always).
func commonHParams(c *archCtx, md *gguf.Metadata) error {
	a := c.arch.name
	h := c.h
	setU := func(key string, v int64) error {
		val, err := u32(key, v)
		if err != nil {
			return err
		}
		md.Set(a+"."+key, val)
		return nil
	}
	if err := setU("block_count", c.nBlocks()); err != nil {
		return err
	}
	optU := func(key string, names ...string) error {
		v, ok, err := h.int(names...)
		if err != nil || !ok {
			return err
		}
		return setU(key, v)
	}
	if err := optU("context_length", "max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"); err != nil {
		return err
	}
	if err := optU("embedding_length", "hidden_size", "n_embd", "dim"); err != nil {
		return err
	}
	if err := optU("feed_forward_length", "prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner", "hidden_dim"); err != nil {
		return err
	}
	if err := optU("attention.head_count", "num_attention_heads", "n_head", "n_heads"); err != nil {
		return err
	}
	if err := optU("attention.head_count_kv", "num_key_value_heads", "n_kv_heads"); err != nil {
		return err
	}
	rp := h.ropeParams()
	if rt, ok := rp["rope_type"].(string); ok {
		factor, hasFactor := rp["factor"]
		switch rt {
		case "linear":
			if hasFactor {
				f, err := asFloat(factor)
				if err != nil {
					return fmt.Errorf("%s: rope factor: %w", h.path, err)
				}
				md.Set(a+".rope.scaling.type", gguf.String("linear"))
				md.Set(a+".rope.scaling.factor", gguf.Float32(float32(f)))
			}
		case "yarn":
			if hasFactor {
				f, err := asFloat(factor)
				if err != nil {
					return fmt.Errorf("%s: rope factor: %w", h.path, err)
				}
				md.Set(a+".rope.scaling.type", gguf.String("yarn"))
				md.Set(a+".rope.scaling.factor", gguf.Float32(float32(f)))
				oc, err := asInt(rp["original_max_position_embeddings"])
				if err != nil {
					return fmt.Errorf("%s: yarn rope scaling needs original_max_position_embeddings: %w", h.path, err)
				}
				if err := setU("rope.scaling.original_context_length", oc); err != nil {
					return err
				}
				for _, kv := range [][2]string{{"extrapolation_factor", "rope.scaling.yarn_ext_factor"},
					{"attention_factor", "rope.scaling.yarn_attn_factor"}, {"attn_factor", "rope.scaling.yarn_attn_factor"},
					{"beta_fast", "rope.scaling.yarn_beta_fast"}, {"beta_slow", "rope.scaling.yarn_beta_slow"}} {
					if v, ok := rp[kv[0]]; ok && v != nil {
						f, err := asFloat(v)
						if err != nil {
							return fmt.Errorf("%s: rope %s: %w", h.path, kv[0], err)
						}
						if !md.Has(a + "." + kv[1]) {
							md.Set(a+"."+kv[1], gguf.Float32(float32(f)))
						}
					}
				}
			}
		case "su", "longrope":
			md.Set(a+".rope.scaling.type", gguf.String("longrope"))
		case "default", "llama3", "dynamic":
			// llama3 is written as the rope_freqs tensor; default needs nothing
		default:
			return fmt.Errorf("%s: unsupported rope_type %q", h.path, rt)
		}
	}
	if v, ok := rp["rope_theta"]; ok && v != nil {
		f, err := asFloat(v)
		if err != nil {
			return fmt.Errorf("%s: rope_theta: %w", h.path, err)
		}
		md.Set(a+".rope.freq_base", gguf.Float32(float32(f)))
	}
	if f, ok, err := h.float("rms_norm_eps", "norm_eps"); err != nil {
		return err
	} else if ok {
		md.Set(a+".attention.layer_norm_rms_epsilon", gguf.Float32(float32(f)))
	}
	if f, ok, err := h.float("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"); err != nil {
		return err
	} else if ok {
		md.Set(a+".attention.layer_norm_epsilon", gguf.Float32(float32(f)))
	}
	if err := optU("expert_count", "num_local_experts", "num_experts", "n_routed_experts"); err != nil {
		return err
	}
	if err := optU("expert_used_count", "num_experts_per_tok", "num_experts_per_token", "top_k_experts"); err != nil {
		return err
	}
	if hd, ok, err := h.int("head_dim"); err != nil {
		return err
	} else if ok {
		if err := setU("attention.key_length", hd); err != nil {
			return err
		}
		if err := setU("attention.value_length", hd); err != nil {
			return err
		}
	}
	return nil
}
