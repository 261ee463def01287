package verify

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/tokenizer"
)

func TestParseTurn(t *testing.T) {
	cases := []struct {
		name, text string
		inThink    bool
		calls      int
		open       bool
		content    string
		reasoning  string
		errs       []string // substring of each call's error ("" = parses)
	}{
		{"json call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", false, 1, false, "", "", []string{""}},
		{"text then call", "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", false, 1, false, "Sure.", "", []string{""}},
		{"two calls", "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\": 1}\"}</tool_call>", false, 2, false, "", "", []string{"", ""}},
		{"think then call", "<think>\nneed weather\n</think>\n\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", false, 1, false, "", "need weather", []string{""}},
		{"prompt in think", "hmm\n</think>\nanswer", true, 0, false, "answer", "hmm", nil},
		{"think cut at call", "reasoning\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", true, 1, false, "", "reasoning", []string{""}},
		{"only reasoning", "<think>\nstill thinking", false, 0, true, "", "still thinking", nil},
		{"bad json", "<tool_call>{\"name\": \"a\", \"arguments\": {</tool_call>", false, 1, false, "", "", []string{"not valid JSON"}},
		{"trailing", "<tool_call>{\"name\": \"a\", \"arguments\": {}} extra</tool_call>", false, 1, false, "", "", []string{"trailing"}},
		{"no name", "<tool_call>{\"arguments\": {}}</tool_call>", false, 1, false, "", "", []string{"name"}},
		{"args not object", "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>", false, 1, false, "", "", []string{"arguments"}},
		{"unterminated", "<tool_call>{\"name\": \"a\"", false, 1, false, "", "", []string{"unterminated"}},
		{"xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPorto\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", false, 1, false, "", "", []string{""}},
		{"xml unclosed param", "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>", false, 1, false, "", "", []string{"no </parameter>"}},
		{"plain answer", "The answer is 4.", false, 0, false, "The answer is 4.", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			turn := parseTurn(c.text, c.inThink)
			if len(turn.Calls) != c.calls || turn.ReasoningOpen != c.open || turn.Content != c.content || turn.Reasoning != c.reasoning {
				t.Fatalf("got %+v", turn)
			}
			for i, want := range c.errs {
				got := turn.Calls[i].Err
				if (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("call %d: error %q, want %q", i, got, want)
				}
			}
		})
	}
}

const weatherTool = `{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
 "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}, "unit": {"type": "string", "enum": ["c", "f"]},
 "tags": {"type": "array", "items": {"type": "string"}}, "opts": {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": false}},
 "required": ["city"]}}}`

