package verify

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Verdicts.
const (
	VerdictPass  = "pass"
	VerdictFail  = "fail"
	VerdictSaved = "saved" // reference-only run (--save-reference without a model)
)

// Report is the result of Run. Its JSON form is what `tq verify --json` prints.
type Report struct {
	Model          string `json:"model,omitempty"`
	Reference      string `json:"reference,omitempty"`
	ReferenceKind  string `json:"reference_kind,omitempty"` // "hf", "gguf" or "logits"
	TQVersion      string `json:"tq_version,omitempty"`
	Verdict        string `json:"verdict"`
	SavedReference string `json:"saved_reference,omitempty"`
	// Failures lists why the verdict is "fail", one line per reason.
	Failures []string `json:"failures,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Skipped maps a section that did not run to the reason.
	Skipped    map[string]string `json:"skipped,omitempty"`
	Integrity  *IntegrityReport  `json:"integrity,omitempty"`
	Fidelity   *FidelityReport   `json:"template_fidelity,omitempty"`
	Perplexity *PerplexityReport `json:"perplexity,omitempty"`
	KLD        *KLDReport        `json:"kld,omitempty"`
	ToolCalls  *ToolCallReport   `json:"toolcalls,omitempty"`
	Layers     []LayerStat       `json:"layers,omitempty"`
	Gates      []Gate            `json:"gates"`
	Seconds    float64           `json:"seconds"`
}

// Passed reports whether the model passed the gate.
func (r *Report) Passed() bool { return r.Verdict == VerdictPass || r.Verdict == VerdictSaved }

// ExitCode is the process status for the report: 0 pass, 1 fail.
func (r *Report) ExitCode() int {
	if r.Passed() {
		return 0
	}
	return 1
}

// Gate is one threshold and its outcome.
type Gate struct {
	Name      string   `json:"name"` // threshold key, e.g. max_kld
	Metric    string   `json:"metric"`
	Op        string   `json:"op"` // "<=" or ">="
	Threshold float64  `json:"threshold"`
	Value     *float64 `json:"value,omitempty"`
	Status    string   `json:"status"` // pass, fail, skipped
	Detail    string   `json:"detail,omitempty"`
}

// metricValue returns the value a threshold checks, or a reason it is unavailable.
func (r *Report) metricValue(key string) (float64, string) {
	noKLD := func() string {
		if why, ok := r.Skipped[SectionKLD]; ok {
			return why
		}
		return "no reference"
	}
	switch key {
	case "max_kld", "max_kld_p99", "min_top1", "max_mean_abs_delta_p", "max_ppl_ratio":
		k := r.KLD
		if k == nil {
			return 0, noKLD()
		}
		switch key {
		case "max_kld":
			return k.KLD.Mean, ""
		case "max_kld_p99":
			return k.KLD.P99, ""
		case "min_top1":
			return k.SameTop.Value, ""
		case "max_mean_abs_delta_p":
			return k.MeanAbsDeltaP, ""
		default:
			return k.PPLRatio.Value, ""
		}
	case "max_ppl":
		if r.Perplexity == nil {
			if why, ok := r.Skipped[SectionPPL]; ok {
				return 0, why
			}
			return 0, "perplexity not computed"
		}
		return r.Perplexity.PPL.Value, ""
	case "min_toolcall_valid", "min_toolcall_answered", "min_toolcall_exact":
		t := r.ToolCalls
		if t == nil {
			if why, ok := r.Skipped[SectionToolCalls]; ok {
				return 0, why
			}
			return 0, "tool calls not run"
		}
		switch key {
		case "min_toolcall_valid":
			return t.Valid, ""
		case "min_toolcall_answered":
			return t.Answered, ""
		default:
			if t.ExactMatch == nil {
				return 0, "no reference tool calls"
			}
			return *t.ExactMatch, ""
		}
	}
	return 0, "unknown metric"
}

// evaluateGates compares the metrics with the thresholds and sets the verdict. A threshold
// whose metric is unavailable is "skipped" — except an explicit one, which fails.
func (r *Report) evaluateGates(t Thresholds, explicit []string) {
	r.Gates = nil
	for _, sp := range thresholdSpecs {
		th := *sp.get(&t)
		if th == nil {
			continue
		}
		g := Gate{Name: sp.key, Metric: sp.metric, Op: ">=", Threshold: *th}
		if sp.max {
			g.Op = "<="
		}
		v, why := r.metricValue(sp.key)
		switch {
		case why != "":
			g.Status, g.Detail = StatusSkipped, why
			if slices.Contains(explicit, sp.key) || slices.Contains(explicit, strings.ReplaceAll(sp.key, "_", "-")) {
				g.Status = StatusFail
				g.Detail = "not measured: " + why
			}
		case (sp.max && v <= *th) || (!sp.max && v >= *th):
			g.Status = StatusPass
			g.Value = &v
		default:
			g.Status = StatusFail
			g.Value = &v
		}
		r.Gates = append(r.Gates, g)
	}
	r.Failures = nil
	if ir := r.Integrity; ir != nil {
		for _, c := range ir.Checks {
			if c.Status == StatusFail {
				r.Failures = append(r.Failures, fmt.Sprintf("integrity/%s: %s", c.Name, strings.Join(firstN(c.Problems, 3), "; ")))
			}
		}
	}
	if f := r.Fidelity; f != nil && !f.Passed() {
		var parts []string
		for _, m := range firstMismatches(f.Mismatches, 3) {
			parts = append(parts, fmt.Sprintf("%s (%s): %s", m.ID, m.Kind, m.Detail))
		}
		r.Failures = append(r.Failures, "template fidelity: "+strings.Join(parts, "; "))
	}
	for _, g := range r.Gates {
		if g.Status == StatusFail {
			if g.Value != nil {
				r.Failures = append(r.Failures, fmt.Sprintf("%s: %s = %.6g, threshold %s %.6g", g.Name, g.Metric, *g.Value, g.Op, g.Threshold))
			} else {
				r.Failures = append(r.Failures, fmt.Sprintf("%s: %s", g.Name, g.Detail))
			}
		}
	}
	r.Verdict = VerdictPass
	if len(r.Failures) > 0 {
		r.Verdict = VerdictFail
	}
}

func firstMismatches(m []Mismatch, n int) []Mismatch {
	if len(m) <= n {
		return m
	}
	return m[:n]
}

// WriteMarkdown writes a summary for CI logs (GitHub step summaries render it).
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	icon := map[string]string{StatusPass: "✅", StatusFail: "❌", StatusWarn: "⚠️", StatusSkipped: "⏭️"}
	verdict := strings.ToUpper(r.Verdict)
	fmt.Fprintf(&b, "## tq verify: %s %s\n\n", icon[map[string]string{VerdictPass: StatusPass, VerdictFail: StatusFail, VerdictSaved: StatusPass}[r.Verdict]], verdict)
	fmt.Fprintf(&b, "- model: `%s`\n", r.Model)
	if r.Reference != "" {
		fmt.Fprintf(&b, "- reference: `%s` (%s)\n", r.Reference, r.ReferenceKind)
	}
	if r.SavedReference != "" {
		fmt.Fprintf(&b, "- saved reference logits: `%s`\n", r.SavedReference)
	}
	b.WriteString("\n")
	if len(r.Failures) > 0 {
		b.WriteString("### Failures\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", mdEscape(f))
		}
		b.WriteString("\n")
	}
	if len(r.Gates) > 0 {
		b.WriteString("### Gates\n\n| gate | metric | value | threshold | status |\n|---|---|---:|---:|---|\n")
		for _, g := range r.Gates {
			val := "—"
			if g.Value != nil {
				val = fmt.Sprintf("%.6g", *g.Value)
			}
			st := icon[g.Status] + " " + g.Status
			if g.Detail != "" {
				st += " (" + mdEscape(g.Detail) + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s %.6g | %s |\n", g.Name, g.Metric, val, g.Op, g.Threshold, st)
		}
		b.WriteString("\n")
	}
	if ir := r.Integrity; ir != nil && len(ir.Checks) > 0 {
		b.WriteString("### Integrity\n\n| check | status | detail |\n|---|---|---|\n")
		for _, c := range ir.Checks {
			d := c.Detail
			if len(c.Problems) > 0 {
				d = strings.Join(firstN(c.Problems, 5), "; ")
			}
			fmt.Fprintf(&b, "| %s | %s %s | %s |\n", c.Name, icon[c.Status], c.Status, mdEscape(d))
		}
		b.WriteString("\n")
	}
	if p := r.Perplexity; p != nil {
		fmt.Fprintf(&b, "### Perplexity\n\nPPL = **%.4f ± %.5f** over %d scored tokens (%d windows of %d, second half scored; text %s, %d tokens, %s tokenizer)\n\n",
			p.PPL.Value, p.PPL.Err, p.Positions, p.Windows, p.Ctx, p.Text, p.TextTokens, p.Tokenizer)
	}
	if k := r.KLD; k != nil {
		b.WriteString("### KL divergence vs reference\n\n| metric | value |\n|---|---:|\n")
		fmt.Fprintf(&b, "| PPL(Q) / PPL(ref) | %.4f / %.4f |\n", k.PPL.Value, k.PPLBase.Value)
		fmt.Fprintf(&b, "| PPL ratio | %.5f ± %.5f |\n", k.PPLRatio.Value, k.PPLRatio.Err)
		fmt.Fprintf(&b, "| mean KLD | %.6f ± %.6f |\n", k.KLD.Mean, k.KLD.Err)
		fmt.Fprintf(&b, "| median / p99 / max KLD | %.6f / %.6f / %.6f |\n", k.KLD.Median, k.KLD.P99, k.KLD.Max)
		fmt.Fprintf(&b, "| top-1 agreement | %.3f%% ± %.3f%% |\n", 100*k.SameTop.Value, 100*k.SameTop.Err)
		fmt.Fprintf(&b, "| mean abs Δp (correct token) | %.4f%% |\n", 100*k.MeanAbsDeltaP)
		fmt.Fprintf(&b, "| RMS Δp | %.4f%% ± %.4f%% |\n", 100*k.RMSDeltaP.Value, 100*k.RMSDeltaP.Err)
		if k.TopK > 0 {
			fmt.Fprintf(&b, "| reference | saved top-%d log-probs, mean rest mass %.4f (KLD is a lower bound) |\n", k.TopK, k.MeanRestMass)
		}
		b.WriteString("\n")
	}
	if f := r.Fidelity; f != nil {
		st := icon[StatusPass] + " identical"
		if !f.Passed() {
			st = icon[StatusFail] + " mismatch"
		}
		fmt.Fprintf(&b, "### Chat template and tokenizer fidelity: %s\n\n%d/%d conversations render identically, %d/%d tokenize identically, evaluation text tokens identical: %v\n\n",
			st, f.TemplateIdentical, f.Conversations, f.TokensIdentical, f.Conversations, f.TextTokensIdentical)
		for _, m := range firstMismatches(f.Mismatches, 10) {
			fmt.Fprintf(&b, "- %s (%s): %s\n", m.ID, m.Kind, mdEscape(m.Detail))
		}
		if len(f.Mismatches) > 0 {
			b.WriteString("\n")
		}
	}
	if t := r.ToolCalls; t != nil {
		fmt.Fprintf(&b, "### Tool calls (%d cases, KV cache %s, cap %d tokens)\n\n", t.Cases, t.CacheType, t.MaxTokens)
		fmt.Fprintf(&b, "valid %.1f%%, answered %.1f%%", 100*t.Valid, 100*t.Answered)
		if t.ExactMatch != nil {
			fmt.Fprintf(&b, ", exact match with reference %.1f%%", 100**t.ExactMatch)
		}
		if t.Reference != nil {
			fmt.Fprintf(&b, " (reference: valid %.1f%%, answered %.1f%%)", 100*t.Reference.Valid, 100*t.Reference.Answered)
		}
		b.WriteString("\n\n| case | valid | answered | match | calls / problems |\n|---|---|---|---|---|\n")
		for _, c := range t.Results {
			match := "—"
			if c.Match != nil {
				match = fmt.Sprint(*c.Match)
			}
			var parts []string
			for _, call := range c.Calls {
				s := call.Name + string(call.Arguments)
				if !call.Valid {
					s += " ✗ " + strings.Join(call.Problems, ", ")
				}
				parts = append(parts, s)
			}
			parts = append(parts, c.Problems...)
			fmt.Fprintf(&b, "| %s | %v | %v | %s | %s |\n", c.ID, c.Valid, c.Answered, match, mdEscape(truncate(strings.Join(parts, "; "), 200)))
		}
		b.WriteString("\n")
	}
	if len(r.Skipped) > 0 {
		b.WriteString("### Skipped\n\n")
		for _, sec := range Sections {
			if why, ok := r.Skipped[sec]; ok {
				fmt.Fprintf(&b, "- %s: %s\n", sec, mdEscape(why))
			}
		}
		b.WriteString("\n")
	}
	for _, wr := range r.Warnings {
		fmt.Fprintf(&b, "> ⚠️ %s\n", mdEscape(wr))
	}
	if !math.IsNaN(r.Seconds) {
		fmt.Fprintf(&b, "\n_%.1f s_\n", r.Seconds)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
