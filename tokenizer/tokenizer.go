// Package tokenizer implements the byte-level BPE tokenizers of Qwen2/Qwen3, Qwen3.5, Llama-3
// and GPT-2 and the SentencePiece-style BPE of Llama-2/Mistral, loaded either from a Hugging
// Face folder (tokenizer.json, tokenizer_config.json, special_tokens_map.json, config.json) or
// from GGUF tokenizer metadata, and exports a tokenizer as the GGUF metadata llama.cpp's
// converter writes.
//
// A tokenizer loaded with LoadHF follows Hugging Face semantics (normalizer, added-token flags,
// leftmost-longest added-token matching); one built with FromGGUF follows llama.cpp's
// llama_tokenize exactly for the supported models. docs/tokenizer.md describes the algorithms,
// the special-token rules and what is exact.
package tokenizer

import (
	"strconv"
	"strings"
	"sync"
)

// TokenType is a GGUF token type (tokenizer.ggml.token_type, llama_token_type).
type TokenType int32

// Token types as stored in GGUF.
const (
	TokenUndefined   TokenType = 0
	TokenNormal      TokenType = 1
	TokenUnknown     TokenType = 2
	TokenControl     TokenType = 3
	TokenUserDefined TokenType = 4
	TokenUnused      TokenType = 5
	TokenByte        TokenType = 6
)

// modelKind is the segmentation algorithm.
type modelKind uint8

const (
	modelBPE modelKind = iota // merge ranks (GGUF "gpt2", tokenizer.json "BPE")
	modelSPM                  // llama.cpp's score-based SentencePiece BPE (GGUF "llama")
)

// EncodeOptions select how special tokens are handled; the zero value tokenizes plain text.
type EncodeOptions struct {
	// AddSpecial adds the BOS and/or EOS tokens the model asks for (add_bos/add_eos), like
	// llama_tokenize's add_special and llama-tokenize without --no-bos.
	AddSpecial bool
	// ParseSpecial recognizes control tokens (e.g. "<|im_start|>") written in the text, like
	// llama-tokenize's default --parse-special. User-defined added tokens (e.g. "<think>") are
	// recognized either way, as in llama.cpp and in Hugging Face tokenizers.
	ParseSpecial bool
}

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	kind   modelKind
	hf     bool // Hugging Face semantics (LoadHF) instead of llama.cpp's (FromGGUF)
	tokens []string
	types  []TokenType // effective types (llama.cpp's load-time overrides applied)
	// fileTypes are the types as stored in / exported to GGUF (before llama.cpp's overrides).
	fileTypes []TokenType
	scores    []float32 // SPM only
	tokenID   map[string]int32

	// BPE
	merges       [][2]string // in rank order (for the merge table and hashing)
	mergeText    []string    // merges exactly as GGUF stores them ("left right")
	bpe          *bpeModel
	byteLevel    bool // GPT-2 byte-to-unicode mapping of the input
	ignoreMerges bool
	byteFallback bool // HF: unknown characters become <0xXX> tokens
	fuseUnk      bool
	rawToID      map[string]int32 // ignore_merges: word (raw bytes) -> token
	byteToken    [256]int32       // <0xXX> token of each byte, -1 if none

	// pre-tokenization
	split      splitKind // the GGUF splitter (llama.cpp mode)
	normalizer normalizer
	preSteps   []preStep // HF pre-tokenizer pipeline
	prefixes   bool      // the normalizer/pre-tokenizer prepends a space marker (decode strips it)

	added *specialSet

	// llama.cpp SPM
	addSpacePrefix bool
	spmWordBound   bool // no token has "▁" after another character (see encodeSPM)

	pre string   // GGUF tokenizer.ggml.pre (as loaded or detected)
	sp  *spVocab // tokenizer.model, when the HF folder has one (GGUF export source)

	bos, eos, unk, sep, pad, mask, eot, eom int32
	addBOS, addEOS                          bool
	addBOSSet, addEOSSet                    bool // explicitly configured (exported to GGUF)
	specialOrder                            []string
	chatTemplate                            string
	namedTemplates                          []NamedTemplate

	cache wordCache
	work  sync.Pool // *encodeWork
}

