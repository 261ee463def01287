package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tq-project/tq/internal/convert"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/llamacppref"
	"github.com/tq-project/tq/internal/safetensors"
)

// trainedModels are the committed models of testdata/trained with the internal/fixtures
// options that generate a random model of the same architecture and layout (train.py's
// ARCHS).
var trainedModels = []struct {
	arch string
	opts fixtures.Options
}{
	{"qwen3", fixtures.Options{Arch: "qwen3", Layers: 4, Hidden: 256, Intermediate: 768, Heads: 4, KVHeads: 2, HeadDim: 64}},
	{"qwen3moe", fixtures.Options{Arch: "qwen3moe", Layers: 4, Hidden: 256, Intermediate: 768, Heads: 4, KVHeads: 2, HeadDim: 64,
		Experts: 8, ExpertsUsed: 2, MoeIntermediate: 256}},
	{"qwen35moe", fixtures.Options{Arch: "qwen35moe", Layers: 4, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64,
		Experts: 6, ExpertsUsed: 2, MoeIntermediate: 256, SharedExpertIntermediate: 256,
		Hybrid: &fixtures.HybridOptions{LinearKeyHeads: 2, LinearValueHeads: 4, LinearHeadDim: 64, ConvKernel: 4, FullAttentionInterval: 4}}},
}

// torchRef is testdata/trained/ARCH/torch-ref.json (train.py --eval --ref).
type torchRef struct {
	Tokens []int32        `json:"tokens"`
	Top    [][][2]float64 `json:"top"`
}

// Largest |Δp| accepted between torch (float64 forward of the BF16 weights) and the F32
// conversion run with an F32 KV cache, by tq and by llama.cpp: both engines compute in
// float32 (measured: see testdata/trained/README.md).
const tolTrained = 1e-4

// TestTrainedModels is the smoke check of the committed trained models: each has the tensor
// names, shapes and dtypes of the internal/fixtures layout for its architecture, converts to
// F32 with tq, and its next-token distributions on 64 held-out tokens, from tq's runner and
// from llama.cpp, match the torch reference committed beside it.
func TestTrainedModels(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "trained")
	tmp := t.TempDir()
	type loaded struct {
		ref  torchRef
		gguf string
	}
	models := make([]loaded, len(trainedModels))
	for i, m := range trainedModels {
		dir := filepath.Join(root, m.arch)
		checkLayout(t, dir, m.opts, filepath.Join(tmp, "fixture-"+m.arch))
		b, err := readRegular(filepath.Join(dir, "torch-ref.json"), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var ref torchRef
		if err := json.Unmarshal(b, &ref); err != nil || len(ref.Tokens) == 0 || len(ref.Top) != len(ref.Tokens) {
			t.Fatalf("%s/torch-ref.json: %v (%d tokens, %d distributions)", m.arch, err, len(ref.Tokens), len(ref.Top))
		}
		out := filepath.Join(tmp, m.arch+"-f32.gguf")
		if _, err := convert.Convert(context.Background(), dir, out, convert.Options{Types: convert.TypeOptions{OutType: "f32"}, Output: convert.OutputOptions{NoManifest: true}}); err != nil {
			t.Fatalf("%s: convert: %v", m.arch, err)
		}
		models[i] = loaded{ref, out}
		p, err := tqProbs(out, ref.Tokens, 2, "f32")
		if err != nil {
			t.Fatalf("%s: %v", m.arch, err)
		}
		worst := worstTop(t, m.arch+" tq", ref, func(pos int) []float64 { return p[pos] })
		t.Logf("%s: tq (F32 GGUF, F32 KV cache) vs torch: max |Δp| %.2e over the top 8 of %d positions", m.arch, worst, len(ref.Tokens))
	}

	llamacppref.Bridge(t)
	var reqs []llamacppref.ProbsRequest
	for _, m := range models {
		reqs = append(reqs, llamacppref.ProbsRequest{Model: m.gguf, Tokens: m.ref.Tokens, Ctx: 128, KVType: "F32"})
	}
	probs := llamacppref.FullProbs(t, 2, reqs)
	for i, m := range trainedModels {
		worst := worstTop(t, m.arch+" llama.cpp", models[i].ref, func(pos int) []float64 { return probs[i][pos] })
		t.Logf("%s: llama.cpp (F32 GGUF, F32 KV cache) vs torch: max |Δp| %.2e", m.arch, worst)
	}
}

// worstTop returns the largest |Δp| over the reference's top entries and fails t beyond
// tolTrained.
func worstTop(t *testing.T, what string, ref torchRef, probs func(pos int) []float64) float64 {
	t.Helper()
	var worst float64
	for pos, top := range ref.Top {
		p := probs(pos)
		for _, e := range top {
			id := int(e[0])
			if id < 0 || id >= len(p) {
				t.Fatalf("%s: reference token %v out of range", what, e[0])
			}
			worst = math.Max(worst, math.Abs(p[id]-e[1]))
		}
	}
	if worst > tolTrained {
		t.Errorf("%s: max |Δp| %.3e against the torch reference > %g", what, worst, tolTrained)
	}
	return worst
}

// checkLayout compares the tensor names, shapes and dtypes of the trained folder with those
// of a random model that internal/fixtures generates with the same options.
func checkLayout(t *testing.T, dir string, o fixtures.Options, fixtureDir string) {
	t.Helper()
	if err := fixtures.Generate(fixtureDir, o); err != nil {
		t.Fatal(err)
	}
	describe := func(path string) map[string]string {
		m, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		out := map[string]string{}
		for _, ti := range m.Tensors() {
			out[ti.Name] = fmt.Sprint(ti.DType, ti.Shape)
		}
		return out
	}
	got := describe(filepath.Join(dir, "model.safetensors"))
	want := describe(filepath.Join(fixtureDir, "model.safetensors"))
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: tensor %s (%s) of the fixtures layout is missing", dir, name, w)
		} else if g != w {
			t.Errorf("%s: tensor %s is %s, the fixtures layout has %s", dir, name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: tensor %s is not in the fixtures layout", dir, name)
		}
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		a, err1 := os.ReadFile(filepath.Join(dir, f))
		b, err2 := os.ReadFile(filepath.Join(fixtureDir, f))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Errorf("%s/%s differs from the fixtures' (%v, %v)", dir, f, err1, err2)
		}
	}
}
