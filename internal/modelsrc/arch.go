package modelsrc

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/safetensors"
)

// archDef is everything tq knows about one architecture. Each architecture lives in its own
// file (arch_llama.go, arch_qwen2.go, arch_qwen3.go, arch_qwen3moe.go, arch_qwen35moe.go for
// qwen35 and qwen35moe): the Hugging Face ->
// GGUF tensor names, the transforms and the metadata keys, as llama.cpp's converter
// (convert_hf_to_gguf.py, conversion/*.py) writes them.
type archDef struct {
	name    string   // general.architecture
	hfArchs []string // config.json "architectures" values
	// global maps whole checkpoint names of non-layer tensors to GGUF names.
	global map[string]string
	// layer maps the part after "model.layers.N." to the part after "blk.N.".
	layer map[string]string
	// optional lists GGUF layer suffixes llama.cpp accepts but does not require.
	optional map[string]bool
	// permuteQK applies LlamaModel.permute to q_proj/k_proj weights and biases.
	permuteQK bool
	// moe stacks per-expert mlp.experts.E.{gate,up,down}_proj into *_exps tensors.
	moe bool
	// metadata appends the architecture's hyper-parameter keys (after the common ones).
	metadata func(c *archCtx, md *gguf.Metadata) error
	// extra returns generated tensors (rope_freqs for llama3 RoPE scaling).
	extra func(c *archCtx) ([]*tensorPlan, error)

	// hybrid marks the Qwen3.5 hybrid-attention architectures (arch_qwen35moe.go): their
	// hyper-parameters are read by newHybridDims, MTP layers are renamed, and transform,
	// required and expectedNE take over the per-tensor rules below.
	hybrid bool
	// sharedExperts: llama.cpp loads ffn_*_shexp tensors for this architecture.
	sharedExperts bool
	// rename maps a checkpoint name (after the language_model. filter) to the name the
	// layer/global maps see (MTP layers -> model.layers.{n_layer + k}.*).
	rename func(c *archCtx, name string) string
	// transform adjusts the plan of one checkpoint tensor (hfName after rename): element
	// transforms, row/column reorders, squeezes.
	transform func(c *archCtx, hfName string, p *tensorPlan) error
	// required lists the GGUF suffixes llama.cpp requires in block il (replaces
	// requiredLayer).
	required func(c *archCtx, il int64) []string
}

var archs = []*archDef{archLlama, archQwen2, archQwen3, archQwen3MoE, archQwen35, archQwen35MoE}

// SupportedArchitectures lists the Hugging Face architectures tq converts.
func SupportedArchitectures() []string {
	var out []string
	for _, a := range archs {
		out = append(out, a.hfArchs...)
	}
	sort.Strings(out)
	return out
}

func findArch(h *hparams) (*archDef, string, error) {
	names := h.architectures()
	for _, n := range names {
		for _, a := range archs {
			for _, hn := range a.hfArchs {
				if n == hn {
					return a, n, nil
				}
			}
		}
	}
	got := "none"
	if len(names) > 0 {
		got = strings.Join(names, ", ")
	} else if mt, ok := h.str("model_type"); ok {
		got = "model_type " + mt
	}
	return nil, "", fmt.Errorf("%s: unsupported architecture %s; tq converts %s", h.path, got, strings.Join(SupportedArchitectures(), ", "))
}

// archCtx carries the hyper-parameters every architecture needs.
type archCtx struct {
	h                                           *hparams
	arch                                        *archDef
	nLayer, nEmbd, nHead, nHeadKV, headDim, nFF int64
	vocab                                       int64 // 0 when config.json has no vocab_size
	nExpert, nExpertUsed, moeFF, sharedFF       int64
	// nMTP is the number of multi-token-prediction blocks exported after the nLayer decoder
	// blocks (block_count = nLayer + nMTP); hy the hybrid-attention dimensions.
	nMTP int64
	hy   *hybridDims
	// skipped counts multimodal (vision/audio) checkpoint tensors the text conversion drops;
	// skippedExample names one of them.
	skipped        int
	skippedExample string
}

// nBlocks is block_count: decoder blocks plus MTP blocks.
func (c *archCtx) nBlocks() int64 { return c.nLayer + c.nMTP }

