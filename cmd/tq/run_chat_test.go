package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/chat"
)

// toolModelQ8 converts the trained tool-calling test model to Q8_0 and returns its path.
func toolModelQ8(t *testing.T) string {
	t.Helper()
	model := filepath.Join(t.TempDir(), "tool-q8_0.gguf")
	tqCmd(t, "convert", filepath.Join(llamacppref.RepoRoot(t), "testdata", "verify", "toolmodel"), "--outtype", "q8_0", "-o", model)
	return model
}

// chatOptions are tq run's flag defaults with greedy sampling and the weather tools.
func chatOptions(t *testing.T) *runOptions {
	return &runOptions{
		toolsFile: filepath.Join(llamacppref.RepoRoot(t), "testdata", "demo", "tools-weather.json"),
		n:         96, ctx: 4096, batch: 512, cacheK: "f16", cacheV: "f16",
		temp: 0, topK: 40, topP: 0.95, minP: 0.05, repeat: 1, repeatN: 64, seed: 1,
	}
}

const wantLisbonCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lisbon\"}}\n</tool_call>"

// TestRunInteractiveToolCall drives `tq run -i` through the command line with a scripted stdin:
// the single turn must produce the same tool call as the one-shot TestRunToolCall.
func TestRunInteractiveToolCall(t *testing.T) {
	model := toolModelQ8(t)
	rootCmd.SetIn(strings.NewReader("What's the weather like in Lisbon right now?\n/exit\nnever read\n"))
	defer rootCmd.SetIn(nil)
	out := tqCmd(t, "run", model, "-i", "--tools", filepath.Join(llamacppref.RepoRoot(t), "testdata", "demo", "tools-weather.json"),
		"-n", "96", "--temp", "0")
	if got := strings.TrimSpace(out); got != wantLisbonCall {
		t.Errorf("stdout %q, want %q", got, wantLisbonCall)
	}
}

// TestRunChatPrefixReuse runs two turns and checks that the second evaluates only the tokens
// the first did not leave in the cache, and that the first turn's reply is the expected call.
func TestRunChatPrefixReuse(t *testing.T) {
	model := toolModelQ8(t)
	var stdout, stderr bytes.Buffer
	in := strings.NewReader("\nWhat's the weather like in Lisbon right now?\n\nAnd in Porto?\n")
	turns, err := runChat(in, &stdout, &stderr, model, chatOptions(t), true)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	if len(turns) != 2 {
		t.Fatalf("%d turns, want 2 (empty lines are skipped)", len(turns))
	}
	t1, t2 := turns[0], turns[1]
	t.Logf("turn 1: rendered %d reused %d; turn 2: rendered %d reused %d evaluated %d (prompt stats %d)",
		t1.Rendered, t1.Reused, t2.Rendered, t2.Reused, t2.Evaluated, t2.Gen.PromptTokens)
	if t1.Reply != wantLisbonCall {
		t.Errorf("turn 1 reply %q, want %q", t1.Reply, wantLisbonCall)
	}
	if t1.Reused != 0 || t1.Evaluated != t1.Rendered {
		t.Errorf("turn 1 reused %d of %d tokens from an empty session", t1.Reused, t1.Rendered)
	}
	// Turn 2's rendering starts with turn 1's prompt and reply, all of which are cached.
	if t2.Reused < t1.Rendered || t2.Evaluated >= t2.Rendered || t2.Gen.PromptTokens != t2.Evaluated {
		t.Errorf("turn 2: evaluated %d of %d rendered tokens (reused %d, generate saw %d); want at least turn 1's %d reused",
			t2.Evaluated, t2.Rendered, t2.Reused, t2.Gen.PromptTokens, t1.Rendered)
	}
	if n := strings.Count(stderr.String(), " tok/s | gen "); n != 2 {
		t.Errorf("%d speed lines on stderr, want 2:\n%s", n, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), wantLisbonCall+"\n") {
		t.Errorf("stdout does not start with the turn-1 reply:\n%q", stdout.String())
	}

	// Reusing the cache must not change the result: a fresh session that evaluates the whole
	// rendered conversation greedily produces the same turn-2 reply.
	o := chatOptions(t)
	tok, err := tokenizer.LoadGGUF(model)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := readToolsFile(o.toolsFile)
	if err != nil {
		t.Fatal(err)
	}
	text, err := chat.Render(tok.ChatTemplate(), []chat.Message{
		{Role: "user", Content: "What's the weather like in Lisbon right now?"},
		{Role: "assistant", Content: t1.Reply},
		{Role: "user", Content: "And in Porto?"},
	}, chat.Options{AddGenerationPrompt: true, ToolsJSON: tools, BOS: tok.TokenText(tok.BOS()), EOS: tok.TokenText(tok.EOS())})
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
	if len(ids) != t2.Rendered {
		t.Errorf("fresh rendering has %d tokens, the chat rendered %d", len(ids), t2.Rendered)
	}
	src, err := infer.OpenGGUF(model)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := infer.Load(src, infer.Options{CtxSize: o.ctx, BatchSize: o.batch})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sess, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := sess.Generate(ids, infer.GenerateOptions{MaxTokens: o.n, Stop: []int32{tok.EOS(), tok.EOT()},
		Sampler: infer.SamplerOptions{Temperature: 0, TopK: o.topK, TopP: o.topP, MinP: o.minP, RepeatPenalty: 1, RepeatLastN: o.repeatN}})
	if err != nil {
		t.Fatal(err)
	}
	if fresh := strings.TrimSpace(tok.Decode(out)); fresh != t2.Reply {
		t.Errorf("turn 2 with the cached prefix replied %q, a fresh evaluation %q", t2.Reply, fresh)
	}
	t.Logf("turn 2 reply: %q", t2.Reply)
}

// TestRunChatResetAndOverflow checks /reset (the conversation restarts, so the rendering is
// the first turn's again) and the error for a conversation that no longer fits the context.
func TestRunChatResetAndOverflow(t *testing.T) {
	model := toolModelQ8(t)
	q := "What's the weather like in Lisbon right now?\n"
	var stdout, stderr bytes.Buffer
	turns, err := runChat(strings.NewReader(q+"/reset\n"+q), &stdout, &stderr, model, chatOptions(t), true)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	if len(turns) != 2 || turns[1].Rendered != turns[0].Rendered || turns[1].Reply != turns[0].Reply {
		t.Fatalf("after /reset: turns %+v", turns)
	}
	// The whole turn-2 prompt is cached; one token is re-evaluated for the logits.
	if turns[1].Evaluated != 1 {
		t.Errorf("after /reset the identical prompt evaluated %d tokens, want 1", turns[1].Evaluated)
	}

	o := chatOptions(t)
	o.ctx = turns[0].Rendered + 40 // room for the first exchange, not the second prompt
	stdout.Reset()
	stderr.Reset()
	turns, err = runChat(strings.NewReader(q+"And in Porto, and in Madrid, and in Paris, and in Rome, and in Berlin, please?\n"), &stdout, &stderr, model, o, true)
	if err == nil || !strings.Contains(err.Error(), "does not fit the context") {
		t.Fatalf("want a context overflow error, got %v (turns %+v)", err, turns)
	}
	if len(turns) != 1 {
		t.Errorf("%d turns completed before the overflow, want 1", len(turns))
	}
}
