package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SentencePiece tokenizer.model support: llama.cpp's converter builds "llama" vocabularies from
// it (convert_hf_to_gguf.py _create_vocab_sentencepiece) whenever a model folder has one.

// spPiece is one SentencePiece vocabulary entry (sentencepiece_model.proto: ModelProto.pieces).
type spPiece struct {
	piece string
	score float32
	typ   int32 // 1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE
}

// spVocab is what the converter needs besides the pieces.
type spVocab struct {
	pieces      []spPiece
	vocabSize   int            // config.json vocab_size, or len(pieces)
	addedJSON   map[string]int // added_tokens.json
	addedConfig []addedDecl    // tokenizer_config.json added_tokens_decoder
}

type addedDecl struct {
	id      int
	content string
	special bool
}

// protobuf wire reading -------------------------------------------------------------------

func pbVarint(b []byte, i int) (uint64, int, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, 0, fmt.Errorf("truncated varint")
		}
		c := b[i]
		i++
		v |= uint64(c&0x7F) << shift
		if c < 0x80 {
			return v, i, nil
		}
	}
	return 0, 0, fmt.Errorf("varint too long")
}

// pbField reads one field header and returns the field number, wire type and the value's span
// (for varints and fixed values the span holds the raw bytes).
func pbField(b []byte, i int) (field uint64, wt uint64, start, end int, err error) {
	key, i, err := pbVarint(b, i)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	field, wt = key>>3, key&7
	switch wt {
	case 0:
		start = i
		_, end, err = pbVarint(b, i)
	case 1:
		start, end = i, i+8
	case 5:
		start, end = i, i+4
	case 2:
		var n uint64
		n, start, err = pbVarint(b, i)
		if err == nil && n > uint64(len(b)-start) {
			err = fmt.Errorf("field %d: length %d beyond the end of the data", field, n)
		}
		end = start + int(n)
	default:
		err = fmt.Errorf("field %d: unsupported wire type %d", field, wt)
	}
	if err == nil && end > len(b) {
		err = fmt.Errorf("field %d: truncated", field)
	}
	return field, wt, start, end, err
}

// parseSentencePieceModel reads the pieces of a serialized sentencepiece ModelProto.
func parseSentencePieceModel(data []byte) ([]spPiece, error) {
	var pieces []spPiece
	for i := 0; i < len(data); {
		field, wt, s, e, err := pbField(data, i)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.model: offset %d: %w", i, err)
		}
		i = e
		if field != 1 || wt != 2 {
			continue
		}
		p := spPiece{typ: 1, score: 0}
		msg := data[s:e]
		for j := 0; j < len(msg); {
			f, w, ps, pe, err := pbField(msg, j)
			if err != nil {
				return nil, fmt.Errorf("tokenizer.model: piece %d: %w", len(pieces), err)
			}
			j = pe
			switch {
			case f == 1 && w == 2:
				p.piece = string(msg[ps:pe])
			case f == 2 && w == 5:
				p.score = math.Float32frombits(binary.LittleEndian.Uint32(msg[ps:pe]))
			case f == 3 && w == 0:
				v, _, _ := pbVarint(msg, ps)
				p.typ = int32(v)
			}
		}
		if p.piece == "" || !utf8.ValidString(p.piece) {
			return nil, fmt.Errorf("tokenizer.model: piece %d is empty or not UTF-8 (not a SentencePiece model?)", len(pieces))
		}
		pieces = append(pieces, p)
		if len(pieces) > maxVocab {
			return nil, fmt.Errorf("tokenizer.model: more than %d pieces", maxVocab)
		}
	}
	if len(pieces) == 0 {
		return nil, fmt.Errorf("tokenizer.model: no pieces (not a SentencePiece model)")
	}
	return pieces, nil
}

// newSPVocab gathers what _create_vocab_sentencepiece reads.
func newSPVocab(model, addedTokensJSON []byte, cfg *hfTokenizerConfig, configVocab *int64) (*spVocab, error) {
	pieces, err := parseSentencePieceModel(model)
	if err != nil {
		return nil, err
	}
	sv := &spVocab{pieces: pieces, vocabSize: len(pieces)}
	if configVocab != nil {
		if *configVocab <= 0 || *configVocab > int64(len(pieces))+idSlack(int64(len(pieces))) {
			return nil, fmt.Errorf("config.json: vocab_size %d does not fit the %d pieces of tokenizer.model", *configVocab, len(pieces))
		}
		sv.vocabSize = int(*configVocab)
	}
	if addedTokensJSON != nil {
		if err := json.Unmarshal(addedTokensJSON, &sv.addedJSON); err != nil {
			return nil, fmt.Errorf("added_tokens.json: %w", err)
		}
	}
	if cfg != nil {
		for k, raw := range cfg.AddedTokensDecd {
			id, err := strconv.Atoi(k)
			if err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder key %q is not an integer", k)
			}
			var a hfAddedToken
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder[%s]: %w", k, err)
			}
			sv.addedConfig = append(sv.addedConfig, addedDecl{id: id, content: a.Content, special: a.Special})
		}
		sort.Slice(sv.addedConfig, func(i, j int) bool { return sv.addedConfig[i].id < sv.addedConfig[j].id })
	}
	return sv, nil
}

// tokens builds the token list, scores and types as _create_vocab_sentencepiece does.
func (sv *spVocab) tokens() ([]string, []float32, []int32) {
	n := sv.vocabSize
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range tokens {
		tokens[i] = "[PAD" + strconv.Itoa(i) + "]"
		scores[i] = -10000
		types[i] = int32(TokenUnused)
	}
	for id, p := range sv.pieces {
		if id >= n {
			break
		}
		typ := TokenNormal
		switch p.typ {
		case 2:
			typ = TokenUnknown
		case 3:
			typ = TokenControl
		case 5:
			typ = TokenUnused
		case 6:
			typ = TokenByte
		}
		tokens[id], scores[id], types[id] = p.piece, p.score, int32(typ)
	}
	names := make([]string, 0, len(sv.addedJSON))
	for k := range sv.addedJSON {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if id := sv.addedJSON[k]; id >= 0 && id < n {
			tokens[id], scores[id], types[id] = k, -1000, int32(TokenUserDefined)
		}
	}
	for _, a := range sv.addedConfig {
		if a.id < 0 || a.id >= n {
			continue
		}
		content := a.content
		if a.special || looksSpecial(content) {
			types[a.id] = int32(TokenControl)
		} else {
			content = strings.ReplaceAll(content, "▁", " ")
			types[a.id] = int32(TokenUserDefined)
		}
		tokens[a.id], scores[a.id] = content, -1000
	}
	return tokens, scores, types
}