func newArchCtx(h *hparams, a *archDef) (*archCtx, error) {
	c := &archCtx{h: h, arch: a}
	var err error
	if c.nLayer, err = h.mustInt("n_layers", "num_hidden_layers", "n_layer", "num_layers"); err != nil {
		return nil, err
	}
	if c.nEmbd, err = h.mustInt("hidden_size", "n_embd", "dim"); err != nil {
		return nil, err
	}
	if c.nHead, err = h.mustInt("num_attention_heads", "n_head", "n_heads"); err != nil {
		return nil, err
	}
	kv, ok, err := h.int("num_key_value_heads", "n_kv_heads")
	if err != nil {
		return nil, err
	}
	c.nHeadKV = c.nHead
	if ok {
		c.nHeadKV = kv
	}
	if c.nHeadKV <= 0 || c.nHead%c.nHeadKV != 0 {
		return nil, fmt.Errorf("%s: num_key_value_heads %d does not divide num_attention_heads %d", h.path, c.nHeadKV, c.nHead)
	}
	hd, ok, err := h.int("head_dim")
	if err != nil {
		return nil, err
	}
	if ok && hd > 0 {
		c.headDim = hd
	} else {
		if c.nEmbd%c.nHead != 0 {
			return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d and head_dim is missing", h.path, c.nEmbd, c.nHead)
		}
		c.headDim = c.nEmbd / c.nHead
	}
	for _, lim := range []struct {
		name string
		v    int64
		max  int64
	}{{"num_hidden_layers", c.nLayer, 1 << 16}, {"hidden_size", c.nEmbd, 1 << 20}, {"num_attention_heads", c.nHead, 1 << 16},
		{"num_key_value_heads", c.nHeadKV, 1 << 16}, {"head_dim", c.headDim, 1 << 16}} {
		if lim.v <= 0 || lim.v > lim.max {
			return nil, fmt.Errorf("%s: %s = %d is out of range (1..%d)", h.path, lim.name, lim.v, lim.max)
		}
	}
	if a.permuteQK && c.headDim%2 != 0 {
		return nil, fmt.Errorf("%s: head_dim %d must be even", h.path, c.headDim)
	}
	if c.vocab, _, err = h.int("vocab_size"); err != nil {
		return nil, err
	}
	if c.vocab < 0 || c.vocab > 1<<31 {
		return nil, fmt.Errorf("%s: vocab_size %d is negative", h.path, c.vocab)
	}
	if ff, ok, err := h.int("intermediate_size"); err != nil {
		return nil, err
	} else if ok {
		if ff <= 0 || ff > 1<<24 {
			return nil, fmt.Errorf("%s: intermediate_size %d is out of range", h.path, ff)
		}
		c.nFF = ff
	}
	if a.moe {
		if c.nExpert, err = h.mustInt("num_local_experts", "num_experts", "n_routed_experts"); err != nil {
			return nil, err
		}
		if c.nExpert > 1<<16 {
			return nil, fmt.Errorf("%s: %d experts is out of range", h.path, c.nExpert)
		}
		if c.nExpertUsed, err = h.mustInt("num_experts_per_tok", "num_experts_per_token", "top_k_experts"); err != nil {
			return nil, err
		}
		if c.nExpertUsed > c.nExpert {
			return nil, fmt.Errorf("%s: num_experts_per_tok %d exceeds num_experts %d", h.path, c.nExpertUsed, c.nExpert)
		}
		if c.moeFF, err = h.mustInt("moe_intermediate_size"); err != nil {
			return nil, err
		}
		if c.moeFF > 1<<24 {
			return nil, fmt.Errorf("%s: moe_intermediate_size %d is out of range", h.path, c.moeFF)
		}
		if sf, ok, err := h.int("shared_expert_intermediate_size"); err != nil {
			return nil, err
		} else if ok {
			if sf < 0 || sf > 1<<24 {
				return nil, fmt.Errorf("%s: shared_expert_intermediate_size %d is out of range", h.path, sf)
			}
			c.sharedFF = sf
		}
	} else if c.nFF <= 0 {
		return nil, fmt.Errorf("%s: missing or invalid intermediate_size", h.path)
	}
	if a.hybrid {
		if err := newHybridDims(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// expectedNE returns the ggml shape a GGUF tensor must have according to config.json, or nil
// when the architecture has no fixed expectation (vocabulary-sized tensors without vocab_size).
func (c *archCtx) expectedNE(ggufName string) []int64 {
	suffix := ggufName
	if l := policy.LayerOf(ggufName); l >= 0 {
		suffix = ggufName[len("blk."+strconv.Itoa(l)+"."):]
	}
	if c.hy != nil {
		if ne := c.hy.expectedNE(c, suffix); ne != nil {
			return ne
		}
	}
	e, q, kv, hd := c.nEmbd, c.nHead*c.headDim, c.nHeadKV*c.headDim, c.headDim
	switch suffix {
	case "token_embd.weight", "output.weight":
		if c.vocab == 0 {
			return nil
		}
		return []int64{e, c.vocab}
	case "output_norm.weight", "attn_norm.weight", "ffn_norm.weight", "attn_output.bias":
		return []int64{e}
	case "attn_q.weight":
		return []int64{e, q}
	case "attn_k.weight", "attn_v.weight":
		return []int64{e, kv}
	case "attn_output.weight":
		return []int64{q, e}
	case "attn_q.bias":
		return []int64{q}
	case "attn_k.bias", "attn_v.bias":
		return []int64{kv}
	case "attn_q_norm.weight", "attn_k_norm.weight":
		return []int64{hd}
	case "ffn_gate.weight", "ffn_up.weight":
		return []int64{e, c.nFF}
	case "ffn_down.weight":
		return []int64{c.nFF, e}
	case "ffn_gate_inp.weight":
		return []int64{e, c.nExpert}
	case "ffn_gate_exps.weight", "ffn_up_exps.weight":
		return []int64{e, c.moeFF, c.nExpert}
	case "ffn_down_exps.weight":
		return []int64{c.moeFF, e, c.nExpert}
	case "ffn_gate_shexp.weight", "ffn_up_shexp.weight":
		return []int64{e, c.sharedFF}
	case "ffn_down_shexp.weight":
		return []int64{c.sharedFF, e}
	case "ffn_gate_inp_shexp.weight":
		return []int64{e}
	}
	return nil
}

// skippedNames are checkpoint tensors the converter drops.
var skippedSuffixes = []string{".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq",
	".activation_scale", "_activation_scale", ".input_scale", ".k_scale", ".v_scale"}

var (
	layerRe  = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)
	expertRe = regexp.MustCompile(`^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$`)
)

// canonicalName applies the converter's name filter: "language_model." is removed.
func canonicalName(n string) string { return strings.Replace(n, "language_model.", "", 1) }

var multimodalPrefixes = []string{"mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.",
	"sound_encoder.", "sound_projection.", "speech_embeddings."}

var multimodalParts = []string{"visual.", "vision.", "audio.", "talker.", "vision_", "audio_", "token2wav.", "code2wav.",
	"projector.", "pre_mm_projector_norm", "image_newline", "view_seperator", "patch_embed", "patch_embedding",
	"patch_merger.", "patch_merge_mlp.", "model.connector."}

// isMultimodalTensor is TextModel.filter_tensors' test for tensors of vision/audio towers, which
// a text conversion drops (llama.cpp's converter writes them to a separate mmproj file).
func isMultimodalTensor(n string) bool {
	for _, p := range multimodalPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, p := range multimodalParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	return false
}

// buildPlans maps every checkpoint tensor to GGUF tensors. The result is sorted in
// llama-quantize order (policy.SortTensors).
func buildPlans(c *archCtx, st *safetensors.Model) ([]*tensorPlan, error) {
	a := c.arch
	infos := st.Tensors()
	byName := make(map[string]safetensors.TensorInfo, len(infos))
	for _, ti := range infos {
		byName[ti.Name] = ti
	}
	// FP8: pair weight_scale_inv with its weight.
	var block []int64
	if qc := c.h.object("quantization_config"); qc != nil {
		if qm, _ := qc["quant_method"].(string); qm != "" && qm != "fp8" {
			return nil, fmt.Errorf("%s: quantization_config.quant_method %q is not supported (only fp8 checkpoints and unquantized ones)", c.h.path, qm)
		}
		if arr, ok := qc["weight_block_size"].([]any); ok {
			for _, v := range arr {
				n, err := asInt(v)
				if err != nil || n <= 0 || n > 1<<20 {
					return nil, fmt.Errorf("%s: bad quantization_config.weight_block_size %v", c.h.path, arr)
				}
				block = append(block, n)
			}
		}
	}
	scales := map[string]safetensors.TensorInfo{}
	for _, ti := range infos {
		if w, ok := strings.CutSuffix(ti.Name, "_scale_inv"); ok {
			if _, ok := byName[w]; !ok {
				return nil, fmt.Errorf("scale tensor %s in %s has no weight %s", ti.Name, ti.File, w)
			}
			scales[w] = ti
		}
	}

	type expertKey struct {
		layer int64
		proj  string
	}
	experts := map[expertKey]map[int64]*hfTensor{}
	var plans []*tensorPlan
	seen := map[string]string{}
	addPlan := func(p *tensorPlan) error {
		if prev, dup := seen[p.name]; dup {
			return fmt.Errorf("checkpoint tensors %s and %s both map to %s", prev, strings.Join(p.sources, ","), p.name)
		}
		seen[p.name] = strings.Join(p.sources, ",")
		plans = append(plans, p)
		return nil
	}

	names := make([]string, 0, len(infos))
	for _, ti := range infos {
		names = append(names, ti.Name)
	}
	sort.Strings(names)
	if a.hybrid {
		hybridCountMTP(c, names)
	}
	for _, raw := range names {
		ti := byName[raw]
		if strings.HasSuffix(raw, "_scale_inv") || hasAnySuffix(raw, skippedSuffixes) {
			continue
		}
		if isMultimodalTensor(raw) {
			if c.skipped == 0 {
				c.skippedExample = raw
			}
			c.skipped++
			continue
		}
		name := canonicalName(raw)
		if a.rename != nil {
			name = a.rename(c, name)
		}
		t, err := newHFTensor(st, ti)
		if err != nil {
			return nil, err
		}
		if ti.DType == safetensors.F8E4M3 || ti.DType == safetensors.F8E5M2 {
			sinfo, ok := scales[raw]
			if !ok {
				return nil, fmt.Errorf("FP8 tensor %s in %s has no %s_scale_inv", raw, ti.File, raw)
			}
			if err := t.attachScale(st, sinfo, block); err != nil {
				return nil, err
			}
		} else if sinfo, ok := scales[raw]; ok {
			return nil, fmt.Errorf("tensor %s has a scale %s but dtype %s (expected F8_E4M3)", raw, sinfo.Name, ti.DType)
		}

		if g, ok := a.global[name]; ok {
			p := simplePlan(g, t, name)
			if a.transform != nil {
				if err := a.transform(c, name, p); err != nil {
					return nil, err
				}
			}
			if err := addPlan(p); err != nil {
				return nil, err
			}
			continue
		}
		m := layerRe.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("cannot map checkpoint tensor %s (in %s) to a %s GGUF tensor", raw, ti.File, a.name)
		}
		bid, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || bid >= c.nBlocks() {
			what := fmt.Sprintf("num_hidden_layers %d", c.nLayer)
			if c.nMTP > 0 {
				what += fmt.Sprintf(" + %d MTP layers", c.nMTP)
			}
			return nil, fmt.Errorf("checkpoint tensor %s: layer %s is outside %s", raw, m[1], what)
		}
		suffix := m[2]
		if a.moe {
			if em := expertRe.FindStringSubmatch(suffix); em != nil {
				e, err := strconv.ParseInt(em[1], 10, 64)
				if err != nil || e >= c.nExpert {
					return nil, fmt.Errorf("checkpoint tensor %s: expert %s is outside num_experts %d", raw, em[1], c.nExpert)
				}
				k := expertKey{bid, em[2]}
				if experts[k] == nil {
					experts[k] = map[int64]*hfTensor{}
				}
				experts[k][e] = t
				continue
			}
			if suffix == "mlp.experts.gate_up_proj" || suffix == "mlp.experts.gate_up_proj.weight" {
				gate, up, err := splitGateUp(c, bid, t, name)
				if err != nil {
					return nil, err
				}
				if err := addPlan(gate); err != nil {
					return nil, err
				}
				if err := addPlan(up); err != nil {
					return nil, err
				}
				continue
			}
			if suffix == "mlp.experts.down_proj" || suffix == "mlp.experts.down_proj.weight" {
				p := simplePlan(fmt.Sprintf("blk.%d.ffn_down_exps.weight", bid), t, name)
				if err := addPlan(p); err != nil {
					return nil, err
				}
				continue
			}
		}
		gs, ok := a.layer[suffix]
		if !ok {
			return nil, fmt.Errorf("cannot map checkpoint tensor %s (in %s) to a %s GGUF tensor", raw, ti.File, a.name)
		}
		p := simplePlan(fmt.Sprintf("blk.%d.%s", bid, gs), t, name)
		if a.transform != nil {
			if err := a.transform(c, name, p); err != nil {
				return nil, err
			}
		}
		if a.permuteQK {
			switch {
			case strings.HasPrefix(suffix, "self_attn.q_proj."):
				if err := setPerm(p, c.nHead); err != nil {
					return nil, err
				}
			case strings.HasPrefix(suffix, "self_attn.k_proj."):
				if err := setPerm(p, c.nHeadKV); err != nil {
					return nil, err
				}
			}
		}
		if err := addPlan(p); err != nil {
			return nil, err
		}
	}

	// stack experts in order 0..E-1
	keys := make([]expertKey, 0, len(experts))
	for k := range experts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].layer != keys[j].layer {
			return keys[i].layer < keys[j].layer
		}
		return keys[i].proj < keys[j].proj
	})
	for _, k := range keys {
		m := experts[k]
		if int64(len(m)) != c.nExpert {
			var missing []string
			for e := int64(0); e < c.nExpert && len(missing) < 5; e++ {
				if m[e] == nil {
					missing = append(missing, strconv.FormatInt(e, 10))
				}
			}
			return nil, fmt.Errorf("layer %d %s: %d of %d experts present (missing e.g. experts %s)", k.layer, k.proj, len(m), c.nExpert, strings.Join(missing, ","))
		}
		gname := map[string]string{"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[k.proj]
		first := m[0]
		if len(first.info.Shape) != 2 {
			return nil, fmt.Errorf("expert tensor %s has shape %v, want 2-D", first.info.Name, first.info.Shape)
		}
		p := &tensorPlan{name: fmt.Sprintf("blk.%d.%s.weight", k.layer, gname), cols: first.cols}
		for e := int64(0); e < c.nExpert; e++ {
			t := m[e]
			if t.cols != first.cols || t.rows != first.rows {
				return nil, fmt.Errorf("expert tensor %s has shape %v, expert 0 has %v", t.info.Name, t.info.Shape, first.info.Shape)
			}
			p.parts = append(p.parts, part{src: t, rows: t.rows})
			p.sources = append(p.sources, canonicalName(t.info.Name))
		}
		p.rows = first.rows * c.nExpert
		p.rowsPerMatrix = first.rows
		p.shape = []int64{first.cols, first.rows, c.nExpert}
		if err := addPlan(p); err != nil {
			return nil, err
		}
	}
	if a.extra != nil {
		ex, err := a.extra(c)
		if err != nil {
			return nil, err
		}
		for _, p := range ex {
			if err := addPlan(p); err != nil {
				return nil, err
			}
		}
	}

	// shapes against config.json, required tensors
	for _, p := range plans {
		if want := c.expectedNE(p.name); want != nil && !EqualShape(p.shape, want) {
			return nil, fmt.Errorf("tensor %s (from %s) has shape %v (ggml order), but config.json implies %v", p.name, strings.Join(p.sources, ","), p.shape, want)
		}
		if len(p.name) > gguf.MaxNameLen {
			return nil, fmt.Errorf("tensor name %s is longer than %d bytes", p.name, gguf.MaxNameLen)
		}
	}
	if err := checkRequired(c, seen); err != nil {
		return nil, err
	}
	sort.SliceStable(plans, func(i, j int) bool {
		return tensorLess(plans[i].name, plans[j].name)
	})
	return plans, nil
}

