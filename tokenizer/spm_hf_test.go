package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"unicode/utf8"
)

// Rebuilds the Hugging Face files of the Llama SentencePiece vocabulary from
// ggml-vocab-llama-spm.gguf: tokenizer.model (protobuf) and a legacy LlamaTokenizerFast
// tokenizer.json whose merges are derived the way transformers' SentencePieceExtractor derives
// them. Both must reproduce llama.cpp's test vectors.

func pbAppendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func encodeSentencePieceModel(tokens []string, scores []float32, types []int32) []byte {
	var out []byte
	for i := range tokens {
		var p []byte
		p = pbAppendVarint(p, 1<<3|2)
		p = pbAppendVarint(p, uint64(len(tokens[i])))
		p = append(p, tokens[i]...)
		p = pbAppendVarint(p, 2<<3|5)
		p = binary.LittleEndian.AppendUint32(p, math.Float32bits(scores[i]))
		if types[i] != 1 {
			p = pbAppendVarint(p, 3<<3|0)
			p = pbAppendVarint(p, uint64(types[i]))
		}
		out = pbAppendVarint(out, 1<<3|2)
		out = pbAppendVarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	// A trainer_spec field the parser must skip.
	out = pbAppendVarint(out, 2<<3|2)
	out = pbAppendVarint(out, 3)
	return append(out, 0x08, 0x96, 0x01)
}

// extractMerges is SentencePieceExtractor.extract(vocab_scores): for every piece (in id
// order) all splits into two pieces, sorted by the ids of the parts, then all merges stably
// sorted by the score of the merged piece, highest first.
func extractMerges(tokens []string, scores []float32) [][2]string {
	vocab := map[string]int{}
	for i, s := range tokens {
		vocab[s] = i
	}
	type m struct {
		l, r  string
		score float32
	}
	var merges []m
	for _, piece := range tokens {
		var local []m
		for i := range piece {
			if i == 0 {
				continue
			}
			l, r := piece[:i], piece[i:]
			if !utf8.ValidString(l) {
				continue
			}
			if _, ok := vocab[l]; !ok {
				continue
			}
			if _, ok := vocab[r]; !ok {
				continue
			}
			local = append(local, m{l, r, scores[vocab[piece]]})
		}
		sort.SliceStable(local, func(a, b int) bool {
			if vocab[local[a].l] != vocab[local[b].l] {
				return vocab[local[a].l] < vocab[local[b].l]
			}
			return vocab[local[a].r] < vocab[local[b].r]
		})
		merges = append(merges, local...)
	}
	sort.SliceStable(merges, func(a, b int) bool { return merges[a].score > merges[b].score })
	out := make([][2]string, len(merges))
	for i, x := range merges {
		out[i] = [2]string{x.l, x.r}
	}
	return out
}

func TestLlamaSPMFromHFFiles(t *testing.T) {
	_, path := loadVocabGGUF(t, "llama-spm")
	md, err := readTestGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	tokens := md["tokenizer.ggml.tokens"].([]string)
	scores := md["tokenizer.ggml.scores"].([]float32)
	types := md["tokenizer.ggml.token_type"].([]int32)
	inputs, want := readVocabTests(t, path)

	vocab := map[string]int{}
	for i, s := range tokens {
		vocab[s] = i
	}
	merges := extractMerges(tokens, scores)
	tj, err := json.Marshal(map[string]any{
		"added_tokens": []jsonAdded{{ID: 0, Content: "<unk>", Special: true}, {ID: 1, Content: "<s>", Special: true}, {ID: 2, Content: "</s>", Special: true}},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
			"vocab": vocab, "merges": merges},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := []byte(`{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": true, "add_eos_token": false}`)
	model := encodeSentencePieceModel(tokens, scores, types)

	check := func(t *testing.T, tok *Tokenizer) {
		fails := 0
		for _, in := range inputs {
			if got := tok.Encode(in, EncodeOptions{}); !equalIDs(got, want[in]) {
				fails++
				if fails <= 3 {
					t.Errorf("%q:\n got %v\nwant %v", in, got, want[in])
				}
			}
		}
		if fails > 0 {
			t.Errorf("%d of %d inputs differ", fails, len(inputs))
		}
	}

	t.Run("tokenizer.json", func(t *testing.T) {
		tok := mustFromHF(t, HFFiles{TokenizerJSON: tj, TokenizerConfigJSON: cfg})
		check(t, tok)
	})
	t.Run("tokenizer.model", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.model"), model, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := LoadHF(dir)
		if err != nil {
			t.Fatal(err)
		}
		check(t, tok)
	})
	t.Run("export", func(t *testing.T) {
		// With tokenizer.json, tokenizer.model and tokenizer_config.json the converter's
		// keys are exactly those of the llama.cpp file.
		tok := mustFromHF(t, HFFiles{TokenizerJSON: tj, TokenizerConfigJSON: cfg, SentencePieceModel: model})
		kvs, err := tok.GGUFMetadata("")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		for _, kv := range kvs {
			got[kv.Key] = kv.Value
		}
		for k, w := range md {
			if len(k) < 10 || k[:10] != "tokenizer." {
				continue
			}
			if !reflect.DeepEqual(got[k], w) {
				t.Errorf("%s: exported %v differs from the file", k, summarize(got[k]))
			}
			delete(got, k)
		}
		for k := range got {
			t.Errorf("exported %s, which the file does not have", k)
		}
	})
}

func summarize(v any) any {
	switch x := v.(type) {
	case []string:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	}
	return v
}

func TestParseSentencePieceModelErrors(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":          {},
		"truncated":      {0x0A, 0x05, 0x0A},
		"bad wire type":  {0x0B},
		"long length":    {0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F},
		"endless varint": {0x0A, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
	} {
		if _, err := parseSentencePieceModel(data); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// FuzzParseSentencePieceModel: arbitrary bytes never panic the protobuf reader.
func FuzzParseSentencePieceModel(f *testing.F) {
	f.Add(encodeSentencePieceModel([]string{"<unk>", "▁a", "<0x41>"}, []float32{0, -1, 0}, []int32{2, 1, 6}))
	f.Add([]byte{0x0A, 0x02, 0x0A, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		pieces, err := parseSentencePieceModel(data)
		if err == nil && len(pieces) == 0 {
			t.Fatal("no error and no pieces")
		}
		if err == nil {
			sv := &spVocab{pieces: pieces, vocabSize: len(pieces)}
			tokens, _, _ := sv.tokens()
			if len(tokens) != len(pieces) {
				t.Fatal("token count")
			}
		}
	})
}
