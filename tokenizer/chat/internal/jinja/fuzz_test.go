package jinja

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/testenv"
)

// FuzzTemplate compiles and renders arbitrary template sources with small
// limits. Any outcome but an internal error (a recovered panic) or a hang is
// acceptable.
func FuzzTemplate(f *testing.F) {
	root := testenv.RepoRoot(f)
	var cases []confCase
	data, err := os.ReadFile(filepath.Join(root, "testdata", "chat", "conformance", "cases.json"))
	if err != nil {
		f.Fatal(err)
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add(c.Template)
	}
	tmpls, _ := filepath.Glob(filepath.Join(root, "testdata", "chat", "templates", "*.jinja"))
	for _, p := range tmpls {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	vars := map[string]any{
		"messages": []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
			map[string]any{"role": "assistant", "content": "<think>r</think>a", "tool_calls": []any{
				map[string]any{"type": "function", "function": map[string]any{"name": "f", "arguments": map[string]any{"a": 1.5, "b": []any{"x", nil, true}}}}}},
			map[string]any{"role": "tool", "content": "res"},
		},
		"tools":                 []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
		"add_generation_prompt": true,
		"s":                     "héllo wörld",
		"n":                     int64(-7),
	}
	f.Fuzz(func(t *testing.T, src string) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				panic(fmt.Sprintf("hang on %q", src))
			}
		}()
		tm, err := Compile("fuzz", src)
		if err != nil {
			if errKind(err) == "InternalError" {
				t.Fatalf("compile panicked: %v", err)
			}
			return
		}
		start := time.Now()
		_, err = tm.Render(context.Background(), vars, Options{MaxSteps: 200000, MaxOutput: 1 << 20, Timeout: 2 * time.Second, Now: fixedNow})
		if errKind(err) == "InternalError" {
			t.Fatalf("render panicked: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("render took %v", d)
		}
	})
}
