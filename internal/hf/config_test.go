package hf

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Configurations written in the shape of public checkpoints' config.json files.
const (
	llama32Config = `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
  "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
  "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": true,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16",
  "attention_bias": false, "hidden_act": "silu"}`
	qwen3MoeConfig = `{
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
  "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
  "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "vocab_size": 151936, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "rope_scaling": null, "max_position_embeddings": 40960, "tie_word_embeddings": false,
  "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
    "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}}`
	qwen25Config = `{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
  "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
  "num_key_value_heads": 2, "vocab_size": 151936, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151645,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}`
)

func parse(t *testing.T, js string) *Config {
	t.Helper()
	c, err := ParseConfig("config.json", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseRealisticConfigs(t *testing.T) {
	l := parse(t, llama32Config)
	if a, err := l.Arch(); err != nil || a != "llama" {
		t.Fatalf("arch %q %v", a, err)
	}
	if l.HeadDim != 64 || l.NumKeyValueHeads != 8 || !l.TieWordEmbeddings || l.RopeTheta != 500000 || l.RMSNormEps != 1e-5 {
		t.Errorf("llama fields: %+v", l)
	}
	if rs := l.RopeScaling; rs == nil || rs.Type != "llama3" || rs.Factor != 32 || rs.OriginalMaxPositionEmbeddings != 8192 || rs.LowFreqFactor != 1 || rs.HighFreqFactor != 4 {
		t.Errorf("rope scaling %+v", l.RopeScaling)
	}
	if len(l.EOSTokenID) != 3 || l.EOSTokenID[2] != 128009 || len(l.BOSTokenID) != 1 || l.TorchDType != "bfloat16" {
		t.Errorf("token ids %v %v", l.BOSTokenID, l.EOSTokenID)
	}

	m := parse(t, qwen3MoeConfig)
	if a, _ := m.Arch(); a != "qwen3moe" {
		t.Fatalf("arch %q", a)
	}
	if m.RopeScaling != nil || !m.NormTopKProb || m.NumExperts != 128 || m.MoeIntermediateSize != 768 || !m.IsMoELayer(0) {
		t.Errorf("moe fields %+v", m)
	}
	if r, c, ok := m.FP8BlockScaled(); !ok || r != 128 || c != 128 || m.QuantizationConfig.Fmt != "e4m3" || m.QuantizationConfig.ModulesToNotConvert[0] != "lm_head" {
		t.Errorf("quantization %+v", m.QuantizationConfig)
	}

	q := parse(t, qwen25Config)
	if q.HeadDim != 64 || q.NumKeyValueHeads != 2 || q.RopeScaling.Type != "yarn" || q.MaxPositionEmbeddings != 32768 {
		t.Errorf("qwen2 fields %+v %+v", q, q.RopeScaling)
	}
	if qkv, o := q.AttentionBiases(); !qkv || o {
		t.Error("qwen2 must have q/k/v biases and no o bias")
	}
	if q.Raw["model_type"] != "qwen2" {
		t.Errorf("raw map %v", q.Raw["model_type"])
	}
}

// paramFormula counts parameters of a llama-style decoder from the dimensions alone.
func paramFormula(h, ff, layers, heads, kv, hd, vocab, experts, used, moeFF float64, tied, qkNorm bool) (total, active float64) {
	attn := h*heads*hd*2 + h*kv*hd*2
	norms := 2 * h
	if qkNorm {
		norms += 2 * hd
	}
	emb := vocab * h
	if !tied {
		emb *= 2
	}
	if experts == 0 {
		total = layers*(attn+norms+3*h*ff) + emb + h
		return total, total
	}
	total = layers*(attn+norms+experts*3*h*moeFF+experts*h) + emb + h
	active = layers*(attn+norms+used*3*h*moeFF+experts*h) + emb + h
	return total, active
}

func TestParamCount(t *testing.T) {
	m := parse(t, qwen3MoeConfig)
	total, active, err := m.ParamCount()
	if err != nil {
		t.Fatal(err)
	}
	wt, wa := paramFormula(2048, 6144, 48, 32, 4, 128, 151936, 128, 8, 768, false, true)
	if float64(total) != wt || float64(active) != wa {
		t.Errorf("qwen3moe: %d/%d, formula %.0f/%.0f", total, active, wt, wa)
	}
	// The model card of this configuration states 30.5B total and 3.3B activated.
	if math.Abs(float64(total)/30.5e9-1) > 0.01 || math.Abs(float64(active)/3.3e9-1) > 0.03 {
		t.Errorf("qwen3moe: %d total / %d active, published 30.5B / 3.3B", total, active)
	}
	l := parse(t, llama32Config)
	total, active, _ = l.ParamCount()
	wt, _ = paramFormula(2048, 8192, 16, 32, 8, 64, 128256, 0, 0, 0, true, false)
	if float64(total) != wt || total != active {
		t.Errorf("llama: %d/%d, formula %.0f", total, active, wt)
	}
	if math.Abs(float64(total)/1.24e9-1) > 0.01 { // published: 1.24B
		t.Errorf("llama 3.2 1B-shaped config counts %d", total)
	}
}

func TestConfigErrors(t *testing.T) {
	base := `"architectures":["Qwen3ForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"vocab_size":1024`
	cases := []struct{ js, field, want string }{
		{`{` + base + `}`, "num_attention_heads", "missing"},
		{`{` + base + `,"num_attention_heads":"8"}`, "num_attention_heads", "expected a number"},
		{`{` + base + `,"num_attention_heads":8,"num_key_value_heads":3}`, "num_key_value_heads", "does not divide"},
		{`{` + base + `,"num_attention_heads":7}`, "num_attention_heads", "does not divide hidden_size"},
		{`{` + base + `,"num_attention_heads":8,"head_dim":0}`, "head_dim", "out of range"},
		{`{` + base + `,"num_attention_heads":8,"num_key_value_heads":-2}`, "num_key_value_heads", "out of range"},
		{`{` + base + `,"num_attention_heads":8.5}`, "num_attention_heads", "expected an integer"},
		{`{` + base + `,"num_attention_heads":1e15}`, "num_attention_heads", "out of range"},
		{`{` + base + `,"num_attention_heads":8,"rms_norm_eps":-1}`, "rms_norm_eps", "not in (0, 1)"},
		{`{` + base + `,"num_attention_heads":8,"num_experts":4,"num_experts_per_tok":5,"moe_intermediate_size":256}`, "num_experts_per_tok", "not in [1"},
		{`{"architectures":["Qwen3MoeForCausalLM"],"hidden_size":256,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":8,"num_experts":4,"num_experts_per_tok":2}`, "moe_intermediate_size", "positive"},
		{`{` + base + `,"num_attention_heads":8,"num_experts":16000,"num_experts_per_tok":2,"moe_intermediate_size":256,"num_hidden_layers":16000}`, "num_experts", "limit"},
		{`{"architectures":["Qwen3ForCausalLM"],"hidden_size":1000000,"intermediate_size":1000000,"num_hidden_layers":10000,"vocab_size":1024,"num_attention_heads":8}`, "", "parameters"},
		{`{` + base + `,"num_attention_heads":8,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":256,"mlp_only_layers":[5]}`, "mlp_only_layers", "not a layer"},
		{`{` + base + `,"num_attention_heads":8,"rope_scaling":{"rope_type":"llama3","factor":8}}`, "rope_scaling", "llama3"},
		{`{` + base + `,"num_attention_heads":8,"rope_scaling":{"type":"linear"}}`, "rope_scaling", "positive factor"},
		{`{` + base + `,"num_attention_heads":8,"rope_scaling":{"type":"linear","factor":"x"}}`, "rope_scaling", "expected a number"},
		{`{` + base + `,"num_attention_heads":8,"quantization_config":{"quant_method":"fp8","weight_block_size":[128]}}`, "quantization_config", "two positive"},
		{`{` + base + `,"num_attention_heads":8,"quantization_config":{"quant_method":"fp8","weight_block_size":[128,-1]}}`, "quantization_config", "positive integers"},
		{`{` + base + `,"num_attention_heads":8,"tie_word_embeddings":"yes"}`, "tie_word_embeddings", "true or false"},
		{`{` + base + `,"num_attention_heads":8,"eos_token_id":"x"}`, "eos_token_id", "integer or a list"},
		{`{"architectures":["Qwen3ForCausalLM"],"hidden_size":256,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":8}`, "intermediate_size", "dense MLP"},
		{`{` + base + `,"num_attention_heads":8,"text_config":[1]}`, "text_config", "not a JSON object"},
		{`{` + base, "", "invalid JSON"},
		{`[1]`, "", "invalid JSON"},
		{`{` + base + `,"num_attention_heads":8} {}`, "", "after the JSON"},
	}
	for _, c := range cases {
		_, err := ParseConfig("/m/config.json", []byte(c.js))
		if err == nil {
			t.Errorf("%s: accepted", c.js)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "/m/config.json") || !strings.Contains(msg, c.want) || (c.field != "" && !strings.Contains(msg, `"`+c.field+`"`)) {
			t.Errorf("%s:\n  error %q\n  want field %q and %q", c.js, msg, c.field, c.want)
		}
	}
}

func TestDefaultsAndVariants(t *testing.T) {
	c := parse(t, `{"model_type":"qwen3","hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":4,"head_dim":null}`)
	if c.NumKeyValueHeads != 4 || c.HeadDim != 64 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 || c.MaxPositionEmbeddings != 32768 || c.DecoderSparseStep != 1 {
		t.Errorf("defaults %+v", c)
	}
	if a, err := c.Arch(); err != nil || a != "qwen3" {
		t.Errorf("arch from model_type: %q %v", a, err)
	}
	// transformers v5 style: rope_parameters carrying rope_theta, dtype instead of torch_dtype.
	c = parse(t, `{"architectures":["LlamaForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":4,
		"rope_parameters":{"rope_type":"default","rope_theta":250000.0},"dtype":"float16"}`)
	if c.RopeTheta != 250000 || c.RopeScaling != nil || c.TorchDType != "float16" {
		t.Errorf("rope_parameters: theta %g scaling %+v dtype %q", c.RopeTheta, c.RopeScaling, c.TorchDType)
	}
	// text_config overrides root keys.
	c = parse(t, `{"architectures":["Qwen3ForCausalLM"],"hidden_size":1,"text_config":{"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":4}}`)
	if c.HiddenSize != 256 {
		t.Errorf("text_config not merged: %d", c.HiddenSize)
	}
	// Mixtral-style expert size from intermediate_size; decoder_sparse_step / mlp_only_layers.
	c = parse(t, `{"architectures":["Qwen3MoeForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":4,"vocab_size":1024,"num_attention_heads":4,
		"num_local_experts":4,"num_experts_per_tok":2,"decoder_sparse_step":2,"mlp_only_layers":[3]}`)
	if c.NumExperts != 4 || c.MoeIntermediateSize != 512 || c.IsMoELayer(0) || !c.IsMoELayer(1) || c.IsMoELayer(3) {
		t.Errorf("sparse layout %+v", c)
	}
	_, err := parse(t, `{"architectures":["GPT2LMHeadModel"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":4}`).Arch()
	if err == nil || !strings.Contains(err.Error(), "GPT2LMHeadModel") || !strings.Contains(err.Error(), "Qwen3MoeForCausalLM") {
		t.Errorf("unsupported arch error: %v", err)
	}
}

func TestLoadConfigPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(qwen25Config), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "config.json")} {
		c, err := LoadConfig(p)
		if err != nil || c.HiddenSize != 896 {
			t.Errorf("LoadConfig(%s): %v", p, err)
		}
	}
	if _, err := LoadConfig(filepath.Join(dir, "nope.json")); err == nil {
		t.Error("missing file loaded")
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{llama32Config, qwen3MoeConfig, qwen25Config, tinyHybrid, `{}`, `{"hidden_size":1e400}`,
		`{"architectures":["Qwen3ForCausalLM"],"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"vocab_size":1024,"num_attention_heads":4,"rope_scaling":{"type":"yarn","factor":-1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz/config.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz/config.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c.HiddenSize < 1 || c.HeadDim < 1 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.NumHiddenLayers < 1 {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
		if _, err := c.Arch(); err == nil {
			if _, _, err := c.ParamCount(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
