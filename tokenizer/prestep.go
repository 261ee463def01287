package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// preStepKind is a Hugging Face pre-tokenizer.
type preStepKind uint8

const (
	preSplit     preStepKind = iota // Split with a known regex (hand-written matcher)
	preSplitRe                      // Split with a Go-compatible regex or a literal string
	preByteLevel                    // ByteLevel (optional prefix space and GPT-2 regex)
	preMetaspace                    // Metaspace
	preDigits                       // Digits
)

// splitBehavior is the "behavior" of a Split pre-tokenizer.
type splitBehavior uint8

const (
	behIsolated splitBehavior = iota
	behRemoved
	behMergedWithPrevious
	behMergedWithNext
	behContiguous
)

// preStep is one step of the pre-tokenizer pipeline.
type preStep struct {
	kind     preStepKind
	split    splitKind
	re       *regexp.Regexp
	literal  string
	behavior splitBehavior
	invert   bool

	addPrefixSpace bool // ByteLevel
	useRegex       bool // ByteLevel

	replacement   string // Metaspace
	prependScheme string // Metaspace: always | first | never
	metaSplit     bool   // Metaspace

	individualDigits bool // Digits
}

// apply maps the pieces in to the pieces of this step, appended to out.
func (p *preStep) apply(in, out []string, first bool, sc *splitScratch) []string {
	for _, s := range in {
		switch p.kind {
		case preSplit:
			out = p.applySplitKind(out, s, sc)
		case preSplitRe:
			out = p.applyRegex(out, s)
		case preByteLevel:
			if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
				s = " " + s
			}
			if p.useRegex {
				start := 0
				for _, e := range splitGPT2.split(s, sc) {
					out = append(out, s[start:e])
					start = e
				}
			} else {
				out = append(out, s)
			}
		case preMetaspace:
			s = strings.ReplaceAll(s, " ", p.replacement)
			if (p.prependScheme == "always" || (p.prependScheme == "first" && first)) && !strings.HasPrefix(s, p.replacement) {
				s = p.replacement + s
			}
			if !p.metaSplit {
				out = append(out, s)
				continue
			}
			// MergedWithNext on the replacement character.
			start := 0
			for i := 1; i < len(s); i++ {
				if strings.HasPrefix(s[i:], p.replacement) {
					out = append(out, s[start:i])
					start = i
				}
			}
			out = append(out, s[start:])
		case preDigits:
			out = p.applyDigits(out, s)
		}
	}
	return out
}

func (p *preStep) applySplitKind(out []string, s string, sc *splitScratch) []string {
	ends := p.split.split(s, sc)
	start := 0
	for _, e := range ends {
		out = append(out, s[start:e])
		start = e
	}
	return out
}

// applyRegex implements Split for a pattern Go's regexp can compile, or a literal string.
func (p *preStep) applyRegex(out []string, s string) []string {
	var locs [][]int
	if p.re != nil {
		locs = p.re.FindAllStringIndex(s, -1)
	} else if p.literal != "" {
		for off := 0; ; {
			i := strings.Index(s[off:], p.literal)
			if i < 0 {
				break
			}
			locs = append(locs, []int{off + i, off + i + len(p.literal)})
			off += i + len(p.literal)
		}
	}
	// Build (span, isMatch) list in order, dropping empty matches.
	type span struct {
		a, b  int
		match bool
	}
	var spans []span
	prev := 0
	for _, l := range locs {
		if l[0] == l[1] {
			continue
		}
		if l[0] > prev {
			spans = append(spans, span{prev, l[0], false})
		}
		spans = append(spans, span{l[0], l[1], true})
		prev = l[1]
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	if p.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	switch p.behavior {
	case behIsolated:
		for _, sp := range spans {
			out = append(out, s[sp.a:sp.b])
		}
	case behRemoved:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, s[sp.a:sp.b])
			}
		}
	case behMergedWithPrevious:
		start := -1
		for _, sp := range spans {
			if start < 0 {
				start = sp.a
			}
			if sp.match {
				out = append(out, s[start:sp.b])
				start = -1
			}
		}
		if start >= 0 {
			out = append(out, s[start:])
		}
	case behMergedWithNext:
		start := 0
		for i, sp := range spans {
			if sp.match && i > 0 && sp.a > start {
				out = append(out, s[start:sp.a])
				start = sp.a
			}
		}
		if start < len(s) {
			out = append(out, s[start:])
		}
	case behContiguous:
		for i := 0; i < len(spans); {
			j := i + 1
			for j < len(spans) && spans[j].match == spans[i].match && spans[i].match {
				j++
			}
			out = append(out, s[spans[i].a:spans[j-1].b])
			i = j
		}
	}
	return out
}

