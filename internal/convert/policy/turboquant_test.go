package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

func moeTensors(nLayer int) []Tensor {
	var ts []Tensor
	add := func(name string, src string, shape ...int64) {
		t := Tensor{Name: name, Shape: shape}
		if src != "" {
			t.Sources = []string{src}
		}
		t.Type = ConverterFloatType(t, gguf.TypeF16)
		ts = append(ts, t)
	}
	add("token_embd.weight", "model.embed_tokens", 256, 1000)
	add("output.weight", "lm_head", 256, 1000)
	add("output_norm.weight", "model.norm", 256)
	for i := 0; i < nLayer; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		h := fmt.Sprintf("model.layers.%d.", i)
		add(p+"attn_norm.weight", h+"input_layernorm", 256)
		add(p+"attn_q.weight", h+"self_attn.q_proj", 256, 256)
		add(p+"attn_k.weight", h+"self_attn.k_proj", 256, 128)
		add(p+"attn_v.weight", h+"self_attn.v_proj", 256, 128)
		add(p+"attn_output.weight", h+"self_attn.o_proj", 256, 256)
		add(p+"attn_q_norm.weight", h+"self_attn.q_norm", 64)
		add(p+"ffn_gate_inp.weight", h+"mlp.gate", 256, 4)
		add(p+"ffn_gate_exps.weight", h+"mlp.experts.gate_proj", 256, 96, 4)
		add(p+"ffn_up_exps.weight", h+"mlp.experts.up_proj", 256, 96, 4)
		add(p+"ffn_down_exps.weight", h+"mlp.experts.down_proj", 96, 256, 4)
	}
	return ts
}

func TestTurboDefaultPolicy(t *testing.T) {
	ts := moeTensors(2)
	ds, err := (&TurboPolicy{Config: DefaultTurboConfig()}).Assign(ts)
	if err != nil {
		t.Fatal(err)
	}
	m := byName(ds)
	want := map[string]gguf.GGMLType{
		"token_embd.weight":          gguf.TypeQ8_0,
		"output.weight":              gguf.TypeF16,
		"output_norm.weight":         gguf.TypeF32,
		"blk.0.attn_norm.weight":     gguf.TypeF32,
		"blk.0.attn_q.weight":        gguf.TypeQ4_K,
		"blk.0.attn_k.weight":        gguf.TypeQ4_K,
		"blk.0.attn_v.weight":        gguf.TypeQ4_K,
		"blk.0.attn_output.weight":   gguf.TypeQ8_0,
		"blk.0.attn_q_norm.weight":   gguf.TypeF32,
		"blk.0.ffn_gate_inp.weight":  gguf.TypeF32,
		"blk.1.ffn_gate_exps.weight": gguf.TypeQ4_K,
		"blk.1.ffn_up_exps.weight":   gguf.TypeQ4_K,
		"blk.1.ffn_down_exps.weight": gguf.TypeQ8_0,
	}
	for n, wt := range want {
		if m[n].Type != wt {
			t.Errorf("%s: %v (%s), want %v", n, m[n].Type, m[n].Rule, wt)
		}
	}
	if !m["blk.0.attn_q.weight"].Weighted || m["blk.0.attn_output.weight"].Weighted {
		t.Error("weighted search flags wrong")
	}
}

