package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// naiveBPE is the textbook algorithm: repeatedly merge every occurrence (left to right) of the
// adjacent pair with the lowest merge rank, starting from single symbols.
func naiveBPE(symbols []string, ranks map[[2]string]int) []string {
	for {
		best, bestRank := [2]string{}, -1
		for i := 0; i+1 < len(symbols); i++ {
			if r, ok := ranks[[2]string{symbols[i], symbols[i+1]}]; ok && (bestRank < 0 || r < bestRank) {
				best, bestRank = [2]string{symbols[i], symbols[i+1]}, r
			}
		}
		if bestRank < 0 {
			return symbols
		}
		var out []string
		for i := 0; i < len(symbols); i++ {
			if i+1 < len(symbols) && symbols[i] == best[0] && symbols[i+1] == best[1] {
				out = append(out, best[0]+best[1])
				i++
				continue
			}
			out = append(out, symbols[i])
		}
		symbols = out
	}
}

// TestBPEMatchesNaive compares the merge engine (linear scan for short words, heap for long
// ones) with the textbook algorithm on random words over a small alphabet, which produces
// many competing merges, including words longer than linearLimit.
func TestBPEMatchesNaive(t *testing.T) {
	tok := mustFromHF(t, HFFiles{TokenizerJSON: syntheticByteLevelJSON(t, nil)})
	ranks := map[[2]string]int{}
	for i, m := range tok.merges {
		if _, ok := ranks[m]; !ok {
			ranks[m] = i
		}
	}
	rng := rand.New(rand.NewSource(1))
	alphabet := []byte("thequickbrownfoxdgs ")
	w := &encodeWork{}
	for iter := 0; iter < 3000; iter++ {
		n := 1 + rng.Intn(12)
		if iter%10 == 0 {
			n = linearLimit + rng.Intn(100)
		}
		word := make([]byte, n)
		for i := range word {
			word[i] = alphabet[rng.Intn(len(alphabet))]
		}
		var syms []string
		for _, b := range word {
			syms = append(syms, byteLevelStrings[b])
		}
		want := naiveBPE(syms, ranks)
		ids := tok.bpeWord(nil, string(word), w)
		var got []string
		for _, id := range ids {
			got = append(got, tok.tokens[id])
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("word %q:\n got %q\nwant %q", word, got, want)
		}
	}
}

