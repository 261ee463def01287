package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ToolCallFormat is the tool-call syntax a model family emits.
type ToolCallFormat int

const (
	// ToolCallsJSON is the Qwen3 / Hermes form:
	//	<tool_call>
	//	{"name": "NAME", "arguments": {...}}
	//	</tool_call>
	ToolCallsJSON ToolCallFormat = iota + 1
	// ToolCallsXML is the Qwen3.5 / Qwen3-Coder form:
	//	<tool_call>
	//	<function=NAME>
	//	<parameter=ARG>
	//	VALUE
	//	</parameter>
	//	</function>
	//	</tool_call>
	// A bare <function=NAME>...</function> block (Qwen3-Coder without the
	// wrapper) is accepted too.
	ToolCallsXML
	// ToolCallsAuto accepts either form, chosen per <tool_call> block: a body
	// that starts with <function= is parsed as XML, any other as JSON. It is
	// for output whose template is not known (verify's tool-call gate judges
	// text without it). Bare <function=...> blocks are not calls in this mode.
	ToolCallsAuto
)

func (f ToolCallFormat) String() string {
	switch f {
	case ToolCallsJSON:
		return "json"
	case ToolCallsXML:
		return "xml"
	case ToolCallsAuto:
		return "auto"
	}
	return fmt.Sprintf("ToolCallFormat(%d)", int(f))
}

// DetectToolCallFormat infers the tool-call format from a chat template the
// way llama.cpp does: <tool_call> with <function= and <parameter= is the XML
// form, <tool_call> alone the JSON form. ok is false when the template has
// no recognizable tool-call syntax.
func DetectToolCallFormat(template string) (f ToolCallFormat, ok bool) {
	hasCall := strings.Contains(template, "<tool_call>")
	if strings.Contains(template, "<function=") && strings.Contains(template, "<parameter=") {
		return ToolCallsXML, true
	}
	if hasCall {
		return ToolCallsJSON, true
	}
	return 0, false
}

// ParsedToolCall is one tool call found in model output.
type ParsedToolCall struct {
	Name string
	// Arguments is the argument object as compact JSON, keys in the order
	// the model wrote them. Empty when the call could not be parsed far
	// enough.
	Arguments json.RawMessage
	// Params are the parameters of an XML-form call as the model wrote
	// them, in order, before typing (one newline after <parameter=P> and
	// one before </parameter> removed). nil for JSON-form calls.
	Params []ToolCallParam
	// Start and End delimit the whole block (including its tags) in the
	// parsed text, as byte offsets.
	Start, End int
	// Err describes what is malformed in this block; nil when it parsed.
	Err error
}

// ToolCallParam is one parameter of an XML-form tool call.
type ToolCallParam struct {
	Name, Value string
}

// ParseToolCalls extracts every tool-call block from generated text.
// Malformed blocks are returned with Err set (and whatever could be
// recovered); the returned error joins all per-call errors and is nil when
// every block parsed. tools (optional) are the tool definitions the model
// was given: in the XML format they type each parameter (string-typed
// parameters are taken verbatim, others are parsed as JSON), and calls to
// unknown functions are reported.
func ParseToolCalls(text string, format ToolCallFormat, tools ...Tool) ([]ParsedToolCall, error) {
	schemas := toolSchemas(tools)
	var calls []ParsedToolCall
	switch format {
	case ToolCallsJSON:
		calls = parseJSONCalls(text)
	case ToolCallsXML:
		calls = parseXMLCalls(text, schemas, false)
	case ToolCallsAuto:
		calls = parseXMLCalls(text, schemas, true)
	default:
		return nil, fmt.Errorf("unknown tool-call format %d", int(format))
	}
	var errs []error
	for i := range calls {
		c := &calls[i]
		if c.Err == nil && schemas != nil && c.Name != "" {
			if _, ok := schemas[c.Name]; !ok {
				c.Err = fmt.Errorf("call to unknown function %q", c.Name)
			}
		}
		if c.Err != nil {
			errs = append(errs, fmt.Errorf("tool call %d at byte %d: %w", i, c.Start, c.Err))
		}
	}
	return calls, errors.Join(errs...)
}

const (
	tagCallOpen  = "<tool_call>"
	tagCallClose = "</tool_call>"
)

var errUnterminated = errors.New("unterminated <tool_call>: missing </tool_call>")

func parseJSONCalls(text string) []ParsedToolCall {
	var calls []ParsedToolCall
	pos := 0
	for {
		i := strings.Index(text[pos:], tagCallOpen)
		if i < 0 {
			return calls
		}
		start := pos + i
		bodyStart := start + len(tagCallOpen)
		j := strings.Index(text[bodyStart:], tagCallClose)
		c := ParsedToolCall{Start: start}
		var body string
		if j < 0 {
			body = text[bodyStart:]
			c.End = len(text)
			c.Err = errUnterminated
		} else {
			body = text[bodyStart : bodyStart+j]
			c.End = bodyStart + j + len(tagCallClose)
		}
		if err := parseJSONCallBody(body, &c); err != nil && c.Err == nil {
			c.Err = err
		}
		calls = append(calls, c)
		pos = c.End
	}
}

