package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"

	"github.com/tq-project/tq/tokenizer/tokfile"
)

func TestTokenizeGGUF(t *testing.T) {
	path := llamacppref.Path(t, "src/models/ggml-vocab-qwen2.gguf")
	tok, err := loadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	// Ids as llama.cpp gives them for this file (llama.mjs tokenize, special tokens parsed).
	o := &tokenizeOptions{prompt: "Hello world <|im_start|> 123", json: true}
	if err := runTokenize(&buf, nil, tok, o); err != nil {
		t.Fatal(err)
	}
	var res tokenizeResult
	if err := json.Unmarshal(buf.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	want := []int32{9707, 1879, 220, 151644, 220, 16, 17, 18}
	if len(res.IDs) != len(want) || res.Count != len(want) {
		t.Fatalf("ids %v, want %v", res.IDs, want)
	}
	for i := range want {
		if res.IDs[i] != want[i] {
			t.Fatalf("ids %v, want %v", res.IDs, want)
		}
	}
	if strings.Join(res.Pieces, "") != "Hello world <|im_start|> 123" {
		t.Errorf("pieces %q do not spell the text", res.Pieces)
	}
	// With --no-parse-special the control token is plain text.
	buf.Reset()
	o = &tokenizeOptions{stdin: true, count: true, noParse: true}
	if err := runTokenize(&buf, strings.NewReader("<|im_start|>"), tok, o); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(buf.String()) == "1" {
		t.Errorf("control token parsed with --no-parse-special")
	}
	if err := runTokenize(&buf, nil, tok, &tokenizeOptions{}); err == nil {
		t.Errorf("no input source accepted")
	}
}

func TestTokenizeCalibrationOut(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3")
	out := filepath.Join(dir, "calib.tok")
	var sum calibTokenizeSummary
	js := tqCmd(t, "tokenize", hfDir, "--calibration-out", out, "--max-length", "1024", "--json")
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	f, err := tokfile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Seqs) != 32 || sum.Sequences != 32 {
		t.Fatalf("%d sequences in the file, %d reported; want the 32 built-in prompts", len(f.Seqs), sum.Sequences)
	}
	real := 0
	for i, s := range f.Seqs {
		if len(s.IDs)%64 != 0 && len(s.IDs) != 1024 || len(s.IDs) > 1024 {
			t.Errorf("sequence %d has %d tokens: not padded to 64 or over --max-length", i, len(s.IDs))
		}
		for _, id := range s.IDs[s.AttnLen:] {
			if id != f.PadID {
				t.Fatalf("sequence %d: padding holds id %d, pad id is %d", i, id, f.PadID)
			}
		}
		real += s.AttnLen
	}
	if real != sum.Tokens {
		t.Errorf("file holds %d real tokens, summary says %d", real, sum.Tokens)
	}
	// The file's SHA-256 is the calibration hash calibrate records for it.
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if h := sha256.Sum256(b); sum.Hash != "sha256:"+hex.EncodeToString(h[:]) {
		t.Errorf("calibration hash %s is not the file's SHA-256", sum.Hash)
	}
	// @builtin names the built-in set: alone it writes the same file, and a prompt file
	// combined with it adds its sequence to the 32.
	out2 := filepath.Join(dir, "builtin.tok")
	tqCmd(t, "tokenize", hfDir, "--calibration-out", out2, "--max-length", "1024", "--calibration-dataset", "@builtin")
	if b2, err := os.ReadFile(out2); err != nil || !bytes.Equal(b, b2) {
		t.Errorf("--calibration-dataset @builtin wrote another file than the default (%v)", err)
	}
	extra := filepath.Join(dir, "extra.txt")
	if err := os.WriteFile(extra, []byte("Explain how a bicycle's gears work.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tqCmd(t, "tokenize", hfDir, "--calibration-out", out2, "--max-length", "1024", "--calibration-dataset", "@builtin", "--calibration-dataset", extra)
	if f2, err := tokfile.ReadFile(out2); err != nil || len(f2.Seqs) != 33 {
		t.Errorf("@builtin and one file: %v, want 33 sequences", err)
	}
}

// Control tokens are parsed by default, as llama-tokenize and transformers do;
// --no-parse-special turns that off and the old --parse-special is still accepted.
func TestTokenizeParsesSpecialByDefault(t *testing.T) {
	hfDir := hfFixture(t, t.TempDir(), "qwen3")
	count := func(args ...string) string {
		out := strings.TrimSpace(tqCmd(t, append([]string{"tokenize", hfDir, "-p", "<|im_start|>", "--show-count", "--no-special"}, args...)...))
		return out[strings.LastIndex(out, "\n")+1:] // after cobra's deprecation notice
	}
	if n := count(); n != "1" {
		t.Errorf("default: %s tokens for <|im_start|>, want 1", n)
	}
	if n := count("--parse-special"); n != "1" {
		t.Errorf("--parse-special: %s tokens, want 1", n)
	}
	if n := count("--no-parse-special"); n == "1" {
		t.Errorf("--no-parse-special: %s tokens, want <|im_start|> spelled out", n)
	}
}