func TestSyntheticByteLevel(t *testing.T) {
	tok := mustFromHF(t, HFFiles{TokenizerJSON: syntheticByteLevelJSON(t, defaultAdded())})
	imStart, _ := tok.TokenID("<|im_start|>")
	think, _ := tok.TokenID("<think>")
	if tok.TokenType(imStart) != TokenControl || tok.TokenType(think) != TokenUserDefined {
		t.Fatalf("types: <|im_start|> %d, <think> %d", tok.TokenType(imStart), tok.TokenType(think))
	}
	text := "<|im_start|>the fox<think>x"
	parsed := tok.Encode(text, EncodeOptions{ParseSpecial: true})
	plain := tok.Encode(text, EncodeOptions{})
	if parsed[0] != imStart || !containsID(parsed, think) {
		t.Errorf("ParseSpecial: %v lacks the added tokens", parsed)
	}
	if containsID(plain, imStart) || !containsID(plain, think) {
		t.Errorf("plain: %v: control tokens must stay text, user-defined ones must match", plain)
	}
	for _, ids := range [][]int32{parsed, plain} {
		if got := tok.Decode(ids); got != text {
			t.Errorf("Decode = %q, want %q", got, text)
		}
	}
	// NFC normalizer: decomposed input encodes like composed input.
	if a, b := tok.Encode("cafe\u0301", EncodeOptions{}), tok.Encode("caf\u00e9", EncodeOptions{}); !equalIDs(a, b) {
		t.Errorf("NFC: %v vs %v", a, b)
	}
	for _, c := range loadCorpus(t) {
		for _, parse := range []bool{false, true} {
			if got := tok.Decode(tok.Encode(c.text, EncodeOptions{ParseSpecial: parse})); got != norm.NFC.String(c.text) {
				t.Fatalf("%s: round trip failed: %q", c.name, got)
			}
		}
	}
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestAddedTokenFlags(t *testing.T) {
	added := []jsonAdded{
		{ID: -1, Content: "<L>", LStrip: true, Special: true},
		{ID: -1, Content: "<R>", RStrip: true, Special: true},
		{ID: -1, Content: "<W>", SingleWord: true},
		{ID: -1, Content: "caf\u00e9", Normalized: true},
		{ID: -1, Content: "dog", Normalized: false},
		{ID: -1, Content: "<LR>", LStrip: true, RStrip: true},
	}
	tok := mustFromHF(t, HFFiles{TokenizerJSON: syntheticByteLevelJSON(t, added)})
	id := func(s string) int32 { i, _ := tok.TokenID(s); return i }
	enc := func(s string) []int32 { return tok.Encode(s, EncodeOptions{ParseSpecial: true}) }
	plain := func(s string) []int32 {
		return tok.Encode(s, EncodeOptions{ParseSpecial: true}) // helper for pieces without added tokens
	}
	cases := []struct {
		in   string
		want []int32
	}{
		{"a  <L>b", concat(plain("a"), []int32{id("<L>")}, plain("b"))},
		{"a<R>  b", concat(plain("a"), []int32{id("<R>")}, plain("b"))},
		{"x <LR> y", concat(plain("x"), []int32{id("<LR>")}, plain("y"))},
		{"x<W>y", concat(plain("x<"), plain("W"), plain(">y"))},
		{"x <W> y", concat(plain("x "), []int32{id("<W>")}, plain(" y"))},
		{"cafe\u0301!", concat([]int32{id("caf\u00e9")}, plain("!"))},
		{"the dog", concat(plain("the "), []int32{id("dog")})},
	}
	for _, c := range cases {
		if got := enc(c.in); !equalIDs(got, c.want) {
			t.Errorf("%q: got %v want %v", c.in, got, c.want)
		}
	}
	// Special tokens are left as text with ParseSpecial off; lstrip then does not apply.
	if got := tok.Encode("a <L>", EncodeOptions{}); containsID(got, id("<L>")) {
		t.Errorf("special <L> matched without ParseSpecial: %v", got)
	}
}

func concat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestSyntheticSPMStyle(t *testing.T) {
	tok := mustFromHF(t, HFFiles{TokenizerJSON: syntheticSPMJSON(t)})
	if !tok.AddBOS() || tok.BOS() != 1 || tok.UNK() != 0 {
		t.Fatalf("bos %d add %v unk %d", tok.BOS(), tok.AddBOS(), tok.UNK())
	}
	ids := tok.Encode("the fox", EncodeOptions{AddSpecial: true})
	if ids[0] != 1 {
		t.Errorf("AddSpecial did not add <s>: %v", ids)
	}
	if got := tok.Decode(ids[1:]); got != "the fox" {
		t.Errorf("Decode = %q", got)
	}
	// Characters outside the vocabulary fall back to <0xXX> byte tokens.
	ids = tok.Encode("é€", EncodeOptions{})
	var names []string
	for _, id := range ids {
		names = append(names, tok.TokenText(id))
	}
	want := []string{"▁", "<0xC3>", "<0xA9>", "<0xE2>", "<0x82>", "<0xAC>"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("byte fallback: %q want %q", names, want)
	}
	if got := tok.Decode(ids); got != "é€" {
		t.Errorf("Decode(byte fallback) = %q", got)
	}
	for _, c := range loadCorpus(t) {
		if strings.Contains(c.text, "▁") || strings.Contains(c.text, "<s>") || strings.Contains(c.text, "</s>") {
			continue
		}
		if got := tok.Decode(tok.Encode(c.text, EncodeOptions{})); got != c.text {
			t.Fatalf("%s: round trip failed: %q", c.name, got)
		}
	}
	// Without byte fallback, unknown characters become one fused <unk>.
	var doc map[string]any
	if err := json.Unmarshal(syntheticSPMJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	doc["model"].(map[string]any)["byte_fallback"] = false
	b, _ := json.Marshal(doc)
	tok2 := mustFromHF(t, HFFiles{TokenizerJSON: b})
	ids = tok2.Encode("the éé€ fox", EncodeOptions{})
	n := 0
	for _, id := range ids {
		if id == tok2.UNK() {
			n++
		}
	}
	if n != 1 {
		t.Errorf("fuse_unk: %v has %d <unk>", ids, n)
	}
}

func TestHFErrors(t *testing.T) {
	good := syntheticByteLevelJSON(t, defaultAdded())
	mutate := func(f func(doc map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal(good, &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		b, _ := json.Marshal(doc)
		return b
	}
	model := func(doc map[string]any) map[string]any { return doc["model"].(map[string]any) }
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"not json", []byte("{"), "tokenizer.json"},
		{"wordpiece", mutate(func(d map[string]any) { model(d)["type"] = "WordPiece" }), `model type "WordPiece"`},
		{"empty vocab", mutate(func(d map[string]any) { model(d)["vocab"] = map[string]any{} }), "model.vocab is empty"},
		{"negative id", mutate(func(d map[string]any) { model(d)["vocab"].(map[string]any)["zz"] = -3 }), `model.vocab["zz"] = -3`},
		{"huge id", mutate(func(d map[string]any) { model(d)["vocab"].(map[string]any)["zz"] = 1 << 40 }), `model.vocab["zz"]`},
		{"fractional id", mutate(func(d map[string]any) { model(d)["vocab"].(map[string]any)["zz"] = 1.5 }), "tokenizer.json"},
		{"dup id", mutate(func(d map[string]any) { model(d)["vocab"].(map[string]any)["zz"] = 5 }), "model.vocab id 5"},
		{"bad merge", mutate(func(d map[string]any) { model(d)["merges"] = []any{[]any{"a"}} }), "model.merges[0]"},
		{"bad merge string", mutate(func(d map[string]any) { model(d)["merges"] = []any{"ab"} }), "model.merges[0]"},
		{"bad normalizer", mutate(func(d map[string]any) { d["normalizer"] = map[string]any{"type": "Precompiled"} }), `normalizer type "Precompiled"`},
		{"bad pre", mutate(func(d map[string]any) { d["pre_tokenizer"] = map[string]any{"type": "BertPreTokenizer"} }), `pre_tokenizer type "BertPreTokenizer"`},
		{"lookahead regex", mutate(func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `a(?=b)`}, "behavior": "Isolated"}
		}), "regex"},
		{"added no id", mutate(func(d map[string]any) { d["added_tokens"] = []any{map[string]any{"content": "x"}} }), "added_tokens[0] has no id"},
		{"added empty", mutate(func(d map[string]any) { d["added_tokens"] = []any{map[string]any{"id": 400, "content": ""}} }), "added_tokens[0]"},
		{"added conflict", mutate(func(d map[string]any) { d["added_tokens"] = []any{map[string]any{"id": 5, "content": "<x>"}} }), `added token "<x>" has id 5`},
		{"suffix", mutate(func(d map[string]any) { model(d)["end_of_word_suffix"] = "</w>" }), "end_of_word_suffix"},
		{"dropout", mutate(func(d map[string]any) { model(d)["dropout"] = 0.1 }), "dropout"},
		{"unk missing", mutate(func(d map[string]any) { model(d)["unk_token"] = "<nope>" }), "unk_token"},
	}
	for _, c := range cases {
		_, err := FromHF(HFFiles{TokenizerJSON: c.data})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := FromHF(HFFiles{TokenizerJSON: good, ConfigJSON: []byte(`{"vocab_size": 10}`)}); err == nil || !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("small config vocab_size: %v", err)
	}
	if _, err := FromHF(HFFiles{TokenizerJSON: good, ConfigJSON: []byte(`{"vocab_size": 100000000}`)}); err == nil || !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("huge config vocab_size: %v", err)
	}
	if _, err := LoadHF(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("missing tokenizer.json: %v", err)
	}
}

