package verify

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// toolDef is a tool definition as the validator sees it.
type toolDef struct {
	Name   string
	Params map[string]any // JSON schema of the arguments ("parameters"); nil: anything
}

// parseTools reads OpenAI-style tool definitions ({"type": "function", "function": {"name",
// "description", "parameters"}}; the bare function object is accepted too).
func parseTools(raws []json.RawMessage) (map[string]toolDef, error) {
	out := map[string]toolDef{}
	for i, raw := range raws {
		var v map[string]any
		if err := decodeJSON(string(raw), &v); err != nil || v == nil {
			return nil, fmt.Errorf("tool %d: not a JSON object", i)
		}
		fn := v
		if f, ok := v["function"].(map[string]any); ok {
			fn = f
		}
		name, _ := fn["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("tool %d: no function name", i)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("tool %q defined twice", name)
		}
		td := toolDef{Name: name}
		if p, ok := fn["parameters"]; ok {
			pm, ok := p.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("tool %q: parameters is not an object schema", name)
			}
			td.Params = pm
		}
		out[name] = td
	}
	return out, nil
}

// validateCall checks a parsed call against the tools: the name exists, the arguments form
// an object, required arguments are present and every argument matches its schema (type,
// enum, nested properties and items; unknown arguments only when additionalProperties is
// false). It returns the problems found (none: valid).
func validateCall(c *ParsedCall, tools map[string]toolDef) []string {
	if c.Err != "" {
		return []string{c.Err}
	}
	td, ok := tools[c.Name]
	if !ok {
		names := make([]string, 0, len(tools))
		for n := range tools {
			names = append(names, n)
		}
		sort.Strings(names)
		return []string{fmt.Sprintf("unknown tool %q (tools: %s)", c.Name, strings.Join(names, ", "))}
	}
	props, _ := td.Params["properties"].(map[string]any)
	c.convertXML(props)
	if c.args == nil {
		return []string{"arguments are not a JSON object"}
	}
	if td.Params == nil {
		return nil
	}
	var probs []string
	validateValue(td.Params, c.args, "arguments", &probs)
	return probs
}

// validateValue checks v against a JSON-schema subset: type (string or list), enum, const,
// properties/required/additionalProperties, items, minItems/maxItems, minimum/maximum.
func validateValue(schema any, v any, path string, probs *[]string) {
	s, ok := schema.(map[string]any)
	if !ok {
		return // true / {} / unknown: anything goes
	}
	if types := schemaTypes(s["type"]); len(types) > 0 {
		match := false
		for _, t := range types {
			match = match || typeMatches(t, v)
		}
		if !match {
			*probs = append(*probs, fmt.Sprintf("%s: %s is %s, schema wants %s", path, shortJSON(v), jsonKind(v), strings.Join(types, " or ")))
			return
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || jsonEqual(e, v)
		}
		if !found {
			*probs = append(*probs, fmt.Sprintf("%s: %s is not one of %s", path, shortJSON(v), shortJSON(enum)))
		}
	}
	if c, ok := s["const"]; ok && !jsonEqual(c, v) {
		*probs = append(*probs, fmt.Sprintf("%s: %s is not %s", path, shortJSON(v), shortJSON(c)))
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				name, _ := r.(string)
				if _, ok := x[name]; !ok {
					*probs = append(*probs, fmt.Sprintf("%s: required %q is missing", path, name))
				}
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				validateValue(ps, x[k], path+"."+k, probs)
			} else if ap, ok := s["additionalProperties"]; ok {
				if b, isBool := ap.(bool); isBool && !b {
					*probs = append(*probs, fmt.Sprintf("%s: unknown argument %q", path, k))
				} else {
					validateValue(ap, x[k], path+"."+k, probs)
				}
			}
		}
	case []any:
		if it, ok := s["items"]; ok {
			for i, e := range x {
				validateValue(it, e, fmt.Sprintf("%s[%d]", path, i), probs)
			}
		}
		if n, ok := schemaNumber(s["minItems"]); ok && float64(len(x)) < n {
			*probs = append(*probs, fmt.Sprintf("%s: %d items, minimum %v", path, len(x), n))
		}
		if n, ok := schemaNumber(s["maxItems"]); ok && float64(len(x)) > n {
			*probs = append(*probs, fmt.Sprintf("%s: %d items, maximum %v", path, len(x), n))
		}
	case json.Number:
		f, _ := x.Float64()
		if n, ok := schemaNumber(s["minimum"]); ok && f < n {
			*probs = append(*probs, fmt.Sprintf("%s: %s is below the minimum %v", path, x, n))
		}
		if n, ok := schemaNumber(s["maximum"]); ok && f > n {
			*probs = append(*probs, fmt.Sprintf("%s: %s is above the maximum %v", path, x, n))
		}
	}
}

func schemaTypes(t any) []string {
	switch x := t.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func schemaNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	}
	return 0, false
}

func typeMatches(t string, v any) bool {
	switch t {
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(json.Number)
		if !ok {
			_, ok = v.(float64)
		}
		return ok
	case "integer":
		switch x := v.(type) {
		case json.Number:
			if _, err := x.Int64(); err == nil {
				return true
			}
			f, err := x.Float64()
			return err == nil && f == math.Trunc(f) && !math.IsInf(f, 0)
		case float64:
			return x == math.Trunc(x)
		}
		return false
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "null":
		return v == nil
	}
	return true // unknown type keyword: do not judge
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "an integer"
		}
		return "a number"
	case float64:
		return "a number"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func shortJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// jsonEqual compares decoded JSON values; numbers compare by value (1 == 1.0).
func jsonEqual(a, b any) bool {
	return canonicalJSON(a) == canonicalJSON(b)
}

// canonicalJSON renders a decoded JSON value with sorted keys and numbers in a canonical
// exact form, so that equal values render equally.
func canonicalJSON(v any) string {
	var b strings.Builder
	writeCanonical(&b, v)
	return b.String()
}

func writeCanonical(b *strings.Builder, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeCanonical(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		if f, err := x.Float64(); err == nil {
			b.WriteString("n:" + strconv.FormatFloat(f, 'g', -1, 64))
		} else {
			b.WriteString(string(x))
		}
	case float64:
		b.WriteString("n:" + strconv.FormatFloat(x, 'g', -1, 64))
	default:
		jb, _ := json.Marshal(x)
		b.Write(jb)
	}
}