func TestTurboMappingAndConfigs(t *testing.T) {
	// the stated policy: int4 in Q4_K (IQ4_NL, also 4.5 bits, where rows are not a multiple
	// of 256), int8 in Q8_0, whatever group_size and symmetric say
	sym, asym := true, false
	cases := []struct {
		dtype string
		group int
		sym   *bool
		cols  int64
		want  []gguf.GGMLType
	}{
		{"int4", 32, &sym, 256, []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeIQ4_NL}},
		{"int4", 128, &asym, 512, []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeIQ4_NL}},
		{"int4", 128, &sym, 96, []gguf.GGMLType{gguf.TypeIQ4_NL}},
		{"int8", 64, &sym, 256, []gguf.GGMLType{gguf.TypeQ8_0}},
		{"int4", 32, &sym, 100, []gguf.GGMLType{gguf.TypeF16}},
	}
	for _, c := range cases {
		cfg := &TurboConfig{WeightDType: c.dtype, GroupSize: c.group, Symmetric: c.sym}
		if got := cfg.WeightCandidates(c.cols); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%+v: got %v", c, got)
		}
	}

	// lm_head must be skipped unless forced
	cfg, err := ParseTurboConfig([]byte(`{"quant_method":"turboquant","weight_dtype":"int4","group_size":128,"symmetric":true,"skip_layers":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&TurboPolicy{Config: cfg}).Assign(moeTensors(1))
	if !errors.Is(err, ErrLMHeadNotSkipped) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("missing lm_head not refused: %v", err)
	}
	ds, err := (&TurboPolicy{Config: cfg, Force: true}).Assign(moeTensors(1))
	if err != nil {
		t.Fatal(err)
	}
	if d := byName(ds)["output.weight"]; d.Type != gguf.TypeQ8_0 {
		t.Errorf("forced lm_head: %+v", d)
	}

	// per-tensor choices, layer-list patterns, embedding type, typos
	cfg, err = ParseTurboConfig([]byte(`{"quant_method":"turboquant","weight_dtype":"int8","skip_layers":["lm_head","model.layers.1"],
		"layers_to_quantize":["self_attn","down_proj"],"embedding_dtype":"q6_k","tensor_types":{"blk.0.attn_v.weight":"q6_K"},"extra":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Unknown) != 1 || cfg.Unknown[0] != "extra" {
		t.Errorf("unknown keys: %v", cfg.Unknown)
	}
	m := byName(must((&TurboPolicy{Config: cfg}).Assign(moeTensors(2))))
	checks := map[string]gguf.GGMLType{
		"blk.0.attn_v.weight":        gguf.TypeQ6_K, // tensor_types
		"blk.0.attn_q.weight":        gguf.TypeQ8_0, // self_attn, int8
		"blk.0.ffn_down_exps.weight": gguf.TypeQ8_0,
		"blk.0.ffn_gate_exps.weight": gguf.TypeQ8_0, // not listed
		"blk.1.attn_q.weight":        gguf.TypeQ8_0, // layer 1 skipped: not int4
		"token_embd.weight":          gguf.TypeQ6_K,
	}
	for n, wt := range checks {
		if m[n].Type != wt {
			t.Errorf("%s: %v (%s), want %v", n, m[n].Type, m[n].Rule, wt)
		}
	}
	if !m["blk.0.attn_v.weight"].Fixed || !m["blk.1.attn_q.weight"].Fixed || m["blk.0.attn_q.weight"].Fixed {
		t.Error("fixed flags wrong")
	}
	// calibration records: their container is used for the quantized layers
	cfg, err = ParseTurboConfig([]byte(`{"quant_method":"turboquant","group_size":32,"calibration":{"x":1},
		"tensors":{"blk.0.attn_q.weight":{"type":"iq4_nl","group_size":0,"rmse":0.1}}}`))
	if err != nil || len(cfg.Unknown) != 0 {
		t.Fatalf("%v %v", err, cfg.Unknown)
	}
	m = byName(must((&TurboPolicy{Config: cfg}).Assign(moeTensors(1))))
	if d := m["blk.0.attn_q.weight"]; d.Type != gguf.TypeIQ4_NL || d.Rule != "calibrated choice" {
		t.Errorf("calibrated attn_q: %+v", d)
	}
	// a record does not pull o_proj into the int4 layers: it contradicts the policy
	cfg, err = ParseTurboConfig([]byte(`{"quant_method":"turboquant","tensors":{"blk.0.attn_output.weight":{"type":"q4_K"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&TurboPolicy{Config: cfg}).Assign(moeTensors(1)); err == nil || !strings.Contains(err.Error(), `tensors["blk.0.attn_output.weight"].type`) {
		t.Errorf("record for a tensor outside layers_to_quantize: %v", err)
	}
	if _, err := ParseTurboConfig([]byte(`{"quant_method":"turboquant","tensors":{"a":{"type":"q4_K","group_size":48}}}`)); err == nil {
		t.Error("bad record group size accepted")
	}
	cfg, _ = ParseTurboConfig([]byte(`{"quant_method":"turboquant","layers_to_quantize":["q_prj"]}`))
	if _, err := (&TurboPolicy{Config: cfg}).Assign(moeTensors(1)); err == nil || !strings.Contains(err.Error(), "q_prj") {
		t.Errorf("typo not reported: %v", err)
	}
	// tied embeddings: token_embd doubles as lm_head and is kept F16
	var tied []Tensor
	for _, x := range moeTensors(1) {
		if x.Name != "output.weight" {
			tied = append(tied, x)
		}
	}
	if d := byName(must((&TurboPolicy{Config: DefaultTurboConfig()}).Assign(tied)))["token_embd.weight"]; d.Type != gguf.TypeF16 {
		t.Errorf("tied token_embd: %+v", d)
	}
}

func TestParseTurboConfigErrors(t *testing.T) {
	bad := map[string]string{
		`[]`:                      "JSON object",
		`{"quant_method":"gptq"}`: "quant_method",
		`{"quant_method":"turboquant","weight_dtype":"int3"}`:      "weight_dtype",
		`{"quant_method":"turboquant","group_size":48}`:            "group_size",
		`{"quant_method":"turboquant","kv_cache_dtype":"fp7"}`:     "kv_cache_dtype",
		`{"quant_method":"turboquant","tensor_types":{"x":"q9"}}`:  "tensor_types",
		`{"quant_method":"turboquant","group_size":"big"}`:         "bad field",
		`{"quant_method":"turboquant","embedding_dtype":"iq2_xs"}`: "embedding_dtype",
	}
	for in, want := range bad {
		_, err := ParseTurboConfig([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want mention of %q", in, err, want)
		}
	}
	c, err := ParseTurboConfig([]byte(`{"quant_method":"turboquant"}`))
	if err != nil || c.WeightDType != "int4" || c.GroupSize != 128 || !*c.Symmetric || len(c.LayersToQuantize) != 5 ||
		fmt.Sprint(c.SkipLayers) != "[o_proj down_proj lm_head]" {
		t.Errorf("defaults: %+v %v", c, err)
	}
}

func FuzzParseTurboConfig(f *testing.F) {
	f.Add([]byte(`{"quant_method":"turboquant","weight_dtype":"int4","group_size":128,"symmetric":false,"skip_layers":["lm_head"],"tensor_types":{"a":"q8_0"}}`))
	f.Add([]byte(`{"quant_method":"turboquant","layers_to_quantize":["model.layers.0","experts"]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"quant_method":"turboquant","weight_dtype":"int8","tensors":{"blk.0.attn_q.weight":{"type":"q8_0","group_size":64}},"tensor_types":{"output.weight":"f16"}}`))
	f.Add([]byte(`{"quant_method":"turboquant","tensors":{"blk.0.attn_k.weight":{"type":"q4_0"}},"tensor_types":{"attn_k":"q6_K"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseTurboConfig(b)
		if err != nil {
			return
		}
		// a valid config must drive the policy without panicking, and an accepted one must
		// follow every calibration record (or say why not)
		for _, ts := range [][]Tensor{moeTensors(1), tiedTensors(1)} {
			p := &TurboPolicy{Config: c, Force: true}
			ds, err := p.Assign(ts)
			if err != nil {
				continue
			}
			m := byName(ds)
			for name, r := range c.Tensors {
				d, ok := m[name]
				if !ok {
					t.Fatalf("record %q for no tensor accepted", name)
				}
				want, _ := gguf.ParseType(r.Type)
				if d.Type != want && !d.Fallback && !strings.HasPrefix(d.Rule, "tensor_types") {
					t.Fatalf("record %q (%s) not followed: %+v", name, r.Type, d)
				}
			}
		}
	})
}
