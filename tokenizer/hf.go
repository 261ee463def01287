package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
)

// idSlack bounds how far token ids (and config.json vocab_size) may exceed the number of
// tokens a tokenizer.json defines (real checkpoints pad by a few hundred), so a hostile file
// cannot make us allocate by a bare number.
func idSlack(count int64) int64 { return 1024 + count/4 }

// HFFiles holds the contents of the Hugging Face files a tokenizer is built from. Only
// TokenizerJSON is required; nil fields are treated as absent files.
type HFFiles struct {
	TokenizerJSON       []byte // tokenizer.json
	TokenizerConfigJSON []byte // tokenizer_config.json
	SpecialTokensMap    []byte // special_tokens_map.json
	ConfigJSON          []byte // config.json (vocab_size, *_token_id)
	ChatTemplateJinja   []byte // chat_template.jinja
	ChatTemplateJSON    []byte // chat_template.json
	// AdditionalTemplates are additional_chat_templates/*.jinja (name = file stem).
	AdditionalTemplates []NamedTemplate
	// SentencePieceModel is tokenizer.model. When present it is what a GGUF export is built
	// from (as llama.cpp's converter does); without tokenizer.json the tokenizer is built from
	// it alone, with llama.cpp's SentencePiece semantics.
	SentencePieceModel []byte
	AddedTokensJSON    []byte // added_tokens.json (used with tokenizer.model)
}

// LoadHF loads the tokenizer of a Hugging Face model folder: tokenizer.json (or, failing that,
// a SentencePiece tokenizer.model), tokenizer_config.json, special_tokens_map.json,
// config.json, added_tokens.json and chat templates (optional).
func LoadHF(dir string) (*Tokenizer, error) {
	var f HFFiles
	read := func(name string, dst *[]byte, required bool) error {
		p := filepath.Join(dir, name)
		b, err := readLimited(p, name)
		if err != nil {
			if !required && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		*dst = b
		return nil
	}
	if err := read("tokenizer.model", &f.SentencePieceModel, false); err != nil {
		return nil, err
	}
	if err := read("tokenizer.json", &f.TokenizerJSON, f.SentencePieceModel == nil); err != nil {
		return nil, err
	}
	for _, x := range []struct {
		name string
		dst  *[]byte
	}{
		{"tokenizer_config.json", &f.TokenizerConfigJSON},
		{"special_tokens_map.json", &f.SpecialTokensMap},
		{"config.json", &f.ConfigJSON},
		{"chat_template.jinja", &f.ChatTemplateJinja},
		{"chat_template.json", &f.ChatTemplateJSON},
		{"added_tokens.json", &f.AddedTokensJSON},
	} {
		if err := read(x.name, x.dst, false); err != nil {
			return nil, err
		}
	}
	if f.ChatTemplateJinja != nil {
		matches, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
		sort.Strings(matches)
		if len(matches) > maxAdditionalTemplates {
			return nil, fmt.Errorf("%s: %d additional chat templates, more than the %d tq reads",
				filepath.Join(dir, "additional_chat_templates"), len(matches), maxAdditionalTemplates)
		}
		for _, m := range matches {
			b, err := readLimited(m, "chat_template.jinja")
			if err != nil {
				return nil, err
			}
			f.AdditionalTemplates = append(f.AdditionalTemplates,
				NamedTemplate{Name: strings.TrimSuffix(filepath.Base(m), ".jinja"), Template: string(b)})
		}
	}
	t, err := FromHF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return t, nil
}

// maxAdditionalTemplates bounds the files read from additional_chat_templates/ (real models
// have a handful: tool_use, rag, ...).
const maxAdditionalTemplates = 256

// readLimited reads one file of a Hugging Face folder (name is its role: "tokenizer.json",
// "config.json", ...) through boundedread, with that file's size limit.
func readLimited(path, name string) ([]byte, error) {
	return boundedread.ReadFile(path, "tokenizer file", hfFileLimit(name))
}

// hfFileLimit is the size limit of each Hugging Face file LoadHF reads.
func hfFileLimit(name string) int64 {
	switch name {
	case "tokenizer.json":
		return boundedread.MaxTokenizerJSON
	case "tokenizer.model", "tokenizer_config.json":
		return boundedread.MaxTokenizerFile
	}
	// config.json, special_tokens_map.json, added_tokens.json and chat templates (the template
	// engine refuses sources above 4 MiB anyway).
	return boundedread.MaxJSONConfig
}

type hfAddedToken struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

type hfTokenizerJSON struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         hfModel         `json:"model"`
}

