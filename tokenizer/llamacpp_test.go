package tokenizer

import (
	"github.com/tq-project/tq/gguf"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// llamaTokenize tokenizes texts with real llama.cpp (testdata/llamacpp/llama.mjs, add_special
// false, parse_special = special).
func llamaTokenize(t *testing.T, model string, texts []string, special bool) [][]int32 {
	t.Helper()
	var resp struct{ Tokens [][]int32 }
	nodeRun(t, "llama.mjs", map[string]any{"op": "tokenize", "model": model, "texts": texts, "special": special}, &resp)
	if len(resp.Tokens) != len(texts) {
		t.Fatalf("llama.mjs returned %d results for %d texts", len(resp.Tokens), len(texts))
	}
	return resp.Tokens
}

func compareWithLlama(t *testing.T, tok *Tokenizer, model string, texts []string, parse bool) {
	t.Helper()
	want := llamaTokenize(t, model, texts, parse)
	fails := 0
	for i, s := range texts {
		got := tok.Encode(s, EncodeOptions{ParseSpecial: parse})
		if !equalIDs(got, want[i]) {
			fails++
			if fails <= 5 {
				t.Errorf("parse_special=%v %q:\n got %v\nwant %v", parse, s, got, want[i])
			}
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d texts differ from llama.cpp", fails, len(texts))
	}
	t.Logf("%s parse_special=%v: %d texts compared", filepath.Base(model), parse, len(texts))
}

func corpusTexts(t *testing.T, includeLlamaOnly bool) []string {
	var texts []string
	for _, c := range loadCorpus(t) {
		if includeLlamaOnly || !c.llamaOnly {
			texts = append(texts, c.text)
		}
	}
	return texts
}

// TestLlamaCppAgreement compares FromGGUF with llama.cpp's llama_tokenize on the corpus.
// qwen2 runs with and without parse_special; the other vocabularies (already covered by
// llama.cpp's own vectors) run with parse_special only and not in -short mode.
func TestLlamaCppAgreement(t *testing.T) {
	// invalidUTF8Expected stands in for the invalid bytes TestInvalidUTF8 feeds our tokenizer.
	texts := append(corpusTexts(t, true), invalidUTF8Expected)
	t.Run("qwen2", func(t *testing.T) {
		tok, path := loadVocabGGUF(t, "qwen2")
		compareWithLlama(t, tok, path, texts, true)
		compareWithLlama(t, tok, path, texts, false)
	})
	if testing.Short() {
		return
	}
	for _, name := range []string{"qwen35", "llama-bpe", "gpt-2", "llama-spm"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tok, path := loadVocabGGUF(t, name)
			compareWithLlama(t, tok, path, texts, true)
		})
	}
}

// invalidUTF8Expected is testdata/corpus/invalid_utf8.bin with every byte sequence that
// llama.cpp's decoder rejects replaced, by hand, the way llama.cpp does it: one U+FFFD per
// rejected byte, and the overlong C0 80 decoded to U+0000.
const invalidUTF8Expected = "valid start \uFFFD\uFFFD bytes \uFFFD( bad cont \uFFFD\uFFFD trunc \uFFFD\uFFFD\uFFFD trunc4 \x00 overlong \uFFFD\uFFFD\uFFFD\uFFFD\uFFFD five \uFFFD lone cont, end \uFFFD\uFFFD"

