package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/tq-project/tq/tokenizer"
)

// FidelityReport compares the model's chat template and tokenizer with the reference's.
type FidelityReport struct {
	Conversations int `json:"conversations"`
	// TemplateIdentical counts conversations the two templates render byte-identically.
	TemplateIdentical int `json:"template_identical"`
	// TokensIdentical counts rendered conversations the two tokenizers encode to the same ids
	// (each tokenizer encoding its own rendering).
	TokensIdentical int `json:"tokens_identical"`
	// TextTokensIdentical says whether the evaluation text encodes identically.
	TextTokensIdentical bool `json:"text_tokens_identical"`
	// TemplateSHA256 and ReferenceTemplateSHA256 identify the two templates.
	TemplateSHA256          string `json:"template_sha256"`
	ReferenceTemplateSHA256 string `json:"reference_template_sha256"`
	// TokenizerHash and ReferenceTokenizerHash are tokenizer.Tokenizer.Hash of each side.
	TokenizerHash          string     `json:"tokenizer_hash"`
	ReferenceTokenizerHash string     `json:"reference_tokenizer_hash"`
	Mismatches             []Mismatch `json:"mismatches,omitempty"`
}

// Mismatch is one difference found by the fidelity check.
type Mismatch struct {
	ID     string `json:"id"`   // conversation id, or "evaluation text"
	Kind   string `json:"kind"` // "template", "tokens" or "render-error"
	Detail string `json:"detail"`
}

// Passed reports whether everything matched.
func (r *FidelityReport) Passed() bool { return len(r.Mismatches) == 0 }

// refSide is the reference side of the fidelity check: a live tokenizer, or what a saved
// reference recorded.
type refSide struct {
	template string
	tok      *tokenizer.Tokenizer // nil with a saved reference
	// saved token hashes per conversation id (and "evaluation text"), used when tok is nil
	tokenHashes map[string]string
	tokHash     string
	bos, eos    string
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func tokensHash(ids []int32) string {
	h := sha256.New()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkFidelity renders every conversation with both templates and compares the bytes, and
// compares the token ids of each rendering and of the evaluation text.
func checkFidelity(modelTemplate string, modelTok *tokenizer.Tokenizer, ref refSide, convs []Conversation, text string) *FidelityReport {
	r := &FidelityReport{Conversations: len(convs), TemplateSHA256: sha256Hex(modelTemplate),
		ReferenceTemplateSHA256: sha256Hex(ref.template), TokenizerHash: modelTok.Hash(), ReferenceTokenizerHash: ref.tokHash}
	mbos, meos := specialText(modelTok, modelTok.BOS()), specialText(modelTok, modelTok.EOS())
	for _, c := range convs {
		got, gerr := render(modelTemplate, c, mbos, meos)
		want, werr := render(ref.template, c, ref.bos, ref.eos)
		switch {
		case gerr != nil && werr != nil:
			r.Mismatches = append(r.Mismatches, Mismatch{c.ID, "render-error", fmt.Sprintf("both templates fail: %v", gerr)})
			continue
		case gerr != nil:
			r.Mismatches = append(r.Mismatches, Mismatch{c.ID, "render-error", fmt.Sprintf("model template fails: %v", gerr)})
			continue
		case werr != nil:
			r.Mismatches = append(r.Mismatches, Mismatch{c.ID, "render-error", fmt.Sprintf("reference template fails: %v", werr)})
			continue
		}
		if got == want {
			r.TemplateIdentical++
		} else {
			r.Mismatches = append(r.Mismatches, Mismatch{c.ID, "template", firstDiff(want, got)})
		}
		opts := tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}
		mids := modelTok.Encode(got, opts)
		if ref.tok != nil {
			rids := ref.tok.Encode(want, opts)
			if slices.Equal(mids, rids) {
				r.TokensIdentical++
			} else {
				r.Mismatches = append(r.Mismatches, Mismatch{c.ID, "tokens", tokenDiff(rids, mids)})
			}
		} else if h, ok := ref.tokenHashes[c.ID]; ok {
			if h == tokensHash(mids) {
				r.TokensIdentical++
			} else {
				r.Mismatches = append(r.Mismatches, Mismatch{c.ID, "tokens", "token ids differ from the saved reference's"})
			}
		}
	}
	// the evaluation text, tokenized as perplexity does
	opts := tokenizer.EncodeOptions{AddSpecial: true}
	mids := modelTok.Encode(text, opts)
	switch {
	case ref.tok != nil:
		rids := ref.tok.Encode(text, opts)
		r.TextTokensIdentical = slices.Equal(mids, rids)
		if !r.TextTokensIdentical {
			r.Mismatches = append(r.Mismatches, Mismatch{"evaluation text", "tokens", tokenDiff(rids, mids)})
		}
	case ref.tokenHashes[textKey] != "":
		r.TextTokensIdentical = ref.tokenHashes[textKey] == tokensHash(mids)
		if !r.TextTokensIdentical {
			r.Mismatches = append(r.Mismatches, Mismatch{"evaluation text", "tokens", "token ids differ from the saved reference's"})
		}
	}
	return r
}

const textKey = "evaluation text"

// firstDiff describes the first differing byte of two renderings.
func firstDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	ctx := func(s string) string {
		lo, hi := max(0, i-20), min(len(s), i+30)
		return fmt.Sprintf("%q", s[lo:hi])
	}
	return fmt.Sprintf("renderings differ at byte %d (reference %d bytes, model %d bytes): reference …%s…, model …%s…",
		i, len(want), len(got), ctx(want), ctx(got))
}

// tokenDiff describes the first differing token of two encodings.
func tokenDiff(want, got []int32) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	show := func(s []int32) string {
		hi := min(len(s), i+6)
		var b strings.Builder
		for j := i; j < hi; j++ {
			fmt.Fprintf(&b, " %d", s[j])
		}
		return strings.TrimSpace(b.String())
	}
	return fmt.Sprintf("token ids differ at position %d (reference %d tokens, model %d): reference [%s], model [%s]",
		i, len(want), len(got), show(want), show(got))
}
