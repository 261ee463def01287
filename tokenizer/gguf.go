package tokenizer

import (
	"fmt"
	"sort"
	"strings"
)

// GGUF tokenizer metadata keys (llamacpp-facts §7.1).
const (
	KeyModel          = "tokenizer.ggml.model"
	KeyPre            = "tokenizer.ggml.pre"
	KeyTokens         = "tokenizer.ggml.tokens"
	KeyTokenType      = "tokenizer.ggml.token_type"
	KeyScores         = "tokenizer.ggml.scores"
	KeyMerges         = "tokenizer.ggml.merges"
	KeyAddBOS         = "tokenizer.ggml.add_bos_token"
	KeyAddEOS         = "tokenizer.ggml.add_eos_token"
	KeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	KeyChatTemplate   = "tokenizer.chat_template"
	KeyChatTemplates  = "tokenizer.chat_templates"
)

// SpecialKeyNames lists the special-token id kinds in llama.cpp's order; the GGUF key of kind
// K is "tokenizer.ggml.K_token_id" (note llama.cpp's spellings "unknown", "seperator",
// "padding").
var SpecialKeyNames = []string{"bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "mask",
	"fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep"}

// SpecialIDKey returns the GGUF key of a special-token id kind, e.g. "bos" ->
// "tokenizer.ggml.bos_token_id".
func SpecialIDKey(kind string) string { return "tokenizer.ggml." + kind + "_token_id" }

// SpecialID is one special-token id from GGUF metadata.
type SpecialID struct {
	Kind string // one of SpecialKeyNames
	ID   uint32
}

// GGUFVocab is the tokenizer metadata of a GGUF file, filled by the caller from its GGUF reader
// (see VocabFromMetadata) and turned into a Tokenizer by FromGGUF.
type GGUFVocab struct {
	Model  string    // tokenizer.ggml.model: "gpt2" or "llama"
	Pre    string    // tokenizer.ggml.pre ("" when absent)
	Tokens []string  // tokenizer.ggml.tokens
	Types  []int32   // tokenizer.ggml.token_type (nil when absent: all NORMAL)
	Scores []float32 // tokenizer.ggml.scores (nil when absent: all 0)
	Merges []string  // tokenizer.ggml.merges ("left right", rank = index)
	// SpecialIDs are the *_token_id keys present, in file order.
	SpecialIDs     []SpecialID
	AddBOS         *bool // tokenizer.ggml.add_bos_token
	AddEOS         *bool // tokenizer.ggml.add_eos_token
	AddSpacePrefix *bool // tokenizer.ggml.add_space_prefix
	ChatTemplate   string
	NamedTemplates []NamedTemplate
}

// KeyValue is one GGUF metadata entry produced by GGUFMetadata or consumed by
// VocabFromMetadata. Value is one of: string (GGUF STRING), []string (ARRAY of STRING),
// []int32 (ARRAY of INT32), []float32 (ARRAY of FLOAT32), uint32 (UINT32), bool (BOOL).
type KeyValue struct {
	Key   string
	Value any
}

// MetadataSource gives access to GGUF metadata by key. Lookup returns the value converted to
// the Go types listed at KeyValue (ARRAY of INT32 as []int32, and so on); a value of another
// GGUF type may be returned as any other Go type and is then reported as a type error.
type MetadataSource interface {
	Lookup(key string) (value any, ok bool)
}

// KVList is a MetadataSource over a list of entries (the last entry of a key wins).
type KVList []KeyValue

// Lookup implements MetadataSource.
func (l KVList) Lookup(key string) (any, bool) {
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].Key == key {
			return l[i].Value, true
		}
	}
	return nil, false
}

