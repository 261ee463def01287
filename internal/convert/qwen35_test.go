package convert

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/quant"
)

// hybridRefNames restates llama.cpp's qwen35 / qwen35moe tensor names (gguf-py constants.py
// and tensor_mapping.py) independently of arch_qwen35moe.go.
var hybridRefNames = map[string]string{
	"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
	"self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
	"self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
	"self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
	"linear_attn.in_proj_qkv.weight": "attn_qkv.weight", "linear_attn.in_proj_z.weight": "attn_gate.weight",
	"linear_attn.in_proj_b.weight": "ssm_beta.weight", "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
	"linear_attn.conv1d.weight": "ssm_conv1d.weight", "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a",
	"linear_attn.norm.weight": "ssm_norm.weight", "linear_attn.out_proj.weight": "ssm_out.weight",
	"mlp.gate.weight": "ffn_gate_inp.weight", "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
	"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight", "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
	"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
	"mlp.gate_proj.weight":               "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}

// reorderV is _LinearAttentionVReorderBase._reorder_v_heads along the row axis of a row-major
// [rows, cols] matrix: rows viewed as [hk, r, size], the first two axes swapped.
func reorderV(v []float32, cols, hk, r, size int) []float32 {
	out := make([]float32, len(v))
	for g := 0; g < hk; g++ {
		for j := 0; j < r; j++ {
			for t := 0; t < size; t++ {
				src := (g*r+j)*size + t
				dst := (j*hk+g)*size + t
				copy(out[dst*cols:(dst+1)*cols], v[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}

// hybridReference rebuilds every GGUF tensor of a Qwen3.5 fixture from its safetensors.
func hybridReference(t *testing.T, dir string, o fixtures.Options) map[string]refTensor {
	t.Helper()
	st, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hy := o.Hybrid
	hk, hv, dh := hy.LinearKeyHeads, hy.LinearValueHeads, hy.LinearHeadDim
	r := hv / hk
	L := o.Layers
	layerRe := regexp.MustCompile(`^model\.(?:language_model\.)?layers\.(\d+)\.(.+)$`)
	mtpRe := regexp.MustCompile(`^mtp\.layers\.(\d+)\.(.+)$`)
	fusedRe := regexp.MustCompile(`^mlp\.experts\.(gate_up_proj|down_proj)$`)
	expRe := regexp.MustCompile(`^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$`)
	out := map[string]refTensor{}
	experts := map[string][][]float32{} // "blk.N.ffn_x_exps.weight" -> per expert
	expShape := map[string][]int64{}
	for _, ti := range st.Tensors() {
		n := ti.Name
		if strings.HasPrefix(n, "model.visual.") || strings.HasSuffix(n, "_scale_inv") {
			continue
		}
		v := make([]float32, ti.NumElements())
		if err := st.ReadFloat32(n, v); err != nil {
			t.Fatal(err)
		}
		dequantFP8(t, st, ti, v)
		shape := slices.Clone(ti.Shape)
		var blk, sub string
		switch {
		case n == "model.embed_tokens.weight" || n == "model.language_model.embed_tokens.weight":
			out["token_embd.weight"] = refTensor{[]int64{shape[1], shape[0]}, v}
			continue
		case n == "lm_head.weight":
			out["output.weight"] = refTensor{[]int64{shape[1], shape[0]}, v}
			continue
		case n == "model.norm.weight" || n == "model.language_model.norm.weight":
			for i := range v {
				v[i]++
			}
			out["output_norm.weight"] = refTensor{shape, v}
			continue
		case n == "mtp.fc.weight":
			out[fmt.Sprintf("blk.%d.nextn.eh_proj.weight", L)] = refTensor{[]int64{shape[1], shape[0]}, v}
			continue
		case strings.HasPrefix(n, "mtp.") && !strings.HasPrefix(n, "mtp.layers."):
			g := map[string]string{"mtp.pre_fc_norm_embedding.weight": "enorm", "mtp.pre_fc_norm_hidden.weight": "hnorm", "mtp.norm.weight": "shared_head_norm"}[n]
			for i := range v {
				v[i]++
			}
			out[fmt.Sprintf("blk.%d.nextn.%s.weight", L, g)] = refTensor{shape, v}
			continue
		}
		if m := layerRe.FindStringSubmatch(n); m != nil {
			blk, sub = m[1], m[2]
		} else if m := mtpRe.FindStringSubmatch(n); m != nil {
			k, _ := strconv.Atoi(m[1])
			blk, sub = strconv.Itoa(L+k), m[2]
		} else {
			t.Fatalf("reference: unexpected tensor %s", n)
		}
		if m := fusedRe.FindStringSubmatch(sub); m != nil {
			ne, rows, cols := int(shape[0]), int(shape[1]), int(shape[2])
			if m[1] == "down_proj" {
				name := "blk." + blk + ".ffn_down_exps.weight"
				out[name] = refTensor{[]int64{int64(cols), int64(rows), int64(ne)}, v}
				continue
			}
			ff := rows / 2
			var gate, up []float32
			for e := 0; e < ne; e++ {
				base := e * rows * cols
				gate = append(gate, v[base:base+ff*cols]...)
				up = append(up, v[base+ff*cols:base+rows*cols]...)
			}
			out["blk."+blk+".ffn_gate_exps.weight"] = refTensor{[]int64{int64(cols), int64(ff), int64(ne)}, gate}
			out["blk."+blk+".ffn_up_exps.weight"] = refTensor{[]int64{int64(cols), int64(ff), int64(ne)}, up}
			continue
		}
		if m := expRe.FindStringSubmatch(sub); m != nil {
			e, _ := strconv.Atoi(m[1])
			name := "blk." + blk + ".ffn_" + strings.TrimSuffix(m[2], "_proj") + "_exps.weight"
			if experts[name] == nil {
				experts[name] = make([][]float32, o.Experts)
			}
			experts[name][e] = v
			expShape[name] = shape
			continue
		}
		g, ok := hybridRefNames[sub]
		if !ok {
			t.Fatalf("reference: no GGUF name for %s", n)
		}
		switch {
		case strings.HasSuffix(sub, "A_log"):
			v = reorderV(v, 1, hk, r, 1)
			for i := range v {
				v[i] = -float32(math.Exp(float64(v[i])))
			}
		case strings.HasSuffix(sub, "dt_bias"), strings.HasSuffix(sub, "in_proj_a.weight"), strings.HasSuffix(sub, "in_proj_b.weight"):
			cols := 1
			if len(shape) == 2 {
				cols = int(shape[1])
			}
			v = reorderV(v, cols, hk, r, 1)
		case strings.HasSuffix(sub, "in_proj_z.weight"):
			v = reorderV(v, int(shape[1]), hk, r, dh)
		case strings.HasSuffix(sub, "in_proj_qkv.weight"), strings.HasSuffix(sub, "conv1d.weight"):
			cols := int(shape[len(shape)-1])
			qk := 2 * hk * dh * cols
			v = append(v[:qk:qk], reorderV(v[qk:], cols, hk, r, dh)...)
			if len(shape) == 3 {
				shape = []int64{shape[0], shape[2]} // squeeze
			}
		case strings.HasSuffix(sub, "out_proj.weight"):
			// reorder columns: transpose, reorder rows, transpose back
			rows, cols := int(shape[0]), int(shape[1])
			tr := make([]float32, len(v))
			for i := 0; i < rows; i++ {
				for j := 0; j < cols; j++ {
					tr[j*rows+i] = v[i*cols+j]
				}
			}
			tr = reorderV(tr, rows, hk, r, dh)
			for i := 0; i < rows; i++ {
				for j := 0; j < cols; j++ {
					v[i*cols+j] = tr[j*rows+i]
				}
			}
		case strings.HasSuffix(sub, "norm.weight") && sub != "linear_attn.norm.weight":
			for i := range v {
				v[i]++
			}
		}
		ggml := slices.Clone(shape)
		slices.Reverse(ggml)
		out["blk."+blk+"."+g] = refTensor{ggml, v}
	}
	for name, per := range experts {
		var all []float32
		for _, e := range per {
			all = append(all, e...)
		}
		s := expShape[name]
		out[name] = refTensor{[]int64{s[1], s[0], int64(len(per))}, all}
	}
	return out
}

func hybridVariants() []struct {
	name string
	o    fixtures.Options
} {
	causal := fixtures.Preset("qwen35moe")
	h := *causal.Hybrid
	h.Multimodal, h.UnfusedExperts = false, true
	causal.Hybrid = &h
	f16 := fixtures.Preset("qwen35")
	f16.DType = safetensors.F16
	even := fixtures.Preset("qwen35")
	he := *even.Hybrid
	he.LinearValueHeads, he.LinearHeadDim = 2, 128 // Hk == Hv: no reorder
	even.Hybrid = &he
	return []struct {
		name string
		o    fixtures.Options
	}{{"qwen35moe", fixtures.Preset("qwen35moe")}, {"qwen35-f16", f16}, {"qwen35moe-causal-unfused", causal}, {"qwen35-even-heads", even}}
}

// The F32 and F16 outputs hold exactly the values llama.cpp's converter computes: +1 on the
// (1+w) RMSNorm weights, -exp(A_log), squeezed conv1d, value heads tiled, MTP block renamed,
// experts split or stacked, vision tower dropped; modelsrc.OpenHF serves the same values.
func TestHybridConvertExactValues(t *testing.T) {
	vs := hybridVariants()
	if !fullTests() {
		vs = vs[:2] // CI and TQ_CONVERT_FULL=1 also run the CausalLM/unfused and Hk == Hv variants
	}
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			dir := genModel(t, v.o)
			ref := hybridReference(t, dir, v.o)
			src, err := modelsrc.OpenHF(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for _, ot := range []string{"f32", "f16"} {
				out := filepath.Join(t.TempDir(), "m.gguf")
				res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{OutType: ot}})
				if err != nil {
					t.Fatal(err)
				}
				if v.o.Hybrid.Multimodal != (len(res.Plan.Warnings) > 0 && strings.Contains(strings.Join(res.Plan.Warnings, " "), "vision")) {
					t.Errorf("vision warning %v for multimodal %v", res.Plan.Warnings, v.o.Hybrid.Multimodal)
				}
				m, err := gguf.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				if len(m.Tensors()) != len(ref) {
					t.Errorf("%s: %d tensors, reference has %d", ot, len(m.Tensors()), len(ref))
				}
				for name, r := range ref {
					got, mt := ggufFloats(t, m, name)
					if !modelsrc.EqualShape(shapeOf(mt), r.shape) {
						t.Errorf("%s %s: shape %v, want %v", ot, name, shapeOf(mt), r.shape)
						continue
					}
					f32 := len(r.shape) == 1 || (len(r.shape) == 2 && r.shape[1] == 1) || strings.Contains(name, "ssm_conv1d") ||
						strings.Contains(name, "ffn_gate_inp") || strings.HasSuffix(name, "_norm.weight")
					want := gguf.TypeF32
					if !f32 && ot == "f16" {
						want = gguf.TypeF16
					}
					if mt.Type != want {
						t.Errorf("%s %s: type %v, want %v", ot, name, mt.Type, want)
					}
					var served []float32
					if ot == "f32" {
						served = make([]float32, len(r.vals))
						if err := src.ReadFloat32(name, served); err != nil {
							t.Fatal(err)
						}
					}
					bad := 0
					for i, x := range r.vals {
						if v.o.DType == safetensors.F16 && (strings.HasSuffix(name, "norm.weight") && !strings.Contains(name, "ssm_norm")) {
							x = quant.FP16ToFP32(quant.FP32ToFP16(x)) // +1 computed in float16 by the converter
						}
						exp := x
						if mt.Type == gguf.TypeF16 {
							exp = quant.FP16ToFP32(quant.FP32ToFP16(x))
						}
						if math.Float32bits(got[i]) != math.Float32bits(exp) || (served != nil && math.Float32bits(served[i]) != math.Float32bits(exp)) {
							if bad == 0 {
								t.Errorf("%s %s[%d] = %v, want %v", ot, name, i, got[i], exp)
							}
							bad++
						}
					}
					if bad > 0 {
						t.Errorf("%s %s: %d of %d values differ", ot, name, bad, len(r.vals))
					}
				}
				m.Close()
			}
		})
	}
}

// The metadata keys and values llama.cpp's converter writes for the 35B-A3B-shaped fixture.
func TestHybridMetadata(t *testing.T) {
	o := fixtures.Preset("qwen35moe")
	dir := genModel(t, o)
	p, err := PlanConvert(dir, Options{Types: TypeOptions{OutType: "f16"}})
	if err != nil {
		t.Fatal(err)
	}
	md := p.Metadata()
	u := func(k string) uint64 {
		v, err := md.GetUint("qwen35moe." + k)
		if err != nil {
			t.Errorf("%s: %v", k, err)
		}
		return v
	}
	want := map[string]uint64{"block_count": 5, "embedding_length": 256, "attention.head_count": 4, "attention.head_count_kv": 2,
		"attention.key_length": 64, "attention.value_length": 64, "expert_count": 4, "expert_used_count": 2,
		"expert_feed_forward_length": 256, "expert_shared_feed_forward_length": 256, "ssm.conv_kernel": 4, "ssm.state_size": 64,
		"ssm.group_count": 2, "ssm.time_step_rank": 4, "ssm.inner_size": 256, "full_attention_interval": 4,
		"rope.dimension_count": 16, "nextn_predict_layers": 1, "context_length": 262144}
	for k, w := range want {
		if got := u(k); got != w {
			t.Errorf("%s = %d, want %d", k, got, w)
		}
	}
	if md.Has("qwen35moe.feed_forward_length") {
		t.Error("feed_forward_length written without intermediate_size")
	}
	v, _ := md.Get("qwen35moe.rope.dimension_sections")
	if sec, ok := gguf.ArrayOf[int32](v); !ok || !slices.Equal(sec, []int32{3, 3, 2, 0}) {
		t.Errorf("rope.dimension_sections %v", v)
	}
	if f, err := md.GetFloat("qwen35moe.rope.freq_base"); err != nil || f != 1e7 {
		t.Errorf("rope.freq_base %v %v", f, err)
	}
	// a dense model without mrope_section gets the converter's default sections, no MTP key
	od := fixtures.Preset("qwen35")
	h := *od.Hybrid
	h.MTPLayers = 0
	od.Hybrid = &h
	dd := genModel(t, od)
	p2, err := PlanConvert(dd, Options{Types: TypeOptions{OutType: "f16"}})
	if err != nil {
		t.Fatal(err)
	}
	md2 := p2.Metadata()
	if n, _ := md2.GetUint("qwen35.block_count"); n != 4 || md2.Has("qwen35.nextn_predict_layers") || md2.Has("qwen35.expert_count") {
		t.Errorf("dense metadata: block_count %d, nextn %v", n, md2.Has("qwen35.nextn_predict_layers"))
	}
	if ff, _ := md2.GetUint("qwen35.feed_forward_length"); ff != 512 {
		t.Errorf("feed_forward_length %d", ff)
	}
}

func TestHybridConfigRejects(t *testing.T) {
	cases := []struct{ key, value, want string }{
		{"linear_value_head_dim", "128", "linear_key_head_dim"},
		{"full_attention_interval", "2", "disagrees with full_attention_interval"},
		{"linear_num_value_heads", "3", "not a multiple"},
		{"attn_output_gate", "false", "attn_output_gate"},
		{"mrope_section", "[40, 40]", "mrope_section"},
	}
	dir := genModel(t, fixtures.Preset("qwen35"))
	orig := readFile(t, filepath.Join(dir, "config.json"))
	for _, c := range cases {
		re := regexp.MustCompile(`"` + c.key + `": (\[[^\]]*\]|[^,\n]+)`)
		if !re.MatchString(orig) {
			t.Fatalf("fixture config has no %s", c.key)
		}
		writeFile(t, filepath.Join(dir, "config.json"), re.ReplaceAllString(orig, `"`+c.key+`": `+c.value))
		if _, err := PlanConvert(dir, Options{Types: TypeOptions{OutType: "f16"}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %s: error %v, want %q", c.key, c.value, err, c.want)
		}
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --target-bpw keeps ssm_alpha / ssm_beta in F16, never quantizes the conv1d kernel, ssm_a,
// dt_bias and norms, chooses types for every other new tensor kind, and meets the budget.
func TestHybridTargetBPW(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen35moe"))
	// turboquant's own mixture (6.6 bpw on this fixture) is the floor of a budget on top of it
	for turbo, target := range map[bool]float64{false: 5, true: 7.5} {
		p, err := PlanConvert(dir, Options{Types: TypeOptions{OutType: "f16", TargetBPW: target, TurboQuant: turbo}})
		if err != nil {
			t.Fatal(err)
		}
		if p.BPW > target+0.0001 {
			t.Errorf("turbo %v: %.3f bpw over the %.0f bpw budget", turbo, p.BPW, target)
		}
		free := 0
		for _, pt := range p.Tensors {
			switch {
			case strings.Contains(pt.Name, "ssm_alpha") || strings.Contains(pt.Name, "ssm_beta"):
				if !strings.EqualFold(pt.Type, "F16") {
					t.Errorf("%s: %s (%s), want F16", pt.Name, pt.Type, pt.Rule)
				}
			case strings.Contains(pt.Name, "ssm_conv1d") || strings.HasSuffix(pt.Name, "ssm_a") || strings.Contains(pt.Name, "ssm_dt") || strings.Contains(pt.Name, "norm"):
				if !strings.EqualFold(pt.Type, "F32") {
					t.Errorf("%s: %s, want F32", pt.Name, pt.Type)
				}
			case strings.HasPrefix(pt.Rule, "budget"):
				free++
			}
		}
		if free == 0 {
			t.Errorf("turbo %v: no tensor chosen by the budget", turbo)
		}
	}
}