// NamedTemplate is an additional named chat template (tokenizer.chat_template.NAME).
type NamedTemplate struct {
	Name     string
	Template string
}

// encodeWork is per-call scratch space.
type encodeWork struct {
	split   splitScratch
	bpe     bpeWork
	frags   []fragment
	frags2  []fragment
	words   []string
	words2  []string
	spmSyms []spmSym
	spmQ    spmQueue
}

// VocabSize is the number of token ids (including padding entries).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// PAD returns the padding id, or -1.
func (t *Tokenizer) PAD() int32 { return t.pad }

// UNK returns the unknown-token id, or -1.
func (t *Tokenizer) UNK() int32 { return t.unk }

// EOT returns the end-of-turn id, or -1.
func (t *Tokenizer) EOT() int32 { return t.eot }

// AddBOS reports whether Encode with AddSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS && t.bos >= 0 }

// AddEOS reports whether Encode with AddSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS && t.eos >= 0 }

// ChatTemplate returns the default Jinja chat template ("" if none).
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// NamedChatTemplates returns the additional named chat templates.
func (t *Tokenizer) NamedChatTemplates() []NamedTemplate {
	return append([]NamedTemplate(nil), t.namedTemplates...)
}

// Pre returns the GGUF pre-tokenizer name (tokenizer.ggml.pre) the tokenizer was loaded with
// or, for LoadHF, the one DetectPre found ("" when unknown or for SPM models).
func (t *Tokenizer) Pre() string { return t.pre }

// TokenText returns the stored text of a token (byte-level or "▁" form, as in the vocabulary),
// or "" for an out-of-range id.
func (t *Tokenizer) TokenText(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// TokenType returns the type a token is tokenized with (TokenUndefined for an out-of-range id).
// For GGUF vocabularies this includes llama.cpp's load-time fixes (e.g. "</s>" and
// "<|endoftext|>" are always CONTROL); GGUFMetadata exports the types as stored.
func (t *Tokenizer) TokenType(id int32) TokenType {
	if id < 0 || int(id) >= len(t.types) {
		return TokenUndefined
	}
	return t.types[id]
}

// TokenID returns the id of a token given its stored text.
func (t *Tokenizer) TokenID(text string) (int32, bool) {
	id, ok := t.tokenID[text]
	return id, ok
}

// TokenPiece returns the bytes a token decodes to (control tokens render as their text;
// unused/padding tokens decode to ""). An out-of-range id yields "".
func (t *Tokenizer) TokenPiece(id int32) string {
	return string(t.appendPiece(nil, id))
}

func (t *Tokenizer) appendPiece(dst []byte, id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return dst
	}
	text := t.tokens[id]
	switch t.types[id] {
	case TokenControl, TokenUserDefined, TokenUnknown:
		return append(dst, text...)
	case TokenByte:
		if b, ok := parseByteToken(text); ok {
			return append(dst, b)
		}
		return dst
	case TokenNormal:
		if t.byteLevel {
			if raw, ok := byteLevelToBytes(text); ok {
				return append(dst, raw...)
			}
			return append(dst, text...)
		}
		if t.kind == modelSPM || t.prefixes || strings.Contains(text, "▁") {
			return append(dst, strings.ReplaceAll(text, "▁", " ")...)
		}
		return append(dst, text...)
	}
	return dst
}

// parseByteToken parses "<0xXX>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

// Decode returns the text of a token sequence: the concatenated bytes of every token (control
// tokens included as their text), minus the leading space that SentencePiece-style models
// prepend. The result can be invalid UTF-8 when the ids split a character.
// Decode(Encode(s, EncodeOptions{})) == s for every valid UTF-8 s on byte-level BPE models.
func (t *Tokenizer) Decode(ids []int32) string {
	var buf []byte
	for i, id := range ids {
		n := len(buf)
		buf = t.appendPiece(buf, id)
		if i == 0 && (t.addSpacePrefix || t.prefixes) && len(buf) > n && buf[n] == ' ' {
			buf = append(buf[:n], buf[n+1:]...)
		}
	}
	return string(buf)
}