// VocabFromMetadata reads the tokenizer keys llama.cpp uses from src, checking their types the
// way llama.cpp's loader does.
func VocabFromMetadata(src MetadataSource) (GGUFVocab, error) {
	var v GGUFVocab
	str := func(key string, dst *string, required bool) error {
		x, ok := src.Lookup(key)
		if !ok {
			if required {
				return fmt.Errorf("gguf metadata: missing %s", key)
			}
			return nil
		}
		s, ok := x.(string)
		if !ok {
			return fmt.Errorf("gguf metadata: %s has type %T, want string", key, x)
		}
		*dst = s
		return nil
	}
	if err := str(KeyModel, &v.Model, true); err != nil {
		return v, err
	}
	if err := str(KeyPre, &v.Pre, false); err != nil {
		return v, err
	}
	if err := str(KeyChatTemplate, &v.ChatTemplate, false); err != nil {
		return v, err
	}
	if x, ok := src.Lookup(KeyTokens); ok {
		s, ok := x.([]string)
		if !ok {
			return v, fmt.Errorf("gguf metadata: %s has type %T, want array of string", KeyTokens, x)
		}
		v.Tokens = s
	} else {
		return v, fmt.Errorf("gguf metadata: missing %s", KeyTokens)
	}
	if x, ok := src.Lookup(KeyTokenType); ok {
		s, ok := x.([]int32)
		if !ok {
			return v, fmt.Errorf("gguf metadata: %s has type %T, want array of int32", KeyTokenType, x)
		}
		v.Types = s
	}
	if x, ok := src.Lookup(KeyScores); ok {
		switch s := x.(type) {
		case []float32:
			v.Scores = s
		case []int32:
			v.Scores = make([]float32, len(s))
			for i, n := range s {
				v.Scores[i] = float32(n)
			}
		default:
			return v, fmt.Errorf("gguf metadata: %s has type %T, want array of float32 or int32", KeyScores, x)
		}
	}
	if x, ok := src.Lookup(KeyMerges); ok {
		s, ok := x.([]string)
		if !ok {
			return v, fmt.Errorf("gguf metadata: %s has type %T, want array of string", KeyMerges, x)
		}
		v.Merges = s
	}
	for _, kind := range SpecialKeyNames {
		key := SpecialIDKey(kind)
		x, ok := src.Lookup(key)
		if !ok {
			continue
		}
		id, ok := x.(uint32)
		if !ok {
			return v, fmt.Errorf("gguf metadata: %s has type %T, want uint32", key, x)
		}
		v.SpecialIDs = append(v.SpecialIDs, SpecialID{Kind: kind, ID: id})
	}
	for _, b := range []struct {
		key string
		dst **bool
	}{{KeyAddBOS, &v.AddBOS}, {KeyAddEOS, &v.AddEOS}, {KeyAddSpacePrefix, &v.AddSpacePrefix}} {
		x, ok := src.Lookup(b.key)
		if !ok {
			continue
		}
		f, ok := x.(bool)
		if !ok {
			return v, fmt.Errorf("gguf metadata: %s has type %T, want bool", b.key, x)
		}
		*b.dst = &f
	}
	if x, ok := src.Lookup(KeyChatTemplates); ok {
		names, ok := x.([]string)
		if !ok {
			return v, fmt.Errorf("gguf metadata: %s has type %T, want array of string", KeyChatTemplates, x)
		}
		for _, name := range names {
			var tmpl string
			if err := str(KeyChatTemplate+"."+name, &tmpl, true); err != nil {
				return v, err
			}
			v.NamedTemplates = append(v.NamedTemplates, NamedTemplate{Name: name, Template: tmpl})
		}
	}
	return v, nil
}

// preInfo is what llama.cpp derives from a tokenizer.ggml.pre name.
type preInfo struct {
	split        splitKind
	ignoreMerges bool
	addBOS       bool
}