// TestHFSpecialsAndTemplates checks special ids, add_bos/add_eos, padding to config.json's
// vocab_size and chat templates as gguf-py's SpecialVocab resolves them.
func TestHFSpecialsAndTemplates(t *testing.T) {
	dir := t.TempDir()
	tj := syntheticByteLevelJSON(t, defaultAdded())
	var n int
	{
		var doc struct {
			Model struct{ Vocab map[string]int } `json:"model"`
		}
		_ = json.Unmarshal(tj, &doc)
		n = len(doc.Model.Vocab) + 4
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", string(tj))
	write("tokenizer_config.json", `{"add_bos_token": false, "bos_token": null, "eos_token": "<|im_end|>",
		"pad_token": {"content": "<|im_start|>"}, "chat_template": [{"name": "default", "template": "T1"},
		{"name": "tool use", "template": "T2"}]}`)
	write("config.json", `{"vocab_size": `+itoa(n+10)+`, "bos_token_id": 3, "eos_token_id": [1, 2]}`)
	tok, err := LoadHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	imStart, _ := tok.TokenID("<|im_start|>")
	imEnd, _ := tok.TokenID("<|im_end|>")
	if tok.VocabSize() != n+10 || tok.EOS() != imEnd || tok.PAD() != imStart || tok.BOS() != 3 || tok.AddBOS() {
		t.Fatalf("vocab %d eos %d pad %d bos %d addbos %v", tok.VocabSize(), tok.EOS(), tok.PAD(), tok.BOS(), tok.AddBOS())
	}
	if tok.TokenType(int32(n+5)) != TokenUnused || tok.TokenText(int32(n+5)) != "[PAD"+itoa(n+5)+"]" {
		t.Errorf("padding token %q type %d", tok.TokenText(int32(n+5)), tok.TokenType(int32(n+5)))
	}
	if tok.ChatTemplate() != "T1" || !reflect.DeepEqual(tok.NamedChatTemplates(), []NamedTemplate{{"tool_use", "T2"}}) {
		t.Errorf("templates %q %v", tok.ChatTemplate(), tok.NamedChatTemplates())
	}
	kvs, err := tok.GGUFMetadata("qwen2")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, kv.Key)
	}
	wantKeys := []string{KeyModel, KeyPre, KeyTokens, KeyTokenType, KeyMerges,
		"tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.bos_token_id",
		KeyAddBOS, "tokenizer.chat_template.tool_use", KeyChatTemplates, KeyChatTemplate}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Errorf("keys\n got %q\nwant %q", keys, wantKeys)
	}
	md := KVList(kvs)
	if v, _ := md.Lookup("tokenizer.ggml.bos_token_id"); v != uint32(3) {
		t.Errorf("bos id %v", v)
	}
	if v, _ := md.Lookup(KeyAddBOS); v != false {
		t.Errorf("add_bos %v", v)
	}
	merges, _ := md.Lookup(KeyMerges)
	if m := merges.([]string); len(m) != len(tok.merges) || m[0] != tok.merges[0][0]+" "+tok.merges[0][1] {
		t.Errorf("merges %q", m[:2])
	}
	// The exported vocabulary loads back with the same hash; the hash ignores the padding.
	v, err := VocabFromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromGGUF(v)
	if err != nil {
		t.Fatal(err)
	}
	plain := mustFromHF(t, HFFiles{TokenizerJSON: tj})
	if back.Hash() != tok.Hash() || plain.Hash() != tok.Hash() {
		t.Errorf("hash differs: hf %s exported %s unpadded %s", tok.Hash(), back.Hash(), plain.Hash())
	}
	// ... and changes with the merges.
	mod := mustFromHF(t, HFFiles{TokenizerJSON: tj})
	mod.merges = mod.merges[1:]
	if mod.Hash() == plain.Hash() {
		t.Error("hash ignores merges")
	}
	// chat_template.jinja is used when tokenizer_config.json has none.
	write("tokenizer_config.json", `{}`)
	write("chat_template.jinja", "J")
	tok, err = LoadHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.ChatTemplate() != "J" {
		t.Errorf("chat_template.jinja: %q", tok.ChatTemplate())
	}
}

