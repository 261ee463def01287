package policy

import (
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// hybridTensors is one Gated DeltaNet block, one gated-attention block and the MTP block of a
// Qwen3.5 MoE model, as the converter names and shapes them.
func hybridTensors() []Tensor {
	var ts []Tensor
	add := func(name, src string, shape ...int64) {
		t := Tensor{Name: name, Shape: shape, Sources: []string{src}}
		t.Type = ConverterFloatType(t, gguf.TypeF16)
		ts = append(ts, t)
	}
	add("token_embd.weight", "model.embed_tokens", 256, 1000)
	add("output.weight", "lm_head", 256, 1000)
	la := "model.layers.0.linear_attn."
	add("blk.0.attn_qkv.weight", la+"in_proj_qkv", 256, 512)
	add("blk.0.attn_gate.weight", la+"in_proj_z", 256, 256)
	add("blk.0.ssm_alpha.weight", la+"in_proj_a", 256, 4)
	add("blk.0.ssm_beta.weight", la+"in_proj_b", 256, 4)
	add("blk.0.ssm_conv1d.weight", la+"conv1d", 4, 512)
	add("blk.0.ssm_a", la+"A_log", 4)
	add("blk.0.ssm_dt.bias", la+"dt_bias", 4)
	add("blk.0.ssm_norm.weight", la+"norm", 64)
	add("blk.0.ssm_out.weight", la+"out_proj", 256, 256)
	add("blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm", 256)
	add("blk.0.ffn_gate_inp_shexp.weight", "model.layers.0.mlp.shared_expert_gate", 256, 1)
	add("blk.0.ffn_gate_shexp.weight", "model.layers.0.mlp.shared_expert.gate_proj", 256, 256)
	add("blk.0.ffn_up_shexp.weight", "model.layers.0.mlp.shared_expert.up_proj", 256, 256)
	add("blk.0.ffn_down_shexp.weight", "model.layers.0.mlp.shared_expert.down_proj", 256, 256)
	add("blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj", 256, 512)
	add("blk.1.attn_output.weight", "model.layers.1.self_attn.o_proj", 256, 256)
	add("blk.2.nextn.eh_proj.weight", "model.layers.2.eh_proj", 512, 256)
	add("blk.2.nextn.enorm.weight", "model.layers.2.enorm", 256)
	return ts
}

func TestTurboHybridKinds(t *testing.T) {
	ts := hybridTensors()
	ds, err := (&TurboPolicy{Config: DefaultTurboConfig()}).Assign(ts)
	if err != nil {
		t.Fatal(err)
	}
	m := byName(ds)
	want := map[string]gguf.GGMLType{
		"blk.0.attn_qkv.weight":           gguf.TypeQ4_K, // with q_proj/k_proj/v_proj
		"blk.0.attn_gate.weight":          gguf.TypeQ4_K, // with gate_proj
		"blk.0.ssm_alpha.weight":          gguf.TypeF16,  // recurrent gate projections stay F16
		"blk.0.ssm_beta.weight":           gguf.TypeF16,
		"blk.0.ssm_conv1d.weight":         gguf.TypeF32, // never quantized
		"blk.0.ssm_a":                     gguf.TypeF32,
		"blk.0.ssm_dt.bias":               gguf.TypeF32,
		"blk.0.ssm_norm.weight":           gguf.TypeF32,
		"blk.0.ssm_out.weight":            gguf.TypeQ8_0, // like o_proj
		"blk.0.ffn_gate_inp_shexp.weight": gguf.TypeF32,
		"blk.0.ffn_gate_shexp.weight":     gguf.TypeQ4_K,
		"blk.0.ffn_up_shexp.weight":       gguf.TypeQ4_K,
		"blk.0.ffn_down_shexp.weight":     gguf.TypeQ8_0,
		"blk.1.attn_q.weight":             gguf.TypeQ4_K,
		"blk.2.nextn.eh_proj.weight":      gguf.TypeQ8_0,
		"blk.2.nextn.enorm.weight":        gguf.TypeF32,
		"output.weight":                   gguf.TypeF16,
	}
	for n, w := range want {
		if d, ok := m[n]; !ok || d.Type != w {
			t.Errorf("%s: %v (%s), want %v", n, d.Type, d.Rule, w)
		}
	}
	if d := m["blk.0.ssm_alpha.weight"]; !d.Fixed || !strings.Contains(d.Rule, "recurrent") {
		t.Errorf("ssm_alpha decision %+v", d)
	}
	// an explicit tensor_types choice still wins over the F16 pin; o_proj in skip_layers
	// also selects ssm_out ("not int4": Q8_0), and a tensor_types choice for it wins
	cfg := DefaultTurboConfig()
	cfg.TensorTypes = map[string]string{"blk.0.ssm_beta.weight": "q8_0", "blk.0.ssm_out.weight": "f16"}
	ds, err = (&TurboPolicy{Config: cfg}).Assign(ts)
	if err != nil {
		t.Fatal(err)
	}
	m = byName(ds)
	if m["blk.0.ssm_beta.weight"].Type != gguf.TypeQ8_0 || m["blk.0.ssm_out.weight"].Type != gguf.TypeF16 {
		t.Errorf("ssm_beta %v, ssm_out %v", m["blk.0.ssm_beta.weight"].Type, m["blk.0.ssm_out.weight"].Type)
	}
	roles := map[string]string{"blk.0.attn_qkv.weight": "in_proj_qkv", "blk.0.ssm_beta.weight": "in_proj_b",
		"blk.0.ssm_conv1d.weight": "conv1d", "blk.2.nextn.eh_proj.weight": "fc", "blk.2.nextn.hnorm.weight": "norm"}
	for n, r := range roles {
		if got := Role(n); got != r {
			t.Errorf("Role(%s) = %q, want %q", n, got, r)
		}
	}
	if KeepsHighPrecision(Tensor{Name: "blk.0.attn_qkv.weight"}) || !KeepsHighPrecision(Tensor{Name: "blk.3.ssm_alpha.weight"}) {
		t.Error("KeepsHighPrecision")
	}
}

// The llama-quantize mixtures treat the fused linear-attention qkv like attn_v (it counts in
// n_attention_wv) and everything else by name, as llama-quant.cpp does.
func TestMixtureHybridCategories(t *testing.T) {
	if CategoryOf("blk.0.attn_qkv.weight") != CatAttnQKV || CategoryOf("blk.0.attn_gate.weight") != CatOther ||
		CategoryOf("blk.0.ssm_out.weight") != CatOther || CategoryOf("blk.0.ffn_gate_shexp.weight") != CatFFNGate {
		t.Error("categories")
	}
	for _, n := range []string{"blk.0.ssm_conv1d.weight", "blk.0.ssm_a", "blk.0.ssm_dt.bias", "blk.0.ffn_gate_inp_shexp.weight"} {
		tt := Tensor{Name: n, Shape: []int64{4, 512}}
		if n != "blk.0.ssm_conv1d.weight" {
			tt.Shape = []int64{256}
		}
		if AllowsQuantization(tt, false) {
			t.Errorf("%s quantizable", n)
		}
	}
}
