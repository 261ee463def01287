package tokenizer

import "testing"

// TestLlamaCppVocabVectors checks exact token-id equality with llama.cpp's own tokenizer test
// vectors (models/ggml-vocab-NAME.gguf.inp/.out, produced from the Hugging Face tokenizers and
// checked by llama.cpp's test-tokenizer-0 with add_special=false, parse_special=false).
func TestLlamaCppVocabVectors(t *testing.T) {
	for _, name := range []string{"qwen2", "qwen35", "llama-bpe", "llama-spm", "gpt-2"} {
		t.Run(name, func(t *testing.T) {
			tok, path := loadVocabGGUF(t, name)
			inputs, want := readVocabTests(t, path)
			if len(inputs) < 10 {
				t.Fatalf("only %d test inputs in %s.inp", len(inputs), path)
			}
			fails := 0
			for _, in := range inputs {
				got := tok.Encode(in, EncodeOptions{})
				if !equalIDs(got, want[in]) {
					fails++
					if fails <= 5 {
						t.Errorf("%q:\n got %v\nwant %v", in, got, want[in])
					}
				}
			}
			if fails > 0 {
				t.Errorf("%d of %d inputs differ", fails, len(inputs))
			}
			t.Logf("%d inputs, vocab %d", len(inputs), tok.VocabSize())
		})
	}
}
