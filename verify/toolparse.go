package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
	Raw       string          `json:"raw"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"` // a JSON object (XML-style calls converted)
	// Err is why the block could not be parsed ("" when it parsed).
	Err string `json:"error,omitempty"`

	args  map[string]any // decoded Arguments (numbers as json.Number)
	xml   map[string]string
	order []string // XML parameter order
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
// <tool_call>…</tool_call> blocks after it, in JSON ({"name": …, "arguments": {…}}) or XML
// (<function=NAME><parameter=P>VALUE</parameter></function>) form. paramType gives the JSON
// schema type of an XML parameter ("string" values are taken verbatim, others parsed as JSON).
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
	var content strings.Builder
	for {
		i := strings.Index(rest, toolCallOpen)
		if i < 0 {
			content.WriteString(rest)
			break
		}
		content.WriteString(rest[:i])
		rest = rest[i+len(toolCallOpen):]
		j := strings.Index(rest, toolCallClose)
		if j < 0 {
			t.Calls = append(t.Calls, ParsedCall{Raw: rest, Err: "unterminated <tool_call> (no </tool_call>)"})
			rest = ""
			break
		}
		t.Calls = append(t.Calls, parseCall(rest[:j]))
		rest = rest[j+len(toolCallClose):]
	}
	t.Content = strings.TrimSpace(content.String())
	return t
}

// parseCall parses the body of one <tool_call> block.
func parseCall(body string) ParsedCall {
	c := ParsedCall{Raw: body}
	s := strings.TrimSpace(body)
	if strings.HasPrefix(s, "<function=") {
		if err := c.parseXML(s); err != nil {
			c.Err = err.Error()
		}
		return c
	}
	if err := c.parseJSON(s); err != nil {
		c.Err = err.Error()
	}
	return c
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

func (c *ParsedCall) parseJSON(s string) error {
	var obj map[string]json.RawMessage
	if err := decodeJSON(s, &obj); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if obj == nil {
		return errors.New("not a JSON object")
	}
	raw, ok := obj["name"]
	if !ok {
		return errors.New(`no "name" field`)
	}
	if err := json.Unmarshal(raw, &c.Name); err != nil || c.Name == "" {
		return errors.New(`"name" is not a non-empty string`)
	}
	args, ok := obj["arguments"]
	if !ok {
		if args, ok = obj["parameters"]; !ok {
			return errors.New(`no "arguments" field`)
		}
	}
	// arguments may be given as a JSON string holding the object (OpenAI style)
	var str string
	if json.Unmarshal(args, &str) == nil {
		args = json.RawMessage(str)
	}
	var m map[string]any
	if err := decodeJSON(string(args), &m); err != nil || m == nil {
		return fmt.Errorf(`"arguments" is not a JSON object`)
	}
	c.args = m
	c.Arguments = compactJSON(args)
	return nil
}

func compactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return json.RawMessage(b)
	}
	return buf.Bytes()
}

// parseXML parses <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…</function>. Values are
// kept as text; convertXML types them once the schema is known.
func (c *ParsedCall) parseXML(s string) error {
	s = strings.TrimPrefix(s, "<function=")
	gt := strings.IndexByte(s, '>')
	if gt <= 0 {
		return errors.New("malformed <function=NAME> tag")
	}
	c.Name = strings.TrimSpace(s[:gt])
	s = s[gt+1:]
	c.xml = map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if strings.HasPrefix(s, "</function>") {
			if strings.TrimSpace(s[len("</function>"):]) != "" {
				return errors.New("text after </function>")
			}
			return nil
		}
		if !strings.HasPrefix(s, "<parameter=") {
			return errors.New("expected <parameter=…> or </function>")
		}
		s = s[len("<parameter="):]
		gt := strings.IndexByte(s, '>')
		if gt <= 0 {
			return errors.New("malformed <parameter=NAME> tag")
		}
		name := strings.TrimSpace(s[:gt])
		s = s[gt+1:]
		end := strings.Index(s, "</parameter>")
		if end < 0 {
			return fmt.Errorf("parameter %q has no </parameter>", name)
		}
		v := strings.TrimPrefix(s[:end], "\n")
		v = strings.TrimSuffix(v, "\n")
		if _, dup := c.xml[name]; dup {
			return fmt.Errorf("parameter %q given twice", name)
		}
		c.xml[name] = v
		c.order = append(c.order, name)
		s = s[end+len("</parameter>"):]
	}
}

// convertXML types the XML parameters with the tool's schema: string parameters verbatim,
// others parsed as JSON (a value that does not parse stays a string and fails the type check).
func (c *ParsedCall) convertXML(props map[string]any) {
	if c.xml == nil || c.Err != "" {
		return
	}
	c.args = map[string]any{}
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range c.order {
		raw := c.xml[name]
		var v any = raw
		if !schemaAllowsOnly(props[name], "string") {
			var parsed any
			if decodeJSON(raw, &parsed) == nil {
				v = parsed
			}
		}
		c.args[name] = v
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(name)
		vb, _ := json.Marshal(v)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	c.Arguments = json.RawMessage(b.String())
}

// schemaAllowsOnly reports whether a property schema's type is exactly typ.
func schemaAllowsOnly(schema any, typ string) bool {
	m, _ := schema.(map[string]any)
	t, _ := m["type"].(string)
	return t == typ
}
