package calib

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tq-project/tq/calib/prompts"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/tokfile"
)

// TestBuildSequencesDefaultSet renders the built-in calibration set through the fixture
// model's chat template: every sequence is padded to a multiple of 64 with the pad id, the
// ChatML markers are parsed as single special tokens, and the rendering equals
// chat.Render + Encode(ParseSpecial) done by hand.
func TestBuildSequencesDefaultSet(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3"))
	tok, err := tokenizer.LoadHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := prompts.Default()
	if err != nil {
		t.Fatal(err)
	}
	seqs, pad, err := BuildSequences(tok, FromPromptSet(ps), SequenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != len(ps) {
		t.Fatalf("%d sequences for %d prompts", len(seqs), len(ps))
	}
	imStart := tok.Encode("<|im_start|>", tokenizer.EncodeOptions{ParseSpecial: true})
	if len(imStart) != 1 {
		t.Fatalf("<|im_start|> is %v", imStart)
	}
	for i, s := range seqs {
		if len(s.Tokens)%DefaultPadMultiple != 0 || s.Valid <= 0 || s.Valid > len(s.Tokens) || len(s.Tokens)-s.Valid >= DefaultPadMultiple {
			t.Fatalf("sequence %d: %d tokens, %d valid", i, len(s.Tokens), s.Valid)
		}
		for _, id := range s.Tokens[s.Valid:] {
			if id != pad {
				t.Fatalf("sequence %d: padding holds %d, pad id %d", i, id, pad)
			}
		}
		if s.Tokens[0] != imStart[0] {
			t.Errorf("sequence %d (%s) does not start with <|im_start|>: %v", i, ps[i].ID, s.Tokens[:4])
		}
	}
	// a tool prompt mentions its tools in the rendered text
	for i, p := range ps {
		if p.Kind != prompts.KindTool {
			continue
		}
		text := tok.Decode(seqs[i].Tokens[:seqs[i].Valid])
		if !strings.Contains(text, "<tools>") || !strings.Contains(text, prompts.ToolName(p.Tools[0])) {
			t.Errorf("tool prompt %s rendered without its tools", p.ID)
		}
		break
	}
}

// TestTokenFileInput reads sequences from a token file and checks that calibration_hash is
// the SHA-256 of that file.
func TestTokenFileInput(t *testing.T) {
	seqs := randSeqs(1, 4, 1000, 10, 200, 64)
	h := tokfile.Header{PadID: 0, PadMultiple: 64}
	th := sha256.Sum256([]byte("vocab"))
	h.VocabHash = th
	ts := make([]tokfile.Sequence, len(seqs))
	for i, s := range seqs {
		ts[i] = tokfile.Sequence{IDs: s.Tokens, AttnLen: s.Valid}
	}
	path := filepath.Join(t.TempDir(), "calib.tqtok")
	if err := tokfile.WriteFile(path, h, ts); err != nil {
		t.Fatal(err)
	}
	got, hdr, err := SequencesFromTokenFile(path, hex.EncodeToString(th[:]))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, seqs) {
		t.Fatal("sequences differ after the token file")
	}
	hash, err := CalibrationHash(*hdr, got)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	sum := sha256.Sum256(b)
	if hash != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("calibration hash %s is not the token file's SHA-256", hash)
	}
	other := sha256.Sum256([]byte("other"))
	if _, _, err := SequencesFromTokenFile(path, hex.EncodeToString(other[:])); err == nil {
		t.Error("a token file of another tokenizer was accepted")
	}
}
