package verify

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert"
	"github.com/tq-project/tq/tokenizer"
)

// toolModel converts testdata/verify/toolmodel — a tiny Qwen3 trained (train.py) to answer the
// built-in suite with tool calls — with the turboquant policy of the given weight dtype.
func toolModel(t *testing.T, weightDType string) (hf, gg string) {
	t.Helper()
	hf = filepath.Join(llamacppref.RepoRoot(t), "testdata", "verify", "toolmodel")
	if _, err := os.Stat(filepath.Join(hf, "model.safetensors")); err != nil {
		t.Fatalf("the trained tool-call model is missing: %v", err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "quantize_config.json")
	os.WriteFile(cfg, []byte(`{"quant_method": "turboquant", "weight_dtype": "`+weightDType+`", "kv_cache_dtype": "q8_0",
		"group_size": 32, "skip_layers": ["lm_head"]}`), 0o644)
	gg = filepath.Join(dir, "toolmodel.gguf")
	if _, err := convert.Convert(context.Background(), hf, gg, convert.Options{Types: convert.TypeOptions{TurboQuant: true, ConfigPath: cfg}, Report: convert.ReportOptions{Warn: func(string) {}}}); err != nil {
		t.Fatal(err)
	}
	return hf, gg
}

func toolOpts(model, ref string) Options {
	o := Options{Model: model, Reference: ref, Skip: []string{SectionPPL, SectionKLD}, SampleRows: 8,
		Thresholds: DefaultThresholds(), ToolCallMaxTokens: 128}
	return o
}

// On a model that really calls tools, the tool-call gate passes for a correct quantization
// (every call valid, every turn answered, calls equal to the reference's) with the f16 and the
// q4_0 KV cache, and fails when the tokenizer is swapped. The model memorized the built-in
// suite's prompts: after changing verify/data/suite.json, retrain it
// (testdata/verify/toolmodel/README.md).
func TestToolModelGate(t *testing.T) {
	hf, gg := toolModel(t, "int8")
	for _, cache := range []string{"f16", "q4_0"} {
		t.Run("int8/"+cache, func(t *testing.T) {
			o := toolOpts(gg, hf)
			o.CacheType = cache
			o.Thresholds.MinToolCallExact = ptr(0.9)
			o.Explicit = []string{"min_toolcall_exact"}
			rep := run(t, o)
			tc := rep.ToolCalls
			if tc == nil {
				t.Fatalf("no tool-call report: %v", rep.Skipped)
			}
			for _, r := range tc.Results {
				if !r.Valid || !r.Answered || r.Match == nil || !*r.Match {
					t.Errorf("case %s: valid %v answered %v match %v: %q %v", r.ID, r.Valid, r.Answered, r.Match, r.Output, r.Problems)
				}
			}
			if rep.Verdict != VerdictPass || tc.Valid != 1 || tc.Answered != 1 || *tc.ExactMatch != 1 || tc.Reference.Valid != 1 || tc.CacheType != cache {
				t.Fatalf("verdict %s %v: %+v", rep.Verdict, rep.Failures, tc)
			}
		})
	}
	t.Run("swapped tokenizer", func(t *testing.T) {
		info := tokenizerSizes(t, gg)
		out := filepath.Join(t.TempDir(), "swapped.gguf")
		rewriteGGUF(t, gg, out, func(md *gguf.Metadata) {
			toks, _ := md.GetStringArray(tokenizer.KeyTokens)
			v, _ := md.Get(tokenizer.KeyTokenType)
			types, _ := gguf.ArrayOf[int32](v)
			toks, types = slices.Clone(toks), slices.Clone(types)
			slices.Reverse(toks[256:info])
			slices.Reverse(types[256:info])
			md.Set(tokenizer.KeyTokens, gguf.Array(toks))
			md.Set(tokenizer.KeyTokenType, gguf.Array(types))
		}, nil)
		// without a reference: the tool-call gate alone catches it
		rep := run(t, toolOpts(out, ""))
		if rep.Verdict != VerdictFail || rep.ToolCalls == nil || rep.ToolCalls.Valid >= 0.95 || !failuresMention(rep, "min_toolcall_valid") {
			t.Fatalf("verdict %s %v: %+v", rep.Verdict, rep.Failures, rep.ToolCalls)
		}
		t.Logf("swapped tokenizer: valid %.2f, answered %.2f", rep.ToolCalls.Valid, rep.ToolCalls.Answered)
	})
}

// tokenizerSizes returns the number of byte-level BPE tokens (before the added tokens) of a
// fixture-tokenizer GGUF: the index of <|endoftext|>.
func tokenizerSizes(t *testing.T, path string) int {
	m, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks, _ := m.Metadata().GetStringArray(tokenizer.KeyTokens)
	i := slices.Index(toks, "<|endoftext|>")
	if i < 256 {
		t.Fatal("no <|endoftext|> in the vocabulary")
	}
	return i
}

func ptr(v float64) *float64 { return &v }
