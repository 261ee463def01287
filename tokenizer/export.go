package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// GGUFMetadata returns the tokenizer metadata llama.cpp's converter (convert_hf_to_gguf.py,
// gguf-py SpecialVocab) writes for this tokenizer, in the converter's key order:
//
//	tokenizer.ggml.model       string   "gpt2" (byte-level BPE) or "llama" (SentencePiece)
//	tokenizer.ggml.pre         string   pre (or Pre() when pre is ""); "default" for llama
//	tokenizer.ggml.tokens      []string token texts by id ([PADn] for unused ids)
//	tokenizer.ggml.scores      []float32 (llama only)
//	tokenizer.ggml.token_type  []int32  NORMAL/CONTROL/USER_DEFINED/UNUSED/BYTE/UNKNOWN
//	tokenizer.ggml.merges      []string "left right" in rank order (gpt2 only)
//	tokenizer.ggml.*_token_id  uint32   the special ids found, in SpecialVocab's order
//	tokenizer.ggml.add_bos_token / add_eos_token  bool, only when configured explicitly
//	tokenizer.chat_template.NAME, tokenizer.chat_templates, tokenizer.chat_template  string(s)
//
// For gpt2 vocabularies pre must be one of the names FromGGUF supports. Keys the converter
// writes from other sources (tokenizer.ggml.add_space_prefix for llama-architecture models,
// normalizer flags of WordPiece models) are left to the caller.
func (t *Tokenizer) GGUFMetadata(pre string) ([]KeyValue, error) {
	var kv []KeyValue
	n := len(t.tokens)
	types := make([]int32, n)
	tokens := make([]string, n)
	for i := range t.tokens {
		types[i] = int32(t.fileTypes[i])
		tokens[i] = t.tokens[i]
		if t.hf && t.fileTypes[i] == TokenUserDefined {
			tokens[i] = strings.ReplaceAll(tokens[i], "▁", " ") // converter: pre-normalize user-defined spaces
		}
	}
	switch {
	case t.sp != nil:
		// convert_hf_to_gguf.py _set_vocab_sentencepiece: the vocabulary of tokenizer.model.
		spTokens, spScores, spTypes := t.sp.tokens()
		n = len(spTokens)
		kv = append(kv,
			KeyValue{KeyModel, "llama"},
			KeyValue{KeyPre, "default"},
			KeyValue{KeyTokens, spTokens},
			KeyValue{KeyScores, spScores},
			KeyValue{KeyTokenType, spTypes})
	case t.kind == modelBPE && t.byteLevel:
		if pre == "" {
			pre = t.pre
		}
		if pre == "" {
			return nil, fmt.Errorf("tokenizer: no tokenizer.ggml.pre name known for this vocabulary; pass one explicitly")
		}
		if _, ok := preTable[pre]; !ok {
			return nil, fmt.Errorf("tokenizer: pre-tokenizer %q is not supported (supported: %s)", pre, supportedPres())
		}
		merges := t.mergeText
		if merges == nil {
			merges = make([]string, len(t.merges))
			for i, p := range t.merges {
				// gguf-py joins list-of-pairs merges with one space and writes spaces inside a
				// part as U+0120.
				merges[i] = strings.ReplaceAll(p[0], " ", "Ġ") + " " + strings.ReplaceAll(p[1], " ", "Ġ")
			}
		}
		kv = append(kv,
			KeyValue{KeyModel, "gpt2"},
			KeyValue{KeyPre, pre},
			KeyValue{KeyTokens, tokens},
			KeyValue{KeyTokenType, types},
			KeyValue{KeyMerges, merges})
	default:
		if pre == "" {
			pre = t.pre
		}
		if pre == "" {
			pre = "default"
		}
		scores := make([]float32, n)
		if t.kind == modelSPM {
			copy(scores, t.scores)
		} else {
			for i := range scores {
				scores[i] = -1000 // gguf-py LlamaHfVocab (tokenizer.json without tokenizer.model)
			}
		}
		kv = append(kv,
			KeyValue{KeyModel, "llama"},
			KeyValue{KeyPre, pre},
			KeyValue{KeyTokens, tokens},
			KeyValue{KeyScores, scores},
			KeyValue{KeyTokenType, types})
	}
	ids := map[string]int32{"bos": t.bos, "eos": t.eos, "unknown": t.unk, "seperator": t.sep,
		"padding": t.pad, "mask": t.mask, "eot": t.eot, "eom": t.eom}
	for _, k := range t.specialOrder {
		if id := ids[k]; id >= 0 && int(id) < n {
			kv = append(kv, KeyValue{SpecialIDKey(k), uint32(id)})
		}
	}
	if t.addBOSSet {
		kv = append(kv, KeyValue{KeyAddBOS, t.addBOS})
	}
	if t.addEOSSet {
		kv = append(kv, KeyValue{KeyAddEOS, t.addEOS})
	}
	if len(t.namedTemplates) > 0 {
		names := make([]string, 0, len(t.namedTemplates))
		for _, nt := range t.namedTemplates {
			kv = append(kv, KeyValue{KeyChatTemplate + "." + nt.Name, nt.Template})
			names = append(names, nt.Name)
		}
		kv = append(kv, KeyValue{KeyChatTemplates, names})
	}
	if t.chatTemplate != "" {
		kv = append(kv, KeyValue{KeyChatTemplate, t.chatTemplate})
	}
	return kv, nil
}