// tokenSpec is a tokenizer_config.json special-token entry: a string or {"content": ...}.
type tokenSpec struct {
	set     bool
	content string
}

func (s *tokenSpec) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		s.set = true
		return json.Unmarshal(b, &s.content)
	}
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		if o.Content != nil {
			s.set, s.content = true, *o.Content
		}
		return nil
	}
	return nil // other types are ignored, like the converter does
}

type hfTokenizerConfig struct {
	BOS             *tokenSpec                 `json:"bos_token"`
	EOS             *tokenSpec                 `json:"eos_token"`
	UNK             *tokenSpec                 `json:"unk_token"`
	SEP             *tokenSpec                 `json:"sep_token"`
	PAD             *tokenSpec                 `json:"pad_token"`
	CLS             *tokenSpec                 `json:"cls_token"`
	MASK            *tokenSpec                 `json:"mask_token"`
	AddBOS          json.RawMessage            `json:"add_bos_token"`
	AddEOS          json.RawMessage            `json:"add_eos_token"`
	ChatTemplate    json.RawMessage            `json:"chat_template"`
	AddedTokensDecd map[string]json.RawMessage `json:"added_tokens_decoder"`
}

// FromHF builds a tokenizer with Hugging Face semantics from the contents of the model files.
func FromHF(f HFFiles) (*Tokenizer, error) {
	var cfg hfTokenizerConfig
	haveCfg := f.TokenizerConfigJSON != nil
	if haveCfg {
		if err := json.Unmarshal(f.TokenizerConfigJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	if f.SpecialTokensMap != nil {
		var stm hfTokenizerConfig
		if err := json.Unmarshal(f.SpecialTokensMap, &stm); err != nil {
			return nil, fmt.Errorf("special_tokens_map.json: %w", err)
		}
		for _, p := range []struct{ dst, src **tokenSpec }{
			{&cfg.BOS, &stm.BOS}, {&cfg.EOS, &stm.EOS}, {&cfg.UNK, &stm.UNK}, {&cfg.SEP, &stm.SEP},
			{&cfg.PAD, &stm.PAD}, {&cfg.CLS, &stm.CLS}, {&cfg.MASK, &stm.MASK},
		} {
			if *p.dst == nil {
				*p.dst = *p.src
			}
		}
	}
	var config struct {
		VocabSize  *int64          `json:"vocab_size"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	var configIDs map[string]json.RawMessage
	if f.ConfigJSON != nil {
		if err := json.Unmarshal(f.ConfigJSON, &config); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
		if err := json.Unmarshal(f.ConfigJSON, &configIDs); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	}

	if config.VocabSize == nil && len(config.TextConfig) > 0 {
		var tc struct {
			VocabSize *int64 `json:"vocab_size"`
		}
		if json.Unmarshal(config.TextConfig, &tc) == nil {
			config.VocabSize = tc.VocabSize
		}
	}
	var sv *spVocab
	if f.SentencePieceModel != nil {
		var err error
		if sv, err = newSPVocab(f.SentencePieceModel, f.AddedTokensJSON, &cfg, config.VocabSize); err != nil {
			return nil, err
		}
	}
	if f.TokenizerJSON == nil {
		if sv == nil {
			return nil, fmt.Errorf("tokenizer.json: missing")
		}
		return fromSentencePiece(sv, f, &cfg, haveCfg, configIDs)
	}
	var tj hfTokenizerJSON
	if err := json.Unmarshal(f.TokenizerJSON, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	m := tj.Model
	if m.Type == "" && m.Merges != nil {
		m.Type = "BPE"
	}
	if m.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model type %q is not supported (only BPE)", m.Type)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("tokenizer.json: model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("tokenizer.json: model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if m.Dropout != nil && *m.Dropout > 0 {
		return nil, fmt.Errorf("tokenizer.json: model.dropout %g is not supported (tokenization would be random)", *m.Dropout)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("tokenizer.json: model.vocab is empty")
	}

	t := &Tokenizer{kind: modelBPE, hf: true, ignoreMerges: m.IgnoreMerges, byteFallback: m.ByteFallback, fuseUnk: m.FuseUnk}
	t.bos, t.eos, t.unk, t.sep, t.pad, t.mask, t.eot, t.eom = -1, -1, -1, -1, -1, -1, -1, -1

	// Token table: model vocabulary, then added tokens.
	count := int64(len(m.Vocab) + len(tj.AddedTokens))
	limit := count + idSlack(count)
	maxID := int64(-1)
	for s, id := range m.Vocab {
		if id < 0 || id >= limit {
			return nil, fmt.Errorf("tokenizer.json: model.vocab[%q] = %d is out of range [0, %d)", s, id, limit)
		}
		maxID = max(maxID, id)
	}
	for i, a := range tj.AddedTokens {
		if a.ID == nil {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] has no id", i)
		}
		if *a.ID < 0 || *a.ID >= limit {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] id %d is out of range [0, %d)", i, *a.ID, limit)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] (id %d) has empty content", i, *a.ID)
		}
		maxID = max(maxID, *a.ID)
	}
	n := maxID + 1
	if config.VocabSize != nil {
		vs := *config.VocabSize
		if vs < n {
			return nil, fmt.Errorf("config.json: vocab_size %d is smaller than the tokenizer's %d ids", vs, n)
		}
		if vs > limit {
			return nil, fmt.Errorf("config.json: vocab_size %d exceeds the tokenizer's %d tokens by more than %d", vs, count, idSlack(count))
		}
		n = vs
	}
	t.tokens = make([]string, n)
	t.types = make([]TokenType, n)
	t.tokenID = make(map[string]int32, n)
	have := make([]bool, n)
	for s, id := range m.Vocab {
		if have[id] {
			return nil, fmt.Errorf("tokenizer.json: model.vocab id %d is used by %q and %q", id, t.tokens[id], s)
		}
		have[id] = true
		t.tokens[id], t.types[id] = s, TokenNormal
		t.tokenID[s] = int32(id)
	}
	var added []addedToken
	seenAdded := map[int64]bool{}
	addAdded := func(a hfAddedToken, where string) error {
		id := *a.ID
		if vid, ok := m.Vocab[a.Content]; ok && vid != id {
			return fmt.Errorf("%s: added token %q has id %d but the vocabulary has it at %d", where, a.Content, id, vid)
		}
		if have[id] && t.tokens[id] != a.Content {
			return fmt.Errorf("%s: added token %q has id %d, already used by %q", where, a.Content, id, t.tokens[id])
		}
		if seenAdded[id] {
			return nil
		}
		seenAdded[id] = true
		have[id] = true
		t.tokens[id] = a.Content
		t.tokenID[a.Content] = int32(id)
		normalized := !a.Special // HF default: special tokens are not normalized
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		added = append(added, addedToken{id: int32(id), text: a.Content, special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord, normalized: normalized})
		return nil
	}
	for i, a := range tj.AddedTokens {
		if err := addAdded(a, fmt.Sprintf("tokenizer.json added_tokens[%d]", i)); err != nil {
			return nil, err
		}
	}
	// tokenizer_config.json added_tokens_decoder entries missing from tokenizer.json.
	if len(cfg.AddedTokensDecd) > 0 {
		keys := make([]string, 0, len(cfg.AddedTokensDecd))
		for k := range cfg.AddedTokensDecd {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var id int64
			if _, err := fmt.Sscanf(k, "%d", &id); err != nil || fmt.Sprint(id) != k {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder key %q is not an integer", k)
			}
			if seenAdded[id] {
				continue
			}
			if id < 0 || id >= n {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder id %d is out of range [0, %d)", id, n)
			}
			var a hfAddedToken
			if err := json.Unmarshal(cfg.AddedTokensDecd[k], &a); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder[%s]: %w", k, err)
			}
			if a.Content == "" {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder[%s] has empty content", k)
			}
			a.ID = &id
			if err := addAdded(a, "tokenizer_config.json added_tokens_decoder"); err != nil {
				return nil, err
			}
		}
	}
	for i := range t.tokens {
		if !have[i] {
			s := "[PAD" + strconv.Itoa(i) + "]"
			t.tokens[i], t.types[i] = s, TokenUnused
			if _, dup := t.tokenID[s]; !dup {
				t.tokenID[s] = int32(i)
			}
		}
	}
	t.added = newSpecialSet(added)

	// Merges.
	if err := t.parseHFMerges(m.Merges); err != nil {
		return nil, err
	}

	// Normalizer and pre-tokenizer.
	nrm, prepends, err := parseNormalizer(tj.Normalizer, 0)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t.normalizer, t.prefixes = nrm, prepends
	steps, err := parsePreTokenizer(tj.PreTokenizer, 0)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	for i, s := range steps {
		switch s.kind {
		case preByteLevel:
			if i != len(steps)-1 {
				return nil, fmt.Errorf("tokenizer.json: ByteLevel must be the last pre-tokenizer")
			}
			t.byteLevel = true
			if s.useRegex && t.split == splitNone {
				t.split = splitGPT2
			}
		case preSplit:
			if t.split == splitNone {
				t.split = s.split
			}
		case preMetaspace:
			if s.prependScheme != "never" {
				t.prefixes = true
			}
		}
	}
	t.preSteps = steps
	if t.byteLevel && t.byteFallback {
		return nil, fmt.Errorf("tokenizer.json: byte_fallback together with a ByteLevel pre-tokenizer is not supported")
	}

	// Token types (as llama.cpp's converter assigns them) and the unknown token.
	for _, a := range added {
		if a.special || looksSpecial(a.text) {
			t.types[a.id] = TokenControl
		} else {
			t.types[a.id] = TokenUserDefined
		}
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			var id32 int32
			id32, ok = t.tokenID[*m.UnkToken]
			id = int64(id32)
		}
		if !ok {
			return nil, fmt.Errorf("tokenizer.json: model.unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		t.unk = int32(id)
	}

	// Special ids, add_bos/add_eos and chat template, as gguf-py's SpecialVocab reads them.
	if err := t.hfSpecials(tj.PostProcessor, t.added.list, &cfg, haveCfg, configIDs); err != nil {
		return nil, err
	}
	if !t.byteLevel {
		// Exported as a "llama" vocabulary (gguf-py LlamaHfVocab): byte tokens and specials.
		specialIDs := map[int32]bool{}
		for _, id := range []int32{t.bos, t.eos, t.unk, t.sep, t.pad, t.mask} {
			if id >= 0 {
				specialIDs[id] = true
			}
		}
		for i, s := range t.tokens {
			if t.types[i] == TokenUnused {
				continue
			}
			if isByteTokenText(s) {
				t.types[i] = TokenByte
			} else if specialIDs[int32(i)] {
				t.types[i] = TokenControl
			}
		}
	}
	t.fileTypes = t.types
	if err := t.hfChatTemplate(f, &cfg, haveCfg); err != nil {
		return nil, err
	}
	t.sp = sv
	if t.ignoreMerges {
		// Hugging Face's ignore_merges looks the word up in the model vocabulary only.
		t.rawToID = make(map[string]int32)
		for s, id := range m.Vocab {
			if !t.byteLevel {
				t.rawToID[s] = int32(id)
			} else if raw, ok := byteLevelToBytes(s); ok {
				t.rawToID[string(raw)] = int32(id)
			}
		}
	}
	t.finish()
	if t.byteLevel {
		t.pre = t.DetectPre()
	}
	return t, nil
}

// fromSentencePiece builds a tokenizer from tokenizer.model alone: the vocabulary llama.cpp's
// converter would write, tokenized with llama.cpp's semantics.
func fromSentencePiece(sv *spVocab, f HFFiles, cfg *hfTokenizerConfig, haveCfg bool, configIDs map[string]json.RawMessage) (*Tokenizer, error) {
	tokens, scores, types := sv.tokens()
	t, err := FromGGUF(GGUFVocab{Model: "llama", Pre: "default", Tokens: tokens, Types: types, Scores: scores})
	if err != nil {
		return nil, fmt.Errorf("tokenizer.model: %w", err)
	}
	// Special ids as SpecialVocab finds them without tokenizer.json: the token names cannot be
	// resolved (no added_tokens list), so only config.json ids and the add_* flags apply.
	t.bos, t.eos, t.unk, t.sep, t.pad, t.mask, t.eot, t.eom = -1, -1, -1, -1, -1, -1, -1, -1
	t.addBOS, t.addEOS = true, false
	t.specialOrder = nil
	if err := t.hfSpecials(nil, nil, cfg, haveCfg, configIDs); err != nil {
		return nil, err
	}
	if t.bos < 0 {
		t.bos = 1
	}
	if t.eos < 0 {
		t.eos = 2
	}
	if t.unk < 0 {
		t.unk = 0
	}
	for _, p := range []*int32{&t.bos, &t.eos, &t.unk} {
		if int(*p) >= len(t.tokens) {
			*p = -1
		}
	}
	if err := t.hfChatTemplate(f, cfg, haveCfg); err != nil {
		return nil, err
	}
	t.sp = sv
	return t, nil
}

var byteTokenRe = regexp.MustCompile(`^<0x[0-9A-Fa-f]{2}>$`)

func isByteTokenText(s string) bool { return len(s) == 6 && byteTokenRe.MatchString(s) }

// looksSpecial is the converter's does_token_look_special.
func looksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	if strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") && len(s) >= 4 {
		return true
	}
	if strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") && len(s) >= len("<｜｜>") {
		return true
	}
	return strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

// parseHFMerges reads model.merges in either format: ["a b", ...] or [["a", "b"], ...].
func (t *Tokenizer) parseHFMerges(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	// The first element decides the format (a string or a pair), so the array is decoded once.
	body := bytes.TrimSpace(raw)
	if len(body) > 0 && body[0] == '[' {
		body = bytes.TrimSpace(body[1:])
	}
	if len(body) > 0 && body[0] == '"' {
		var strs []string
		if err := json.Unmarshal(raw, &strs); err != nil {
			return fmt.Errorf("tokenizer.json: model.merges: %w", err)
		}
		t.merges = make([][2]string, 0, len(strs))
		for i, s := range strs {
			sp := strings.IndexByte(s, ' ')
			if sp <= 0 || sp == len(s)-1 || strings.IndexByte(s[sp+1:], ' ') >= 0 {
				return fmt.Errorf("tokenizer.json: model.merges[%d] %q is not \"left right\"", i, s)
			}
			t.merges = append(t.merges, [2]string{s[:sp], s[sp+1:]})
		}
		t.mergeText = strs
		return nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return fmt.Errorf("tokenizer.json: model.merges: %w", err)
	}
	t.merges = make([][2]string, 0, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return fmt.Errorf("tokenizer.json: model.merges[%d] is not a pair of non-empty strings", i)
		}
		t.merges = append(t.merges, [2]string{p[0], p[1]})
	}
	return nil
}

// hfSpecials resolves special-token ids and add_bos/add_eos like gguf-py's SpecialVocab.
func (t *Tokenizer) hfSpecials(postProcessor json.RawMessage, added []addedToken, cfg *hfTokenizerConfig, haveCfg bool, configIDs map[string]json.RawMessage) error {
	name := func(s *tokenSpec) string {
		if s == nil || !s.set {
			return ""
		}
		return s.content
	}
	bos, eos, sep, cls := name(cfg.BOS), name(cfg.EOS), name(cfg.SEP), name(cfg.CLS)
	if bos == "" && cls != "" {
		bos = cls
	}
	if eos == "" && sep != "" {
		eos = sep
	}
	eot := ""
	if len(postProcessor) > 0 && string(postProcessor) != "null" {
		var pp struct {
			Type       string            `json:"type"`
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(postProcessor, &pp); err != nil {
			return fmt.Errorf("tokenizer.json: post_processor: %w", err)
		}
		procs := pp.Processors
		if pp.Type != "Sequence" {
			procs = []json.RawMessage{postProcessor}
		}
		for i, raw := range procs {
			var p struct {
				Type   string `json:"type"`
				Single []struct {
					SpecialToken *struct {
						ID string `json:"id"`
					} `json:"SpecialToken"`
				} `json:"single"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("tokenizer.json: post_processor[%d]: %w", i, err)
			}
			switch p.Type {
			case "RobertaProcessing":
				t.addBOS, t.addBOSSet, t.addEOS, t.addEOSSet = true, true, true, true
			case "TemplateProcessing":
				if len(p.Single) > 1 {
					if st := p.Single[0].SpecialToken; st != nil && st.ID != "" {
						if bos == "" {
							bos = st.ID
						}
						t.addBOS, t.addBOSSet = st.ID == bos || st.ID == cls, true
					}
					if st := p.Single[len(p.Single)-1].SpecialToken; st != nil && st.ID != "" {
						if st.ID != eos {
							if eos != "" {
								eot = eos
							}
							eos = st.ID
						}
						t.addEOS, t.addEOSSet = true, true
					}
				}
			}
		}
	}
	if haveCfg {
		for _, x := range []struct {
			raw json.RawMessage
			v   *bool
			set *bool
		}{{cfg.AddBOS, &t.addBOS, &t.addBOSSet}, {cfg.AddEOS, &t.addEOS, &t.addEOSSet}} {
			var b bool
			if len(x.raw) > 0 && json.Unmarshal(x.raw, &b) == nil && string(bytes.TrimSpace(x.raw)) != "null" {
				*x.v, *x.set = b, true
			}
		}
	}
	// Names resolve to ids through the added tokens only (first match), as in SpecialVocab.
	lookup := func(s string) int32 {
		if s == "" {
			return -1
		}
		for _, a := range added {
			if a.text == s {
				return a.id
			}
		}
		return -1
	}
	kinds := []struct {
		kind, cfgKey string
		name         string
		dst          *int32
	}{
		{"bos", "bos", bos, &t.bos}, {"eos", "eos", eos, &t.eos}, {"unknown", "unk", name(cfg.UNK), &t.unk},
		{"seperator", "sep", sep, &t.sep}, {"padding", "pad", name(cfg.PAD), &t.pad},
		{"", "cls", cls, nil}, {"mask", "mask", name(cfg.MASK), &t.mask}, {"eot", "eot", eot, &t.eot},
	}
	unk := t.unk
	t.unk = -1
	set := map[string]bool{}
	for _, k := range kinds {
		if id := lookup(k.name); id >= 0 {
			set[k.cfgKey] = true
			if k.dst != nil {
				*k.dst = id
				t.specialOrder = append(t.specialOrder, k.kind)
			}
		}
	}
	for _, k := range kinds {
		if set[k.cfgKey] || configIDs == nil || (k.cfgKey == "eot" && eot == "") {
			continue
		}
		raw, ok := configIDs[k.cfgKey+"_token_id"]
		if !ok {
			continue
		}
		var id int64
		if json.Unmarshal(raw, &id) != nil || string(bytes.TrimSpace(raw)) == "null" {
			continue // lists (e.g. several eos ids) and nulls are ignored, like the converter
		}
		if id < 0 {
			return fmt.Errorf("config.json: %s_token_id is negative (%d)", k.cfgKey, id)
		}
		if id >= int64(len(t.tokens)) {
			return fmt.Errorf("config.json: %s_token_id %d is outside the vocabulary (%d)", k.cfgKey, id, len(t.tokens))
		}
		set[k.cfgKey] = true
		if k.dst != nil {
			*k.dst = int32(id)
			t.specialOrder = append(t.specialOrder, k.kind)
		}
	}
	if t.unk < 0 {
		t.unk = unk // model.unk_token still drives the BPE fallback
	}
	return nil
}