func parseJSONCallBody(body string, c *ParsedToolCall) error {
	body = strings.TrimSpace(body)
	if body == "" {
		return errors.New("empty tool call")
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	invalid := func(err error) error {
		return fmt.Errorf("not valid JSON: %w (invalid JSON at byte %d of the call)", err, dec.InputOffset())
	}
	tok, err := dec.Token()
	if err != nil {
		return invalid(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("tool call is not a JSON object")
	}
	var args json.RawMessage
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return invalid(err)
		}
		key, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return invalid(err)
		}
		if seen[key] {
			return fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "name":
			if err := json.Unmarshal(raw, &c.Name); err != nil {
				return errors.New(`"name" is not a string`)
			}
		case "arguments", "parameters":
			args = raw
		}
	}
	if _, err := dec.Token(); err != nil {
		return invalid(err)
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	if rest := strings.TrimSpace(body[dec.InputOffset():]); rest != "" {
		return errors.New("trailing data after the JSON object")
	}
	if c.Name == "" {
		return errors.New(`missing "name"`)
	}
	if args == nil {
		return errors.New(`missing "arguments"`)
	}
	// Some models emit the arguments as a JSON string holding an object.
	if len(args) > 0 && args[0] == '"' {
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return fmt.Errorf("arguments: %w", err)
		}
		args = json.RawMessage(s)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err != nil {
		return fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	if buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return errors.New("arguments are not a JSON object")
	}
	c.Arguments = buf.Bytes()
	return nil
}

// paramTypes maps function name -> parameter name -> JSON-schema type
// ("" when untyped).
type paramTypes map[string]map[string]string

func toolSchemas(tools []Tool) paramTypes {
	if len(tools) == 0 {
		return nil
	}
	out := paramTypes{}
	for _, t := range tools {
		fn, _ := t["function"].(map[string]any)
		if fn == nil {
			fn = t // bare {"name", "parameters"} form
		}
		name, _ := fn["name"].(string)
		if name == "" {
			continue
		}
		types := map[string]string{}
		if params, ok := fn["parameters"].(map[string]any); ok {
			if props, ok := params["properties"].(map[string]any); ok {
				for p, s := range props {
					sm, _ := s.(map[string]any)
					typ, _ := sm["type"].(string)
					types[p] = typ
				}
			}
		}
		out[name] = types
	}
	return out
}

// parseXMLCalls parses the XML form; with auto (ToolCallsAuto), a <tool_call>
// body that is not a <function=...> block is parsed as JSON, and bare
// <function=...> blocks are not looked for.
func parseXMLCalls(text string, schemas paramTypes, auto bool) []ParsedToolCall {
	var calls []ParsedToolCall
	pos := 0
	for pos < len(text) {
		iCall := strings.Index(text[pos:], tagCallOpen)
		iFn := -1
		if !auto {
			iFn = strings.Index(text[pos:], "<function=")
		}
		if iCall < 0 && iFn < 0 {
			break
		}
		var c ParsedToolCall
		if iCall >= 0 && (iFn < 0 || iCall <= iFn) {
			start := pos + iCall
			bodyStart := start + len(tagCallOpen)
			c.Start = start
			j := strings.Index(text[bodyStart:], tagCallClose)
			var body string
			if j < 0 {
				body = text[bodyStart:]
				c.End = len(text)
				c.Err = errUnterminated
			} else {
				body = text[bodyStart : bodyStart+j]
				c.End = bodyStart + j + len(tagCallClose)
			}
			trimmed := strings.TrimSpace(body)
			if auto && !strings.HasPrefix(trimmed, "<function=") {
				if err := parseJSONCallBody(body, &c); err != nil && c.Err == nil {
					c.Err = err
				}
			} else if !strings.HasPrefix(trimmed, "<function=") {
				if c.Err == nil {
					c.Err = errors.New("expected <function=NAME> inside <tool_call>")
				}
			} else {
				_, rest, err := parseXMLFunction(trimmed, schemas, &c)
				if err != nil && c.Err == nil {
					c.Err = err
				}
				if strings.TrimSpace(rest) != "" && c.Err == nil {
					c.Err = errors.New("unexpected text after </function>")
				}
			}
		} else {
			start := pos + iFn
			c.Start = start
			n, _, err := parseXMLFunction(text[start:], schemas, &c)
			c.End = start + n
			if err != nil {
				c.Err = err
			}
		}
		calls = append(calls, c)
		if c.End <= pos {
			break
		}
		pos = c.End
	}
	return calls
}