// TestInvalidUTF8 checks llama.cpp's handling of invalid UTF-8: byte-level BPE replaces the
// rejected bytes by U+FFFD, so the bytes must encode like the hand-replaced text (which
// TestLlamaCppAgreement compares with llama.cpp, since JSON cannot carry the raw bytes);
// SentencePiece falls back to byte tokens.
func TestInvalidUTF8(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "corpus", "invalid_utf8.bin"))
	if err != nil {
		t.Fatal(err)
	}
	bin := string(raw)
	t.Run("qwen2", func(t *testing.T) {
		tok, _ := loadVocabGGUF(t, "qwen2")
		for _, parse := range []bool{false, true} {
			got := tok.Encode(bin, EncodeOptions{ParseSpecial: parse})
			if want := tok.Encode(invalidUTF8Expected, EncodeOptions{ParseSpecial: parse}); !equalIDs(got, want) {
				t.Fatalf("Encode(invalid bytes) = %v, want the encoding of the replaced text %v", got, want)
			}
			if dec := tok.Decode(got); dec != invalidUTF8Expected {
				t.Errorf("Decode = %q, want %q", dec, invalidUTF8Expected)
			}
		}
		// A surrogate encoded as three bytes is decoded (not rejected) by llama.cpp and
		// passes through unchanged.
		if got := tok.Decode(tok.Encode("a\xed\xa0\x80b", EncodeOptions{})); got != "a\xed\xa0\x80b" {
			t.Errorf("surrogate bytes: got %q", got)
		}
	})
	t.Run("llama-spm", func(t *testing.T) {
		tok, _ := loadVocabGGUF(t, "llama-spm")
		ids := tok.Encode(bin, EncodeOptions{})
		// A lead byte claims as many following bytes as it announces (llama.cpp splits
		// symbols by lead byte only), so a space it swallows comes back as the "▁" bytes.
		if got := strings.ReplaceAll(tok.Decode(ids), "▁", " "); got != bin {
			t.Errorf("byte fallback round trip: got %q want %q", got, bin)
		}
		bytesSeen := 0
		for _, id := range ids {
			if tok.TokenType(id) == TokenByte {
				bytesSeen++
			}
		}
		if bytesSeen < 10 {
			t.Errorf("expected byte-fallback tokens for the invalid bytes, got %d", bytesSeen)
		}
	})
	t.Run("qwen3-hf", func(t *testing.T) {
		tok := loadQwen3(t)
		got := tok.Encode(bin, EncodeOptions{ParseSpecial: true})
		want := tok.Encode(invalidUTF8Expected, EncodeOptions{ParseSpecial: true})
		if !equalIDs(got, want) {
			t.Errorf("Encode(invalid bytes) = %v, want %v", got, want)
		}
	})
}

// TestExportQwen3ToLlamaCpp exports the Qwen3 tokenizer.json as GGUF metadata, writes it into a
// vocabulary-only GGUF and checks that llama.cpp tokenizes the corpus (parse_special, NFC text
// since llama.cpp does not normalize) exactly as the Hugging Face tokenizer and as FromGGUF of
// the exported metadata do.
func TestExportQwen3ToLlamaCpp(t *testing.T) {
	hf := loadQwen3(t)
	kvs, err := hf.GGUFMetadata("")
	if err != nil {
		t.Fatal(err)
	}
	v, err := VocabFromMetadata(KVList(kvs))
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "gpt2" || v.Pre != "qwen2" {
		t.Fatalf("exported model %q pre %q, want gpt2 qwen2", v.Model, v.Pre)
	}
	back, err := FromGGUF(v)
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash() != hf.Hash() {
		t.Errorf("hash of the exported vocabulary %s differs from the tokenizer.json one %s", back.Hash(), hf.Hash())
	}
	// Architecture keys from a real vocabulary file, so llama.cpp accepts the file.
	_, ref := loadVocabGGUF(t, "qwen2")
	md, err := readTestGGUF(ref)
	if err != nil {
		t.Fatal(err)
	}
	var keep []KeyValue
	for k, val := range md {
		if strings.HasPrefix(k, "general.") || strings.HasPrefix(k, "qwen2.") {
			keep = append(keep, KeyValue{k, val})
		}
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].Key < keep[j].Key })
	all, err := KeyValuesToGGUF(keep)
	if err != nil {
		t.Fatal(err)
	}
	exported, err := KeyValuesToGGUF(kvs)
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, exported...)
	out := filepath.Join(t.TempDir(), "qwen3-vocab.gguf")
	w, err := gguf.Create(out, gguf.WriterOptions{NoManifest: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata = all
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, s := range corpusTexts(t, false) {
		texts = append(texts, norm.NFC.String(s))
	}
	want := llamaTokenize(t, out, texts, true)
	for name, tok := range map[string]*Tokenizer{"tokenizer.json": hf, "exported GGUF": back} {
		fails := 0
		for i, s := range texts {
			if got := tok.Encode(s, EncodeOptions{ParseSpecial: true}); !equalIDs(got, want[i]) {
				fails++
				if fails <= 5 {
					t.Errorf("%s %q:\n got %v\nwant %v", name, s, got, want[i])
				}
			}
		}
		if fails > 0 {
			t.Errorf("%s: %d of %d texts differ from llama.cpp", name, fails, len(texts))
		}
	}
}
