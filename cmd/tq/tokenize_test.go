package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTokenizeGGUF(t *testing.T) {
	path := refPath(t, "src/models/ggml-vocab-qwen2.gguf")
	tok, err := loadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	// Ids as llama.cpp gives them for this file (llama.mjs tokenize, special tokens parsed).
	o := &tokenizeOptions{prompt: "Hello world <|im_start|> 123", parseSpecial: true, json: true}
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
	// Without --parse-special the control token is plain text.
	buf.Reset()
	o = &tokenizeOptions{stdin: true, count: true}
	if err := runTokenize(&buf, strings.NewReader("<|im_start|>"), tok, o); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(buf.String()) == "1" {
		t.Errorf("control token parsed without --parse-special")
	}
	if err := runTokenize(&buf, nil, tok, &tokenizeOptions{}); err == nil {
		t.Errorf("no input source accepted")
	}
}
