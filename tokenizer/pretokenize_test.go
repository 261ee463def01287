package tokenizer

import (
	"reflect"
	"strings"
	"testing"
)

func splitPieces(k splitKind, s string) []string {
	var out []string
	start := 0
	for _, e := range k.split(s, &splitScratch{}) {
		out = append(out, s[start:e])
		start = e
	}
	return out
}

// TestSplitters checks the hand-written matchers against splits derived by hand from the
// regexes (leftmost-first alternation, greedy quantifiers, backtracking for (?!\S)).
func TestSplitters(t *testing.T) {
	cases := []struct {
		kind splitKind
		in   string
		want []string
	}{
		// GPT-2: ' ?' prefixes, case-sensitive contractions, no CR/LF rules.
		{splitGPT2, "Hello world", []string{"Hello", " world"}},
		{splitGPT2, "  Hello", []string{" ", " Hello"}},
		{splitGPT2, "a  b", []string{"a", " ", " b"}},
		{splitGPT2, "a  ", []string{"a", "  "}},
		{splitGPT2, "I'm DON'T", []string{"I", "'m", " DON", "'", "T"}},
		{splitGPT2, "x 123 4", []string{"x", " 123", " 4"}},
		{splitGPT2, "hi!!\n\nyo", []string{"hi", "!!", "\n", "\n", "yo"}},
		{splitGPT2, "\t\tx", []string{"\t", "\t", "x"}},
		{splitGPT2, " \n x", []string{" \n", " x"}},
		{splitGPT2, "é1", []string{"é", "1"}},

		// Llama-3: (?i) contractions, optional non-letter prefix, digit triples, CR/LF runs.
		{splitLlama3, "I'M you'RE", []string{"I", "'M", " you", "'RE"}},
		{splitLlama3, "12345", []string{"123", "45"}},
		{splitLlama3, "x1234567", []string{"x", "123", "456", "7"}},
		{splitLlama3, "(hello)", []string{"(hello", ")"}},
		{splitLlama3, "\tword", []string{"\tword"}},
		{splitLlama3, "!!\n\nx", []string{"!!\n\n", "x"}},
		{splitLlama3, "a \n\n b", []string{"a", " \n\n", " b"}},
		{splitLlama3, "a\n  \n x", []string{"a", "\n  \n", " x"}},
		{splitLlama3, "a   b", []string{"a", "  ", " b"}},
		{splitLlama3, "a   ", []string{"a", "   "}},
		{splitLlama3, " \r\n", []string{" \r\n"}},
		{splitLlama3, "'s'", []string{"'s", "'"}},
		{splitLlama3, "a'", []string{"a", "'"}},

		// Qwen2: one digit per piece; marks are "other".
		{splitQwen2, "2024年", []string{"2", "0", "2", "4", "年"}},
		{splitQwen2, "na\u0301ive", []string{"na", "\u0301ive"}},
		{splitQwen2, "\u0915\u093f\u0924", []string{"\u0915", "\u093f\u0924"}},

		// Qwen3.5: letter runs absorb marks.
		{splitQwen35, "na\u0301ive", []string{"na\u0301ive"}},
		{splitQwen35, "\u0915\u093f\u0924", []string{"\u0915\u093f\u0924"}},
		{splitQwen35, " \u0301x", []string{" \u0301x"}},
		{splitQwen35, "1\u0301", []string{"1", "\u0301"}},
	}
	for _, c := range cases {
		got := splitPieces(c.kind, c.in)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v %q: got %q want %q", c.kind, c.in, got, c.want)
		}
	}
}

// TestSplitCoversInput checks that pieces are non-empty and concatenate to the input, for
// every splitter, on arbitrary bytes.
func TestSplitCoversInput(t *testing.T) {
	inputs := append([]string{"\xff\xfe abc \xc3", "\x00\x01 \u0085\u2028x", strings.Repeat("  \n", 50)}, edgeCases...)
	for _, k := range []splitKind{splitGPT2, splitLlama3, splitQwen2, splitQwen35} {
		for _, in := range inputs {
			pieces := splitPieces(k, in)
			for _, p := range pieces {
				if p == "" {
					t.Fatalf("%v %q: empty piece", k, in)
				}
			}
			if got := strings.Join(pieces, ""); got != in {
				t.Fatalf("%v %q: pieces join to %q", k, in, got)
			}
		}
	}
}

func TestSanitizeUTF8(t *testing.T) {
	cases := map[string]string{
		"plain":                "plain",
		"é€😀":                  "é€😀",
		"\xff":                 "\uFFFD",
		"a\xc3(":               "a\uFFFD(",
		"\xe2\x82 ":            "\uFFFD\uFFFD ",
		"\xc0\x80":             "\x00",
		"\xed\xa0\x80":         "\xed\xa0\x80",
		"\xf4\x90\x80\x80":     "\uFFFD",
		"\xf8\x88\x80\x80\x80": "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD",
		"end\xe4\xbd":          "end\uFFFD\uFFFD",
	}
	for in, want := range cases {
		if got := sanitizeUTF8(in); got != want {
			t.Errorf("sanitizeUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteLevelRunes[b]
		if seen[r] {
			t.Fatalf("byte %d maps to duplicate rune %U", b, r)
		}
		seen[r] = true
	}
	if byteLevelRunes[' '] != 'Ġ' || byteLevelRunes['\n'] != 'Ċ' || byteLevelRunes['a'] != 'a' || byteLevelRunes[0xAD] != 0x143 {
		t.Errorf("unexpected byte-level mapping: space %U newline %U", byteLevelRunes[' '], byteLevelRunes['\n'])
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	back, ok := byteLevelToBytes(byteLevelEncode(string(all)))
	if !ok || string(back) != string(all) {
		t.Fatal("byte-level encoding does not round-trip")
	}
}
