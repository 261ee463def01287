package plan

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/internal/convert"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/hf"
)

const qwen36 = "testdata/qwen3.6-35b-a3b.json" // internal/hf/testdata/qwen3.6-35b-a3b.config.json

// Qwen3.6-35B-A3B: the same parameter counts as internal/hf (35.5B with the MTP block, 3.45B
// active without it), KV cache only in the 10 full-attention blocks (2·2·256 f16 values per
// token each), a fixed f32 recurrent state in the 30 Gated DeltaNet blocks, and a q4_K
// conversion that fits an 8 GiB card with the first experts kept on the CPU.
func TestHybridPlanQwen36(t *testing.T) {
	m := mustHF(t, qwen36, "q4_K")
	total, active := m.Params()
	c, err := hf.LoadConfig(qwen36)
	if err != nil {
		t.Fatal(err)
	}
	ht, ha, _ := c.ParamCount()
	if total != ht || active != ha {
		t.Errorf("params %d / %d, internal/hf %d / %d", total, active, ht, ha)
	}
	if total < 34e9 || total > 36.5e9 || active < 3e9 || active > 3.6e9 {
		t.Errorf("params %d total / %d active, published 35B / 3B", total, active)
	}
	o := DefaultOptions()
	o.VRAM = 8 * gib
	r, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Memory
	rec := int64(4 * ((4-1)*(2*16+32)*128 + 32*128*128))
	if b.KVPerToken != 10*2*512*2 || b.KV != b.KVPerToken*4096+30*rec {
		t.Errorf("KV %d/token, %d total; want %d/token and %d", b.KVPerToken, b.KV, 10*2*512*2, int64(10*2*512*2)*4096+30*rec)
	}
	if b.Layers[3].KV != 2*512*2*4096 || b.Layers[0].KV != rec {
		t.Errorf("layer KV: full %d, linear %d", b.Layers[3].KV, b.Layers[0].KV)
	}
	if b.MTPBytes <= 0 || b.MTPBytes > b.Weights/40 {
		t.Errorf("MTP bytes %d", b.MTPBytes)
	}
	p := r.Placement
	if !p.Fits || p.GPUBytes > 8*gib || p.CPUMoE == 0 || p.NGL < 40 {
		t.Errorf("placement %+v", p)
	}
	t.Logf("q4_K: weights %s (+%s MTP not loaded), KV %s; 8 GiB: %s, GPU %s, CPU %s, %.1f tok/s predicted",
		HumanBytes(b.Weights), HumanBytes(b.MTPBytes), HumanBytes(b.KV), p.Args, HumanBytes(p.GPUBytes), HumanBytes(p.CPUBytes), p.DecodeTokS)
}

// The inventory built from config.json matches the tensors tq's converter writes for the same
// model (names, dims and, for an F16 conversion, bytes), and FromGGUF reads the hybrid shape.
func TestHybridInventoryMatchesConversion(t *testing.T) {
	for _, arch := range []string{"qwen35moe", "qwen35"} {
		dir := filepath.Join(t.TempDir(), arch)
		if err := fixtures.Generate(dir, fixtures.Preset(arch)); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "m.gguf")
		if _, err := convert.Convert(context.Background(), dir, out, convert.Options{Types: convert.TypeOptions{OutType: "f16"}}); err != nil {
			t.Fatal(err)
		}
		g, err := FromGGUF(out)
		if err != nil {
			t.Fatal(err)
		}
		h := mustHF(t, filepath.Join(dir, "config.json"), "f16")
		if g.Shape.Hybrid == nil || len(g.Shape.Hybrid.Linear) != 4 || g.Shape.Hybrid.MTP != 1 || g.Shape.NLayer != 4 {
			t.Fatalf("%s: GGUF shape %+v", arch, g.Shape)
		}
		want := map[string]Tensor{}
		for _, x := range g.Tensors {
			want[x.Name] = x
		}
		if len(h.Tensors) != len(g.Tensors) {
			t.Errorf("%s: %d tensors from config.json, %d in the GGUF", arch, len(h.Tensors), len(g.Tensors))
		}
		for _, x := range h.Tensors {
			w, ok := want[x.Name]
			if !ok {
				t.Errorf("%s: %s not in the GGUF", arch, x.Name)
				continue
			}
			if x.Bytes != w.Bytes || x.Elements() != w.Elements() {
				t.Errorf("%s: %s %v %s %d bytes, GGUF %v %s %d bytes", arch, x.Name, x.Dims, x.TypeS, x.Bytes, w.Dims, w.TypeS, w.Bytes)
			}
		}
		gt, ga := g.Params()
		ht, ha := h.Params()
		if gt != ht || ga != ha {
			t.Errorf("%s: params GGUF %d/%d, config %d/%d", arch, gt, ga, ht, ha)
		}
		if _, err := Analyze(g, DefaultOptions()); err != nil {
			t.Fatal(err)
		}
	}
}

