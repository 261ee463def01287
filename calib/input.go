package calib

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/tq-project/tq/calib/prompts"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/chat"
	"github.com/tq-project/tq/tokenizer/tokfile"
)

// DefaultPadMultiple is the multiple calibration sequences are padded to.
const DefaultPadMultiple = 64

// Prompt is one calibration prompt: plain text, or a conversation (optionally with tool
// definitions and tool calls) rendered through the model's own chat template.
type Prompt struct {
	// Name identifies the prompt in error messages.
	Name string
	// Text is used when Messages is empty (or the model has no chat template); it is tokenized
	// with the model's BOS/EOS rules.
	Text string
	// Messages, when not empty, are rendered with the chat template; the rendered text is
	// tokenized with special tokens parsed as special and without adding BOS/EOS (the template
	// writes them), as transformers' apply_chat_template(tokenize=True) does.
	Messages []chat.Message
	// Tools are tool definitions (JSON objects) passed to the template.
	Tools []json.RawMessage
	// AddGenerationPrompt appends the assistant turn header.
	AddGenerationPrompt bool
}

// FromPromptSet converts prompts of the calibration set (prompts.Default, prompts.LoadFiles).
// Plain-text prompts keep their text too, used when the model has no chat template.
func FromPromptSet(ps []prompts.Prompt) []Prompt {
	out := make([]Prompt, len(ps))
	for i, p := range ps {
		co := p.ChatOptions()
		out[i] = Prompt{Name: p.ID, Messages: p.Messages, Tools: co.ToolsJSON, AddGenerationPrompt: co.AddGenerationPrompt}
		if p.Kind == prompts.KindText && len(p.Messages) == 1 {
			out[i].Text = p.Messages[0].Content
		}
	}
	return out
}

// SequenceOptions control BuildSequences.
type SequenceOptions struct {
	// PadMultiple pads every sequence to a multiple of it (0: DefaultPadMultiple; 1: none).
	PadMultiple int
	// MaxLen truncates longer sequences (0: no limit).
	MaxLen int
	// Template overrides the tokenizer's chat template.
	Template string
}

// BuildSequences renders and tokenizes prompts and pads them (tokfile.Pad). The padding id is
// the tokenizer's PAD, else EOS, else 0; padding positions are excluded from statistics.
func BuildSequences(tok *tokenizer.Tokenizer, prompts []Prompt, o SequenceOptions) ([]Sequence, int32, error) {
	mult := o.PadMultiple
	if mult == 0 {
		mult = DefaultPadMultiple
	}
	pad := tok.PAD()
	if pad < 0 {
		pad = tok.EOS()
	}
	if pad < 0 {
		pad = 0
	}
	tmpl := o.Template
	if tmpl == "" {
		tmpl = tok.ChatTemplate()
	}
	var out []Sequence
	for i, p := range prompts {
		name := p.Name
		if name == "" {
			name = fmt.Sprintf("prompt %d", i)
		}
		var ids []int32
		if len(p.Messages) > 0 && (tmpl != "" || p.Text == "") {
			if tmpl == "" {
				return nil, 0, fmt.Errorf("calib: %s is a conversation but the model has no chat template", name)
			}
			copts := chat.Options{ToolsJSON: p.Tools, AddGenerationPrompt: p.AddGenerationPrompt, Name: "chat_template"}
			if id := tok.BOS(); id >= 0 {
				copts.BOS = tok.TokenPiece(id)
			}
			if id := tok.EOS(); id >= 0 {
				copts.EOS = tok.TokenPiece(id)
			}
			text, err := chat.Render(tmpl, p.Messages, copts)
			if err != nil {
				return nil, 0, fmt.Errorf("calib: %s: %w", name, err)
			}
			ids = tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true})
		} else {
			ids = tok.Encode(p.Text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
		}
		if len(ids) == 0 {
			return nil, 0, fmt.Errorf("calib: %s tokenizes to nothing", name)
		}
		padded, n := tokfile.Pad(ids, mult, o.MaxLen, pad)
		out = append(out, Sequence{Tokens: padded, Valid: n})
	}
	return out, pad, nil
}

// SequencesFromTokenFile reads the sequences of a token file (`tq tokenize` output). When
// vocabHash is not empty (hex SHA-256, as tokenizer.Tokenizer.Hash returns) and the file
// records a vocabulary hash, they must agree.
func SequencesFromTokenFile(path, vocabHash string) ([]Sequence, *tokfile.Header, error) {
	f, err := tokfile.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("calib: %w", err)
	}
	if vocabHash != "" && f.VocabHash != ([32]byte{}) {
		if want, err := hex.DecodeString(vocabHash); err == nil && len(want) == 32 && [32]byte(want) != f.VocabHash {
			return nil, nil, fmt.Errorf("calib: token file %s was made with a different tokenizer (vocabulary hash %x, model's %s)", path, f.VocabHash[:8], vocabHash[:16])
		}
	}
	out := make([]Sequence, len(f.Seqs))
	for i, s := range f.Seqs {
		out[i] = Sequence{Tokens: s.IDs, Valid: s.AttnLen}
	}
	return out, &f.Header, nil
}

// CalibrationHash is the calibration_hash of quantize_config.json: "sha256:" and the hex
// SHA-256 of the calibration token file (tokfile format) holding the sequences with header h.
// For a calibration read from a token file with an unchanged header this is the hash of that
// file.
func CalibrationHash(h tokfile.Header, seqs []Sequence) (string, error) {
	ts := make([]tokfile.Sequence, len(seqs))
	for i, s := range seqs {
		ts[i] = tokfile.Sequence{IDs: s.Tokens, AttnLen: s.Valid}
	}
	b, err := tokfile.Encode(h, ts)
	if err != nil {
		return "", fmt.Errorf("calib: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
