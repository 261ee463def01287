package infer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SamplerOptions configure token sampling. The chain follows llama.cpp's default order:
// repetition penalties, top-k, top-p, min-p, temperature, then a seeded draw.
type SamplerOptions struct {
	// Temperature divides the logits; <= 0 selects greedy decoding (argmax after penalties).
	Temperature float32
	// TopK keeps the k most likely tokens (<= 0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability reaches p (>= 1: off).
	TopP float32
	// MinP drops tokens whose probability is below MinP times the top probability (<= 0: off).
	MinP float32
	// RepeatPenalty divides positive (multiplies negative) logits of tokens seen in the last
	// RepeatLastN tokens (1 or 0: off).
	RepeatPenalty float32
	// RepeatLastN is the penalty window (0: 64, < 0: disabled).
	RepeatLastN int
	// FrequencyPenalty and PresencePenalty subtract count·f and (count > 0)·p.
	FrequencyPenalty, PresencePenalty float32
	// Seed seeds the draw.
	Seed uint64
}

// DefaultSamplerOptions are llama.cpp's defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
// no repetition penalty).
func DefaultSamplerOptions() SamplerOptions {
	return SamplerOptions{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64}
}

// Validate reports options that cannot be used.
func (o SamplerOptions) Validate() error {
	switch {
	case math.IsNaN(float64(o.Temperature)) || math.IsInf(float64(o.Temperature), 0):
		return fmt.Errorf("temperature %v is not finite", o.Temperature)
	case o.TopP < 0 || math.IsNaN(float64(o.TopP)):
		return fmt.Errorf("top-p %v must be >= 0", o.TopP)
	case o.MinP < 0 || o.MinP > 1 || math.IsNaN(float64(o.MinP)):
		return fmt.Errorf("min-p %v must be in [0, 1]", o.MinP)
	case o.RepeatPenalty < 0 || math.IsNaN(float64(o.RepeatPenalty)):
		return fmt.Errorf("repeat penalty %v must be > 0 (0: default 1)", o.RepeatPenalty)
	}
	return nil
}

// Sampler picks next tokens from logits. It remembers accepted tokens for the penalties.
type Sampler struct {
	o       SamplerOptions
	rng     *rand.Rand
	history []int32
	cand    []candidate
}

type candidate struct {
	id    int32
	logit float32
	p     float32
}

// NewSampler returns a sampler; invalid options are reported by [SamplerOptions.Validate].
func NewSampler(o SamplerOptions) *Sampler {
	if o.RepeatLastN == 0 {
		o.RepeatLastN = 64
	}
	if o.RepeatPenalty == 0 {
		o.RepeatPenalty = 1
	}
	return &Sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
}

// Accept records a token (prompt or generated) for the repetition penalties.
func (s *Sampler) Accept(tok int32) {
	s.history = append(s.history, tok)
	if n := s.o.RepeatLastN; n > 0 && len(s.history) > 4*n {
		s.history = append(s.history[:0], s.history[len(s.history)-n:]...)
	}
}

// Reset forgets the accepted tokens.
func (s *Sampler) Reset() { s.history = s.history[:0] }

func (s *Sampler) penalties() {
	o := s.o
	if o.RepeatLastN < 0 || (o.RepeatPenalty == 1 && o.FrequencyPenalty == 0 && o.PresencePenalty == 0) {
		return
	}
	win := s.history
	if len(win) > o.RepeatLastN {
		win = win[len(win)-o.RepeatLastN:]
	}
	counts := map[int32]int{}
	for _, t := range win {
		counts[t]++
	}
	for i := range s.cand {
		c := &s.cand[i]
		n, ok := counts[c.id]
		if !ok {
			continue
		}
		if c.logit <= 0 {
			c.logit *= o.RepeatPenalty
		} else {
			c.logit /= o.RepeatPenalty
		}
		c.logit -= float32(n)*o.FrequencyPenalty + o.PresencePenalty
	}
}

// sortTop orders the k largest candidates first (descending logit) and truncates to them.
func (s *Sampler) sortTop(k int) {
	if k <= 0 || k > len(s.cand) {
		k = len(s.cand)
	}
	cmp := func(a, b candidate) int {
		switch {
		case a.logit > b.logit:
			return -1
		case a.logit < b.logit:
			return 1
		}
		return int(a.id - b.id)
	}
	if k < len(s.cand)/8 {
		// partial selection: keep a sorted top-k buffer
		top := make([]candidate, 0, k+1)
		for _, c := range s.cand {
			if len(top) == k && cmp(c, top[k-1]) >= 0 {
				continue
			}
			i, _ := slices.BinarySearchFunc(top, c, cmp)
			top = slices.Insert(top, i, c)
			if len(top) > k {
				top = top[:k]
			}
		}
		s.cand = append(s.cand[:0], top...)
		return
	}
	slices.SortFunc(s.cand, cmp)
	s.cand = s.cand[:k]
}

func (s *Sampler) softmax() {
	mx := s.cand[0].logit
	var sum float64
	for i := range s.cand {
		e := math.Exp(float64(s.cand[i].logit - mx))
		s.cand[i].p = float32(e)
		sum += e
	}
	for i := range s.cand {
		s.cand[i].p = float32(float64(s.cand[i].p) / sum)
	}
}

// Sample returns the next token for the given logits (not modified) and does not accept it.
func (s *Sampler) Sample(logits []float32) int32 {
	o := s.o
	s.cand = s.cand[:0]
	for i, l := range logits {
		s.cand = append(s.cand, candidate{id: int32(i), logit: l})
	}
	s.penalties()
	if o.Temperature <= 0 {
		best := s.cand[0]
		for _, c := range s.cand[1:] {
			if c.logit > best.logit {
				best = c
			}
		}
		return best.id
	}
	s.sortTop(o.TopK)
	if o.TopP > 0 && o.TopP < 1 {
		s.softmax()
		var cum float32
		for i, c := range s.cand {
			cum += c.p
			if cum >= o.TopP {
				s.cand = s.cand[:i+1]
				break
			}
		}
	}
	if o.MinP > 0 {
		thr := s.cand[0].logit + float32(math.Log(float64(o.MinP)))
		n := 1
		for n < len(s.cand) && s.cand[n].logit >= thr {
			n++
		}
		s.cand = s.cand[:n]
	}
	for i := range s.cand {
		s.cand[i].logit /= o.Temperature
	}
	s.softmax()
	r := s.rng.Float64()
	var cum float64
	for _, c := range s.cand {
		cum += float64(c.p)
		if r < cum {
			return c.id
		}
	}
	return s.cand[len(s.cand)-1].id
}
