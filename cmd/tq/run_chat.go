package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"golang.org/x/term"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/chat"
)

// chatTurnStats describes the work of one interactive turn: how long the rendered conversation
// was, how many of its tokens were already in the KV cache, and what was evaluated.
type chatTurnStats struct {
	Rendered  int                 // tokens of the whole rendered conversation (with generation prompt)
	Reused    int                 // leading tokens kept from the session's cache
	Evaluated int                 // prompt tokens evaluated this turn (Rendered - Reused)
	Gen       infer.GenerateStats // the generation's own statistics
	Reply     string              // the assistant text appended to the conversation
}

// runChat is `tq run -i`: a REPL that reads one user turn per line from in, renders the whole
// conversation with the model's chat template each turn, evaluates only the tokens after the
// longest common prefix with what the session already holds, and streams the reply to stdout.
// Empty lines are ignored; "/exit" or end of input ends the chat; "/reset" clears the
// conversation (the system message stays). It returns the statistics of every turn.
func runChat(in io.Reader, stdout, stderr io.Writer, path string, o *runOptions, seedSet bool) ([]chatTurnStats, error) {
	if o.prompt != "" || o.promptFile != "" {
		return nil, errors.New("-i/--interactive reads the user turns from standard input: drop -p/-f")
	}
	if o.json {
		return nil, errors.New("-i/--interactive streams text: --json is not supported")
	}
	if o.n == 0 || o.n < -1 {
		return nil, fmt.Errorf("-n %d: give a positive token count, or -1 to generate until end of text", o.n)
	}
	seed := uint64(o.seed)
	if !seedSet || o.seed < 0 {
		seed = rand.Uint64() >> 1
	}
	tok, err := tokenizer.LoadGGUF(path)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", path, err)
	}
	tmpl := tok.ChatTemplate()
	if tmpl == "" {
		return nil, fmt.Errorf("%s: -i: the model has no chat template (tokenizer.chat_template)", path)
	}
	copts := chat.Options{AddGenerationPrompt: true, BOS: tok.TokenText(tok.BOS()), EOS: tok.TokenText(tok.EOS())}
	if o.toolsFile != "" {
		tools, err := readToolsFile(o.toolsFile)
		if err != nil {
			return nil, err
		}
		copts.ToolsJSON = tools
	}
	if o.noThink {
		off := false
		copts.EnableThinking = &off
	}

	rm, err := loadRunModel(stderr, path, o) // run.go: backend and placement, one line each
	if err != nil {
		return nil, err
	}
	defer rm.Close()
	m := rm.m
	sess, err := m.NewSession()
	if err != nil {
		return nil, err
	}

	var endTexts []string
	var stopIDs []int32
	for _, id := range []int32{tok.EOS(), tok.EOT()} {
		if id >= 0 {
			stopIDs = append(stopIDs, id)
			if t := tok.TokenText(id); t != "" {
				endTexts = append(endTexts, t)
			}
		}
	}
	if o.ignoreEOS {
		stopIDs = nil
	}
	gen := infer.GenerateOptions{MaxTokens: o.n, Stop: stopIDs, Sampler: infer.SamplerOptions{
		Temperature: o.temp, TopK: o.topK, TopP: o.topP, MinP: o.minP, RepeatPenalty: o.repeat,
		RepeatLastN: o.repeatN, Seed: seed}}
	if o.n == -1 {
		gen.MaxTokens = 0 // until a stop token or a full context
	}

	var base []chat.Message
	if o.system != "" {
		base = append(base, chat.Message{Role: "system", Content: o.system})
	}
	msgs := slices.Clone(base)
	prompt := ""
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		prompt = "> "
	}
	bw := bufio.NewWriter(stdout)
	defer bw.Flush()
	r := bufio.NewReader(in)
	var held []int32 // tokens whose K/V the session holds, in order
	var turns []chatTurnStats
	for {
		if prompt != "" {
			fmt.Fprint(stderr, prompt)
		}
		line, rerr := r.ReadString('\n')
		if rerr != nil && rerr != io.EOF {
			return turns, rerr
		}
		line = strings.TrimRight(line, "\r\n")
		switch strings.TrimSpace(line) {
		case "":
			if rerr == io.EOF {
				return turns, nil
			}
			continue
		case "/exit":
			return turns, nil
		case "/reset":
			// keep the cache: the next turn reuses whatever prefix still matches
			msgs = slices.Clone(base)
			if rerr == io.EOF {
				return turns, nil
			}
			continue
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: line})
		text, err := chat.Render(tmpl, msgs, copts)
		if err != nil {
			return turns, fmt.Errorf("%s: chat template: %w", path, err)
		}
		ids := tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: false, ParseSpecial: true})
		if len(ids) == 0 {
			return turns, errors.New("the conversation encodes to no tokens")
		}
		if len(ids) >= o.ctx {
			return turns, fmt.Errorf("the conversation has %d tokens, which does not fit the context of %d (raise --ctx, or /reset sooner)", len(ids), o.ctx)
		}
		lcp := commonPrefix(held, ids)
		if lcp == len(ids) {
			lcp-- // Generate needs at least one token to evaluate for the next-token logits
		}
		if err := sess.Truncate(lcp); err != nil {
			return turns, err
		}
		stream := &textStream{tok: tok, w: bw}
		gen.OnToken = stream.add
		out, st, err := sess.Generate(ids[lcp:], gen)
		seq := append(slices.Clone(ids), out...)
		if p := sess.Pos(); p <= len(seq) {
			held = seq[:p]
		} else {
			held = nil // cannot happen; forget the cache contents rather than trust them
			sess.Reset()
		}
		if err != nil {
			return turns, err
		}
		stream.flush()
		fmt.Fprintln(bw)
		if err := bw.Flush(); err != nil {
			return turns, err
		}
		reply := trimEndOfTurn(tok.Decode(out), endTexts)
		msgs = append(msgs, chat.Message{Role: "assistant", Content: reply})
		ts := chatTurnStats{Rendered: len(ids), Reused: lcp, Evaluated: len(ids) - lcp, Gen: st, Reply: reply}
		turns = append(turns, ts)
		fmt.Fprintf(stderr, "prompt %d tok (%d cached) %.1f tok/s | gen %d tok %.1f tok/s | TTFT %.0f ms | peak RSS %s | ctx %d/%d | %d threads, %s, stop: %s\n",
			ts.Evaluated, ts.Reused, st.PromptTokS(), st.GenTokens, st.GenTokS(), float64(st.TTFT)/1e6, rssString(peakRSS()),
			sess.Pos(), o.ctx, m.Threads(), infer.KernelImplementation(), st.StopReason)
		if st.StopReason == "context" {
			return turns, fmt.Errorf("the context of %d tokens is full: the reply was cut off (raise --ctx)", o.ctx)
		}
		if rerr == io.EOF {
			return turns, nil
		}
	}
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// trimEndOfTurn removes trailing whitespace and end-of-turn token texts (e.g. "<|im_end|>",
// present when --ignore-eos lets them through) from a reply.
func trimEndOfTurn(s string, ends []string) string {
	for {
		t := strings.TrimRightFunc(s, func(r rune) bool { return r == ' ' || r == '\n' || r == '\r' || r == '\t' })
		for _, e := range ends {
			t = strings.TrimSuffix(t, e)
		}
		if t == s {
			return s
		}
		s = t
	}
}
