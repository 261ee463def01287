package chat

import (
	"encoding/json"
	"strings"
	"testing"
)

const tinyTemplate = `{{ tools|tojson }}|{% for m in messages %}{{ m|tojson }};{% endfor %}|{{ enable_thinking is defined }}|{{ bos_token is defined }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ documents }}|{{ extra_var }}`

func TestRenderContext(t *testing.T) {
	msgs := []Message{
		{Role: "system", Content: "s"},
		{Role: "assistant", ToolCalls: []ToolCall{
			{ID: "c1", Name: "f", Arguments: map[string]any{"z": 1, "a": []any{true, nil}}},
			{Name: "g", Arguments: json.RawMessage(`{"z": 1, "a": 2.0}`)},
			{Name: "h", Arguments: `{"raw": "string"}`},
			{Name: "k"},
		}, ReasoningContent: "why"},
		{Role: "tool", Content: "r", ToolCallID: "c1", Name: "f"},
	}
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "description": "d"}}}
	out, err := Render(tinyTemplate, msgs, Options{
		Tools:     tools,
		ToolsJSON: []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "g", "description": "d"}}`)},
		EOS:       "</s>",
		Extra:     map[string]any{"extra_var": "X"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"function": {"description": "d", "name": "f"}, "type": "function"}, {"type": "function", "function": {"name": "g", "description": "d"}}]|` +
		`{"role": "system", "content": "s"};` +
		`{"role": "assistant", "content": "", "reasoning_content": "why", "tool_calls": [` +
		`{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": [true, null], "z": 1}}}, ` +
		`{"type": "function", "function": {"name": "g", "arguments": {"z": 1, "a": 2.0}}}, ` +
		`{"type": "function", "function": {"name": "h", "arguments": "{\"raw\": \"string\"}"}}, ` +
		`{"type": "function", "function": {"name": "k"}}]};` +
		`{"role": "tool", "content": "r", "name": "f", "tool_call_id": "c1"};` +
		`|False|False|</s>|False|None|X`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	on := true
	out, err = Render(`{{ tools }} {{ enable_thinking }} {{ bos_token }}`, nil, Options{EnableThinking: &on, BOS: "<s>"})
	if err != nil || out != "None True <s>" {
		t.Errorf("got %q, %v", out, err)
	}
	if _, err := Render(tinyTemplate, msgs, Options{Extra: map[string]any{"messages": 1}}); err == nil || !strings.Contains(err.Error(), "messages") {
		t.Errorf("reserved Extra name accepted: %v", err)
	}
	if _, err := Render(tinyTemplate, []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{bad`)}}}}, Options{}); err == nil {
		t.Error("invalid raw JSON arguments accepted")
	}
}

func TestMessageJSON(t *testing.T) {
	in := `{"role": "assistant", "content": null, "reasoning_content": "r", "tool_calls": [` +
		`{"id": "x", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": 2}}}, ` +
		`{"function": {"name": "g", "arguments": "{\"s\": 1}"}}, {"name": "h", "arguments": {}}]}`
	var m Message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if m.Content != "" || m.ReasoningContent != "r" || len(m.ToolCalls) != 3 {
		t.Fatalf("%+v", m)
	}
	if raw, ok := m.ToolCalls[0].Arguments.(json.RawMessage); !ok || string(raw) != `{"b": 1, "a": 2}` || m.ToolCalls[0].ID != "x" {
		t.Errorf("call 0: %#v", m.ToolCalls[0])
	}
	if s, ok := m.ToolCalls[1].Arguments.(string); !ok || s != `{"s": 1}` {
		t.Errorf("call 1: %#v", m.ToolCalls[1])
	}
	if m.ToolCalls[2].Name != "h" {
		t.Errorf("call 2: %#v", m.ToolCalls[2])
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Message
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(out) {
		t.Errorf("round trip:\n%s\n%s", out, again)
	}
	for _, bad := range []string{`{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}`, `{"role": "assistant", "tool_calls": [{"name": "f", "arguments": {x}}]}`} {
		if err := json.Unmarshal([]byte(bad), &m); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
