package prompts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/testenv"
	"github.com/tq-project/tq/tokenizer/chat"
)

func loadDefault(t *testing.T) []Prompt {
	t.Helper()
	ps, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestDefaultComposition(t *testing.T) {
	ps := loadDefault(t)
	if len(ps) != 32 {
		t.Fatalf("%d prompts, want 32", len(ps))
	}
	counts := map[string]int{}
	ids := map[string]bool{}
	for _, p := range ps {
		counts[p.Kind]++
		if ids[p.ID] {
			t.Errorf("duplicate id %s", p.ID)
		}
		ids[p.ID] = true
		if !strings.HasPrefix(p.ID, p.Kind+"-") {
			t.Errorf("id %s does not start with its kind %s", p.ID, p.Kind)
		}
	}
	if counts[KindTool] != 12 || counts[KindDocument] != 10 || counts[KindMath] != 10 {
		t.Fatalf("kinds %v, want 12 tool / 10 document / 10 math", counts)
	}
	// Stable order: tool, document, math.
	if ps[0].Kind != KindTool || ps[12].Kind != KindDocument || ps[22].Kind != KindMath {
		t.Errorf("unexpected order: %s %s %s", ps[0].ID, ps[12].ID, ps[22].ID)
	}
}

// documentWords counts the words of a document prompt's text after the
// request (which ends at the first blank line).
func documentWords(p Prompt) int {
	for _, m := range p.Messages {
		if m.Role == "user" {
			_, doc, ok := strings.Cut(m.Content, "\n\n")
			if !ok {
				return 0
			}
			return len(strings.Fields(doc))
		}
	}
	return 0
}

func TestDocumentsAreLong(t *testing.T) {
	total := 0
	for _, p := range loadDefault(t) {
		if p.Kind != KindDocument {
			continue
		}
		n := documentWords(p)
		total += n
		if n < 2500 || n > 4000 {
			t.Errorf("%s: %d words, want 2,500-4,000", p.ID, n)
		}
		if len(p.Tools) != 0 {
			t.Errorf("%s: document prompt has tools", p.ID)
		}
	}
	t.Logf("documents: %d words in total", total)
}

func TestMathPrompts(t *testing.T) {
	thinking := 0
	for _, p := range loadDefault(t) {
		if p.Kind != KindMath {
			continue
		}
		var solution string
		for _, m := range p.Messages {
			if m.Role == "assistant" {
				solution += m.ReasoningContent + m.Content
				if m.ReasoningContent != "" {
					thinking++
				}
			}
		}
		if p.Messages[len(p.Messages)-1].Role != "assistant" || len(strings.Fields(solution)) < 40 {
			t.Errorf("%s: needs a worked solution in a final assistant turn", p.ID)
		}
	}
	if thinking < 3 {
		t.Errorf("only %d math solutions in thinking form", thinking)
	}
}

// schemaErr validates a JSON-schema fragment of the kind tool definitions
// use: typed values, objects with properties/required, arrays with items,
// enums of the declared type, numeric bounds on numbers only.
func schemaErr(s map[string]any, where string) error {
	typ, ok := s["type"].(string)
	if !ok {
		return fmt.Errorf("%s: missing type", where)
	}
	if d, ok := s["description"]; ok {
		if _, isStr := d.(string); !isStr {
			return fmt.Errorf("%s: description is not a string", where)
		}
	}
	switch typ {
	case "object":
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			return fmt.Errorf("%s: object without properties", where)
		}
		for name, ps := range props {
			sub, ok := ps.(map[string]any)
			if !ok {
				return fmt.Errorf("%s.%s: not a schema", where, name)
			}
			if err := schemaErr(sub, where+"."+name); err != nil {
				return err
			}
		}
		if req, ok := s["required"]; ok {
			list, ok := req.([]any)
			if !ok {
				return fmt.Errorf("%s: required is not a list", where)
			}
			for _, r := range list {
				name, _ := r.(string)
				if _, ok := props[name]; !ok {
					return fmt.Errorf("%s: required %q is not a property", where, name)
				}
			}
		}
	case "array":
		items, ok := s["items"].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: array without items", where)
		}
		return schemaErr(items, where+"[]")
	case "string", "number", "integer", "boolean", "null":
	default:
		return fmt.Errorf("%s: unknown type %q", where, typ)
	}
	if enum, ok := s["enum"]; ok {
		list, ok := enum.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("%s: bad enum", where)
		}
		for _, v := range list {
			if err := valueErr(map[string]any{"type": typ}, v, where); err != nil {
				return fmt.Errorf("enum value: %w", err)
			}
		}
	}
	for _, k := range []string{"minimum", "maximum"} {
		if _, ok := s[k]; ok && typ != "number" && typ != "integer" {
			return fmt.Errorf("%s: %s on a %s", where, k, typ)
		}
	}
	return nil
}

