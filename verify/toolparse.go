package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/tq-project/tq/tokenizer/chat"
)

// Turn is an assistant turn split into reasoning, answer text and tool calls.
type Turn struct {
	Reasoning string `json:"reasoning,omitempty"`
	// ReasoningOpen is true when the reasoning block was never closed.
	ReasoningOpen bool         `json:"reasoning_open,omitempty"`
	Content       string       `json:"content,omitempty"` // text outside reasoning and calls, trimmed
	Calls         []ParsedCall `json:"calls,omitempty"`
}

// ParsedCall is one <tool_call> block as extracted from generated text.
type ParsedCall struct {
	Raw       string          `json:"raw"` // the block as generated, tags included
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"` // a JSON object (XML-style calls converted)
	// Err is why the block could not be parsed ("" when it parsed).
	Err string `json:"error,omitempty"`

	args   map[string]any       // decoded Arguments (numbers as json.Number)
	params []chat.ToolCallParam // XML-style parameters as written, typed by convertXML
}

const (
	thinkOpen     = "<think>"
	thinkClose    = "</think>"
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

// parseTurn splits generated assistant text. inThink says the prompt left the model inside a
// reasoning block (the generation prompt ended with an open <think>). Reasoning ends at
// </think>, or at the first <tool_call> (Qwen3.5 accepts both); tool calls are the
// <tool_call>…</tool_call> blocks after it, parsed by chat.ParseToolCalls in either form
// (chat.ToolCallsAuto: JSON {"name": …, "arguments": {…}}, or XML
// <function=NAME><parameter=P>VALUE</parameter></function>). XML parameter values stay text
// until validateCall types them with the tool's schema.
func parseTurn(text string, inThink bool) Turn {
	var t Turn
	rest := text
	if !inThink {
		if trimmed := strings.TrimLeft(rest, " \t\r\n"); strings.HasPrefix(trimmed, thinkOpen) {
			inThink = true
			rest = trimmed[len(thinkOpen):]
		}
	}
	if inThink {
		end := strings.Index(rest, thinkClose)
		call := strings.Index(rest, toolCallOpen)
		switch {
		case end >= 0 && (call < 0 || end < call):
			t.Reasoning = strings.TrimSpace(rest[:end])
			rest = rest[end+len(thinkClose):]
		case call >= 0:
			t.Reasoning = strings.TrimSpace(rest[:call])
			rest = rest[call:]
		default:
			t.Reasoning = strings.TrimSpace(rest)
			t.ReasoningOpen = true
			return t
		}
	}
	calls, _ := chat.ParseToolCalls(rest, chat.ToolCallsAuto) // per-call errors are kept below
	var content strings.Builder
	prev := 0
	for _, c := range calls {
		content.WriteString(rest[prev:c.Start])
		t.Calls = append(t.Calls, newParsedCall(rest[c.Start:c.End], c))
		prev = c.End
	}
	content.WriteString(rest[prev:])
	t.Content = strings.TrimSpace(content.String())
	return t
}

// newParsedCall adapts one call found by chat.ParseToolCalls.
func newParsedCall(raw string, c chat.ParsedToolCall) ParsedCall {
	pc := ParsedCall{Raw: raw, Name: c.Name, params: c.Params}
	if c.Err != nil {
		pc.Err = c.Err.Error()
		return pc
	}
	if c.Params == nil { // JSON form: the arguments are final
		pc.Arguments = c.Arguments
		if decodeJSON(string(c.Arguments), &pc.args) != nil || pc.args == nil {
			pc.Err = "arguments are not a JSON object"
		}
	}
	return pc
}

func decodeJSON(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing text after the JSON value")
	}
	return nil
}

// convertXML types the XML parameters with the tool's schema (chat.XMLParamValue): a string
// parameter is taken verbatim, others are converted by their schema type; a value that does
// not convert stays a string, so the schema check reports the mismatch.
func (c *ParsedCall) convertXML(props map[string]any) {
	if c.params == nil || c.Err != "" {
		return
	}
	c.args = map[string]any{}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range c.params {
		v, err := chat.XMLParamValue(p.Value, schemaType(props[p.Name]))
		if err != nil {
			v, _ = json.Marshal(p.Value)
		}
		var val any
		if decodeJSON(string(v), &val) != nil {
			val = p.Value
		}
		c.args[p.Name] = val
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(p.Name)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	c.Arguments = json.RawMessage(b.String())
}

// schemaType is a property schema's type when it names exactly one ("" otherwise).
func schemaType(schema any) string {
	m, _ := schema.(map[string]any)
	t, _ := m["type"].(string)
	return t
}
