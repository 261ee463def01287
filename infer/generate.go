package infer

import (
	"fmt"
	"slices"
	"time"
)

// GenerateOptions configure [Session.Generate].
type GenerateOptions struct {
	// MaxTokens is the most tokens to generate (<= 0: until a stop token or the context is full).
	MaxTokens int
	// Sampler chooses the tokens.
	Sampler SamplerOptions
	// Stop lists tokens that end generation (not included in the output), e.g. EOS/EOT.
	Stop []int32
	// OnToken, when set, is called with every generated token as soon as it is chosen; an
	// error stops generation and is returned.
	OnToken func(tok int32) error
}

// GenerateStats reports the work and timing of a generation.
type GenerateStats struct {
	PromptTokens int           `json:"prompt_tokens"`
	GenTokens    int           `json:"gen_tokens"`
	Prompt       time.Duration `json:"prompt_ns"`   // evaluating the prompt
	TTFT         time.Duration `json:"ttft_ns"`     // start to first generated token
	Gen          time.Duration `json:"gen_ns"`      // first to last generated token
	StopReason   string        `json:"stop_reason"` // "stop", "length", "context", "callback"
}

// PromptTokS is the prompt evaluation speed.
func (g GenerateStats) PromptTokS() float64 { return rate(g.PromptTokens, g.Prompt) }

// GenTokS is the decode speed: tokens after the first over the time since the first.
func (g GenerateStats) GenTokS() float64 { return rate(g.GenTokens-1, g.Gen) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate evaluates prompt (appended to the session's cache) and then samples up to
// MaxTokens tokens, feeding each back. It returns the generated tokens.
func (s *Session) Generate(prompt []int32, o GenerateOptions) ([]int32, GenerateStats, error) {
	st := GenerateStats{PromptTokens: len(prompt)}
	if err := o.Sampler.Validate(); err != nil {
		return nil, st, fmt.Errorf("infer: sampler: %w", err)
	}
	sm := NewSampler(o.Sampler)
	for _, t := range prompt {
		sm.Accept(t)
	}
	start := time.Now()
	logits, err := s.Eval(prompt, LogitsLast)
	if err != nil {
		return nil, st, err
	}
	st.Prompt = time.Since(start)
	var out []int32
	var first time.Time
	for {
		if o.MaxTokens > 0 && len(out) >= o.MaxTokens {
			st.StopReason = "length"
			break
		}
		tok := sm.Sample(logits[0])
		if len(out) == 0 {
			first = time.Now()
			st.TTFT = first.Sub(start)
		}
		if slices.Contains(o.Stop, tok) {
			st.StopReason = "stop"
			break
		}
		out = append(out, tok)
		sm.Accept(tok)
		st.GenTokens = len(out)
		st.Gen = time.Since(first)
		if o.OnToken != nil {
			if err := o.OnToken(tok); err != nil {
				st.StopReason = "callback"
				return out, st, err
			}
		}
		if o.MaxTokens > 0 && len(out) >= o.MaxTokens {
			st.StopReason = "length"
			break
		}
		if s.Pos() >= s.CtxSize() {
			st.StopReason = "context"
			break
		}
		if logits, err = s.Eval([]int32{tok}, LogitsLast); err != nil {
			return out, st, err
		}
	}
	return out, st, nil
}