// preTable maps the supported tokenizer.ggml.pre names to the llama.cpp pre-tokenizer they
// select (src/llama-vocab.cpp: llama_vocab::impl::load and llm_tokenizer_bpe).
var preTable = map[string]preInfo{
	"llama3": {splitLlama3, true, true}, "llama-v3": {splitLlama3, true, true}, "llama-bpe": {splitLlama3, true, true},
	"falcon3": {splitLlama3, true, true}, "falcon-h1": {splitLlama3, true, true}, "pixtral": {splitLlama3, true, true},
	"midm-2.0": {splitLlama3, true, true}, "lfm2": {splitLlama3, true, true}, "jina-v5-nano": {splitLlama3, true, true},
	"dbrx": {splitLlama3, false, false}, "smaug-bpe": {splitLlama3, false, false},

	"qwen2": {splitQwen2, false, false}, "deepseek-r1-qwen": {splitQwen2, false, false}, "kormo": {splitQwen2, false, false},
	"f2llmv2": {splitQwen2, false, false}, "megrez": {splitQwen2, false, false}, "stablelm2": {splitQwen2, false, false},
	"hunyuan": {splitQwen2, false, false}, "solar-open": {splitQwen2, false, false}, "grok-2": {splitQwen2, false, false},

	"qwen35": {splitQwen35, false, false},

	"gpt-2": {splitGPT2, false, false}, "phi-2": {splitGPT2, false, false}, "jina-es": {splitGPT2, false, false},
	"jina-de": {splitGPT2, false, false}, "gigachat": {splitGPT2, false, false}, "jina-v2-es": {splitGPT2, false, false},
	"jina-v2-de": {splitGPT2, false, false}, "a.x-4.0": {splitGPT2, false, false}, "mellum": {splitGPT2, false, false},
	"modern-bert": {splitGPT2, false, false}, "mpt": {splitGPT2, false, false}, "olmo": {splitGPT2, false, false},
	"exaone4": {splitGPT2, false, false},
}

// Token texts llama.cpp forces to CONTROL (end-of-generation and FIM markers found by text).
var llamaForcedControl = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
	"<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
	"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
	"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>",
	"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>",
	"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>",
	"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
	"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
}

// maxVocab bounds vocabulary sizes accepted from files (largest real vocabularies are ~262k).
const maxVocab = 1 << 22

