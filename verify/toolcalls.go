package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tq-project/tq/tokenizer"
)

// DefaultToolCallMaxTokens caps the tokens generated per tool-call case.
const DefaultToolCallMaxTokens = 384

// ToolCallReport summarizes the tool-call suite (docs/verify.md "Tool calls").
type ToolCallReport struct {
	Suite     string `json:"suite"`
	Cases     int    `json:"cases"`
	CacheType string `json:"cache_type"` // KV cache type used for the model
	MaxTokens int    `json:"max_tokens"`
	// Valid is the fraction of cases whose turn contains at least one tool call and only valid
	// calls (JSON parses, the tool exists, required arguments present, types match).
	Valid float64 `json:"valid"`
	// Answered is the fraction of cases whose turn ended (end-of-turn token before the cap)
	// with a tool call or answer text, not only a reasoning block.
	Answered float64 `json:"answered"`
	// ExactMatch is the fraction of cases whose calls equal the reference model's calls (same
	// names and arguments, in order); nil without a reference.
	ExactMatch *float64 `json:"exact_match,omitempty"`
	// Reference summarizes the reference model on the same suite (nil without one).
	Reference *ToolCallSummary `json:"reference,omitempty"`
	Results   []CaseResult     `json:"results"`
}

// ToolCallSummary is the reference model's valid / answered fractions.
type ToolCallSummary struct {
	Valid    float64 `json:"valid"`
	Answered float64 `json:"answered"`
}

// CaseResult is the outcome of one tool-call case.
type CaseResult struct {
	ID       string       `json:"id"`
	Output   string       `json:"output"` // generated text (end token excluded)
	Tokens   int          `json:"tokens"`
	Ended    bool         `json:"ended"` // an end-of-turn token was generated before the cap
	Answered bool         `json:"answered"`
	Valid    bool         `json:"valid"`
	Calls    []CallResult `json:"calls,omitempty"`
	Problems []string     `json:"problems,omitempty"`
	// Match reports whether the calls equal the reference's (nil without a reference).
	Match    *bool        `json:"match,omitempty"`
	RefCalls []CallResult `json:"reference_calls,omitempty"`
}

// CallResult is one extracted tool call and its validation.
type CallResult struct {
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Valid     bool            `json:"valid"`
	Problems  []string        `json:"problems,omitempty"`
	canonical string
}

// toolRunner greedy-decodes the suite's cases with one model.
type toolRunner struct {
	model     LogitsModel
	tok       *tokenizer.Tokenizer
	template  string
	maxTokens int
	stop      map[int32]bool
	bos, eos  string
}

// endOfTurnTexts are token texts that end an assistant turn in the supported families, in
// addition to the vocabulary's EOS/EOT ids (llama.cpp's end-of-generation set).
var endOfTurnTexts = []string{"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "</s>"}

func newToolRunner(m LogitsModel, tok *tokenizer.Tokenizer, template string, maxTokens int) *toolRunner {
	r := &toolRunner{model: m, tok: tok, template: template, maxTokens: maxTokens, stop: map[int32]bool{}}
	for _, id := range []int32{tok.EOS(), tok.EOT()} {
		if id >= 0 {
			r.stop[id] = true
		}
	}
	for _, s := range endOfTurnTexts {
		if id, ok := tok.TokenID(s); ok {
			r.stop[id] = true
		}
	}
	r.bos, r.eos = specialText(tok, tok.BOS()), specialText(tok, tok.EOS())
	return r
}

func specialText(tok *tokenizer.Tokenizer, id int32) string {
	if id < 0 {
		return ""
	}
	return tok.TokenPiece(id)
}

// promptTokens renders and tokenizes a conversation the way llama.cpp's server does: special
// tokens parsed, BOS added when the vocabulary adds it and the text does not already start
// with it.
func (r *toolRunner) promptTokens(c Conversation) (string, []int32, error) {
	text, err := render(r.template, c, r.bos, r.eos)
	if err != nil {
		return "", nil, err
	}
	addSpecial := !(r.bos != "" && strings.HasPrefix(text, r.bos))
	return text, r.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true}), nil
}

