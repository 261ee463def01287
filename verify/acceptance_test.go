package verify

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/tokenizer"
)

// acceptOpts are the options of the acceptance tests: the generated HF folder as reference,
// short windows, the default thresholds. Tool calls are skipped here (random fixture weights
// never emit one; TestToolRunner and TestToolCallsSection cover that section).
func acceptOpts(model string, f fixtureSet) Options {
	return Options{Model: model, Reference: f.hf, Ctx: 128, Chunks: 3, SampleRows: 16,
		Thresholds: DefaultThresholds(), Skip: []string{SectionToolCalls}}
}

func run(t *testing.T, o Options) *Report {
	t.Helper()
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func failuresMention(rep *Report, subs ...string) bool {
	all := strings.Join(rep.Failures, "\n")
	for _, s := range subs {
		if !strings.Contains(all, s) {
			return false
		}
	}
	return true
}

func checkStatus(t *testing.T, rep *Report, name, want string) *Check {
	t.Helper()
	c := rep.Integrity.Check(name)
	if c == nil || c.Status != want {
		t.Fatalf("integrity check %s = %+v, want %s", name, c, want)
	}
	return c
}

// A correct quantization (int8 turboquant, single file and 3 shards) passes every check.
func TestAcceptCorrectQuantizationPasses(t *testing.T) {
	f := getFixtures(t)
	for _, model := range []string{f.gguf, f.split} {
		t.Run(filepath.Base(model), func(t *testing.T) {
			rep := run(t, acceptOpts(model, f))
			if rep.Verdict != VerdictPass || len(rep.Failures) > 0 {
				t.Fatalf("verdict %s: %v", rep.Verdict, rep.Failures)
			}
			for _, c := range []string{CheckManifest, CheckStructure, CheckTypes, CheckMetadata, CheckTurboQuant, CheckValues} {
				checkStatus(t, rep, c, StatusPass)
			}
			k := rep.KLD
			if k == nil || rep.Perplexity == nil || rep.Fidelity == nil || !rep.Fidelity.Passed() {
				t.Fatalf("missing sections: kld %v ppl %v fidelity %+v", k, rep.Perplexity, rep.Fidelity)
			}
			if k.KLD.Mean <= 0 || k.KLD.Mean > 0.05 || k.SameTop.Value < 0.8 || k.Positions != 3*63 {
				t.Fatalf("KLD %+v", k)
			}
			gates := map[string]string{}
			for _, g := range rep.Gates {
				gates[g.Name] = g.Status
			}
			if gates["max_kld"] != StatusPass || gates["max_ppl_ratio"] != StatusPass || gates["min_toolcall_valid"] != StatusSkipped {
				t.Fatalf("gates %v", gates)
			}
			// per-tensor error against the reference: Q8_0 tensors ~0.4 %, F16 lm_head ~0.01 %
			for _, ts := range rep.Integrity.Tensors {
				if ts.RelRMSE == nil {
					t.Fatalf("tensor %s has no error statistics", ts.Name)
				}
				if ts.Type == "q8_0" && (*ts.RelRMSE < 1e-4 || *ts.RelRMSE > 0.02) {
					t.Errorf("%s (q8_0): relative RMSE %v", ts.Name, *ts.RelRMSE)
				}
			}
		})
	}
}

// Flipped bytes in one shard: the manifest check fails and names the shard.
func TestAcceptFlippedBytesFailChecksum(t *testing.T) {
	f := getFixtures(t)
	dir := copyTree(t, filepath.Dir(f.split))
	shard2 := filepath.Join(dir, filepath.Base(strings.Replace(f.split, "-00001-of-", "-00002-of-", 1)))
	b, err := os.ReadFile(shard2)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)*3/4] ^= 0x01 // inside the tensor data
	if err := os.WriteFile(shard2, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := run(t, acceptOpts(filepath.Join(dir, filepath.Base(f.split)), f))
	if rep.Verdict != VerdictFail || rep.ExitCode() != 1 {
		t.Fatalf("verdict %s", rep.Verdict)
	}
	c := checkStatus(t, rep, CheckManifest, StatusFail)
	if !strings.Contains(strings.Join(c.Problems, " "), filepath.Base(shard2)) || !strings.Contains(strings.Join(c.Problems, " "), "SHA-256 mismatch") {
		t.Fatalf("manifest problems %v", c.Problems)
	}
	checkStatus(t, rep, CheckStructure, StatusPass)
	if !failuresMention(rep, "integrity/manifest", filepath.Base(shard2)) {
		t.Fatalf("failures %v", rep.Failures)
	}
}

