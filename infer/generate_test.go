package infer

import (
	"errors"
	"testing"
)

func TestGenerate(t *testing.T) {
	src := defaultSource(t, "qwen3")
	m, err := Load(src, Options{Threads: 2, CtxSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, _ := m.NewSession()
	prompt := randTokens(6, 10, 512)

	// greedy generation equals the manual argmax loop
	s.Reset()
	want := greedy(t, s, prompt, 20)
	s.Reset()
	var streamed []int32
	got, st, err := s.Generate(prompt, GenerateOptions{MaxTokens: 20, Sampler: SamplerOptions{Temperature: 0},
		OnToken: func(tok int32) error { streamed = append(streamed, tok); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 || st.StopReason != "length" || st.GenTokens != 20 || st.PromptTokens != 10 {
		t.Fatalf("got %d tokens, stats %+v", len(got), st)
	}
	for i := range want {
		if got[i] != want[i] || streamed[i] != want[i] {
			t.Fatalf("token %d: generated %d, streamed %d, greedy %d", i, got[i], streamed[i], want[i])
		}
	}
	if st.TTFT <= 0 || st.Prompt <= 0 || st.Prompt > st.TTFT || st.GenTokS() <= 0 || st.PromptTokS() <= 0 {
		t.Fatalf("bad timing %+v", st)
	}

	// a stop token ends generation before it is emitted
	s.Reset()
	got, st, err = s.Generate(prompt, GenerateOptions{MaxTokens: 20, Sampler: SamplerOptions{Temperature: 0}, Stop: []int32{want[5]}})
	if err != nil {
		t.Fatal(err)
	}
	stopAt := 0
	for stopAt < len(want) && want[stopAt] != want[5] {
		stopAt++
	}
	if st.StopReason != "stop" || len(got) != stopAt {
		t.Fatalf("stop token: %d tokens (%v), reason %q, want %d", len(got), got, st.StopReason, stopAt)
	}

	// the context bounds generation
	s.Reset()
	got, st, err = s.Generate(prompt, GenerateOptions{Sampler: SamplerOptions{Temperature: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if st.StopReason != "context" || len(prompt)+len(got) != 64+1 && len(prompt)+len(got) != 64 {
		t.Fatalf("context stop: %d tokens, reason %q", len(got), st.StopReason)
	}

	// callback errors are returned
	s.Reset()
	boom := errors.New("boom")
	if _, _, err := s.Generate(prompt, GenerateOptions{MaxTokens: 5, Sampler: SamplerOptions{Temperature: 0},
		OnToken: func(int32) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("callback error: got %v", err)
	}
	// seeded sampling is reproducible
	o := GenerateOptions{MaxTokens: 15, Sampler: DefaultSamplerOptions()}
	o.Sampler.Seed = 3
	s.Reset()
	a, _, _ := s.Generate(prompt, o)
	s.Reset()
	b, _, _ := s.Generate(prompt, o)
	if len(a) != len(b) {
		t.Fatalf("seeded runs differ in length")
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded runs differ at %d", i)
		}
	}
}