// hfChatTemplate finds the chat template like SpecialVocab: tokenizer_config.json
// "chat_template" (string or list of {name, template}), else chat_template.jinja (+ named
// additional templates), else chat_template.json.
func (t *Tokenizer) hfChatTemplate(f HFFiles, cfg *hfTokenizerConfig, haveCfg bool) error {
	var list []NamedTemplate
	var single *string
	parse := func(raw json.RawMessage, where string) error {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || string(raw) == "null" {
			return nil
		}
		if raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("%s: chat_template: %w", where, err)
			}
			single = &s
			return nil
		}
		if raw[0] == '[' {
			var items []struct {
				Name     string  `json:"name"`
				Template *string `json:"template"`
			}
			if err := json.Unmarshal(raw, &items); err != nil {
				return fmt.Errorf("%s: chat_template: %w", where, err)
			}
			for _, it := range items {
				if it.Template != nil {
					list = append(list, NamedTemplate{Name: it.Name, Template: *it.Template})
				}
			}
			return nil
		}
		return nil // other types are ignored with a warning by the converter
	}
	switch {
	case haveCfg && len(cfg.ChatTemplate) > 0:
		if err := parse(cfg.ChatTemplate, "tokenizer_config.json"); err != nil {
			return err
		}
	case f.ChatTemplateJinja != nil:
		s := string(f.ChatTemplateJinja)
		if len(f.AdditionalTemplates) > 0 {
			list = append([]NamedTemplate{{Name: "default", Template: s}}, f.AdditionalTemplates...)
		} else {
			single = &s
		}
	case f.ChatTemplateJSON != nil:
		var o struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(f.ChatTemplateJSON, &o); err != nil {
			return fmt.Errorf("chat_template.json: %w", err)
		}
		if err := parse(o.ChatTemplate, "chat_template.json"); err != nil {
			return err
		}
	}
	if single != nil {
		t.chatTemplate = *single
	}
	for _, nt := range list {
		name := sanitizeTemplateName(nt.Name)
		if name == "" {
			continue
		}
		if name == "default" {
			t.chatTemplate = nt.Template
			continue
		}
		t.namedTemplates = append(t.namedTemplates, NamedTemplate{Name: name, Template: nt.Template})
	}
	sort.SliceStable(t.namedTemplates, func(i, j int) bool { return t.namedTemplates[i].Name < t.namedTemplates[j].Name })
	return nil
}

// sanitizeTemplateName keeps ASCII letters and digits and turns every other character into '_'
// (gguf-py's add_chat_template).
func sanitizeTemplateName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