// parseXMLFunction parses "<function=NAME>...</function>" at the start of s.
// It returns the number of bytes consumed and the remaining text.
func parseXMLFunction(s string, schemas paramTypes, c *ParsedToolCall) (int, string, error) {
	const fnOpen, fnClose = "<function=", "</function>"
	gt := strings.IndexByte(s, '>')
	if gt < 0 {
		return len(s), "", errors.New("unterminated <function= tag")
	}
	name := strings.TrimSpace(s[len(fnOpen):gt])
	if name == "" || strings.ContainsAny(name, "<\n") {
		return gt + 1, s[gt+1:], fmt.Errorf("bad function name %q", name)
	}
	c.Name = name
	types := schemas[name]
	var args bytes.Buffer
	args.WriteByte('{')
	seen := map[string]bool{}
	p := gt + 1
	for {
		rest := s[p:]
		trimmed := strings.TrimLeft(rest, " \t\r\n")
		p += len(rest) - len(trimmed)
		switch {
		case strings.HasPrefix(trimmed, fnClose):
			p += len(fnClose)
			args.WriteByte('}')
			c.Arguments = args.Bytes()
			return p, s[p:], nil
		case strings.HasPrefix(trimmed, "<parameter="):
			gt := strings.IndexByte(trimmed, '>')
			if gt < 0 {
				return len(s), "", errors.New("unterminated <parameter= tag")
			}
			pname := strings.TrimSpace(trimmed[len("<parameter="):gt])
			if pname == "" || strings.ContainsAny(pname, "<\n") {
				return len(s), "", fmt.Errorf("bad parameter name %q", pname)
			}
			valStart := gt + 1
			end := strings.Index(trimmed[valStart:], "</parameter>")
			if end < 0 {
				return len(s), "", fmt.Errorf("parameter %q: missing </parameter> (no </parameter> in the rest of the block)", pname)
			}
			val := trimmed[valStart : valStart+end]
			val = strings.TrimPrefix(val, "\n")
			val = strings.TrimSuffix(val, "\n")
			if seen[pname] {
				return len(s), "", fmt.Errorf("duplicate parameter %q", pname)
			}
			seen[pname] = true
			c.Params = append(c.Params, ToolCallParam{Name: pname, Value: val})
			typ, typed := types[pname]
			if types != nil && !typed {
				return len(s), "", fmt.Errorf("function %q has no parameter %q", name, pname)
			}
			jv, err := xmlParamValue(val, typ)
			if err != nil {
				return len(s), "", fmt.Errorf("parameter %q: %w", pname, err)
			}
			if len(seen) > 1 {
				args.WriteByte(',')
			}
			kb, _ := json.Marshal(pname)
			args.Write(kb)
			args.WriteByte(':')
			args.Write(jv)
			p += valStart + end + len("</parameter>")
		case trimmed == "":
			return len(s), "", errors.New("missing </function>")
		default:
			return len(s), "", fmt.Errorf("unexpected text %q in function block", firstLine(trimmed))
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// XMLParamValue converts the text of an XML-form parameter to JSON following
// its JSON-schema type: "string" takes the text verbatim; boolean and null
// accept JSON's and Python's spellings (true/True, null/None, as templates
// print them); integer, number, object and array must be JSON of that kind.
// An untyped parameter ("") is JSON when its text is a JSON number, object or
// array, and a string otherwise.
func XMLParamValue(text, typ string) (json.RawMessage, error) { return xmlParamValue(text, typ) }

func xmlParamValue(val, typ string) (json.RawMessage, error) {
	compact := func(s string) (json.RawMessage, bool) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(s)); err != nil {
			return nil, false
		}
		return buf.Bytes(), true
	}
	str := func() json.RawMessage {
		b, _ := json.Marshal(val)
		return b
	}
	t := strings.TrimSpace(val)
	switch typ {
	case "string":
		return str(), nil
	case "boolean":
		switch t {
		case "true", "True":
			return json.RawMessage("true"), nil
		case "false", "False":
			return json.RawMessage("false"), nil
		}
		return nil, fmt.Errorf("%q is not a boolean", t)
	case "null":
		if t == "null" || t == "None" {
			return json.RawMessage("null"), nil
		}
		return nil, fmt.Errorf("%q is not null", t)
	case "integer", "number", "object", "array":
		v, ok := compact(t)
		if !ok {
			return nil, fmt.Errorf("%q is not a JSON %s", firstLine(t), typ)
		}
		first := v[0]
		okType := (typ == "object" && first == '{') || (typ == "array" && first == '[') ||
			((typ == "integer" || typ == "number") && (first == '-' || (first >= '0' && first <= '9')))
		if typ == "integer" && bytes.ContainsAny(v, ".eE") {
			okType = false
		}
		if !okType {
			return nil, fmt.Errorf("%q is not a JSON %s", firstLine(t), typ)
		}
		return v, nil
	}
	if t != "" && (t[0] == '{' || t[0] == '[' || t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
		if v, ok := compact(t); ok {
			return v, nil
		}
	}
	return str(), nil
}