// valueErr checks a JSON value against a schema fragment.
func valueErr(s map[string]any, v any, where string) error {
	typ, _ := s["type"].(string)
	switch typ {
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: %v is not a string", where, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", where, v)
		}
	case "number", "integer":
		f, ok := v.(float64)
		if !ok || (typ == "integer" && f != math.Trunc(f)) {
			return fmt.Errorf("%s: %v is not a %s", where, v, typ)
		}
		if mn, ok := s["minimum"].(float64); ok && f < mn {
			return fmt.Errorf("%s: %v below minimum %v", where, f, mn)
		}
		if mx, ok := s["maximum"].(float64); ok && f > mx {
			return fmt.Errorf("%s: %v above maximum %v", where, f, mx)
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: not an array", where)
		}
		items, _ := s["items"].(map[string]any)
		for i, it := range list {
			if err := valueErr(items, it, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: not an object", where)
		}
		props, _ := s["properties"].(map[string]any)
		for k, val := range obj {
			ps, ok := props[k].(map[string]any)
			if !ok {
				return fmt.Errorf("%s: unknown property %q", where, k)
			}
			if err := valueErr(ps, val, where+"."+k); err != nil {
				return err
			}
		}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					return fmt.Errorf("%s: missing required %q", where, r)
				}
			}
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if e == v {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%s: %v not in enum %v", where, v, enum)
		}
	}
	return nil
}

func TestToolsAndCallsAreValid(t *testing.T) {
	calls := 0
	for _, p := range loadDefault(t) {
		if p.Kind == KindTool && len(p.Tools) == 0 {
			t.Errorf("%s: tool prompt without tools", p.ID)
		}
		schemas := map[string]map[string]any{}
		for i, tool := range p.Tools {
			if tool["type"] != "function" {
				t.Errorf("%s tools[%d]: type %v", p.ID, i, tool["type"])
			}
			fn, _ := tool["function"].(map[string]any)
			name := ToolName(tool)
			if name == "" || fn == nil {
				t.Errorf("%s tools[%d]: no function name", p.ID, i)
				continue
			}
			if d, _ := fn["description"].(string); d == "" {
				t.Errorf("%s %s: no description", p.ID, name)
			}
			params, _ := fn["parameters"].(map[string]any)
			if params == nil || params["type"] != "object" {
				t.Errorf("%s %s: parameters must be an object schema", p.ID, name)
				continue
			}
			if err := schemaErr(params, p.ID+" "+name); err != nil {
				t.Error(err)
			}
			if _, dup := schemas[name]; dup {
				t.Errorf("%s: duplicate tool %s", p.ID, name)
			}
			schemas[name] = params
		}
		pending := 0
		for i, m := range p.Messages {
			if m.Role == "system" && i != 0 {
				t.Errorf("%s: system message at %d", p.ID, i)
			}
			if m.Role == "tool" {
				if pending == 0 {
					t.Errorf("%s: tool message %d answers no call", p.ID, i)
				}
				pending--
				continue
			}
			if pending > 0 {
				t.Errorf("%s: message %d arrives with %d unanswered calls", p.ID, i, pending)
			}
			pending = len(m.ToolCalls)
			for _, c := range m.ToolCalls {
				calls++
				schema, ok := schemas[c.Name]
				if !ok {
					t.Errorf("%s: call to undefined tool %s", p.ID, c.Name)
					continue
				}
				raw, ok := c.Arguments.(json.RawMessage)
				if !ok {
					t.Errorf("%s: %s arguments are %T, want a JSON object", p.ID, c.Name, c.Arguments)
					continue
				}
				var args any
				if err := json.Unmarshal(raw, &args); err != nil {
					t.Fatal(err)
				}
				if err := valueErr(schema, args, p.ID+" "+c.Name); err != nil {
					t.Error(err)
				}
			}
		}
	}
	if calls < 15 {
		t.Errorf("only %d tool calls in the set", calls)
	}
}