// applyDigits splits runs of numeric characters out of s (one per piece when individual).
func (p *preStep) applyDigits(out []string, s string) []string {
	start := 0
	inDigits := false
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		d := runeClass(r)&clsNumber != 0 // Rust char::is_numeric: Nd, Nl, No
		switch {
		case d && p.individualDigits:
			if i > start {
				out = append(out, s[start:i])
			}
			out = append(out, s[i:i+n])
			start = i + n
		case d != inDigits && i > start:
			out = append(out, s[start:i])
			start = i
		}
		inDigits = d
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// parsePreTokenizer builds the steps of a tokenizer.json "pre_tokenizer" object.
func parsePreTokenizer(raw json.RawMessage, depth int) ([]preStep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if depth > 8 {
		return nil, fmt.Errorf("pre_tokenizer: nesting too deep")
	}
	var h struct {
		Type             string            `json:"type"`
		Pretokenizers    []json.RawMessage `json:"pretokenizers"`
		Pattern          *patternSpec      `json:"pattern"`
		Behavior         string            `json:"behavior"`
		Invert           bool              `json:"invert"`
		AddPrefixSpace   *bool             `json:"add_prefix_space"`
		UseRegex         *bool             `json:"use_regex"`
		Replacement      *string           `json:"replacement"`
		PrependScheme    *string           `json:"prepend_scheme"`
		Split            *bool             `json:"split"`
		IndividualDigits bool              `json:"individual_digits"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch h.Type {
	case "Sequence":
		var steps []preStep
		for i, r := range h.Pretokenizers {
			s, err := parsePreTokenizer(r, depth+1)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
			}
			steps = append(steps, s...)
		}
		return steps, nil
	case "Split":
		if h.Pattern == nil {
			return nil, fmt.Errorf("pre_tokenizer Split: missing \"pattern\"")
		}
		beh, err := parseBehavior(h.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		st := preStep{behavior: beh, invert: h.Invert}
		switch {
		case h.Pattern.Regex != nil:
			if k, ok := knownSplitRegexes[*h.Pattern.Regex]; ok && beh == behIsolated && !h.Invert {
				st.kind, st.split = preSplit, k
				return []preStep{st}, nil
			}
			re, err := regexp.Compile(*h.Pattern.Regex)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer Split: regex %q is not supported: %w", *h.Pattern.Regex, err)
			}
			st.kind, st.re = preSplitRe, re
		case h.Pattern.String != nil:
			if *h.Pattern.String == "" {
				return nil, fmt.Errorf("pre_tokenizer Split: empty pattern string")
			}
			st.kind, st.literal = preSplitRe, *h.Pattern.String
		default:
			return nil, fmt.Errorf("pre_tokenizer Split: pattern has neither Regex nor String")
		}
		return []preStep{st}, nil
	case "ByteLevel":
		st := preStep{kind: preByteLevel, useRegex: true}
		if h.AddPrefixSpace != nil {
			st.addPrefixSpace = *h.AddPrefixSpace
		}
		if h.UseRegex != nil {
			st.useRegex = *h.UseRegex
		}
		return []preStep{st}, nil
	case "Metaspace":
		st := preStep{kind: preMetaspace, replacement: "▁", prependScheme: "always", metaSplit: true}
		if h.Replacement != nil {
			if *h.Replacement == "" {
				return nil, fmt.Errorf("pre_tokenizer Metaspace: empty replacement")
			}
			st.replacement = *h.Replacement
		}
		if h.AddPrefixSpace != nil && !*h.AddPrefixSpace {
			st.prependScheme = "never"
		}
		if h.PrependScheme != nil {
			switch *h.PrependScheme {
			case "always", "first", "never":
				st.prependScheme = *h.PrependScheme
			default:
				return nil, fmt.Errorf("pre_tokenizer Metaspace: unknown prepend_scheme %q", *h.PrependScheme)
			}
		}
		if h.Split != nil {
			st.metaSplit = *h.Split
		}
		return []preStep{st}, nil
	case "Digits":
		return []preStep{{kind: preDigits, individualDigits: h.IndividualDigits}}, nil
	case "":
		return nil, fmt.Errorf("pre_tokenizer: missing \"type\"")
	}
	return nil, fmt.Errorf("pre_tokenizer type %q is not supported", h.Type)
}

func parseBehavior(s string) (splitBehavior, error) {
	switch strings.ToLower(s) {
	case "isolated":
		return behIsolated, nil
	case "removed":
		return behRemoved, nil
	case "mergedwithprevious", "merged_with_previous":
		return behMergedWithPrevious, nil
	case "mergedwithnext", "merged_with_next":
		return behMergedWithNext, nil
	case "contiguous":
		return behContiguous, nil
	}
	return 0, fmt.Errorf("unknown split behavior %q", s)
}
