package policy

import (
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

func tiedTensors(nLayer int) []Tensor {
	var out []Tensor
	for _, t := range moeTensors(nLayer) {
		if t.Name != "output.weight" {
			out = append(out, t)
		}
	}
	return out
}

// Contradictions in quantize_config.json are errors naming the field (as a JSON path), found
// when the file is parsed or, for those that need the model, when the policy is assigned.
func TestTurboConfigContradictions(t *testing.T) {
	cases := []struct {
		name   string
		config string   // body inside {"quant_method":"turboquant", ...}
		tied   bool     // model without output.weight
		want   []string // substrings of the error
	}{
		{"int8 with int4 records", `"weight_dtype":"int8","tensors":{"blk.0.attn_q.weight":{"type":"q4_0"}}`, false,
			[]string{`tensors["blk.0.attn_q.weight"].type = "q4_0"`, `weight_dtype "int8"`}},
		{"int8 with q4_K record", `"weight_dtype":"int8","symmetric":false,"tensors":{"blk.0.attn_q.weight":{"type":"q4_K"}}`, false,
			[]string{`tensors["blk.0.attn_q.weight"].type = "q4_K"`}},
		{"int4 with a q4_0 record (not a container the policy writes)", `"tensors":{"blk.0.attn_q.weight":{"type":"q4_0"}}`, false,
			[]string{`tensors["blk.0.attn_q.weight"].type = "q4_0"`, `weight_dtype "int4"`}},
		{"int4 with q8_0 record", `"tensors":{"blk.0.attn_q.weight":{"type":"q8_0"}}`, false,
			[]string{`tensors["blk.0.attn_q.weight"].type = "q8_0"`, `weight_dtype "int4"`}},
		{"record outside both containers", `"tensors":{"blk.0.attn_q.weight":{"type":"q6_K"}}`, false,
			[]string{`tensors["blk.0.attn_q.weight"].type = "q6_K"`}},
		{"group_size 0", `"group_size":0`, false, []string{"group_size = 0"}},
		{"group_size null", `"group_size":null`, false, []string{"group_size = 0"}},
		{"group_size negative", `"group_size":-128`, false, []string{"group_size = -128"}},
		{"group_size 48", `"group_size":48`, false, []string{"group_size = 48"}},
		{"record group_size negative", `"tensors":{"blk.0.attn_q.weight":{"type":"q4_K","group_size":-1}}`, false,
			[]string{`tensors["blk.0.attn_q.weight"].group_size = -1`}},
		{"record naming no tensor", `"tensors":{"blk.7.attn_q.weight":{"type":"q4_K"}}`, false,
			[]string{`tensors["blk.7.attn_q.weight"] names no tensor`}},
		{"record for a tensor outside layers_to_quantize", `"skip_layers":["lm_head"],"tensors":{"blk.0.attn_output.weight":{"type":"q4_K"}}`, false,
			[]string{`tensors["blk.0.attn_output.weight"].type = "q4_K"`, "not listed"}},
		{"record for a norm", `"tensors":{"blk.0.attn_norm.weight":{"type":"q4_K"}}`, false,
			[]string{`tensors["blk.0.attn_norm.weight"].type`, "never quantized"}},
		{"q4_0 override for lm_head (default skip_layers)", `"tensor_types":{"output.weight":"q4_0"}`, false,
			[]string{`tensor_types["output.weight"] = "q4_0"`, `skip_layers entry "lm_head"`}},
		{"q4_0 override for lm_head by pattern", `"skip_layers":["lm_head"],"tensor_types":{"output":"q4_0"}`, false,
			[]string{`tensor_types["output"] = "q4_0"`, "output.weight", `"lm_head"`}},
		{"q4_K record for lm_head", `"tensors":{"output.weight":{"type":"q4_K"}}`, false,
			[]string{`tensors["output.weight"].type = "q4_K"`, "lm_head: skipped"}},
		{"q4_0 override for the tied embedding", `"tensor_types":{"token_embd.weight":"q4_0"}`, true,
			[]string{`tensor_types["token_embd.weight"]`, "tied"}},
		{"q2_k override for a skipped layer", `"skip_layers":["lm_head","model.layers.1"],"tensor_types":{"blk.1.attn_q.weight":"q2_k"}`, false,
			[]string{`tensor_types["blk.1.attn_q.weight"] = "q2_k"`, `skip_layers entry "model.layers.1"`}},
		{"q2_k override for a skipped role by pattern", `"skip_layers":["lm_head","o_proj"],"tensor_types":{"attn_output":"q2_K"}`, false,
			[]string{`tensor_types["attn_output"] = "q2_K"`, `"o_proj"`}},
		{"q6_K override for a skipped layer (not int4 means 8 bits)", `"tensor_types":{"blk.0.ffn_down_exps.weight":"q6_K"}`, false,
			[]string{`tensor_types["blk.0.ffn_down_exps.weight"] = "q6_K"`, `skip_layers entry "down_proj"`}},
		{"record for a skipped layer", `"skip_layers":["lm_head","model.layers.1"],"tensors":{"blk.1.attn_q.weight":{"type":"q4_K"}}`, false,
			[]string{`tensors["blk.1.attn_q.weight"].type = "q4_K"`, "skip_layers"}},
		{"layer entry matching nothing", `"skip_layers":["lm_head","model.layers.9"]`, false,
			[]string{`"model.layers.9" matches no tensor`}},
	}
	for _, c := range cases {
		ts := moeTensors(2)
		if c.tied {
			ts = tiedTensors(2)
		}
		cfg, err := ParseTurboConfig([]byte(`{"quant_method":"turboquant",` + c.config + `}`))
		if err == nil {
			_, err = (&TurboPolicy{Config: cfg}).Assign(ts)
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", c.name, err, w)
			}
		}
	}
}

