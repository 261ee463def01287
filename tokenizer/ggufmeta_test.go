package tokenizer

import (
	"path/filepath"
	"testing"
)

// The real gguf reader and the test-only reader used by the vector tests must build the same
// tokenizer from llama.cpp's files.
func TestLoadGGUFMatchesVectors(t *testing.T) {
	path := llamacppPath(t, filepath.Join("src", "models", "ggml-vocab-qwen2.gguf"))
	tok, err := LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode("Hello world <|im_start|> 123", EncodeOptions{ParseSpecial: true})
	want := []int32{9707, 1879, 220, 151644, 220, 16, 17, 18} // from llama.cpp (llama.mjs tokenize)
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}
}
