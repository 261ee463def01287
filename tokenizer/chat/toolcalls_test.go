package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/testenv"
)

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("invalid JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func readTemplate(t *testing.T, name string) string { return readTemplateTB(t, name) }

func readTemplateTB(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "testdata", "chat", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDetectToolCallFormat(t *testing.T) {
	if f, ok := DetectToolCallFormat(readTemplate(t, "qwen3.jinja")); !ok || f != ToolCallsJSON {
		t.Errorf("qwen3: %v %v", f, ok)
	}
	if f, ok := DetectToolCallFormat(readTemplate(t, "qwen3.5-4b.jinja")); !ok || f != ToolCallsXML {
		t.Errorf("qwen3.5: %v %v", f, ok)
	}
	if _, ok := DetectToolCallFormat("{{ messages }}"); ok {
		t.Error("plain template detected as tool-capable")
	}
}

// assistantTurns returns the bodies of the assistant turns of a ChatML text.
func assistantTurns(text string) []string {
	var out []string
	for _, part := range strings.Split(text, "<|im_start|>assistant\n")[1:] {
		body, _, _ := strings.Cut(part, "<|im_end|>")
		out = append(out, body)
	}
	return out
}

// TestToolCallRoundTrip renders the tool-call conversations with the Qwen3
// (JSON) and Qwen3.5 (XML) templates and parses the calls back out of the
// assistant turns: names and argument values must survive.
func TestToolCallRoundTrip(t *testing.T) {
	checked := 0
	for _, tc := range []struct {
		file   string
		format ToolCallFormat
	}{{"qwen3.jinja", ToolCallsJSON}, {"qwen3.5-4b.jinja", ToolCallsXML}} {
		src := readTemplate(t, tc.file)
		for _, nc := range loadConversations(t) {
			var want []ToolCall
			hasStringArgs := false
			for _, m := range nc.conv.Messages {
				if m.Role == "assistant" {
					for _, c := range m.ToolCalls {
						want = append(want, c)
						if _, ok := c.Arguments.(string); ok {
							hasStringArgs = true
						}
					}
				}
			}
			if len(want) == 0 || hasStringArgs {
				continue
			}
			text, err := Render(src, nc.conv.Messages, nc.conv.options(tc.file))
			if err != nil {
				t.Fatalf("%s/%s: %v", tc.file, nc.name, err)
			}
			var tools []Tool
			for _, raw := range nc.conv.Tools {
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				tools = append(tools, m)
			}
			var got []ParsedToolCall
			for _, turn := range assistantTurns(text) {
				calls, err := ParseToolCalls(turn, tc.format, tools...)
				if err != nil {
					t.Fatalf("%s/%s: %v\n%s", tc.file, nc.name, err, turn)
				}
				for _, c := range calls {
					if turn[c.Start:c.End] == "" || !strings.HasPrefix(turn[c.Start:], "<tool_call>") {
						t.Errorf("%s/%s: bad span %d..%d", tc.file, nc.name, c.Start, c.End)
					}
				}
				got = append(got, calls...)
			}
			if len(got) != len(want) {
				t.Fatalf("%s/%s: parsed %d calls, rendered %d", tc.file, nc.name, len(got), len(want))
			}
			for i := range want {
				wantArgs, _ := want[i].Arguments.(json.RawMessage)
				if got[i].Name != want[i].Name || !jsonEqual(t, got[i].Arguments, wantArgs) {
					t.Errorf("%s/%s call %d: got %s %s, want %s %s", tc.file, nc.name, i, got[i].Name, got[i].Arguments, want[i].Name, wantArgs)
				}
				checked++
			}
		}
	}
	if checked < 12 {
		t.Fatalf("only %d calls round-tripped", checked)
	}
}

func TestParseToolCallsExamples(t *testing.T) {
	weather := Tool{"type": "function", "function": map[string]any{
		"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"},
			"metric": map[string]any{"type": "boolean"}, "when": map[string]any{"type": "object"}}},
	}}
	cases := []struct {
		name   string
		format ToolCallFormat
		text   string
		tools  []Tool
		want   []string // "name args" per call, or "ERR substring"
	}{
		{"llama.cpp JSON example", ToolCallsJSON, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>", nil,
			[]string{`special_function {"arg1":1}`}},
		{"llama.cpp XML example", ToolCallsXML, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", nil,
			[]string{`special_function {"arg1":1}`}},
		{"two JSON calls with text", ToolCallsJSON, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"x\": [1, {\"y\": null}]}, \"name\": \"b\"}\n</tool_call>", nil,
			[]string{`a {}`, `b {"x":[1,{"y":null}]}`}},
		{"JSON string arguments", ToolCallsJSON, "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 2}\"}</tool_call>", nil,
			[]string{`a {"k":2}`}},
		{"unterminated JSON call", ToolCallsJSON, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", nil, []string{"ERR missing </tool_call>"}},
		{"invalid JSON", ToolCallsJSON, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call>", nil, []string{"ERR invalid JSON"}},
		{"template placeholder", ToolCallsJSON, "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>", nil, []string{"ERR invalid JSON"}},
		{"missing name", ToolCallsJSON, "<tool_call>{\"arguments\": {}}</tool_call>", nil, []string{"ERR missing \"name\""}},
		{"missing arguments", ToolCallsJSON, "<tool_call>{\"name\": \"a\"}</tool_call>", nil, []string{"ERR missing \"arguments\""}},
		{"arguments not object", ToolCallsJSON, "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>", nil, []string{"ERR not a JSON object"}},
		{"trailing junk", ToolCallsJSON, "<tool_call>{\"name\": \"a\", \"arguments\": {}} extra</tool_call>", nil, []string{"ERR trailing"}},
		{"unknown function", ToolCallsJSON, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>", []Tool{weather}, []string{"ERR unknown function"}},
		{"XML typed by schema", ToolCallsXML, "<tool_call>\n<function=get_weather>\n<parameter=city>\n007\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nFalse\n</parameter>\n<parameter=when>\n{\"from\": \"mon\"}\n</parameter>\n</function>\n</tool_call>", []Tool{weather},
			[]string{`get_weather {"city":"007","days":3,"metric":false,"when":{"from":"mon"}}`}},
		{"XML multiline string kept verbatim", ToolCallsXML, "<tool_call>\n<function=f>\n<parameter=code>\nline 1\n  line 2\n\n</parameter>\n</function>\n</tool_call>", nil,
			[]string{`f {"code":"line 1\n  line 2\n"}`}},
		{"XML bare function block", ToolCallsXML, "text <function=f>\n<parameter=a>\nx\n</parameter>\n</function>", nil, []string{`f {"a":"x"}`}},
		{"XML bad integer", ToolCallsXML, "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>", []Tool{weather}, []string{"ERR not a JSON integer"}},
		{"XML unknown parameter", ToolCallsXML, "<tool_call>\n<function=get_weather>\n<parameter=zip>\n1\n</parameter>\n</function>\n</tool_call>", []Tool{weather}, []string{"ERR no parameter"}},
		{"XML missing </function>", ToolCallsXML, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>", nil, []string{"ERR missing </function>"}},
		{"XML missing </parameter>", ToolCallsXML, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", nil, []string{"ERR missing </parameter>"}},
		{"XML no function", ToolCallsXML, "<tool_call>\n{\"name\": \"a\"}\n</tool_call>", nil, []string{"ERR expected <function=NAME>"}},
		{"XML duplicate parameter", ToolCallsXML, "<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>", nil, []string{"ERR duplicate"}},
		{"no calls", ToolCallsXML, "just an answer", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, err := ParseToolCalls(c.text, c.format, c.tools...)
			if len(calls) != len(c.want) {
				t.Fatalf("got %d calls (%v), want %d", len(calls), err, len(c.want))
			}
			anyErr := false
			for i, w := range c.want {
				if msg, isErr := strings.CutPrefix(w, "ERR "); isErr {
					anyErr = true
					if calls[i].Err == nil || !strings.Contains(calls[i].Err.Error(), msg) {
						t.Errorf("call %d: err %v, want %q", i, calls[i].Err, msg)
					}
					continue
				}
				if calls[i].Err != nil {
					t.Errorf("call %d: %v", i, calls[i].Err)
					continue
				}
				name, args, _ := strings.Cut(w, " ")
				if calls[i].Name != name || string(calls[i].Arguments) != args {
					t.Errorf("call %d: got %s %s, want %s", i, calls[i].Name, calls[i].Arguments, w)
				}
			}
			if anyErr != (err != nil) {
				t.Errorf("aggregate error %v with per-call errors %v", err, anyErr)
			}
		})
	}
}

// FuzzParseToolCalls checks that arbitrary model output never panics and
// yields ordered, in-bounds spans and valid JSON for well-formed calls.
func FuzzParseToolCalls(f *testing.F) {
	f.Add("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", true)
	f.Add("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", false)
	f.Add("<function=f><parameter=a>x</parameter></function><tool_call>", false)
	f.Add("<tool_call><tool_call></tool_call>{", true)
	f.Fuzz(func(t *testing.T, text string, jsonFormat bool) {
		format := ToolCallsXML
		if jsonFormat {
			format = ToolCallsJSON
		}
		calls, _ := ParseToolCalls(text, format)
		prev := 0
		for _, c := range calls {
			if c.Start < prev || c.End < c.Start || c.End > len(text) {
				t.Fatalf("bad span %d..%d after %d in %d bytes", c.Start, c.End, prev, len(text))
			}
			prev = c.End
			if c.Err == nil {
				var m map[string]any
				if err := json.Unmarshal(c.Arguments, &m); err != nil || c.Name == "" {
					t.Fatalf("accepted call %q with arguments %q: %v", c.Name, c.Arguments, err)
				}
			}
		}
	})
}