// turboMixQwen35 is the type of every tensor tq convert --use-turboquant writes for a qwen35moe
// model (read from a converted fixture with tq inspect): the int4 roles Q4_K, skip roles Q8_0,
// the LM head F16, the DeltaNet's small β/decay projections F16, vectors F32.
const turboMixQwen35 = "q4_K,attn_output=q8_0,ssm_out=q8_0,ffn_down_exps=q8_0,ffn_down_shexp=q8_0,output=f16," +
	"token_embd=q8_0,ssm_alpha=f16,ssm_beta=f16,nextn.eh_proj=q8_0"

// TestHybridPlanQwen36Turboquant builds the 8 GiB placement of the real Qwen3.6-35B-A3B
// configuration with the turboquant file's tensor types from config.json alone, and checks
// that infer's device blocks can run every tensor the plan puts on the GPU (a mat-vec kernel
// for its type, or a float32 vector) with the device limits on head sizes and experts: so the
// -ngl / --n-cpu-moe pair tq run takes from this plan loads instead of falling back.
func TestHybridPlanQwen36Turboquant(t *testing.T) {
	m := mustHF(t, qwen36, turboMixQwen35)
	o := DefaultOptions()
	o.VRAM = 8 * gib
	r, err := Analyze(m, o)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Placement
	if !p.Fits || p.GPUBytes > 8*gib || p.NGL < 40 || p.CPUMoE == 0 || p.CPUMoE >= 40 {
		t.Fatalf("placement %+v", p)
	}
	s := m.Shape
	if s.Hybrid == nil || s.Hybrid.HeadDim > 256 || s.HeadDim > 256 || s.NExpert > 1024 || s.NExpertUsed > 64 {
		t.Fatalf("shape outside the device limits: %+v hybrid %+v", s, s.Hybrid)
	}
	first := s.NLayer - p.GPULayers
	mv := cuda.MatVecTypes()
	onGPU := 0
	for _, tn := range m.Tensors {
		gpu := tn.Layer >= first || (tn.Layer < 0 && tn.Group == GroupOutput && p.OutputOnGPU)
		if tn.Layer >= s.NLayer || !gpu || tn.Group == GroupEmbedding { // MTP blocks are not loaded; the embedding stays on the host
			continue
		}
		if tn.Layer >= 0 && tn.Layer < p.CPUMoE && strings.Contains(tn.Name, "_exps") {
			continue // --n-cpu-moe: routed experts on the host
		}
		onGPU++
		if len(tn.Dims) >= 2 && tn.Type != gguf.TypeF32 && !slices.Contains(mv, tn.Type) {
			t.Errorf("%s (%s) goes to the GPU but has no mat-vec kernel", tn.Name, tn.Type)
		}
	}
	if onGPU == 0 {
		t.Fatal("no tensor on the GPU")
	}
	t.Logf("turboquant types, 8 GiB: %s (GPU %s, %d tensors on the device, %.1f tok/s predicted)", p.Args, HumanBytes(p.GPUBytes), onGPU, p.DecodeTokS)
}
