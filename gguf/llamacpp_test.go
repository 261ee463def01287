package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/testenv"
)

// runTokenize runs testdata/llamacpp/llama.mjs (real llama.cpp through node-llama-cpp).
func runTokenize(harness, model string, texts []string) ([][]int, error) {
	req, _ := json.Marshal(map[string]any{"op": "tokenize", "model": model, "texts": texts})
	cmd := exec.Command("node", "llama.mjs")
	cmd.Dir = harness
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", model, err, stderr.String())
	}
	var resp struct{ Tokens [][]int }
	if err := json.Unmarshal(out, &resp); err != nil || len(resp.Tokens) != len(texts) {
		return nil, fmt.Errorf("%s: bad output %.200q: %v", model, out, err)
	}
	return resp.Tokens, nil
}

// TestLlamaCppTokenizesOurCopy copies all metadata of llama.cpp's Qwen2 vocab file into a
// new vocab-only file written by our Writer, and requires llama.cpp to tokenize the
// vocab test inputs identically with both files.
func TestLlamaCppTokenizesOurCopy(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	harness := filepath.Join(root, "testdata", "llamacpp")
	src := filepath.Join(harness, "src", "models", "ggml-vocab-qwen2.gguf")
	requireRef(t, src, "llama.cpp Qwen2 vocab file")
	requireRef(t, filepath.Join(harness, "node_modules", "node-llama-cpp"), "node-llama-cpp")
	if _, err := exec.LookPath("node"); err != nil {
		requireRef(t, "/nonexistent/node", "node executable")
	}
	inp, err := os.ReadFile(src + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(strings.TrimSuffix(string(inp), "\n__ggml_vocab_test__\n"), "\n__ggml_vocab_test__\n")
	texts = append(texts, "<|im_start|>user\nHi 🦙<|im_end|>", "")
	if len(texts) < 40 {
		t.Fatalf("only %d test inputs", len(texts))
	}

	m, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	md := m.Metadata().Clone()
	m.Close()
	dst := filepath.Join(t.TempDir(), "qwen2-copy.gguf")
	w, err := Create(dst, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata = md
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The original (from the Python writer) has no padding after a tensor-less header;
	// ours pads to the alignment like llama.cpp's C writer. Otherwise the bytes match.
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if len(b) < len(a) || !bytes.Equal(a, b[:len(a)]) || len(b)%DefaultAlignment != 0 ||
		len(b)-len(a) >= DefaultAlignment || bytes.Count(b[len(a):], []byte{0}) != len(b)-len(a) {
		t.Fatalf("copy (%d bytes) is not the original (%d bytes) plus zero padding", len(b), len(a))
	}

	// Both llama.cpp runs in parallel (each is a node process loading the vocab).
	var want [][]int
	done := make(chan struct{})
	var wantErr string
	go func() {
		defer close(done)
		var err error
		want, err = runTokenize(harness, src, texts)
		if err != nil {
			wantErr = err.Error()
		}
	}()
	got, err := runTokenize(harness, dst, texts)
	<-done
	if err != nil || wantErr != "" {
		t.Fatalf("llama.mjs: ours: %v; original: %s", err, wantErr)
	}
	nonEmpty := 0
	for i := range texts {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("text %d %q: our copy tokenizes to %v, original to %v", i, texts[i], got[i], want[i])
		}
		if len(want[i]) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty < len(texts)-2 {
		t.Fatalf("only %d of %d texts produced tokens", nonEmpty, len(texts))
	}
}
