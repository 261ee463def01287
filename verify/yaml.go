package verify

import (
	"fmt"
	"strconv"
	"strings"
)

// parseFlatYAML parses the YAML subset verify.yaml uses: one "key: value" mapping per line,
// "#" comments, blank lines and an optional leading "---". Values are numbers, booleans
// (true/false), null (null, ~ or empty) or strings (plain, 'single' or "double" quoted).
// Nested mappings, lists and multi-line values are rejected with the line number.
func parseFlatYAML(data []byte, name string) (map[string]any, error) {
	out := map[string]any{}
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		ln := i + 1
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "---" && len(out) == 0 {
			continue
		}
		if strings.ContainsRune(line, '\t') && strings.TrimSpace(line) != "" && strings.HasPrefix(line, "\t") {
			return nil, fmt.Errorf("%s line %d: tabs are not allowed for indentation in YAML", name, ln)
		}
		s := stripYAMLComment(line)
		if strings.TrimSpace(s) == "" {
			continue
		}
		if s[0] == ' ' {
			return nil, fmt.Errorf("%s line %d: nested values are not supported (use flat \"key: value\" lines)", name, ln)
		}
		if strings.HasPrefix(s, "- ") || s == "-" {
			return nil, fmt.Errorf("%s line %d: lists are not supported", name, ln)
		}
		colon := strings.Index(s, ":")
		if colon <= 0 {
			return nil, fmt.Errorf("%s line %d: expected \"key: value\"", name, ln)
		}
		key := strings.TrimSpace(s[:colon])
		if k, err := unquoteYAML(key); err == nil {
			key = k
		} else {
			return nil, fmt.Errorf("%s line %d: %v", name, ln, err)
		}
		rest := s[colon+1:]
		if rest != "" && rest[0] != ' ' {
			return nil, fmt.Errorf("%s line %d: expected a space after \":\"", name, ln)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s line %d: key %q given twice", name, ln, key)
		}
		v, err := yamlScalar(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %s: %v", name, ln, key, err)
		}
		if v == nil && strings.TrimSpace(rest) == "" && i+1 < len(lines) {
			if next := stripYAMLComment(strings.TrimRight(lines[i+1], "\r")); strings.HasPrefix(next, " ") && strings.TrimSpace(next) != "" {
				return nil, fmt.Errorf("%s line %d: nested values are not supported (use flat \"key: value\" lines)", name, ln+1)
			}
		}
		out[key] = v
	}
	return out, nil
}

// stripYAMLComment removes a "#" comment that starts a line or follows whitespace, outside
// quotes.
func stripYAMLComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' '):
			return strings.TrimRight(s[:i], " ")
		}
	}
	return s
}

func unquoteYAML(s string) (string, error) {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return strconv.Unquote(s)
	}
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	}
	if strings.ContainsAny(s, "\"'") {
		return "", fmt.Errorf("malformed quoted string %s", s)
	}
	return s, nil
}

func yamlScalar(s string) (any, error) {
	switch s {
	case "", "~", "null", "Null", "NULL":
		return nil, nil
	case "true", "True", "TRUE":
		return true, nil
	case "false", "False", "FALSE":
		return false, nil
	}
	if strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{") || strings.HasPrefix(s, "|") || strings.HasPrefix(s, ">") ||
		strings.HasPrefix(s, "&") || strings.HasPrefix(s, "*") || strings.HasPrefix(s, "!") {
		return nil, fmt.Errorf("only scalar values are supported, got %q", s)
	}
	if s[0] == '"' || s[0] == '\'' {
		return unquoteYAML(s)
	}
	if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil && !strings.ContainsAny(s, "xXoObB") {
		return f, nil
	}
	return s, nil
}