// Encode tokenizes text. Invalid UTF-8 is handled as llama.cpp does: byte-level BPE models
// replace each offending byte by U+FFFD, SentencePiece models emit byte tokens.
func (t *Tokenizer) Encode(text string, opts EncodeOptions) []int32 {
	w, _ := t.work.Get().(*encodeWork)
	if w == nil {
		w = &encodeWork{}
	}
	defer t.work.Put(w)
	out := make([]int32, 0, len(text)/3+4)
	if opts.AddSpecial && t.addBOS && t.bos >= 0 {
		out = append(out, t.bos)
	}
	var frags []fragment
	if t.hf {
		frags = t.added.partitionHF(t.added.raw, text, opts.ParseSpecial, w.frags[:0])
		w.frags = frags
	} else {
		frags = t.added.partitionLlama(text, opts.ParseSpecial, w.frags[:0])
		w.frags = frags
	}
	prevSpecial := true
	for fi, f := range frags {
		if f.tok >= 0 {
			out = append(out, f.tok)
			prevSpecial = true
			continue
		}
		if t.hf {
			out = t.encodeHFSection(out, f.text, fi == 0, opts.ParseSpecial, w)
		} else {
			out = t.encodeLlamaFragment(out, f.text, prevSpecial, w)
		}
		prevSpecial = false
	}
	if opts.AddSpecial && t.addEOS && t.eos >= 0 {
		out = append(out, t.eos)
	}
	return out
}

// encodeLlamaFragment tokenizes one text fragment as llama.cpp does.
func (t *Tokenizer) encodeLlamaFragment(out []int32, text string, prevSpecial bool, w *encodeWork) []int32 {
	if t.kind == modelSPM {
		if t.addSpacePrefix && prevSpecial {
			text = " " + text
		}
		return t.encodeSPM(out, strings.ReplaceAll(text, " ", "▁"), w)
	}
	text = sanitizeUTF8(text)
	for i := 0; i < len(text); {
		e := t.split.next(text, i)
		out = t.encodeWord(out, text[i:e], w)
		i = e
	}
	return out
}

// encodeHFSection tokenizes one section between added tokens with Hugging Face semantics:
// normalize, match normalized added tokens, pre-tokenize, BPE.
func (t *Tokenizer) encodeHFSection(out []int32, text string, first, parseSpecial bool, w *encodeWork) []int32 {
	text = sanitizeUTF8(text)
	if t.normalizer != nil {
		text = t.normalizer(text)
	}
	if text == "" {
		return out
	}
	if len(t.added.norm.nodes) > 1 {
		sub := t.added.partitionHF(t.added.norm, text, parseSpecial, w.frags2[:0])
		w.frags2 = sub
		for _, f := range sub {
			if f.tok >= 0 {
				out = append(out, f.tok)
				continue
			}
			out = t.encodeHFPieces(out, f.text, first, w)
		}
		return out
	}
	return t.encodeHFPieces(out, text, first, w)
}

func (t *Tokenizer) encodeHFPieces(out []int32, text string, first bool, w *encodeWork) []int32 {
	cur := append(w.words[:0], text)
	alt := w.words2[:0]
	for i := range t.preSteps {
		next := t.preSteps[i].apply(cur, alt[:0], first, &w.split)
		alt, cur = cur, next
	}
	w.words, w.words2 = cur, alt
	for _, word := range cur {
		out = t.encodeWord(out, word, w)
	}
	return out
}