func TestValidateCall(t *testing.T) {
	tools, err := parseTools([]json.RawMessage{json.RawMessage(weatherTool), json.RawMessage(`{"name": "noargs"}`)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		body string
		want string // "" valid, else a substring of the problems
	}{
		{`{"name": "get_weather", "arguments": {"city": "Paris"}}`, ""},
		{`{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "c", "tags": ["a"], "opts": {"x": 1.5}}}`, ""},
		{`{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}`, ""}, // 3.0 is an integer value
		{`{"name": "get_weather", "arguments": {}}`, `required "city"`},
		{`{"name": "get_weather", "arguments": {"city": 5}}`, "schema wants string"},
		{`{"name": "get_weather", "arguments": {"city": "P", "days": 2.5}}`, "schema wants integer"},
		{`{"name": "get_weather", "arguments": {"city": "P", "days": 0}}`, "minimum"},
		{`{"name": "get_weather", "arguments": {"city": "P", "unit": "k"}}`, "not one of"},
		{`{"name": "get_weather", "arguments": {"city": "P", "tags": [1]}}`, "tags[0]"},
		{`{"name": "get_weather", "arguments": {"city": "P", "opts": {"y": 1}}}`, `unknown argument "y"`},
		{`{"name": "get_weather", "arguments": {"city": "P", "extra": true}}`, ""}, // extra keys allowed by default
		{`{"name": "get_wether", "arguments": {"city": "P"}}`, "unknown tool"},
		{`{"name": "noargs", "arguments": {"anything": [1, {"a": null}]}}`, ""},
		{"<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>", ""},
		{"<function=get_weather>\n<parameter=city>\n123\n</parameter>\n</function>", ""}, // string param taken verbatim
		{"<function=get_weather>\n<parameter=city>\nX\n</parameter>\n<parameter=days>\ntwo\n</parameter>\n</function>", "schema wants integer"},
	}
	for _, c := range cases {
		pc := parseCall(c.body)
		probs := validateCall(&pc, tools)
		got := strings.Join(probs, "; ")
		if (c.want == "") != (len(probs) == 0) || !strings.Contains(got, c.want) {
			t.Errorf("%s: problems %q, want %q", c.body, got, c.want)
		}
	}
	// XML arguments are converted with the schema
	pc := parseCall("<function=get_weather>\n<parameter=city>\n007\n</parameter>\n<parameter=days>\n7\n</parameter>\n</function>")
	validateCall(&pc, tools)
	if string(pc.Arguments) != `{"city":"007","days":7}` {
		t.Errorf("XML arguments %s", pc.Arguments)
	}
}

func TestCanonicalJSON(t *testing.T) {
	var a, b, c map[string]any
	decodeJSON(`{"b": [1, 2.0, {"y": "z", "x": null}], "a": 1e2}`, &a)
	decodeJSON(`{"a": 100, "b": [1.0, 2, {"x": null, "y": "z"}]}`, &b)
	decodeJSON(`{"a": 100, "b": [2, 1, {"x": null, "y": "z"}]}`, &c)
	if !jsonEqual(a, b) || jsonEqual(a, c) {
		t.Errorf("canonical: %s vs %s vs %s", canonicalJSON(a), canonicalJSON(b), canonicalJSON(c))
	}
}

func TestSuite(t *testing.T) {
	s, err := LoadSuite("")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Cases) < 10 || len(s.Conversations) < 5 {
		t.Fatalf("built-in suite has %d cases, %d conversations", len(s.Cases), len(s.Conversations))
	}
	for _, c := range s.Cases {
		if len(c.Tools) == 0 || c.EnableThinking == nil || !c.AddGenerationPrompt {
			t.Errorf("case %s not normalized", c.ID)
		}
	}
	bad := []struct{ json, want string }{
		{`{"cases": [{"id": "a", "tools": ["nope"], "messages": [{"role": "user", "content": "x"}]}]}`, "not defined"},
		{`{"cases": [{"id": "a", "messages": [{"role": "user", "content": "x"}]}]}`, "needs tools"},
		{`{"cases": [{"id": "a", "tools": [{"name": "f"}], "messages": []}]}`, "no messages"},
		{`{"cases": [{"id": "a", "tools": [{"name": "f"}], "messages": [{"role": "robot", "content": "x"}]}]}`, "role"},
		{`{"conversations": [{"id": "a", "messages": [{"role": "user", "content": "x"}]}, {"id": "a", "messages": [{"role": "user", "content": "y"}]}]}`, "duplicate"},
		{`{"cases": [{"id": "a", "tools": [{"name": "f"}, {"name": "f"}], "messages": [{"role": "user", "content": "x"}]}]}`, "twice"},
		{`{"unknown": 1}`, "unknown field"},
		{`{}`, "no cases"},
		{`[`, "unexpected EOF"},
	}
	for _, b := range bad {
		if _, err := ParseSuite([]byte(b.json), "s.json"); err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), "s.json") {
			t.Errorf("%s: error %v, want %q", b.json, err, b.want)
		}
	}
}