func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "testdata", "chat", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type hashGolden struct {
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	Error  string `json:"error"`
}

// TestRenderWithQwenTemplates renders every prompt through the Qwen3 and
// Qwen3.5 templates and compares with the Python jinja2 renders recorded by
// testdata/chat/render.py (SHA-256 of the text).
func TestRenderWithQwenTemplates(t *testing.T) {
	var golden map[string]map[string]hashGolden
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "testdata", "chat", "golden-prompts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	ps := loadDefault(t)
	for _, tmpl := range []string{"qwen3.jinja", "qwen3.5-4b.jinja"} {
		src := readTemplate(t, tmpl)
		total := 0
		for _, p := range ps {
			opts := p.ChatOptions()
			opts.Name = tmpl
			out, err := chat.Render(src, p.Messages, opts)
			if err != nil {
				t.Errorf("%s %s: %v", tmpl, p.ID, err)
				continue
			}
			total += len(out)
			want := golden[tmpl][p.ID]
			sum := sha256.Sum256([]byte(out))
			if want.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("%s %s: render differs from Python (%d bytes, Python %d %s)", tmpl, p.ID, len(out), want.Bytes, want.Error)
			}
			for _, tool := range p.Tools {
				if !strings.Contains(out, `"name": "`+ToolName(tool)+`"`) {
					t.Errorf("%s %s: tool %s missing from the render", tmpl, p.ID, ToolName(tool))
				}
			}
		}
		t.Logf("%s: 32 prompts, %d bytes rendered, all identical to Python", tmpl, total)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	txt := writeFile(t, dir, "essay.txt", "Summarize the history of the bicycle.\n")
	jsonl := writeFile(t, dir, "mixed.jsonl", `{"text": "What is 2+2?"}

{"messages": [{"role": "user", "content": "Weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]}
{"id": "custom", "kind": "math", "messages": [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]}
`)
	one := writeFile(t, dir, "one.json", `{"id": "x1", "kind": "tool", "messages": [{"role": "user", "content": "hi"}], "tools": []}`)
	arr := writeFile(t, dir, "many.json", `[{"messages": [{"role": "user", "content": "a"}]}, {"messages": [{"role": "user", "content": "b"}]}]`)
	ps, err := LoadFiles(txt, jsonl, one, arr)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, p := range ps {
		got = append(got, p.ID+"/"+p.Kind)
	}
	want := []string{"essay/text", "mixed:1/text", "mixed:3/chat", "custom/math", "x1/tool", "many:0/chat", "many:1/chat"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if ps[0].Messages[0].Content != "Summarize the history of the bicycle.\n" {
		t.Errorf("txt content %q", ps[0].Messages[0].Content)
	}
	if len(ps[2].Tools) != 1 || ToolName(ps[2].Tools[0]) != "get_weather" || len(ps[2].ToolsJSON) != 1 {
		t.Errorf("jsonl tools not loaded: %+v", ps[2])
	}
	if !ps[2].ChatOptions().AddGenerationPrompt || ps[3].ChatOptions().AddGenerationPrompt {
		t.Error("ChatOptions generation prompt rule")
	}
}

func TestLoadFilesErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content, want string
	}{
		{"a.csv", "x", "unsupported extension"},
		{"empty.txt", "  \n", "empty prompt"},
		{"bad.jsonl", "{\"text\": \"ok\"}\n{broken\n", "bad.jsonl:2"},
		{"role.jsonl", `{"messages": [{"role": "robot", "content": "x"}]}`, "invalid role"},
		{"tool.json", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]}`, "function name"},
		{"nomsg.json", `{"id": "x"}`, `no "messages"`},
		{"emptytext.jsonl", `{"text": ""}`, "empty text"},
		{"trailing.json", `{"messages": [{"role": "user", "content": "x"}]} {}`, "trailing"},
		{"calls.json", `{"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]}`, "tool_calls on a user"},
		{"nothing.jsonl", "\n\n", "no prompts"},
	}
	for _, c := range cases {
		p := writeFile(t, dir, c.name, c.content)
		_, err := LoadFiles(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: err = %v, want %q naming the file", c.name, err, c.want)
		}
	}
	if _, err := LoadFiles(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	if _, err := LoadFiles(filepath.Join(dir, "missing.txt")); err == nil {
		t.Error("missing file accepted")
	}
}

