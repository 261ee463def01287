package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/testenv"
)

// fullTests reports whether the slow test matrices run: in CI (TQ_REQUIRE_REFS=1) or with
// TQ_CONVERT_FULL=1. The default `go test` keeps to a representative subset.
func fullTests() bool {
	return os.Getenv("TQ_REQUIRE_REFS") == "1" || os.Getenv("TQ_CONVERT_FULL") == "1"
}

// llamaCppHarness returns testdata/llamacpp when node and node-llama-cpp are available. A
// missing reference skips the test, or fails it when TQ_REQUIRE_REFS=1 (CI).
func llamaCppHarness(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp")
	missing := ""
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp", "dist", "index.js")); err != nil {
		missing = "testdata/llamacpp/node_modules/node-llama-cpp (run `make refs`)"
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node in PATH"
	}
	if missing != "" {
		if os.Getenv("TQ_REQUIRE_REFS") == "1" {
			t.Fatalf("llama.cpp reference missing: %s (TQ_REQUIRE_REFS=1)", missing)
		}
		t.Skipf("llama.cpp reference missing: %s", missing)
	}
	return dir
}

type llamaReq struct {
	Op        string  `json:"op"`
	Model     string  `json:"model"`
	Tokens    []int32 `json:"tokens"`
	Positions []int   `json:"positions"`
	TopK      int     `json:"topk"`
	Ctx       int     `json:"ctx,omitempty"`
}

// llamaProbs is one next-token distribution from llama.cpp (all tokens: topk 0).
type llamaProbs struct {
	Pos int          `json:"pos"`
	Top [][2]float64 `json:"top"`
}

type llamaResult struct {
	Probs []llamaProbs `json:"probs"`
}

// summary of a distribution: size, sum, non-finite entries, arg max
func (p llamaProbs) stats() (n int, sum float64, nonfinite int, top int) {
	best := -1.0
	for _, e := range p.Top {
		n++
		if math.IsNaN(e[1]) || math.IsInf(e[1], 0) {
			nonfinite++
			continue
		}
		sum += e[1]
		if e[1] > best {
			best, top = e[1], int(e[0])
		}
	}
	return
}