func FuzzParseSuite(f *testing.F) {
	f.Add(builtinSuite)
	f.Add([]byte(`{"cases": [{"id": "a", "tools": [{"name": "f", "parameters": {"type": "object"}}], "messages": [{"role": "user", "content": "x"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSuite(data, "fuzz")
		if err != nil {
			return
		}
		for _, c := range s.Cases {
			if _, err := parseTools(c.Tools); err != nil {
				t.Fatalf("accepted suite with bad tools: %v", err)
			}
		}
	})
}

func FuzzParseTurn(f *testing.F) {
	f.Add("<think>x</think><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"P\"}}</tool_call>", false)
	f.Add("<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n</function>\n</tool_call>", true)
	f.Fuzz(func(t *testing.T, text string, inThink bool) {
		tools, _ := parseTools([]json.RawMessage{json.RawMessage(weatherTool)})
		turn := parseTurn(text, inThink)
		for i := range turn.Calls {
			probs := validateCall(&turn.Calls[i], tools)
			if len(probs) == 0 && turn.Calls[i].Name != "get_weather" {
				t.Fatalf("call to %q validated", turn.Calls[i].Name)
			}
		}
	})
}

// scriptedLM emits a fixed token sequence after any prompt (logits one-hot on the next
// scripted token).
type scriptedLM struct {
	nv, ctx int
	script  []int32
	pos     int // tokens of the script emitted so far
	n       int // tokens in context
}

func (s *scriptedLM) NVocab() int  { return s.nv }
func (s *scriptedLM) CtxSize() int { return s.ctx }
func (s *scriptedLM) Reset()       { s.pos, s.n = 0, 0 }
func (s *scriptedLM) Eval(tokens []int32, nOut int) ([][]float32, error) {
	if s.n > 0 {
		s.pos++ // the previous output was fed back
	}
	s.n += len(tokens)
	row := make([]float32, s.nv)
	if s.pos < len(s.script) {
		row[s.script[s.pos]] = 10
	}
	return [][]float32{row}, nil
}

func fixtureTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.LoadHF(getFixtures(t).hf)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The decode loop, stop tokens, cap and judgement, driven by a scripted model.
func TestToolRunner(t *testing.T) {
	tok := fixtureTokenizer(t)
	suite, err := LoadSuite("")
	if err != nil {
		t.Fatal(err)
	}
	c := suite.Cases[0] // weather: get_weather, search_web
	imEnd, _ := tok.TokenID("<|im_end|>")
	enc := func(s string) []int32 { return tok.Encode(s, tokenizer.EncodeOptions{ParseSpecial: true}) }
	cases := []struct {
		name                   string
		out                    string
		end                    bool
		valid, answered, ended bool
	}{
		{"valid call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lisbon\"}}\n</tool_call>", true, true, true, true},
		{"wrong type", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>", true, false, true, true},
		{"answer only", "It is sunny.", true, false, true, true},
		{"thinking forever", "<think>\nlet me think about the weather in Lisbon", false, false, false, false},
		{"cut call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lis", false, false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			script := enc(tc.out)
			if tc.end {
				script = append(script, imEnd)
			}
			m := &scriptedLM{nv: tok.VocabSize(), ctx: 4096, script: script}
			limit := len(script) + 5
			if !tc.end {
				limit = len(script) // the cap stops it
			}
			r := newToolRunner(m, tok, fixtures.ChatTemplate, limit)
			res, err := r.runCase(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if res.Output != tc.out || res.Valid != tc.valid || res.Answered != tc.answered || res.Ended != tc.ended {
				t.Fatalf("got %+v", res)
			}
		})
	}
	// the reference comparison
	a := judge(c, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lisbon\", \"unit\": \"celsius\"}}</tool_call>", false, true)
	b := judge(c, "<tool_call>{\"arguments\": {\"unit\": \"celsius\", \"city\": \"Lisbon\"}, \"name\": \"get_weather\"}</tool_call>", false, true)
	d := judge(c, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Porto\"}}</tool_call>", false, true)
	if !callsEqual(a.Calls, b.Calls) || callsEqual(a.Calls, d.Calls) {
		t.Error("callsEqual")
	}
	js, _ := json.Marshal(a.Calls)
	var back []CallResult
	json.Unmarshal(js, &back)
	if !callsEqual(refCallsFromJSON(back), b.Calls) {
		t.Error("stored reference calls do not compare equal")
	}
	rep := &ToolCallReport{Results: []CaseResult{a, d, judge(c, "no", false, false)}}
	m1, m2 := true, false
	rep.Results[0].Match, rep.Results[1].Match = &m1, &m2
	rep.summarize()
	if rep.Cases != 3 || rep.Valid != 2.0/3 || rep.Answered != 2.0/3 || rep.ExactMatch == nil || *rep.ExactMatch != 1.0/3 {
		t.Errorf("summary %+v", rep)
	}
}

// The tool-call section through Run: every case judged for the model and the reference,
// exact match computed, the KV cache type honoured ("auto" reads turboquant.kv_cache_dtype).
func TestToolCallsSection(t *testing.T) {
	f := getFixtures(t)
	o := acceptOpts(f.gguf, f)
	o.Skip = []string{SectionPPL, SectionKLD}
	o.ToolCallMaxTokens = 6
	o.CacheType = "auto"
	// the first three built-in cases (keeps the test short)
	var raw map[string]json.RawMessage
	json.Unmarshal(builtinSuite, &raw)
	var cases []json.RawMessage
	json.Unmarshal(raw["cases"], &cases)
	raw["cases"], _ = json.Marshal(cases[:3])
	delete(raw, "conversations")
	o.SuitePath = filepath.Join(t.TempDir(), "suite.json")
	b, _ := json.Marshal(raw)
	os.WriteFile(o.SuitePath, b, 0o644)
	rep := run(t, o)
	tc := rep.ToolCalls
	if tc == nil || tc.Cases != 3 || len(tc.Results) != 3 || tc.CacheType != "q8_0" || tc.MaxTokens != 6 {
		t.Fatalf("tool-call report %+v", tc)
	}
	if tc.ExactMatch == nil || tc.Reference == nil {
		t.Fatal("no comparison with the reference")
	}
	for _, r := range tc.Results {
		if r.Tokens != 6 || r.Ended || r.Match == nil {
			t.Errorf("case %s: %+v", r.ID, r)
		}
	}
	// random weights never call a tool: the default gate fails, and says so
	if rep.Verdict != VerdictFail || !failuresMention(rep, "min_toolcall_valid") {
		t.Fatalf("verdict %s: %v", rep.Verdict, rep.Failures)
	}
}
