// Package chat renders a model's own Jinja chat template
// (tokenizer_config.json "chat_template" or GGUF tokenizer.chat_template)
// the way Hugging Face transformers' apply_chat_template does, and parses
// tool calls out of generated text (Qwen3 JSON and Qwen3.5/Qwen3-Coder XML
// styles).
//
// Rendering uses our own sandboxed Jinja2 interpreter (internal/jinja);
// docs/chat-templates.md explains why and lists the supported subset.
package chat

import (
	"encoding/json"
	"fmt"
)

// Message is one chat message in OpenAI / transformers form.
type Message struct {
	Role             string     // system, user, assistant or tool
	Content          string     // text content
	ToolCalls        []ToolCall // assistant tool calls
	ReasoningContent string     // assistant reasoning ("thinking"); empty = absent
	Name             string     // optional author / tool name
	ToolCallID       string     // tool messages: id of the call answered
}

// ToolCall is one function call made by the assistant.
//
// Arguments may be:
//   - map[string]any: passed to the template as a dict (keys sorted, Go maps
//     have no order);
//   - json.RawMessage: parsed as JSON keeping the key order of the text
//     (use this for byte-exact parity with Python, where dict order is the
//     JSON order);
//   - string: passed as a Python str (what transformers does when given the
//     OpenAI-style JSON-string form; Qwen3 prints it verbatim, Qwen3.5's
//     template rejects it like Python does);
//   - nil: the "arguments" key is omitted.
type ToolCall struct {
	ID        string
	Name      string
	Arguments any
}

// Tool is a tool definition: a JSON-schema function description in the
// OpenAI form {"type": "function", "function": {"name", "description",
// "parameters"}}.
type Tool = map[string]any

type wireToolCall struct {
	ID       string          `json:"id,omitempty"`
	Type     string          `json:"type,omitempty"`
	Function *wireFunction   `json:"function,omitempty"`
	Name     string          `json:"name,omitempty"`
	Args     json.RawMessage `json:"arguments,omitempty"`
}

type wireFunction struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"arguments,omitempty"`
}

type wireMessage struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
	Name             string         `json:"name,omitempty"`
	ToolCallID       string         `json:"tool_call_id,omitempty"`
}

// UnmarshalJSON reads the OpenAI message form. Tool-call arguments given
// as a JSON object become json.RawMessage; given as a JSON string they stay
// a string.
func (m *Message) UnmarshalJSON(data []byte) error {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*m = Message{Role: w.Role, Name: w.Name, ToolCallID: w.ToolCallID}
	if w.Content != nil {
		m.Content = *w.Content
	}
	if w.ReasoningContent != nil {
		m.ReasoningContent = *w.ReasoningContent
	}
	for i, tc := range w.ToolCalls {
		c := ToolCall{ID: tc.ID, Name: tc.Name}
		args := tc.Args
		if tc.Function != nil {
			c.Name = tc.Function.Name
			args = tc.Function.Args
		}
		if c.Name == "" {
			return fmt.Errorf("tool_calls[%d]: missing function name", i)
		}
		if len(args) > 0 && string(args) != "null" {
			if args[0] == '"' {
				var s string
				if err := json.Unmarshal(args, &s); err != nil {
					return fmt.Errorf("tool_calls[%d].arguments: %w", i, err)
				}
				c.Arguments = s
			} else {
				if !json.Valid(args) {
					return fmt.Errorf("tool_calls[%d].arguments: invalid JSON", i)
				}
				c.Arguments = append(json.RawMessage(nil), args...)
			}
		}
		m.ToolCalls = append(m.ToolCalls, c)
	}
	return nil
}

// MarshalJSON writes the OpenAI message form (the inverse of UnmarshalJSON).
func (m Message) MarshalJSON() ([]byte, error) {
	w := wireMessage{Role: m.Role, Content: &m.Content, Name: m.Name, ToolCallID: m.ToolCallID}
	if m.ReasoningContent != "" {
		w.ReasoningContent = &m.ReasoningContent
	}
	for _, tc := range m.ToolCalls {
		f := &wireFunction{Name: tc.Name}
		switch a := tc.Arguments.(type) {
		case nil:
		case json.RawMessage:
			f.Args = a
		default:
			b, err := json.Marshal(a)
			if err != nil {
				return nil, fmt.Errorf("tool call %q arguments: %w", tc.Name, err)
			}
			f.Args = b
		}
		w.ToolCalls = append(w.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: f})
	}
	return json.Marshal(w)
}