// What the user may mean is accepted with a warning that says what was done.
func TestTurboConfigWarnings(t *testing.T) {
	cases := []struct {
		name   string
		config string
		tied   bool
		tensor string
		typ    gguf.GGMLType
		want   string // substring of the one warning
	}{
		{"tensor_types overrides a record", `"tensor_types":{"blk.0.attn_q.weight":"q6_K"},"tensors":{"blk.0.attn_q.weight":{"type":"q4_K"}}`, false,
			"blk.0.attn_q.weight", gguf.TypeQ6_K, `tensors["blk.0.attn_q.weight"]: calibrated q4_K not used: tensor_types["blk.0.attn_q.weight"] sets q6_K`},
		{"embedding_dtype with tied embeddings", `"embedding_dtype":"q6_K"`, true,
			"token_embd.weight", gguf.TypeF16, "embedding type q6_K not used: embeddings are tied"},
	}
	for _, c := range cases {
		ts := moeTensors(2)
		if c.tied {
			ts = tiedTensors(2)
		}
		cfg, err := ParseTurboConfig([]byte(`{"quant_method":"turboquant",` + c.config + `}`))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		p := &TurboPolicy{Config: cfg}
		ds, err := p.Assign(ts)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], c.want) {
			t.Errorf("%s: warnings %q, want one containing %q", c.name, p.Warnings, c.want)
		}
		if d := byName(ds)[c.tensor]; d.Type != c.typ {
			t.Errorf("%s: %s is %v (%s), want %v", c.name, c.tensor, d.Type, d.Rule, c.typ)
		}
	}
}

// A config as tq calibrate writes it (records for the searched tensors only), with float
// overrides for skipped tensors, still loads and is followed without warnings.
func TestTurboConfigValidStillLoads(t *testing.T) {
	cfg, err := ParseTurboConfig([]byte(`{"quant_method":"turboquant","weight_dtype":"int4","kv_cache_dtype":"f16",
		"group_size":128,"symmetric":true,"calibration_method":"mse","num_prompts":8,"calibration_hash":"sha256:00",
		"layers_to_quantize":["q_proj","k_proj","v_proj","gate_proj","up_proj"],"skip_layers":["o_proj","down_proj","lm_head"],
		"tensor_types":{"output.weight":"f16","blk.1.attn_output.weight":"bf16","blk.0.attn_output.weight":"q8_0"},
		"imatrix":"imatrix.gguf","tq_version":"test","calibration":{"model":"m"},
		"tensors":{
			"blk.0.attn_q.weight":{"type":"q4_K","group_size":0,"shape":[256,256],"rmse":0.01},
			"blk.0.attn_k.weight":{"type":"iq4_nl","group_size":0},
			"blk.1.attn_v.weight":{"type":"q4_K","group_size":128},
			"blk.0.ffn_up_exps.weight":{"type":"iq4_nl","group_size":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := &TurboPolicy{Config: cfg}
	ds, err := p.Assign(moeTensors(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings for a consistent config: %q", p.Warnings)
	}
	m := byName(ds)
	for name, want := range map[string]gguf.GGMLType{
		"blk.0.attn_q.weight":        gguf.TypeQ4_K,
		"blk.0.attn_k.weight":        gguf.TypeIQ4_NL,
		"blk.0.ffn_up_exps.weight":   gguf.TypeIQ4_NL,
		"blk.1.attn_q.weight":        gguf.TypeQ4_K, // no record: the container
		"output.weight":              gguf.TypeF16,
		"blk.1.attn_output.weight":   gguf.TypeBF16,
		"blk.0.attn_output.weight":   gguf.TypeQ8_0,
		"blk.0.ffn_down_exps.weight": gguf.TypeQ8_0, // skip_layers: not int4
	} {
		if d := m[name]; d.Type != want {
			t.Errorf("%s: %v (%s), want %v", name, d.Type, d.Rule, want)
		}
	}
}
