package convert

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/quant"
)

// genModel generates a fixture folder in a temp dir.
func genModel(t testing.TB, o fixtures.Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model-"+o.Arch)
	if err := fixtures.Generate(dir, o); err != nil {
		t.Fatalf("fixtures.Generate(%+v): %v", o, err)
	}
	return dir
}

// refTensor is a tensor computed independently from the checkpoint (test-side restatement of
// the converter's rules), in ggml order.
type refTensor struct {
	shape []int64
	vals  []float32
}

var refLayerNames = map[string]string{
	"input_layernorm.weight":             "attn_norm.weight",
	"post_attention_layernorm.weight":    "ffn_norm.weight",
	"self_attn.q_proj.weight":            "attn_q.weight",
	"self_attn.k_proj.weight":            "attn_k.weight",
	"self_attn.v_proj.weight":            "attn_v.weight",
	"self_attn.o_proj.weight":            "attn_output.weight",
	"self_attn.q_proj.bias":              "attn_q.bias",
	"self_attn.k_proj.bias":              "attn_k.bias",
	"self_attn.v_proj.bias":              "attn_v.bias",
	"self_attn.q_norm.weight":            "attn_q_norm.weight",
	"self_attn.k_norm.weight":            "attn_k_norm.weight",
	"mlp.gate_proj.weight":               "ffn_gate.weight",
	"mlp.up_proj.weight":                 "ffn_up.weight",
	"mlp.down_proj.weight":               "ffn_down.weight",
	"mlp.gate.weight":                    "ffn_gate_inp.weight",
	"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
	"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
	"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
	"mlp.shared_expert_gate.weight":      "ffn_gate_inp_shexp.weight",
}

var (
	refLayerRe  = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)
	refExpertRe = regexp.MustCompile(`^mlp\.experts\.(\d+)\.(\w+)\.weight$`)
)

// referenceTensors rebuilds every GGUF tensor from the safetensors files: FP8 block scales
// applied elementwise, llama q/k rows permuted per head ([n,2,hd/2] -> [n,hd/2,2]), experts
// stacked along a new slowest axis.
func referenceTensors(t testing.TB, dir string, o fixtures.Options) map[string]refTensor {
	t.Helper()
	o, err := fixtures.Resolve(o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	load := func(name string) ([]float32, []int64) {
		ti, _ := st.Lookup(name)
		v := make([]float32, ti.NumElements())
		if err := st.ReadFloat32(name, v); err != nil {
			t.Fatal(err)
		}
		if sc, ok := st.Lookup(name + "_scale_inv"); ok {
			s := make([]float32, sc.NumElements())
			st.ReadFloat32(sc.Name, s)
			cols := ti.Shape[1]
			for i := range v {
				r, c := int64(i)/cols, int64(i)%cols
				v[i] = v[i] * s[(r/128)*sc.Shape[1]+c/128]
			}
		}
		return v, ti.Shape
	}
	rev := func(s []int64) []int64 {
		out := make([]int64, len(s))
		for i := range s {
			out[len(s)-1-i] = s[i]
		}
		return out
	}
	permute := func(v []float32, shape []int64, nHead int64) []float32 {
		rows := shape[0]
		cols := int64(1)
		if len(shape) > 1 {
			cols = shape[1]
		}
		hd := rows / nHead
		out := make([]float32, len(v))
		for h := int64(0); h < nHead; h++ {
			for s := int64(0); s < 2; s++ {
				for i := int64(0); i < hd/2; i++ {
					src := h*hd + s*(hd/2) + i // [h, s, i]
					dst := h*hd + i*2 + s      // [h, i, s]
					copy(out[dst*cols:(dst+1)*cols], v[src*cols:(src+1)*cols])
				}
			}
		}
		return out
	}
	out := map[string]refTensor{}
	type ek struct {
		layer string
		proj  string
	}
	experts := map[ek]map[int][]float32{}
	expShape := map[ek][]int64{}
	for _, ti := range st.Tensors() {
		n := ti.Name
		if strings.HasSuffix(n, "_scale_inv") {
			continue
		}
		switch n {
		case "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight":
			g := map[string]string{"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}[n]
			v, s := load(n)
			out[g] = refTensor{rev(s), v}
			continue
		}
		m := refLayerRe.FindStringSubmatch(n)
		if m == nil {
			t.Fatalf("reference: unexpected tensor %s", n)
		}
		if em := refExpertRe.FindStringSubmatch(m[2]); em != nil {
			e, _ := strconv.Atoi(em[1])
			k := ek{m[1], em[2]}
			if experts[k] == nil {
				experts[k] = map[int][]float32{}
			}
			v, s := load(n)
			experts[k][e] = v
			expShape[k] = s
			continue
		}
		g, ok := refLayerNames[m[2]]
		if !ok {
			t.Fatalf("reference: no name for %s", n)
		}
		v, s := load(n)
		if o.Arch == "llama" && strings.HasPrefix(m[2], "self_attn.q_proj") {
			v = permute(v, s, int64(o.Heads))
		}
		if o.Arch == "llama" && strings.HasPrefix(m[2], "self_attn.k_proj") {
			v = permute(v, s, int64(o.KVHeads))
		}
		out["blk."+m[1]+"."+g] = refTensor{rev(s), v}
	}
	for k, m := range experts {
		var all []float32
		for e := 0; e < len(m); e++ {
			all = append(all, m[e]...)
		}
		s := expShape[k]
		g := map[string]string{"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[k.proj]
		out["blk."+k.layer+"."+g+".weight"] = refTensor{[]int64{s[1], s[0], int64(len(m))}, all}
	}
	return out
}

// ggufFloats decodes a tensor of a written GGUF to float32.
func ggufFloats(t testing.TB, m *gguf.Model, name string) ([]float32, gguf.ModelTensor) {
	t.Helper()
	mt, ok := m.Tensor(name)
	if !ok {
		t.Fatalf("tensor %s missing", name)
	}
	b, err := m.TensorData(name)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, mt.NumElements())
	switch mt.Type {
	case gguf.TypeF32:
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case gguf.TypeF16:
		for i := range v {
			v[i] = quant.FP16ToFP32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case gguf.TypeBF16:
		for i := range v {
			v[i] = quant.BF16ToFP32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	default:
		if err := quant.Dequantize(mt.Type, v, b); err != nil {
			t.Fatal(err)
		}
	}
	return v, mt
}

func shapeOf(mt gguf.ModelTensor) []int64 {
	s := make([]int64, len(mt.Dims))
	for i, d := range mt.Dims {
		s[i] = int64(d)
	}
	return s
}

// dirFiles lists the names in dir (to check that nothing was left behind).
func dirFiles(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func relRMS(a, b []float32) float64 {
	var e, x float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		e += d * d
		x += float64(a[i]) * float64(a[i])
	}
	if x == 0 {
		return math.Sqrt(e)
	}
	return math.Sqrt(e / x)
}

func fmtShape(s []int64) string { return fmt.Sprint(s) }
