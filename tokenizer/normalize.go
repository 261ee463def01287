package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer is one Hugging Face normalizer step (tokenizer.json "normalizer").
type normalizer func(string) string

// parseNormalizer builds the normalizer described by a tokenizer.json "normalizer" object.
// A JSON null yields nil (no normalization).
func parseNormalizer(raw json.RawMessage, depth int) (normalizer, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	if depth > 8 {
		return nil, false, fmt.Errorf("normalizer: nesting too deep")
	}
	var head struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     *string           `json:"prepend"`
		Content     *string           `json:"content"`
		Pattern     *patternSpec      `json:"pattern"`
		StripLeft   *bool             `json:"strip_left"`
		StripRight  *bool             `json:"strip_right"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, false, fmt.Errorf("normalizer: %w", err)
	}
	switch head.Type {
	case "NFC":
		return func(s string) string { return nfcString(s) }, false, nil
	case "NFD":
		return norm.NFD.String, false, nil
	case "NFKC":
		return norm.NFKC.String, false, nil
	case "NFKD":
		return norm.NFKD.String, false, nil
	case "Lowercase":
		return strings.ToLower, false, nil
	case "StripAccents":
		return func(s string) string {
			return strings.Map(func(r rune) rune {
				if unicode.Is(unicode.Mn, r) {
					return -1
				}
				return r
			}, s)
		}, false, nil
	case "Strip":
		left := head.StripLeft == nil || *head.StripLeft
		right := head.StripRight == nil || *head.StripRight
		return func(s string) string {
			if left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, false, nil
	case "Prepend":
		if head.Prepend == nil {
			return nil, false, fmt.Errorf("normalizer Prepend: missing \"prepend\"")
		}
		p := *head.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}, true, nil
	case "Replace":
		if head.Pattern == nil || head.Content == nil {
			return nil, false, fmt.Errorf("normalizer Replace: missing \"pattern\" or \"content\"")
		}
		content := *head.Content
		if head.Pattern.String != nil {
			from := *head.Pattern.String
			if from == "" {
				return nil, false, fmt.Errorf("normalizer Replace: empty pattern")
			}
			return func(s string) string { return strings.ReplaceAll(s, from, content) }, false, nil
		}
		if head.Pattern.Regex != nil {
			re, err := regexp.Compile(*head.Pattern.Regex)
			if err != nil {
				return nil, false, fmt.Errorf("normalizer Replace: regex %q: %w", *head.Pattern.Regex, err)
			}
			return func(s string) string { return re.ReplaceAllLiteralString(s, content) }, false, nil
		}
		return nil, false, fmt.Errorf("normalizer Replace: pattern has neither String nor Regex")
	case "Sequence":
		var steps []normalizer
		prepends := false
		for i, r := range head.Normalizers {
			n, p, err := parseNormalizer(r, depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			prepends = prepends || p
			if n != nil {
				steps = append(steps, n)
			}
		}
		if len(steps) == 0 {
			return nil, false, nil
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, prepends, nil
	case "":
		return nil, false, fmt.Errorf("normalizer: missing \"type\"")
	}
	return nil, false, fmt.Errorf("normalizer type %q is not supported", head.Type)
}

// nfcString is NFC with a fast path for text that is already in NFC (the common case).
func nfcString(s string) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	return norm.NFC.String(s)
}

// patternSpec is a tokenizer.json pattern: {"String": "..."} or {"Regex": "..."}.
type patternSpec struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}