// chkTxt is the probe text of convert_hf_to_gguf.py's get_vocab_base_pre.
const chkTxt = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705 \U0001f999\U0001f999 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 \u1780\u17b6\u1793\u17cb\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f\u17a2\u17b6\u1785\U0001f601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e ------======= \u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438 ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"

// chkHashes maps the converter's probe hashes to pre-tokenizer names (the supported subset).
var chkHashes = map[string]string{
	"3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",     // openai-community/gpt2
	"0fe1cf6eda062318a1af7270f3331a85c539a01778ff948e24388e949c5282f4": "gpt-2",     // ruGPT3XL
	"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe", // Meta-Llama-3-8B
	"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",     // Qwen1.5-7B
	"d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",     // Qwen3-Embedding-0.6B
	"d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4": "qwen35",    // Qwen3.5-9B-Instruct
	"1444df51289cfa8063b96f0e62b1125440111bc79a52003ea14b6eac7016fd5f": "qwen35",    // MiniCPM-V-4_6
}

// ChkHash returns the converter's pre-tokenizer probe hash: SHA-256 of Python's str() of the
// ids of chkTxt encoded with special tokens added.
func (t *Tokenizer) ChkHash() string {
	ids := t.Encode(chkTxt, EncodeOptions{AddSpecial: true, ParseSpecial: true})
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(int(id)))
	}
	b.WriteByte(']')
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// DetectPre returns the tokenizer.ggml.pre name for a byte-level BPE tokenizer: first by the
// converter's probe hash, else by the pre-tokenizer regex ("" when neither is known).
func (t *Tokenizer) DetectPre() string {
	if !t.byteLevel {
		return ""
	}
	if p, ok := chkHashes[t.ChkHash()]; ok {
		return p
	}
	switch t.split {
	case splitQwen2:
		return "qwen2"
	case splitQwen35:
		return "qwen35"
	case splitLlama3:
		return "llama-bpe"
	case splitGPT2:
		return "gpt-2"
	}
	return ""
}

// Hash returns a stable hex SHA-256 of what determines tokenization: the model kind, the
// pre-tokenizer, every token (text and type) up to the last one that is not an unused
// "[PADn]" filler, the merges in rank order and (SentencePiece) the scores. A tokenizer loaded
// with LoadHF and the same vocabulary read back from the GGUF it exports hash alike.
func (t *Tokenizer) Hash() string {
	h := sha256.New()
	var buf [8]byte
	putU := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	putS := func(s string) {
		putU(uint64(len(s)))
		h.Write([]byte(s))
	}
	putS("tq-tokenizer-hash-v1")
	switch {
	case t.kind == modelSPM:
		putS("spm")
	case t.byteLevel:
		putS("bpe-bytelevel")
	default:
		putS("bpe")
	}
	putS(t.split.String())
	n := len(t.tokens)
	for n > 0 && t.fileTypes[n-1] == TokenUnused && t.tokens[n-1] == fmt.Sprintf("[PAD%d]", n-1) {
		n--
	}
	putU(uint64(n))
	for i := 0; i < n; i++ {
		putU(uint64(t.fileTypes[i]))
		putS(t.tokens[i])
	}
	putU(uint64(len(t.merges)))
	for _, m := range t.merges {
		putS(m[0])
		putS(m[1])
	}
	if t.kind == modelSPM {
		for i := 0; i < n; i++ {
			putU(uint64(math.Float32bits(t.scores[i])))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