// encodeWord runs the model on one pre-tokenized word (raw text; byte-level models map it to
// the byte alphabet internally).
func (t *Tokenizer) encodeWord(out []int32, word string, w *encodeWork) []int32 {
	if word == "" {
		return out
	}
	if len(word) <= wordCacheMaxLen {
		if ids, ok := t.cache.get(word); ok {
			return append(out, ids...)
		}
	}
	n := len(out)
	out = t.bpeWord(out, word, w)
	if len(word) <= wordCacheMaxLen {
		t.cache.put(word, append([]int32(nil), out[n:]...))
	}
	return out
}

// bpeWord applies BPE to one word.
func (t *Tokenizer) bpeWord(out []int32, word string, w *encodeWork) []int32 {
	if t.ignoreMerges {
		if id, ok := t.rawToID[word]; ok {
			return append(out, id)
		}
	}
	m := t.bpe
	syms := w.bpe.syms[:0]
	if t.byteLevel {
		for i := 0; i < len(word); i++ {
			syms = append(syms, bpeSym{piece: m.bytePiece[word[i]], start: int32(i), end: int32(i + 1)})
		}
	} else {
		syms = t.initialSymbols(syms, word)
	}
	for i := range syms {
		syms[i].prev = int32(i - 1)
		syms[i].next = int32(i + 1)
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	w.bpe.syms = syms
	m.merge(&w.bpe)
	syms = w.bpe.syms
	for i := int32(0); len(syms) > 0 && i != -1; i = syms[i].next {
		s := syms[i]
		if s.piece >= 0 && int(s.piece) < m.nTokens {
			out = append(out, s.piece)
			continue
		}
		out = t.fallback(out, word[s.start:s.end])
	}
	return out
}

// initialSymbols splits a non-byte-level word into characters, mapping characters that are not
// tokens through byte fallback or the unknown token (Hugging Face BPE.merge_word).
func (t *Tokenizer) initialSymbols(syms []bpeSym, word string) []bpeSym {
	unkStart := -1
	flushUnk := func(end int) {
		if unkStart >= 0 {
			syms = append(syms, bpeSym{piece: t.unk, start: int32(unkStart), end: int32(end)})
			unkStart = -1
		}
	}
	for i := 0; i < len(word); {
		_, n := decodeRune(word, i)
		ch := word[i : i+n]
		if id, ok := t.tokenID[ch]; ok {
			flushUnk(i)
			syms = append(syms, bpeSym{piece: id, start: int32(i), end: int32(i + n)})
			i += n
			continue
		}
		if t.byteFallback {
			all := true
			for j := 0; j < n; j++ {
				if t.byteToken[ch[j]] < 0 {
					all = false
					break
				}
			}
			if all {
				flushUnk(i)
				for j := 0; j < n; j++ {
					syms = append(syms, bpeSym{piece: t.byteToken[ch[j]], start: int32(i + j), end: int32(i + j + 1)})
				}
				i += n
				continue
			}
		}
		if t.unk >= 0 {
			if unkStart >= 0 && !t.fuseUnk {
				flushUnk(i)
			}
			if unkStart < 0 {
				unkStart = i
			}
		}
		i += n
	}
	flushUnk(len(word))
	return syms
}

// fallback emits tokens for a merged symbol that is not itself a token. Byte-level models do
// what llama.cpp does (each byte of the byte-level text, looked up as a one-byte token); other
// models use <0xXX> byte tokens, else the unknown token.
func (t *Tokenizer) fallback(out []int32, raw string) []int32 {
	if t.byteLevel {
		for i := 0; i < len(raw); i++ {
			enc := byteLevelStrings[raw[i]]
			for j := 0; j < len(enc); j++ {
				if id, ok := t.tokenID[enc[j:j+1]]; ok {
					out = append(out, id)
				}
			}
		}
		return out
	}
	ok := true
	for i := 0; i < len(raw); i++ {
		if t.byteToken[raw[i]] < 0 {
			ok = false
		}
	}
	if ok {
		for i := 0; i < len(raw); i++ {
			out = append(out, t.byteToken[raw[i]])
		}
		return out
	}
	if t.unk >= 0 {
		out = append(out, t.unk)
	}
	return out
}
