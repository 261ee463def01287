package convert

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/internal/testenv"
)

func TestMixtureFileType(t *testing.T) {
	const layer = 1 << 20
	norms := func(n int) []finalTensor {
		out := make([]finalTensor, n)
		for i := range out {
			out[i] = finalTensor{gguf.TypeF32, 1024}
		}
		return out
	}
	cases := []struct {
		name string
		ts   []finalTensor
		want policy.FileType
	}{
		// F32 norms are the most numerous tensors, but not quantized weights
		{"norms outnumber", append(norms(10), finalTensor{gguf.TypeQ4_K, 3 * layer}, finalTensor{gguf.TypeQ6_K, layer}), policy.FileTypeQ4_K_M},
		// MoE: four small Q8_0 attention matrices against one merged Q4_K expert tensor
		{"experts hold the weights", []finalTensor{{gguf.TypeQ8_0, layer}, {gguf.TypeQ8_0, layer}, {gguf.TypeQ8_0, layer},
			{gguf.TypeQ8_0, layer}, {gguf.TypeQ4_K, 64 * layer}}, policy.FileTypeQ4_K_M},
		// an F16 lm_head bigger than everything quantized does not make the file F16
		{"big F16 output", []finalTensor{{gguf.TypeF16, 8 * layer}, {gguf.TypeQ8_0, 2 * layer}, {gguf.TypeQ4_0, layer}}, policy.FileTypeQ8_0},
		{"Q5_K means Q5_K_M", []finalTensor{{gguf.TypeQ5_K, 2 * layer}, {gguf.TypeQ4_K, layer}}, policy.FileTypeQ5_K_M},
		{"Q3_K means Q3_K_M", []finalTensor{{gguf.TypeQ3_K, 2 * layer}, {gguf.TypeQ6_K, layer}}, policy.FileTypeQ3_K_M},
		{"tie goes to the lower type id", []finalTensor{{gguf.TypeQ6_K, layer}, {gguf.TypeQ4_K, layer}}, policy.FileTypeQ4_K_M},
		{"nothing quantized", append(norms(40), finalTensor{gguf.TypeBF16, layer}), policy.FileTypeBF16},
		{"only F32", norms(3), policy.FileTypeAllF32},
		{"empty", nil, policy.FileTypeAllF32},
	}
	for _, c := range cases {
		if got := mixtureFileType(c.ts); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		rev := make([]finalTensor, len(c.ts))
		for i, x := range c.ts {
			rev[len(c.ts)-1-i] = x
		}
		if got := mixtureFileType(rev); got != c.want {
			t.Errorf("%s, reversed: %v, want %v", c.name, got, c.want)
		}
	}
}

// checkMixtureLabel checks a plan's general.file_type against its tensors: the quantized type
// holding the most weights, named as llama.cpp's loader names a mixture (Q4_K: Q4_K_M, ...).
func checkMixtureLabel(t *testing.T, what string, p *Plan) {
	t.Helper()
	weights := map[gguf.GGMLType]int64{}
	for _, pt := range p.Tensors {
		typ, err := gguf.ParseType(pt.Type)
		if err != nil {
			t.Fatal(err)
		}
		if tr, _ := typ.Traits(); !tr.Quantized {
			continue
		}
		n := int64(1)
		for _, d := range pt.Shape {
			n *= d
		}
		weights[typ] += n
	}
	var best string
	bestType, bestN := gguf.GGMLType(0), int64(0)
	for typ, n := range weights {
		if n > bestN || n == bestN && typ < bestType { // ties: the lower ggml type id
			best, bestType, bestN = typ.String(), typ, n
		}
	}
	names := map[string]string{"Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q8_0": "Q8_0",
		"Q2_K": "Q2_K", "Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M", "Q6_K": "Q6_K", "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS"}
	want, ok := names[strings.ToUpper(best)]
	if !ok {
		t.Fatalf("%s: no quantized tensors (types %v)", what, p.TypeCount)
	}
	if p.FileType != want {
		t.Errorf("%s: file type %s, want %s (weights per quantized type %v)", what, p.FileType, want, weights)
	}
	md := p.Metadata()
	ft, err := md.GetUint("general.file_type")
	if err != nil || policy.FileType(ft).String() != want {
		t.Errorf("%s: general.file_type %d (%v) is %v, want %s", what, ft, err, policy.FileType(ft), want)
	}
}

// A --target-bpw output of a BF16 model is a mixture of 4-6 bit types, not BF16; a turboquant
// file whose F16 tensors outweigh each quantized type is still labelled by a quantized type.
func TestMixtureFileTypeOfOutputs(t *testing.T) {
	o := fixtures.Preset("qwen3")
	o.DType = safetensors.BF16
	dir := genModel(t, o)
	p, err := PlanConvert(dir, Options{Types: TypeOptions{TargetBPW: 5}})
	if err != nil {
		t.Fatal(err)
	}
	checkMixtureLabel(t, "--target-bpw 5", p)

	// a turboquant config that keeps o_proj, down_proj and lm_head in F16 (tensor_types) for
	// testdata/verify/toolmodel: together they outweigh the 4-bit tensors of this small model
	tool := filepath.Join(testenv.RepoRoot(t), "testdata", "verify", "toolmodel")
	cfg := filepath.Join(t.TempDir(), "quantize_config.json")
	writeFile(t, cfg, `{"quant_method":"turboquant","weight_dtype":"int4","kv_cache_dtype":"f16","group_size":128,
		"symmetric":true,"calibration_method":"mse","layers_to_quantize":["q_proj","k_proj","v_proj","gate_proj","up_proj"],
		"skip_layers":["o_proj","down_proj","lm_head"],"tensor_types":{"attn_output":"f16","ffn_down":"f16"}}`)
	p, err = PlanConvert(tool, Options{Types: TypeOptions{TurboQuant: true, ConfigPath: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	var f16, q int64
	for _, m := range p.Types {
		if strings.EqualFold(m.Type, "F16") {
			f16 = m.Elements
		} else if typ, _ := gguf.ParseType(m.Type); typ != gguf.TypeF32 {
			q = max(q, m.Elements)
		}
	}
	if f16 <= q {
		t.Fatalf("F16 holds %d weights, the largest quantized type %d: the case under test is gone (types %+v)", f16, q, p.Types)
	}
	checkMixtureLabel(t, "calibrated turboquant", p)

	// a preset keeps its name whatever the mixture rules changed, as llama-quantize does
	p, err = PlanConvert(dir, Options{Types: TypeOptions{OutType: "q4_k_s"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.FileType != "Q4_K_S" {
		t.Errorf("q4_k_s preset: file type %s", p.FileType)
	}
}