// FromGGUF builds a tokenizer from GGUF tokenizer metadata with llama.cpp's semantics.
// Supported: tokenizer.ggml.model "gpt2" with the pre-tokenizers in preTable (qwen2, qwen35,
// llama-bpe, gpt-2 and their aliases), and "llama" (SentencePiece).
func FromGGUF(v GGUFVocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("gguf tokenizer: %s is empty", KeyTokens)
	}
	if n > maxVocab {
		return nil, fmt.Errorf("gguf tokenizer: %s has %d entries (limit %d)", KeyTokens, n, maxVocab)
	}
	if v.Types != nil && len(v.Types) < n {
		return nil, fmt.Errorf("gguf tokenizer: %s has %d entries, fewer than %d tokens", KeyTokenType, len(v.Types), n)
	}
	if v.Scores != nil && len(v.Scores) < n {
		return nil, fmt.Errorf("gguf tokenizer: %s has %d entries, fewer than %d tokens", KeyScores, len(v.Scores), n)
	}
	t := &Tokenizer{pre: v.Pre, chatTemplate: v.ChatTemplate, namedTemplates: v.NamedTemplates}
	var info preInfo
	switch v.Model {
	case "gpt2":
		t.kind, t.byteLevel = modelBPE, true
		if v.Merges == nil {
			return nil, fmt.Errorf("gguf tokenizer: model gpt2 needs %s", KeyMerges)
		}
		var ok bool
		info, ok = preTable[v.Pre]
		if !ok {
			if v.Pre == "" || v.Pre == "default" {
				return nil, fmt.Errorf("gguf tokenizer: %s is missing or \"default\"; llama.cpp's default BPE pre-tokenizer is not supported", KeyPre)
			}
			return nil, fmt.Errorf("gguf tokenizer: %s %q is not supported (supported: %s)", KeyPre, v.Pre, supportedPres())
		}
		t.split, t.ignoreMerges, t.addBOS = info.split, info.ignoreMerges, info.addBOS
		t.bos, t.eos = 11, 11
		t.unk, t.sep, t.pad, t.mask = -1, -1, -1, -1
	case "llama":
		t.kind = modelSPM
		t.addSpacePrefix, t.addBOS = true, true
		t.bos, t.eos, t.unk = 1, 2, 0
		t.sep, t.pad, t.mask = -1, -1, -1
	case "":
		return nil, fmt.Errorf("gguf tokenizer: %s is empty", KeyModel)
	default:
		return nil, fmt.Errorf("gguf tokenizer: %s %q is not supported (supported: gpt2, llama)", KeyModel, v.Model)
	}
	t.eot, t.eom = -1, -1

	t.tokens = make([]string, n)
	t.types = make([]TokenType, n)
	t.tokenID = make(map[string]int32, n)
	for i, s := range v.Tokens {
		if s == "" {
			s = fmt.Sprintf("[EMPTY_%d]", i)
		}
		if j, dup := t.tokenID[s]; dup {
			return nil, fmt.Errorf("gguf tokenizer: %s: token %d %q duplicates token %d", KeyTokens, i, s, j)
		}
		t.tokenID[s] = int32(i)
		t.tokens[i] = s
		t.types[i] = TokenNormal
		if v.Types != nil {
			switch tt := TokenType(v.Types[i]); tt {
			case TokenNormal, TokenUnknown, TokenControl, TokenUserDefined, TokenUnused, TokenByte:
				t.types[i] = tt
			default:
				t.types[i] = TokenUndefined
			}
		}
	}
	if t.kind == modelSPM {
		t.scores = make([]float32, n)
		if v.Scores != nil {
			copy(t.scores, v.Scores[:n])
		}
		t.spmWordBound = true
		for _, s := range t.tokens {
			if strings.Contains(strings.TrimLeft(s, "▁"), "▁") {
				t.spmWordBound = false
				break
			}
		}
	}
	if v.AddSpacePrefix != nil {
		t.addSpacePrefix = *v.AddSpacePrefix
	}

	// Special ids: defaults that fall outside the vocabulary are disabled, then the keys.
	ids := map[string]*int32{"bos": &t.bos, "eos": &t.eos, "unknown": &t.unk, "seperator": &t.sep,
		"padding": &t.pad, "mask": &t.mask, "eot": &t.eot, "eom": &t.eom}
	for _, p := range ids {
		if *p >= int32(n) {
			*p = -1
		}
	}
	for _, s := range v.SpecialIDs {
		p, ok := ids[s.Kind]
		if !ok {
			continue // FIM ids only matter for generation
		}
		if s.ID < uint32(n) {
			*p = int32(s.ID)
		}
		t.specialOrder = append(t.specialOrder, s.Kind)
	}
	if v.AddBOS != nil {
		t.addBOS, t.addBOSSet = *v.AddBOS, true
	}
	if v.AddEOS != nil {
		t.addEOS, t.addEOSSet = *v.AddEOS, true
	}

	t.fileTypes = append([]TokenType(nil), t.types...)
	t.applyLlamaTypeOverrides()

	if t.kind == modelBPE {
		t.merges = make([][2]string, 0, len(v.Merges))
		for _, m := range v.Merges {
			// llama.cpp splits at the first space at index >= 1; a merge without one
			// becomes the pair ("", "") which can never apply.
			sp := -1
			if len(m) > 1 {
				if k := strings.IndexByte(m[1:], ' '); k >= 0 {
					sp = k + 1
				}
			}
			if sp < 0 {
				t.merges = append(t.merges, [2]string{"", ""})
				continue
			}
			t.merges = append(t.merges, [2]string{m[:sp], m[sp+1:]})
		}
		t.mergeText = append([]string(nil), v.Merges...)
	}
	t.finish()
	return t, nil
}

