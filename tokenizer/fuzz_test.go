package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/tq-project/tq/internal/testenv"
)

var (
	fuzzTokOnce sync.Once
	fuzzToks    []*Tokenizer // synthetic byte-level (HF), synthetic SPM-style (HF), qwen2 GGUF, llama-spm GGUF
	fuzzNames   []string
)

// fuzzTokenizers returns the tokenizers FuzzEncode exercises: two synthetic ones always, and
// the qwen2 and llama-spm GGUF vocabularies when the references are installed.
func fuzzTokenizers(t *testing.T) ([]*Tokenizer, []string) {
	fuzzTokOnce.Do(func() {
		bl, err := FromHF(HFFiles{TokenizerJSON: syntheticByteLevelJSON(t, defaultAdded())})
		if err != nil {
			t.Fatal(err)
		}
		spm, err := FromHF(HFFiles{TokenizerJSON: syntheticSPMJSON(t)})
		if err != nil {
			t.Fatal(err)
		}
		fuzzToks, fuzzNames = []*Tokenizer{bl, spm}, []string{"synthetic-bytelevel", "synthetic-spm"}
		root := testenv.RepoRoot(t)
		for _, name := range []string{"qwen2", "llama-spm"} {
			path := filepath.Join(root, "testdata", "llamacpp", "src", "models", "ggml-vocab-"+name+".gguf")
			if _, err := os.Stat(path); err != nil {
				continue
			}
			md, err := readTestGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			v, err := VocabFromMetadata(md)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := FromGGUF(v)
			if err != nil {
				t.Fatal(err)
			}
			fuzzToks = append(fuzzToks, tok)
			fuzzNames = append(fuzzNames, name)
		}
	})
	if len(fuzzToks) < 4 && requireRefs() {
		t.Fatal("llama.cpp vocabularies missing (TQ_REQUIRE_REFS=1)")
	}
	return fuzzToks, fuzzNames
}

// FuzzEncode: Encode never panics, ids are in range, and for valid UTF-8 Decode(Encode(s))
// gives s back (NFC-normalized for the NFC tokenizer; SentencePiece only without "▁" and
// control tokens).
func FuzzEncode(f *testing.F) {
	for _, s := range edgeCases {
		f.Add(s, false)
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b), true)
		}
	}
	f.Add("\xff\xfe<|im_start|>\xc3(", true)
	f.Add("a\u0085b\ufeffc\u2028d", false)
	f.Fuzz(func(t *testing.T, s string, parse bool) {
		toks, names := fuzzTokenizers(t)
		for i, tok := range toks {
			ids := tok.Encode(s, EncodeOptions{ParseSpecial: parse, AddSpecial: parse})
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("%s: id %d out of range", names[i], id)
				}
			}
			dec := tok.Decode(tok.Encode(s, EncodeOptions{ParseSpecial: parse}))
			if !utf8.ValidString(s) {
				continue
			}
			want := s
			switch {
			case tok.hf && tok.normalizer != nil && tok.byteLevel:
				want = norm.NFC.String(s)
			case !tok.byteLevel:
				if strings.Contains(s, "▁") || (parse && strings.ContainsAny(s, "<")) || strings.ContainsRune(s, utf8.RuneError) {
					continue
				}
			}
			if dec != want {
				t.Fatalf("%s: Decode(Encode(%q)) = %q", names[i], s, dec)
			}
		}
	})
}