// generate greedy-decodes one case.
func (r *toolRunner) generate(ctx context.Context, c ToolCase) (prompt string, out []int32, ended bool, err error) {
	prompt, toks, err := r.promptTokens(c.Conversation)
	if err != nil {
		return "", nil, false, fmt.Errorf("case %s: rendering: %w", c.ID, err)
	}
	limit := r.maxTokens
	if c.MaxTokens > 0 {
		limit = c.MaxTokens
	}
	if len(toks)+limit > r.model.CtxSize() {
		return "", nil, false, fmt.Errorf("case %s: prompt of %d tokens + %d generated exceed the context of %d", c.ID, len(toks), limit, r.model.CtxSize())
	}
	r.model.Reset()
	rows, err := r.model.Eval(toks, 1)
	if err != nil {
		return "", nil, false, fmt.Errorf("case %s: %w", c.ID, err)
	}
	for len(out) < limit {
		if err := ctx.Err(); err != nil {
			return "", nil, false, err
		}
		next := int32(argmax(rows[0]))
		if r.stop[next] {
			return prompt, out, true, nil
		}
		out = append(out, next)
		if len(out) == limit {
			break
		}
		if rows, err = r.model.Eval([]int32{next}, 1); err != nil {
			return "", nil, false, fmt.Errorf("case %s: %w", c.ID, err)
		}
	}
	return prompt, out, false, nil
}

// endsInsideThink reports whether a rendered prompt leaves the model inside a reasoning block
// (an unclosed <think> after the last assistant header).
func endsInsideThink(prompt string) bool {
	i := strings.LastIndex(prompt, thinkOpen)
	return i >= 0 && !strings.Contains(prompt[i:], thinkClose)
}

// runCase generates and judges one case.
func (r *toolRunner) runCase(ctx context.Context, c ToolCase) (CaseResult, error) {
	prompt, out, ended, err := r.generate(ctx, c)
	if err != nil {
		return CaseResult{}, err
	}
	text := r.tok.Decode(out)
	res := judge(c, text, endsInsideThink(prompt), ended)
	res.Tokens = len(out)
	return res, nil
}

// judge extracts and validates the calls of a generated turn.
func judge(c ToolCase, text string, inThink, ended bool) CaseResult {
	res := CaseResult{ID: c.ID, Output: text, Ended: ended}
	tools, _ := parseTools(c.Tools) // validated when the suite was loaded
	turn := parseTurn(text, inThink)
	res.Answered = ended && !turn.ReasoningOpen && (turn.Content != "" || len(turn.Calls) > 0)
	if !ended {
		res.Problems = append(res.Problems, "turn did not end within the token cap")
	}
	if turn.ReasoningOpen {
		res.Problems = append(res.Problems, "output is only an unfinished reasoning block")
	}
	allValid := true
	for i := range turn.Calls {
		pc := &turn.Calls[i]
		probs := validateCall(pc, tools)
		cr := CallResult{Name: pc.Name, Arguments: pc.Arguments, Valid: len(probs) == 0, Problems: probs}
		if pc.args != nil {
			cr.canonical = pc.Name + canonicalJSON(pc.args)
		}
		allValid = allValid && cr.Valid
		res.Calls = append(res.Calls, cr)
	}
	if len(turn.Calls) == 0 {
		res.Problems = append(res.Problems, "no tool call")
	}
	res.Valid = len(turn.Calls) > 0 && allValid
	return res
}

// callsEqual compares two cases' calls: same count, names and arguments (as JSON values,
// key order and number formatting ignored), in order.
func callsEqual(a, b []CallResult) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i].canonical == "" || a[i].canonical != b[i].canonical {
			return false
		}
	}
	return true
}

// refCallsFromJSON restores the canonical forms of stored reference calls.
func refCallsFromJSON(calls []CallResult) []CallResult {
	out := make([]CallResult, len(calls))
	for i, c := range calls {
		out[i] = c
		var args map[string]any
		if len(c.Arguments) > 0 && decodeJSON(string(c.Arguments), &args) == nil && args != nil {
			out[i].canonical = c.Name + canonicalJSON(args)
		}
	}
	return out
}

// summarize fills the fractions of a report from its results.
func (r *ToolCallReport) summarize() {
	r.Cases = len(r.Results)
	if r.Cases == 0 {
		return
	}
	var valid, answered, match, withRef int
	for _, c := range r.Results {
		if c.Valid {
			valid++
		}
		if c.Answered {
			answered++
		}
		if c.Match != nil {
			withRef++
			if *c.Match {
				match++
			}
		}
	}
	n := float64(r.Cases)
	r.Valid, r.Answered = float64(valid)/n, float64(answered)/n
	if withRef > 0 {
		v := float64(match) / n
		r.ExactMatch = &v
	}
}

func summaryOf(results []CaseResult) *ToolCallSummary {
	if len(results) == 0 {
		return nil
	}
	var v, a int
	for _, c := range results {
		if c.Valid {
			v++
		}
		if c.Answered {
			a++
		}
	}
	n := float64(len(results))
	return &ToolCallSummary{Valid: float64(v) / n, Answered: float64(a) / n}
}
