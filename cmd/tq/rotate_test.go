package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/llamacppref"
	"github.com/tq-project/tq/internal/rotate"
)

// TestConvertRotate: --rotate writes a file llama.cpp computes the same function with. A
// generated qwen3moe (norm weights random around 1) is converted to F32 with and without the
// rotation; llama.cpp's next-token probabilities over the whole vocabulary agree to 1e-4 at
// every position (float32 rounding through the rotated residual; an unfolded norm or an
// unrotated writer moves them by order 0.1). The rotated file records its rotation, a
// calibrated 4-bit conversion with it runs, tq verify compares its values against the rotated
// reference, and a model with tied embeddings is refused with the reason.
func TestConvertRotate(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3moe")
	plain, rot := filepath.Join(dir, "plain.gguf"), filepath.Join(dir, "rot.gguf")
	tqCmd(t, "convert", hfDir, "--outtype", "f32", "-o", plain, "--no-manifest")
	tqCmd(t, "convert", hfDir, "--outtype", "f32", "--rotate", "-o", rot, "--no-manifest")
	m, err := gguf.Open(rot)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := m.Metadata().GetString(rotate.MetaKey)
	m.Close()
	if !strings.HasPrefix(spec, "hadamard-v1 dim=") {
		t.Fatalf("rotated file records rotation %q", spec)
	}

	toks := []int32{1, 17, 200, 33, 5, 91, 144, 7, 250, 3, 64, 12}
	probs := llamacppref.FullProbs(t, 1, []llamacppref.ProbsRequest{
		{Model: plain, Tokens: toks, Ctx: 64, KVType: "F32"}, {Model: rot, Tokens: toks, Ctx: 64, KVType: "F32"}})
	var worst float64
	for i := range toks {
		a, b := probs[0][i], probs[1][i]
		if len(a) != len(b) {
			t.Fatalf("position %d: %d and %d probabilities", i, len(a), len(b))
		}
		for k := range a {
			worst = math.Max(worst, math.Abs(a[k]-b[k]))
		}
	}
	if worst > 1e-4 {
		t.Fatalf("llama.cpp's probabilities of the rotated file differ by %v", worst)
	}

	cal := filepath.Join(dir, "cal")
	prompts := filepath.Join(dir, "prompts.txt")
	if err := os.WriteFile(prompts, []byte("The history of printing begins with seals and stamps.\n\nA river carries silt to the sea.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tqCmd(t, "calibrate", hfDir, "-o", cal, "--threads", "2", "--calibration-dataset", prompts, "--no-baseline", "--search-rows", "32")
	q4 := filepath.Join(dir, "rot-q4.gguf")
	var res struct {
		Plan struct {
			Rotation string `json:"rotation"`
		} `json:"plan"`
	}
	out := tqCmd(t, "convert", hfDir, "--outtype", "q4_k_m", "--calibration", cal, "--rotate", "-o", q4, "--no-manifest", "--json")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Plan.Rotation != spec {
		t.Fatalf("plan rotation %q (want %q): %v\n%s", res.Plan.Rotation, spec, err, out)
	}
	// verify's value check reads the reference through the same rotation: the errors are a
	// 4-bit file's, not those of comparing rotated with unrotated weights
	var vr struct {
		Integrity struct {
			Tensors []struct {
				Name    string   `json:"name"`
				RelRMSE *float64 `json:"rel_rmse"`
			} `json:"tensors"`
		} `json:"integrity"`
	}
	vout, _, _ := tqRun(t, "verify", q4, "--reference", hfDir, "--json", "--chunks", "1", "--ctx", "64")
	if err := json.Unmarshal([]byte(vout), &vr); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, vout)
	}
	checked := 0
	for _, ts := range vr.Integrity.Tensors {
		if ts.RelRMSE == nil || !strings.Contains(ts.Name, "attn_q.weight") {
			continue
		}
		checked++
		if *ts.RelRMSE > 0.3 { // 4-bit: about 0.1; against unrotated weights about 1.4
			t.Errorf("verify: %s relative RMSE %.3f against the rotated reference", ts.Name, *ts.RelRMSE)
		}
	}
	if checked == 0 {
		t.Fatalf("verify compared no attn_q tensor: %s", vout)
	}

	o := fixtures.Preset("llama")
	o.TieEmbeddings = true
	tied := filepath.Join(dir, "tied")
	if err := fixtures.Generate(tied, o); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tqRun(t, "convert", tied, "--outtype", "q8_0", "--rotate", "--dry-run"); err == nil || !strings.Contains(err.Error(), "tied") {
		t.Errorf("--rotate on tied embeddings: %v", err)
	}
}