// FuzzLoadTokenizerJSON: hostile tokenizer.json / tokenizer_config.json never panic and either
// fail with an error or give a tokenizer that encodes and decodes without panicking.
func FuzzLoadTokenizerJSON(f *testing.F) {
	good := syntheticByteLevelJSON(f, defaultAdded())
	f.Add(good, []byte(`{"eos_token": "<|im_end|>", "add_bos_token": true, "chat_template": "x"}`))
	f.Add(syntheticSPMJSON(f), []byte(`{"bos_token": {"content": "<s>"}, "chat_template": [{"name": "a b", "template": "t"}]}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`), []byte(nil))
	f.Add([]byte(`{"model": {"vocab": {"a": 0}, "merges": [["a", "a"]]}, "added_tokens": [{"id": 7, "content": "<x>", "lstrip": true, "rstrip": true, "single_word": true}]}`), []byte(`{"added_tokens_decoder": {"9": {"content": "<y>"}}}`))
	f.Add([]byte(`{"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "prepend_scheme": "first"}, {"type": "Digits", "individual_digits": true}, {"type": "Split", "pattern": {"String": "x"}, "behavior": "MergedWithNext"}]}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Strip"}, {"type": "Replace", "pattern": {"Regex": "a+"}, "content": "b"}]}}`), []byte(nil))
	f.Add([]byte(`{"model": {"vocab": {"a": 2147483647}}}`), []byte(nil))
	f.Add([]byte(`{"model": {"vocab": {"a": 0}}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "a"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "a"}}]}}`), []byte(`{"add_eos_token": "yes"}`))
	var nested strings.Builder
	for i := 0; i < 20; i++ {
		nested.WriteString(`{"type": "Sequence", "normalizers": [`)
	}
	f.Add([]byte(`{"model": {"vocab": {"a": 0}}, "normalizer": `+nested.String()+`]}`), []byte(nil))
	f.Fuzz(func(t *testing.T, tj, cfg []byte) {
		tok, err := FromHF(HFFiles{TokenizerJSON: tj, TokenizerConfigJSON: cfg})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		for _, s := range []string{"", "a ab b", "<|im_start|>x<x> 12 é\xff", "  \n\t"} {
			ids := tok.Encode(s, EncodeOptions{ParseSpecial: true, AddSpecial: true})
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range %d", id, tok.VocabSize())
				}
			}
			_ = tok.Decode(ids)
		}
		if kvs, err := tok.GGUFMetadata("qwen2"); err == nil {
			if _, err := VocabFromMetadata(KVList(kvs)); err != nil {
				t.Fatalf("exported metadata does not read back: %v", err)
			}
		}
		_ = tok.Hash()
	})
}

// FuzzFromGGUF: arbitrary token lists, types, scores and merges never panic FromGGUF or the
// resulting tokenizer.
func FuzzFromGGUF(f *testing.F) {
	f.Add("gpt2", "qwen2", "a\nb\nab\nĠ\nĠa\n<|x|>", "1 1 1 1 1 3", "a b\nĠ a\nab")
	f.Add("llama", "default", "<unk>\n<s>\n</s>\n▁\na\n▁a\n<0x41>", "2 3 3 1 1 1 6", "")
	f.Add("gpt2", "llama-bpe", "\n\nx\nx", "", "x x\n x\nxx")
	f.Add("gpt2", "nope", "a", "", "")
	f.Fuzz(func(t *testing.T, model, pre, tokens, types, merges string) {
		v := GGUFVocab{Model: model, Pre: pre, Tokens: strings.Split(tokens, "\n")}
		if merges != "" || model == "gpt2" {
			v.Merges = strings.Split(merges, "\n")
		}
		if types != "" {
			for _, f := range strings.Fields(types) {
				n := int32(0)
				for _, c := range f {
					n = n*10 + int32(c%10)
				}
				v.Types = append(v.Types, n)
			}
			for len(v.Types) < len(v.Tokens) {
				v.Types = append(v.Types, 1)
			}
		}
		v.Scores = make([]float32, len(v.Tokens))
		for i := range v.Scores {
			v.Scores[i] = float32(len(v.Tokens[i])) - float32(i)/8
		}
		v.SpecialIDs = []SpecialID{{"bos", 1}, {"eos", 1 << 31}}
		tok, err := FromGGUF(v)
		if err != nil {
			return
		}
		for _, s := range []string{"", "a b ab", tokens, "<|x|>é\xffĠ"} {
			ids := tok.Encode(s, EncodeOptions{ParseSpecial: true, AddSpecial: true})
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range", id)
				}
			}
			_ = tok.Decode(ids)
		}
		if kvs, err := tok.GGUFMetadata(""); err == nil {
			b, _ := json.Marshal(len(kvs))
			_ = b
		}
	})
}