// TestGGUFExportRoundTrip exports every llama.cpp vocabulary read with FromGGUF and checks
// that the tokenizer keys come back exactly as the converter wrote them.
func TestGGUFExportRoundTrip(t *testing.T) {
	for _, name := range []string{"qwen2", "qwen35", "llama-bpe", "gpt-2", "llama-spm"} {
		t.Run(name, func(t *testing.T) {
			tok, path := loadVocabGGUF(t, name)
			md, err := readTestGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			kvs, err := tok.GGUFMetadata("")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			for _, kv := range kvs {
				got[kv.Key] = kv.Value
			}
			for k, want := range md {
				if !strings.HasPrefix(k, "tokenizer.") {
					continue
				}
				if !reflect.DeepEqual(got[k], want) {
					t.Errorf("%s: exported %T differs from the file's %T", k, got[k], want)
				}
				delete(got, k)
			}
			for k := range got {
				t.Errorf("exported %s, which the file does not have", k)
			}
		})
	}
}

// TestChkHash checks the converter's pre-tokenizer probe: encoding chkTxt must hash to the
// value llama.cpp's convert_hf_to_gguf.py recorded for these tokenizers, which pins the
// exact ids Hugging Face produces on a string full of pre-tokenizer corner cases. (The
// ggml-vocab-qwen35 test file carries the Qwen1.5 vocabulary, so the Qwen3.5 hashes cannot be
// checked here.)
func TestChkHash(t *testing.T) {
	for name, want := range map[string][]string{
		"gpt-2":     {"3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454"},
		"llama-bpe": {"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5"},
		"qwen2":     {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c"},
	} {
		tok, _ := loadVocabGGUF(t, name)
		h := tok.ChkHash()
		found := false
		for _, w := range want {
			found = found || h == w
		}
		if !found {
			t.Errorf("%s: chkhsh %s, want one of %v", name, h, want)
		}
	}
	if p := loadQwen3(t).Pre(); p != "qwen2" {
		t.Errorf("Qwen3 tokenizer.json detected as %q, want qwen2", p)
	}
}

func TestEncodeAddSpecial(t *testing.T) {
	for name, want := range map[string][]int32{
		"llama-spm": {1}, "llama-bpe": {128000}, "qwen2": nil, "gpt-2": nil,
	} {
		tok, _ := loadVocabGGUF(t, name)
		ids := tok.Encode("hi", EncodeOptions{AddSpecial: true})
		plain := tok.Encode("hi", EncodeOptions{})
		if !equalIDs(ids, append(append([]int32(nil), want...), plain...)) {
			t.Errorf("%s: AddSpecial gives %v (plain %v)", name, ids, plain)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := mustFromHF(t, HFFiles{TokenizerJSON: syntheticByteLevelJSON(t, defaultAdded())})
	corpus := loadCorpus(t)
	want := make([][]int32, len(corpus))
	for i, c := range corpus {
		want[i] = tok.Encode(c.text, EncodeOptions{ParseSpecial: true})
	}
	tok.cache.mu.Lock()
	clear(tok.cache.m)
	tok.cache.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < len(corpus); k++ {
				i := (k + g*7) % len(corpus)
				if got := tok.Encode(corpus[i].text, EncodeOptions{ParseSpecial: true}); !equalIDs(got, want[i]) {
					errs <- corpus[i].name
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent Encode differs on %s", e)
	}
}
