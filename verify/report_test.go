package verify

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/verify/reflogits"
)

// writeIMatrixDat writes a legacy llama.cpp imatrix (.dat) with random positive importances
// for every 2-D weight of the model.
func writeIMatrixDat(t *testing.T, model, path string) {
	t.Helper()
	m, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(7, 7))
	var b bytes.Buffer
	var entries []gguf.ModelTensor
	for _, ti := range m.Tensors() {
		if len(ti.Dims) == 2 && ti.Name != "token_embd.weight" {
			entries = append(entries, ti)
		}
	}
	put := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	put(int32(len(entries)))
	for _, ti := range entries {
		put(int32(len(ti.Name)))
		b.WriteString(ti.Name)
		put(int32(1)) // ncall
		put(int32(ti.Dims[0]))
		for range ti.Dims[0] {
			put(float32(0.1 + r.ExpFloat64()))
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The report renders as JSON, Markdown and an HTML page with decodable PNG plots; with an
// imatrix the per-layer sensitivity is computed.
func TestReportOutputs(t *testing.T) {
	f := getFixtures(t)
	im := filepath.Join(t.TempDir(), "imatrix.dat")
	writeIMatrixDat(t, f.gguf, im)
	o := acceptOpts(f.gguf, f)
	o.Imatrix = im
	rep := run(t, o)
	if rep.Verdict != VerdictPass {
		t.Fatalf("verdict %s: %v", rep.Verdict, rep.Failures)
	}
	var withSens int
	for _, l := range rep.Layers {
		if l.Sensitivity > 0 {
			withSens++
			if l.Sensitivity > 0.01 || l.MeanRelRMSE <= 0 {
				t.Errorf("layer %d: sensitivity %v, mean rel RMSE %v", l.Layer, l.Sensitivity, l.MeanRelRMSE)
			}
		}
	}
	if withSens < 2 {
		t.Fatalf("sensitivity for %d layers: %+v", withSens, rep.Layers)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || back.Verdict != VerdictPass || back.KLD.KLD.Mean != rep.KLD.KLD.Mean {
		t.Fatalf("JSON round trip: %v", err)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## tq verify: ✅ PASS", "| max_kld | mean KLD |", "### Integrity", "### Perplexity", "top-1 agreement", "identical", "- toolcalls: --skip toolcalls"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	dir := filepath.Join(t.TempDir(), "report")
	if err := WriteHTML(dir, rep); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{PlotQuantError, PlotKLDHist, PlotSensitivity, PlotRunningPPL} {
		fh, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("plot %s: %v", p, err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil || img.Bounds().Dx() < 200 {
			t.Fatalf("plot %s: %v", p, err)
		}
		if !strings.Contains(string(page), `src="`+p+`"`) {
			t.Errorf("index.html does not show %s", p)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err != nil {
		t.Fatal(err)
	}
	// a failed report says why
	fail := &Report{Model: "m.gguf", Skipped: map[string]string{}, KLD: rep.KLD}
	kld := 0.001
	fail.evaluateGates(Thresholds{MaxKLD: &kld}, nil)
	md.Reset()
	fail.WriteMarkdown(&md)
	if fail.Verdict != VerdictFail || !strings.Contains(md.String(), "❌ FAIL") || !strings.Contains(md.String(), "max_kld: mean KLD =") {
		t.Errorf("failed report:\n%s", md.String())
	}
	// explicit thresholds whose metric is missing fail; default ones are skipped
	miss := &Report{Skipped: map[string]string{SectionToolCalls: "no chat template"}}
	v := 0.9
	miss.evaluateGates(Thresholds{MinToolCallValid: &v}, nil)
	if miss.Verdict != VerdictPass || miss.Gates[0].Status != StatusSkipped {
		t.Errorf("implicit missing gate: %+v", miss.Gates)
	}
	miss.evaluateGates(Thresholds{MinToolCallValid: &v}, []string{"min_toolcall_valid"})
	if miss.Verdict != VerdictFail || miss.Gates[0].Status != StatusFail {
		t.Errorf("explicit missing gate: %+v", miss.Gates)
	}
}

// Saving the reference (top-k, zstd) and verifying against the file reproduces the live
// comparison: same top-1 agreement, PPL(base) and Δp; KLD a slightly lower bound; template
// fidelity from the stored template. The measured top-k error on the fixture is logged (it is
// quoted in docs/verify.md).
func TestSavedReference(t *testing.T) {
	f := getFixtures(t)
	saved := filepath.Join(t.TempDir(), "ref.tqlogits")
	o := acceptOpts(f.gguf, f)
	o.SaveReference = saved
	o.TopK = 64
	live := run(t, o)
	if live.SavedReference != saved {
		t.Fatal("reference not saved")
	}
	file, err := reflogits.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	if file.Header.TopK != 64 || file.Header.NCtx != 128 || file.Header.NWindows != 3 || len(file.Header.Extra) == 0 {
		t.Fatalf("header %+v", file.Header)
	}
	st, _ := os.Stat(saved)
	t.Logf("reference file: %d bytes for %d positions (top-64)", st.Size(), len(file.Records))

	o2 := acceptOpts(f.gguf, f)
	o2.Reference, o2.ReferenceLogits = "", saved
	stored := run(t, o2)
	if stored.Verdict != VerdictPass || stored.ReferenceKind != "logits" {
		t.Fatalf("verdict %s: %v", stored.Verdict, stored.Failures)
	}
	a, b := live.KLD, stored.KLD
	if a.SameTop != b.SameTop || math.Abs(a.PPLBase.Value-b.PPLBase.Value) > 1e-4*a.PPLBase.Value ||
		math.Abs(a.MeanAbsDeltaP-b.MeanAbsDeltaP) > 1e-6 || a.PPL != b.PPL {
		t.Fatalf("live %+v\nstored %+v", a, b)
	}
	rel := (a.KLD.Mean - b.KLD.Mean) / a.KLD.Mean
	t.Logf("fixture mean KLD: live %.5f, top-64 %.5f (relative error %.4f, mean rest mass %.4f)", a.KLD.Mean, b.KLD.Mean, rel, b.MeanRestMass)
	if rel < -1e-4 || rel > 2*b.MeanRestMass+0.01 || b.TopK != 64 {
		t.Fatalf("top-64 KLD %v vs full %v", b.KLD.Mean, a.KLD.Mean)
	}
	if stored.Fidelity == nil || !stored.Fidelity.Passed() || stored.Fidelity.TokensIdentical != stored.Fidelity.Conversations || !stored.Fidelity.TextTokensIdentical {
		t.Fatalf("fidelity from the saved reference: %+v", stored.Fidelity)
	}
	// reference-only run (no model)
	only := filepath.Join(t.TempDir(), "only.tqlogits")
	rep := run(t, Options{Reference: f.hf, SaveReference: only, Ctx: 128, Chunks: 3, Skip: []string{SectionToolCalls}})
	if rep.Verdict != VerdictSaved {
		t.Fatalf("reference-only verdict %s", rep.Verdict)
	}
	g, err := reflogits.ReadFile(only)
	if err != nil || len(g.Records) != len(file.Records) || g.Header.TopK != DefaultTopK {
		t.Fatalf("reference-only file: %v", err)
	}
	// a different explicit text is refused
	o3 := o2
	o3.Text = []byte(strings.Repeat("other words here ", 200))
	if _, err := Run(t.Context(), o3); err == nil || !strings.Contains(err.Error(), "different text") {
		t.Fatalf("different text: %v", err)
	}
}
