package convert

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/tq-project/tq/internal/fixtures"
)

// llama.cpp (node-llama-cpp 3.21.1) loads the Qwen3.5 outputs tq writes (F16, preset
// mixtures, turboquant, a bit budget; MTP block included, vision tower dropped) and returns
// proper next-token distributions (whole vocabulary, finite, summing to 1). The total variation
// from the F16 conversion is logged, not bounded: the random fixtures are chaotic (even Q8_0
// moves qwen3's fixture by up to 0.5), so it says nothing about correctness; the runner parity
// tests compare the same file in both engines instead.
func TestLlamaCppLoadsQwen35(t *testing.T) {
	harness := llamaCppHarness(t)
	cases := []struct {
		arch string
		opts []Options
	}{
		{"qwen35moe", []Options{{Types: TypeOptions{OutType: "f16"}}, {Types: TypeOptions{OutType: "q4_k_m"}}, {Types: TypeOptions{TurboQuant: true}}, {Types: TypeOptions{OutType: "f16", TargetBPW: 5}}}},
		{"qwen35", []Options{{Types: TypeOptions{OutType: "f16"}}, {Types: TypeOptions{OutType: "q8_0"}}, {Types: TypeOptions{TurboQuant: true}}}},
	}
	if !fullTests() { // CI and TQ_CONVERT_FULL=1 run the whole matrix
		cases[0].opts = cases[0].opts[:3:3]
		cases[1].opts = cases[1].opts[:1]
	}
	tokens := []int32{1, 17, 300, 42, 5, 900, 77, 1200, 3, 64}
	var reqs []llamaReq
	var names []string
	var first []int // index of each case's F16 request
	for _, c := range cases {
		dir := genModel(t, fixtures.Preset(c.arch))
		first = append(first, len(reqs))
		for _, o := range c.opts {
			out := filepath.Join(t.TempDir(), "m.gguf")
			res, err := Convert(context.Background(), dir, out, o)
			if err != nil {
				t.Fatalf("%s %+v: %v", c.arch, o, err)
			}
			reqs = append(reqs, llamaReq{Model: res.Files[0].Path, Tokens: tokens, Positions: []int{0, 4, 9}})
			names = append(names, c.arch+"/"+res.Plan.FileType+"/"+res.Plan.Policy)
		}
	}
	results := runLlamaCpp(t, harness, reqs)
	ci := 0
	for i, r := range results {
		if ci+1 < len(first) && i == first[ci+1] {
			ci++
		}
		base := results[first[ci]]
		if len(r.Probs) != 3 {
			t.Errorf("%s: %d distributions", names[i], len(r.Probs))
			continue
		}
		for j, p := range r.Probs {
			n, sum, nonfinite, top := p.stats()
			if n != fixtures.VocabSize() || nonfinite != 0 || math.Abs(sum-1) > 1e-3 || top < 0 {
				t.Errorf("%s pos %d: n=%d sum=%.6f nonfinite=%d top=%d", names[i], p.Pos, n, sum, nonfinite, top)
			}
			tv := totalVariation(p, base.Probs[j])
			t.Logf("%s pos %d: top %d, total variation from F16 %.4f", names[i], p.Pos, top, tv)
		}
	}
}

func totalVariation(a, b llamaProbs) float64 {
	pb := map[int]float64{}
	for _, e := range b.Top {
		pb[int(e[0])] = e[1]
	}
	var s float64
	for _, e := range a.Top {
		s += math.Abs(e[1] - pb[int(e[0])])
	}
	return s / 2
}