// FuzzParseJSONPrompts checks that arbitrary JSON input never panics and
// that accepted prompts satisfy the documented invariants.
func FuzzParseJSONPrompts(f *testing.F) {
	entries, err := dataFS.ReadDir("data")
	if err != nil {
		f.Fatal(err)
	}
	for i, e := range entries {
		if i%4 != 0 {
			continue
		}
		b, err := dataFS.ReadFile("data/" + e.Name())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`[{"messages": [{"role": "user", "content": "a"}]}]`))
	f.Add([]byte(`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := parseJSONPrompts(data, "fuzz.json")
		if err != nil {
			return
		}
		for _, p := range ps {
			if p.ID == "" || p.Kind == "" || len(p.Messages) == 0 || len(p.Tools) != len(p.ToolsJSON) {
				t.Fatalf("accepted invalid prompt %+v", p)
			}
			for _, m := range p.Messages {
				if !validRoles[m.Role] {
					t.Fatalf("accepted role %q", m.Role)
				}
			}
		}
	})
}

// TestValidatorRejects makes sure the schema checks used above can fail.
func TestValidatorRejects(t *testing.T) {
	badSchemas := []string{
		`{"type": "object"}`,
		`{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}`,
		`{"type": "array"}`,
		`{"type": "strng"}`,
		`{"type": "string", "enum": [1]}`,
		`{"type": "string", "minimum": 1}`,
		`{"type": "object", "properties": {"a": {"type": "integer", "description": 5}}}`,
	}
	for _, s := range badSchemas {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		if schemaErr(m, "x") == nil {
			t.Errorf("schema %s accepted", s)
		}
	}
	schema := map[string]any{}
	if err := json.Unmarshal([]byte(`{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}, "u": {"type": "string", "enum": ["c", "f"]}, "l": {"type": "array", "items": {"type": "string"}}}, "required": ["n"]}`), &schema); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`{}`, `{"n": 0}`, `{"n": 1.5}`, `{"n": 1, "u": "k"}`, `{"n": 1, "l": [1]}`, `{"n": 1, "zz": 1}`, `[]`} {
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			t.Fatal(err)
		}
		if valueErr(schema, val, "x") == nil {
			t.Errorf("value %s accepted", v)
		}
	}
	var ok any
	_ = json.Unmarshal([]byte(`{"n": 2, "u": "c", "l": ["a"]}`), &ok)
	if err := valueErr(schema, ok, "x"); err != nil {
		t.Errorf("valid value rejected: %v", err)
	}
}

// TestLoadFilesBuiltin checks that the name Builtin is the built-in set, in its place among the
// files.
func TestLoadFilesBuiltin(t *testing.T) {
	def, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	txt := writeFile(t, dir, "essay.txt", "Summarize the history of the bicycle.\n")
	ps, err := LoadFiles(txt, Builtin)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(def)+1 || ps[0].ID != "essay" {
		t.Fatalf("got %d prompts, first %q; want essay then the %d built-in ones", len(ps), ps[0].ID, len(def))
	}
	for i, p := range def {
		if !reflect.DeepEqual(ps[i+1], p) {
			t.Fatalf("prompt %d after the file is %q, want built-in %q", i+1, ps[i+1].ID, p.ID)
		}
	}
}