// runLlamaCpp evaluates every "probs" request with testdata/llamacpp/llama.mjs in one process
// (its "batch" op). When the batch fails, the requests are retried one by one so the error
// names the file llama.cpp refused.
func runLlamaCpp(t testing.TB, harness string, reqs []llamaReq) []llamaResult {
	t.Helper()
	for i := range reqs {
		reqs[i].Op = "probs"
		if reqs[i].Ctx == 0 {
			reqs[i].Ctx = 256
		}
	}
	run := func(req any) ([]byte, error, string) {
		in, _ := json.Marshal(req)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "llama.mjs")
		cmd.Dir = harness
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return out, err, stderr.String()
	}
	out, err, stderr := run(map[string]any{"op": "batch", "threads": 1, "requests": reqs})
	if err != nil {
		for _, r := range reqs {
			if _, err1, stderr1 := run(r); err1 != nil {
				t.Fatalf("llama.cpp failed on %s: %v\n%s", r.Model, err1, stderr1)
			}
		}
		t.Fatalf("llama.mjs batch: %v\n%s", err, stderr)
	}
	var res struct {
		Results []llamaResult `json:"results"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("bad llama.mjs output: %v", err)
	}
	if len(res.Results) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(res.Results), len(reqs))
	}
	return res.Results
}

// llama.cpp loads the files tq writes for every architecture and a spread of output types,
// and returns proper next-token distributions (all vocabulary entries, finite, summing to 1).
func TestLlamaCppLoadsOutputs(t *testing.T) {
	harness := llamaCppHarness(t)
	qwen3FP8 := fixtures.Preset("qwen3")
	qwen3FP8.FP8 = true
	tied := fixtures.Preset("qwen3")
	tied.TieEmbeddings = true
	cases := []struct {
		name string
		o    fixtures.Options
		opts []Options
	}{
		{"llama", fixtures.Preset("llama"), []Options{{Types: TypeOptions{OutType: "f16"}}, {Types: TypeOptions{OutType: "q4_k_m"}}, {Types: TypeOptions{OutType: "q3_k_s"}}}},
		{"qwen2", fixtures.Preset("qwen2"), []Options{{Types: TypeOptions{OutType: "q8_0"}}, {Types: TypeOptions{OutType: "iq4_xs"}}, {Types: TypeOptions{OutType: "q4_1"}}}},
		{"qwen3", fixtures.Preset("qwen3"), []Options{{Types: TypeOptions{TurboQuant: true}}, {Types: TypeOptions{OutType: "q5_k_m"}}, {Types: TypeOptions{OutType: "q2_k"}}}},
		{"qwen3-tied", tied, []Options{{Types: TypeOptions{OutType: "q4_k_s"}}, {Types: TypeOptions{TurboQuant: true}}}},
		{"qwen3-fp8", qwen3FP8, []Options{{Types: TypeOptions{OutType: "q6_k"}}, {Types: TypeOptions{OutType: "bf16"}}}},
		{"qwen3moe", fixtures.Preset("qwen3moe"), []Options{{Types: TypeOptions{OutType: "q4_k_m"}}, {Types: TypeOptions{TurboQuant: true}}, {Types: TypeOptions{OutType: "q5_0"}}, {Types: TypeOptions{OutType: "iq4_nl"}}}},
		{"llama-split", fixtures.Preset("llama"), []Options{{Types: TypeOptions{OutType: "q8_0"}, Output: OutputOptions{SplitMaxTensors: 8}}}},
	}
	if !fullTests() {
		// default run: one quantized preset per architecture plus turboquant; CI
		// (TQ_REQUIRE_REFS=1) and TQ_CONVERT_FULL=1 run the whole matrix
		cases = []struct {
			name string
			o    fixtures.Options
			opts []Options
		}{
			{"llama", fixtures.Preset("llama"), []Options{{Types: TypeOptions{OutType: "q4_k_m"}}}},
			{"qwen2", fixtures.Preset("qwen2"), []Options{{Types: TypeOptions{OutType: "q8_0"}}}},
			{"qwen3-fp8", qwen3FP8, []Options{{Types: TypeOptions{OutType: "f16"}}, {Types: TypeOptions{TurboQuant: true}}}},
			{"qwen3moe", fixtures.Preset("qwen3moe"), []Options{{Types: TypeOptions{OutType: "q4_0"}}}},
		}
	}
	var reqs []llamaReq
	var names []string
	vocab := 0
	for _, c := range cases {
		dir := genModel(t, c.o)
		for _, o := range c.opts {
			out := filepath.Join(t.TempDir(), "m.gguf")
			res, err := Convert(context.Background(), dir, out, o)
			if err != nil {
				t.Fatalf("%s %+v: %v", c.name, o, err)
			}
			path := res.Files[0].Path
			reqs = append(reqs, llamaReq{Model: path, Tokens: []int32{1, 17, 300, 42, 5, 900}, Positions: []int{2, 5}})
			names = append(names, c.name+"/"+res.Plan.FileType+"/"+res.Plan.Policy)
		}
	}
	results := runLlamaCpp(t, harness, reqs)
	for i, r := range results {
		if len(r.Probs) != 2 {
			t.Errorf("%s: %d distributions", names[i], len(r.Probs))
			continue
		}
		for _, p := range r.Probs {
			n, sum, nonfinite, top := p.stats()
			if vocab == 0 {
				vocab = n
			}
			if n != vocab || n < 1000 || nonfinite != 0 || math.Abs(sum-1) > 1e-3 || top < 0 {
				t.Errorf("%s pos %d: n=%d sum=%.6f nonfinite=%d top=%d", names[i], p.Pos, n, sum, nonfinite, top)
			}
		}
	}
}