func tensorLess(a, b string) bool {
	la, lb := policy.LayerOf(a), policy.LayerOf(b)
	if la != lb {
		return la < lb
	}
	return a < b
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// EqualShape reports whether two ggml shapes are equal up to trailing 1-sized dimensions, as
// llama.cpp compares them (ne padded with 1s).
func EqualShape(a, b []int64) bool {
	for len(a) > 1 && a[len(a)-1] == 1 {
		a = a[:len(a)-1]
	}
	for len(b) > 1 && b[len(b)-1] == 1 {
		b = b[:len(b)-1]
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// simplePlan maps a checkpoint tensor unchanged: PyTorch shape (A, B, C) -> ggml {C, B, A}.
func simplePlan(name string, t *hfTensor, src string) *tensorPlan {
	shape := make([]int64, len(t.info.Shape))
	for i, d := range t.info.Shape {
		shape[len(shape)-1-i] = d
	}
	if len(shape) == 0 {
		shape = []int64{1}
	}
	return &tensorPlan{name: name, shape: shape, rows: t.rows, cols: t.cols, rowsPerMatrix: rowsPerMatrix(shape),
		parts: []part{{src: t, rows: t.rows}}, sources: []string{src}}
}

func rowsPerMatrix(shape []int64) int64 {
	if len(shape) < 2 {
		return 1
	}
	return shape[1]
}

// setPerm installs the llama q/k permutation with n heads.
func setPerm(p *tensorPlan, n int64) error {
	var total int64
	if len(p.shape) == 1 {
		total = p.cols
	} else {
		total = p.rows
	}
	if n <= 0 || total%n != 0 || (total/n)%2 != 0 {
		return fmt.Errorf("tensor %s: %d rows cannot be split into %d heads of even size", p.name, total, n)
	}
	p.parts[0].perm = &headPerm{nHead: n, hd: total / n}
	return nil
}

// splitGateUp maps a fused mlp.experts.gate_up_proj [E, 2*ff, embd] to the gate (first ff rows
// of every expert) and up (second ff rows) stacks, as Qwen2MoeModel.modify_tensors does.
func splitGateUp(c *archCtx, bid int64, t *hfTensor, src string) (*tensorPlan, *tensorPlan, error) {
	s := t.info.Shape
	if len(s) != 3 || s[1]%2 != 0 {
		return nil, nil, fmt.Errorf("fused expert tensor %s has shape %v, want [experts, 2*ff, embd]", t.info.Name, s)
	}
	ff := s[1] / 2
	mk := func(name string, off int64) *tensorPlan {
		p := &tensorPlan{name: fmt.Sprintf("blk.%d.%s", bid, name), cols: s[2], rows: s[0] * ff,
			shape: []int64{s[2], ff, s[0]}, rowsPerMatrix: ff, sources: []string{src}}
		for e := int64(0); e < s[0]; e++ {
			p.parts = append(p.parts, part{src: t, rowOff: e*2*ff + off, rows: ff})
		}
		return p
	}
	return mk("ffn_gate_exps.weight", 0), mk("ffn_up_exps.weight", ff), nil
}

// checkRequired reports missing tensors llama.cpp requires.
func checkRequired(c *archCtx, have map[string]string) error {
	var missing []string
	need := func(n string) {
		if _, ok := have[n]; !ok {
			missing = append(missing, n)
		}
	}
	need("token_embd.weight")
	need("output_norm.weight")
	for i := int64(0); i < c.nBlocks(); i++ {
		req := c.arch.requiredLayer()
		if c.arch.required != nil {
			req = c.arch.required(c, i)
		} else if i >= c.nLayer {
			break
		}
		for _, s := range req {
			need(fmt.Sprintf("blk.%d.%s", i, s))
		}
	}
	if len(missing) > 0 {
		more := ""
		if len(missing) > 8 {
			more = fmt.Sprintf(" and %d more", len(missing)-8)
			missing = missing[:8]
		}
		return fmt.Errorf("checkpoint is missing tensors llama.cpp requires: %s%s (a shard may be missing)", strings.Join(missing, ", "), more)
	}
	return nil
}

func (a *archDef) requiredLayer() []string {
	var out []string
	for _, g := range a.layer {
		if !a.optional[g] {
			out = append(out, g)
		}
	}
	if a.moe {
		out = append(out, "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")
	}
	sort.Strings(out)
	return out
}