func supportedPres() string {
	names := make([]string, 0, len(preTable))
	for k := range preTable {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// applyLlamaTypeOverrides reproduces the token-type fixes llama.cpp applies at load time.
func (t *Tokenizer) applyLlamaTypeOverrides() {
	for _, s := range llamaForcedControl {
		if id, ok := t.tokenID[s]; ok && t.types[id] != TokenControl {
			t.types[id] = TokenControl
		}
	}
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.tokenID[s]; ok {
			t.types[id] = TokenUserDefined
		}
	}
	if t.eot < 0 {
		for _, s := range []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
			"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"} {
			if id, ok := t.tokenID[s]; ok && (t.eot < 0 || id < t.eot) {
				t.eot = id
			}
		}
	}
	has := func(s string) bool { _, ok := t.tokenID[s]; return ok }
	if end, ok := t.tokenID["<|end|>"]; ok {
		if (has("<|return|>") && has("<|call|>")) || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>")) {
			t.types[end] = TokenUserDefined
		}
	}
	if s, ok := t.tokenID["</s>"]; ok && has("<|tool_response>") {
		t.types[s] = TokenNormal
	}
}

// finish builds the derived lookup structures.
func (t *Tokenizer) finish() {
	for b := range t.byteToken {
		t.byteToken[b] = -1
		if id, ok := t.tokenID[fmt.Sprintf("<0x%02X>", b)]; ok {
			t.byteToken[b] = id
		}
	}
	// Added / special tokens for llama.cpp mode: every CONTROL, USER_DEFINED, UNKNOWN token.
	if !t.hf {
		var list []addedToken
		for i, tt := range t.types {
			switch tt {
			case TokenControl, TokenUnknown:
				list = append(list, addedToken{id: int32(i), text: t.tokens[i], special: true})
			case TokenUserDefined:
				list = append(list, addedToken{id: int32(i), text: t.tokens[i]})
			}
		}
		t.added = newSpecialSet(list)
	}
	if t.kind != modelBPE {
		return
	}
	m := &bpeModel{nTokens: len(t.tokens), ranks: make(map[uint64]mergeTo, len(t.merges))}
	extraID := map[string]int32{}
	intern := func(s string) int32 {
		if id, ok := t.tokenID[s]; ok {
			return id
		}
		if id, ok := extraID[s]; ok { // rare: merges over non-tokens
			return id
		}
		m.extra = append(m.extra, s)
		id := int32(m.nTokens + len(m.extra) - 1)
		extraID[s] = id
		return id
	}
	var buf []byte
	for rank, p := range t.merges {
		if p[0] == "" || p[1] == "" {
			continue
		}
		a, b := intern(p[0]), intern(p[1])
		k := pairKey(a, b)
		if _, dup := m.ranks[k]; dup {
			continue // the first (lowest) rank wins, as in llama.cpp's map emplace
		}
		buf = append(append(buf[:0], p[0]...), p[1]...)
		res, ok := t.tokenID[string(buf)] // no allocation for the lookup
		if !ok {
			res = intern(string(buf))
		}
		m.ranks[k] = mergeTo{rank: int32(rank), result: res}
	}
	for b := 0; b < 256; b++ {
		m.bytePiece[b] = -1
		if !t.byteLevel {
			continue
		}
		if id, ok := t.tokenID[byteLevelStrings[b]]; ok {
			m.bytePiece[b] = id
			continue
		}
		if id, ok := extraID[byteLevelStrings[b]]; ok {
			m.bytePiece[b] = id
		}
	}
	t.bpe = m
	if t.ignoreMerges && t.rawToID == nil {
		// llama.cpp looks the byte-level word up among all tokens.
		t.rawToID = make(map[string]int32)
		for s, id := range t.tokenID {
			if !t.byteLevel {
				t.rawToID[s] = id
			} else if raw, ok := byteLevelToBytes(s); ok {
				t.rawToID[string(raw)] = id
			}
		}
	}
}
