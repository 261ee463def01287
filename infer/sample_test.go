package infer

import (
	"math"
	"math/rand/v2"
	"testing"
)

func heavyLogits(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n)
	for i := range out {
		z := r.NormFloat64()
		u := (1 - r.Float64()) * (1 - r.Float64())
		out[i] = float32(2 * z / math.Sqrt(-2*math.Log(u)/4))
	}
	return out
}

func TestSamplerGreedy(t *testing.T) {
	l := heavyLogits(1, 1000)
	want := argmax(l)
	for _, o := range []SamplerOptions{{Temperature: 0}, {Temperature: -1, TopK: 5}, {Temperature: 1, TopK: 1}} {
		s := NewSampler(o)
		for i := 0; i < 5; i++ {
			if got := s.Sample(l); got != want {
				t.Fatalf("%+v: sampled %d, want argmax %d", o, got, want)
			}
		}
	}
}

// Sampling at temperature T without truncation must follow softmax(l/T): chi-square test.
func TestSamplerDistribution(t *testing.T) {
	l := heavyLogits(2, 20)
	const temp = 1.5
	p := make([]float64, len(l))
	for i, v := range l {
		p[i] = float64(v) / temp
	}
	p = softmax64(p)
	s := NewSampler(SamplerOptions{Temperature: temp, TopP: 1, Seed: 42})
	const n = 200000
	counts := make([]float64, len(l))
	for i := 0; i < n; i++ {
		counts[s.Sample(l)]++
	}
	var chi2 float64
	df := 0
	for i := range p {
		e := p[i] * n
		if e < 5 {
			continue
		}
		chi2 += (counts[i] - e) * (counts[i] - e) / e
		df++
	}
	// 99.9% quantile of chi-square with <= 19 dof is < 44
	if chi2 > 44 {
		t.Fatalf("chi-square %.1f over %d bins: sampling does not follow softmax(l/T)", chi2, df)
	}
}

func TestSamplerTruncation(t *testing.T) {
	l := heavyLogits(3, 500)
	p := softmax32(l)
	order := make([]int, len(l))
	for i := range order {
		order[i] = i
	}
	// sort by probability descending
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if p[order[j]] > p[order[i]] {
				order[i], order[j] = order[j], order[i]
			}
		}
	}
	check := func(name string, o SamplerOptions, allowed func(tok int32) bool) {
		s := NewSampler(o)
		for i := 0; i < 3000; i++ {
			if tok := s.Sample(l); !allowed(tok) {
				t.Fatalf("%s: sampled token %d outside the allowed set", name, tok)
			}
		}
	}
	top := map[int32]bool{}
	for _, i := range order[:7] {
		top[int32(i)] = true
	}
	check("top-k 7", SamplerOptions{Temperature: 1, TopK: 7, Seed: 1}, func(tok int32) bool { return top[tok] })
	// top-p 0.5: the smallest prefix reaching 0.5
	var cum float64
	nucleus := map[int32]bool{}
	for _, i := range order {
		nucleus[int32(i)] = true
		cum += p[i]
		if cum >= 0.5 {
			break
		}
	}
	check("top-p 0.5", SamplerOptions{Temperature: 1, TopP: 0.5, Seed: 2}, func(tok int32) bool { return nucleus[tok] })
	pmax := p[order[0]]
	check("min-p 0.2", SamplerOptions{Temperature: 1, MinP: 0.2, Seed: 3}, func(tok int32) bool { return p[tok] >= 0.2*pmax*(1-1e-6) })
}

func TestSamplerSeedAndPenalty(t *testing.T) {
	l := heavyLogits(4, 300)
	o := DefaultSamplerOptions()
	o.Seed = 9
	a, b := NewSampler(o), NewSampler(o)
	for i := 0; i < 50; i++ {
		if x, y := a.Sample(l), b.Sample(l); x != y {
			t.Fatalf("same seed, different draws at %d: %d vs %d", i, x, y)
		}
	}
	// a strong repetition penalty on the argmax must move greedy decoding elsewhere
	best := argmax(l)
	s := NewSampler(SamplerOptions{Temperature: 0, RepeatPenalty: 1e6, RepeatLastN: 4})
	s.Accept(best)
	if got := s.Sample(l); got == best {
		t.Fatalf("repetition penalty did not affect token %d", best)
	}
	// outside the window the penalty no longer applies
	for i := int32(0); i < 4; i++ {
		s.Accept((best + 1 + i) % 300)
	}
	if got := s.Sample(l); got != best {
		t.Fatalf("token %d left the window but is still penalised: sampled %d", best, got)
	}
	if err := (SamplerOptions{Temperature: float32(math.NaN())}).Validate(); err == nil {
		t.Fatal("NaN temperature accepted")
	}
	if err := (SamplerOptions{MinP: 2, RepeatPenalty: 1}).Validate(); err == nil {
		t.Fatal("min-p 2 accepted")
	}
}
