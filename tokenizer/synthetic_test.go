package tokenizer

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// Small synthetic tokenizers built in code, so unit and fuzz tests run without the llama.cpp
// references.

// trainMerges learns up to n BPE merges from text with the textbook algorithm (count adjacent
// pairs inside pre-tokenized words, merge the most frequent, repeat). It returns the merges and
// the resulting vocabulary (base symbols first, then merge results).
func trainMerges(words []string, base []string, n int) (merges [][2]string, vocab []string) {
	seqs := make([][]string, len(words))
	for i, w := range words {
		for _, r := range w {
			seqs[i] = append(seqs[i], string(r))
		}
	}
	vocab = append(vocab, base...)
	have := map[string]bool{}
	for _, b := range base {
		have[b] = true
	}
	for len(merges) < n {
		counts := map[[2]string]int{}
		for _, s := range seqs {
			for j := 0; j+1 < len(s); j++ {
				counts[[2]string{s[j], s[j+1]}]++
			}
		}
		var best [2]string
		bestN := 1
		keys := make([][2]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool {
			if keys[a][0] != keys[b][0] {
				return keys[a][0] < keys[b][0]
			}
			return keys[a][1] < keys[b][1]
		})
		for _, k := range keys {
			if counts[k] > bestN {
				best, bestN = k, counts[k]
			}
		}
		if bestN <= 1 {
			break
		}
		merges = append(merges, best)
		if m := best[0] + best[1]; !have[m] {
			have[m] = true
			vocab = append(vocab, m)
		}
		for i, s := range seqs {
			var out []string
			for j := 0; j < len(s); j++ {
				if j+1 < len(s) && s[j] == best[0] && s[j+1] == best[1] {
					out = append(out, best[0]+best[1])
					j++
					continue
				}
				out = append(out, s[j])
			}
			seqs[i] = out
		}
	}
	return merges, vocab
}

const trainText = `the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs away
and then the fox comes back to the den where the other foxes are sleeping. There's a
number 12345 and another 2024 in this text, plus some code: func main() { return nil }`

type jsonAdded struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// syntheticByteLevelJSON returns a byte-level BPE tokenizer.json (Qwen2 pre-tokenizer regex,
// NFC normalizer, list-of-pairs merges) trained on trainText, with added tokens.
func syntheticByteLevelJSON(t testing.TB, added []jsonAdded) []byte {
	t.Helper()
	var base []string
	for b := 0; b < 256; b++ {
		base = append(base, byteLevelStrings[b])
	}
	var words []string
	ends := splitQwen2.split(trainText, &splitScratch{})
	start := 0
	for _, e := range ends {
		words = append(words, byteLevelEncode(trainText[start:e]))
		start = e
	}
	merges, vocab := trainMerges(words, base, 120)
	v := map[string]int{}
	for i, s := range vocab {
		v[s] = i
	}
	pairs := make([][]string, len(merges))
	for i, m := range merges {
		pairs[i] = []string{m[0], m[1]}
	}
	for i := range added {
		if added[i].ID < 0 {
			added[i].ID = len(vocab) + i
		}
	}
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": v, "merges": pairs},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// syntheticSPMJSON returns a Llama-2 style tokenizer.json: normalizer Prepend("▁") +
// Replace(" ", "▁"), no pre-tokenizer, BPE with byte_fallback and <unk>, string merges.
func syntheticSPMJSON(t testing.TB) []byte {
	t.Helper()
	base := []string{"<unk>", "<s>", "</s>"}
	for b := 0; b < 256; b++ {
		base = append(base, byteTokenName(byte(b)))
	}
	seen := map[string]bool{}
	for _, r := range "▁" + strings.ReplaceAll(trainText, " ", "▁") {
		if !seen[string(r)] && r != '\n' {
			seen[string(r)] = true
			base = append(base, string(r))
		}
	}
	var words []string
	for _, w := range strings.Fields(trainText) {
		words = append(words, "▁"+w)
	}
	merges, vocab := trainMerges(words, base, 80)
	v := map[string]int{}
	for i, s := range vocab {
		v[s] = i
	}
	ms := make([]string, len(merges))
	for i, m := range merges {
		ms[i] = m[0] + " " + m[1]
	}
	doc := map[string]any{
		"added_tokens": []jsonAdded{
			{ID: 0, Content: "<unk>", Special: true}, {ID: 1, Content: "<s>", Special: true}, {ID: 2, Content: "</s>", Special: true},
		},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}}},
		"decoder": map[string]any{"type": "Sequence"},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "fuse_unk": true,
			"byte_fallback": true, "vocab": v, "merges": ms},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func byteTokenName(b byte) string {
	const hexdig = "0123456789ABCDEF"
	return "<0x" + string(hexdig[b>>4]) + string(hexdig[b&15]) + ">"
}

// defaultAdded are the added tokens of the synthetic byte-level tokenizer.
func defaultAdded() []jsonAdded {
	return []jsonAdded{
		{ID: -1, Content: "<|im_start|>", Special: true},
		{ID: -1, Content: "<|im_end|>", Special: true},
		{ID: -1, Content: "<think>"},
		{ID: -1, Content: "</think>"},
	}
}

func mustFromHF(t testing.TB, f HFFiles) *Tokenizer {
	t.Helper()
	tok, err := FromHF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