// A tensor replaced with noise (same type, same RMS, valid blocks): integrity passes, the
// KL-divergence gate fails.
func TestAcceptNoiseTensorFailsKLD(t *testing.T) {
	f := getFixtures(t)
	m, err := gguf.Open(f.gguf)
	if err != nil {
		t.Fatal(err)
	}
	const name = "blk.1.ffn_down.weight"
	ti, _ := m.Tensor(name)
	if ti.Type != gguf.TypeQ8_0 {
		t.Fatalf("%s is %s", name, ti.Type)
	}
	cols, rows := int(ti.Dims[0]), int(ti.Dims[1])
	orig := make([]float32, cols*rows)
	data, _ := m.TensorData(name)
	if err := quant.Dequantize(ti.Type, orig, data); err != nil {
		t.Fatal(err)
	}
	m.Close()
	var ss float64
	for _, v := range orig {
		ss += float64(v) * float64(v)
	}
	rms := math.Sqrt(ss / float64(len(orig)))
	r := rand.New(rand.NewPCG(9, 9))
	noise := make([]float32, len(orig))
	for i := range noise {
		noise[i] = float32(rms * r.NormFloat64())
	}
	nb := make([]byte, len(data))
	if err := quant.Quantize(ti.Type, nb, noise, rows, cols, nil); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "noise.gguf")
	rewriteGGUF(t, f.gguf, out, nil, map[string][]byte{name: nb})
	rep := run(t, acceptOpts(out, f))
	if rep.Verdict != VerdictFail {
		t.Fatalf("verdict %s", rep.Verdict)
	}
	for _, c := range rep.Integrity.Checks {
		if c.Status == StatusFail {
			t.Errorf("integrity check %s failed: %v", c.Name, c.Problems)
		}
	}
	if rep.KLD == nil || rep.KLD.KLD.Mean <= 0.05 || !failuresMention(rep, "max_kld") {
		t.Fatalf("KLD %+v, failures %v", rep.KLD, rep.Failures)
	}
	// the per-tensor statistics single out the replaced tensor
	for _, ts := range rep.Integrity.Tensors {
		if ts.Name == name && (ts.RelRMSE == nil || *ts.RelRMSE < 1) {
			t.Errorf("%s: relative RMSE %v, want >= 1 for noise", name, ts.RelRMSE)
		}
	}
	t.Logf("noise tensor: mean KLD %.3f, top-1 %.3f", rep.KLD.KLD.Mean, rep.KLD.SameTop.Value)
}

// A swapped tokenizer (merged tokens renumbered) or chat template: template/tokenizer
// fidelity fails.
func TestAcceptSwappedTokenizerFailsFidelity(t *testing.T) {
	f := getFixtures(t)
	info := fixtures.TokenizerInfo()
	t.Run("tokenizer", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "swapped.gguf")
		rewriteGGUF(t, f.gguf, out, func(md *gguf.Metadata) {
			toks, _ := md.GetStringArray(tokenizer.KeyTokens)
			v, _ := md.Get(tokenizer.KeyTokenType)
			types, _ := gguf.ArrayOf[int32](v)
			toks, types = slices.Clone(toks), slices.Clone(types)
			// reverse the ids of the merged tokens (bytes and added tokens keep theirs)
			slices.Reverse(toks[256:info.BPESize])
			slices.Reverse(types[256:info.BPESize])
			md.Set(tokenizer.KeyTokens, gguf.Array(toks))
			md.Set(tokenizer.KeyTokenType, gguf.Array(types))
		}, nil)
		rep := run(t, acceptOpts(out, f))
		if rep.Verdict != VerdictFail || rep.Fidelity == nil || rep.Fidelity.TextTokensIdentical || rep.Fidelity.TokensIdentical != 0 {
			t.Fatalf("verdict %s, fidelity %+v", rep.Verdict, rep.Fidelity)
		}
		if rep.Fidelity.TemplateIdentical != rep.Fidelity.Conversations {
			t.Errorf("templates should still render identically: %d/%d", rep.Fidelity.TemplateIdentical, rep.Fidelity.Conversations)
		}
		if !failuresMention(rep, "template fidelity", "token ids differ") {
			t.Fatalf("failures %v", rep.Failures)
		}
		checkStatus(t, rep, CheckMetadata, StatusPass) // structurally a fine tokenizer
	})
	t.Run("template", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "template.gguf")
		rewriteGGUF(t, f.gguf, out, func(md *gguf.Metadata) {
			tmpl, _ := md.GetString(tokenizer.KeyChatTemplate)
			// a plausible edit: the tool instructions reworded
			md.Set(tokenizer.KeyChatTemplate, gguf.String(strings.Replace(tmpl, "To call a function", "To call a tool", 1)))
		}, nil)
		rep := run(t, acceptOpts(out, f))
		fr := rep.Fidelity
		if rep.Verdict != VerdictFail || fr == nil || fr.TemplateIdentical == fr.Conversations || fr.TemplateIdentical == 0 {
			t.Fatalf("verdict %s, fidelity %+v", rep.Verdict, fr)
		}
		if !failuresMention(rep, "template fidelity", "renderings differ at byte") {
			t.Fatalf("failures %v", rep.Failures)
		}
	})
}

// A truncated shard: the structure check fails naming the shard, evaluations are skipped.
func TestAcceptTruncatedShardFailsIntegrity(t *testing.T) {
	f := getFixtures(t)
	dir := copyTree(t, filepath.Dir(f.split))
	shard3 := filepath.Join(dir, filepath.Base(strings.Replace(f.split, "-00001-of-", "-00003-of-", 1)))
	st, err := os.Stat(shard3)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(shard3, st.Size()-1000); err != nil {
		t.Fatal(err)
	}
	rep := run(t, acceptOpts(filepath.Join(dir, filepath.Base(f.split)), f))
	if rep.Verdict != VerdictFail {
		t.Fatalf("verdict %s", rep.Verdict)
	}
	c := checkStatus(t, rep, CheckStructure, StatusFail)
	if !strings.Contains(strings.Join(c.Problems, " "), filepath.Base(shard3)) {
		t.Fatalf("structure problems %v", c.Problems)
	}
	if !failuresMention(rep, "integrity/structure") || rep.KLD != nil || rep.Perplexity != nil {
		t.Fatalf("failures %v", rep.Failures)
	}
	if why := rep.Skipped[SectionKLD]; !strings.Contains(why, "structure") {
		t.Errorf("kld skipped because %q", why)
	}
}
