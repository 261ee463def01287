package chat

import (
	"encoding/json"
	"testing"

	ardan "github.com/ardanlabs/jinja"
)

// benchConversation returns a long tool-using conversation (conversation
// 09 repeated) for the render benchmarks.
func benchConversation(b *testing.B) ([]Message, []json.RawMessage) {
	var msgs []Message
	var tools []json.RawMessage
	for _, nc := range loadConversations(b) {
		if nc.name == "09_tool_followup" {
			tools = nc.conv.Tools
			for i := 0; i < 20; i++ {
				msgs = append(msgs, nc.conv.Messages[1:]...)
			}
			msgs = append([]Message{nc.conv.Messages[0]}, msgs...)
		}
	}
	if len(msgs) == 0 {
		b.Fatal("conversation 09 missing")
	}
	return msgs, tools
}

// BenchmarkRenderQwen3 renders a 101-message tool conversation with the
// Qwen3 template through our interpreter.
func BenchmarkRenderQwen3(b *testing.B) {
	src := readTemplateB(b, "qwen3.jinja")
	msgs, tools := benchConversation(b)
	opts := Options{ToolsJSON: tools, AddGenerationPrompt: true}
	out, err := Render(src, msgs, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Render(src, msgs, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderQwen3Ardan renders the same conversation with
// github.com/ardanlabs/jinja (baseline; its output is not byte-identical,
// see docs/chat-templates.md).
func BenchmarkRenderQwen3Ardan(b *testing.B) {
	src := readTemplateB(b, "qwen3.jinja")
	msgs, tools := benchConversation(b)
	var data []any
	raw, _ := json.Marshal(msgs)
	if err := json.Unmarshal(raw, &data); err != nil {
		b.Fatal(err)
	}
	var toolData []any
	for _, t := range tools {
		var v any
		_ = json.Unmarshal(t, &v)
		toolData = append(toolData, v)
	}
	tm, err := ardan.Compile(src)
	if err != nil {
		b.Fatal(err)
	}
	vars := map[string]any{"messages": data, "tools": toolData, "add_generation_prompt": true}
	out, err := tm.Render(vars)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tm.Render(vars); err != nil {
			b.Fatal(err)
		}
	}
}

func readTemplateB(b *testing.B, name string) string { return readTemplateTB(b, name) }
