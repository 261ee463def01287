package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/testenv"
	"github.com/tq-project/tq/tokenizer/chat/internal/jinja"
)

// fixedNow matches FIXED_NOW in testdata/chat/render.py.
func fixedNow() time.Time { return time.Date(2025, 7, 4, 9, 5, 3, 0, time.Local) }

// conversation is the file format of testdata/chat/conversations/*.json.
type conversation struct {
	Messages            []Message         `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	EnableThinking      *bool             `json:"enable_thinking"`
	BOS                 string            `json:"bos_token"`
	EOS                 string            `json:"eos_token"`
}

type namedConv struct {
	name string
	conv conversation
}

func loadConversations(t testing.TB) []namedConv {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "chat", "conversations")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no conversations in %s: %v", dir, err)
	}
	sort.Strings(files)
	var out []namedConv
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c conversation
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, namedConv{strings.TrimSuffix(filepath.Base(f), ".json"), c})
	}
	return out
}

func (c conversation) options(name string) Options {
	return Options{
		ToolsJSON:           c.Tools,
		AddGenerationPrompt: c.AddGenerationPrompt,
		EnableThinking:      c.EnableThinking,
		BOS:                 c.BOS,
		EOS:                 c.EOS,
		Name:                name,
		Now:                 fixedNow,
	}
}

func errorKind(err error) string {
	var je *jinja.Error
	if errors.As(err, &je) {
		return je.Kind
	}
	return ""
}

func errorMsg(err error) string {
	var je *jinja.Error
	if errors.As(err, &je) {
		return je.Msg
	}
	return err.Error()
}

// TestGoldenQwen renders every conversation with the Qwen3 and Qwen3.5
// templates in testdata/chat/templates and compares byte-for-byte with the
// Python jinja2 outputs in testdata/chat/golden (see render.py). Errors
// must have the same Python exception class and message.
func TestGoldenQwen(t *testing.T) {
	root := testenv.RepoRoot(t)
	convs := loadConversations(t)
	templates, _ := filepath.Glob(filepath.Join(root, "testdata", "chat", "templates", "*.jinja"))
	if len(templates) < 2 {
		t.Fatalf("expected the Qwen3 and Qwen3.5 templates, found %v", templates)
	}
	n := 0
	for _, tf := range templates {
		src, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		stem := strings.TrimSuffix(filepath.Base(tf), ".jinja")
		for _, nc := range convs {
			base := filepath.Join(root, "testdata", "chat", "golden", stem, nc.name)
			got, err := Render(string(src), nc.conv.Messages, nc.conv.options(stem))
			want, werr := os.ReadFile(base + ".txt")
			if werr == nil {
				if err != nil {
					t.Errorf("%s/%s: %v", stem, nc.name, err)
				} else if got != string(want) {
					t.Errorf("%s/%s differs from Python:\n%s", stem, nc.name, firstDiff(got, string(want)))
				}
				n++
				continue
			}
			wantErr, eerr := os.ReadFile(base + ".err")
			if eerr != nil {
				t.Fatalf("%s/%s: no golden (.txt or .err): regenerate with testdata/chat/render.py", stem, nc.name)
			}
			kind, msg, _ := strings.Cut(strings.TrimSpace(string(wantErr)), ": ")
			if err == nil {
				t.Errorf("%s/%s: rendered without error, Python raised %s", stem, nc.name, wantErr)
			} else if errorKind(err) != kind || errorMsg(err) != msg {
				t.Errorf("%s/%s: error %q, Python raised %q", stem, nc.name, err, wantErr)
			}
			n++
		}
	}
	if n < 40 {
		t.Fatalf("only %d golden comparisons", n)
	}
}

func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-80)
	return "first difference at byte " + itoa(i) + "\n got: " + quoteSnippet(got, lo, i+80) + "\nwant: " + quoteSnippet(want, lo, i+80)
}

func quoteSnippet(s string, lo, hi int) string {
	if hi > len(s) {
		hi = len(s)
	}
	if lo > hi {
		lo = hi
	}
	b, _ := json.Marshal(s[lo:hi])
	return string(b)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

type hashGolden struct {
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	Error  string `json:"error"`
}

// TestGoldenLlamaCppTemplates renders every chat template shipped in
// llama.cpp's models/templates (68 model families) with every conversation
// and compares the SHA-256 of the output (or the error class) with Python
// jinja2 (testdata/chat/golden-llamacpp.json).
func TestGoldenLlamaCppTemplates(t *testing.T) {
	root := testenv.RepoRoot(t)
	dir := filepath.Join(root, "testdata", "llamacpp", "src", "models", "templates")
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("TQ_REQUIRE_REFS") == "1" {
			t.Fatalf("llama.cpp templates missing at %s (run testdata/llamacpp/setup.sh)", dir)
		}
		t.Skipf("llama.cpp templates missing at %s (run testdata/llamacpp/setup.sh)", dir)
	}
	var golden map[string]map[string]hashGolden
	data, err := os.ReadFile(filepath.Join(root, "testdata", "chat", "golden-llamacpp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	convs := loadConversations(t)
	names := make([]string, 0, len(golden))
	for name := range golden {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) < 60 {
		t.Fatalf("golden covers only %d templates", len(names))
	}
	match, total, rendered := 0, 0, 0
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, nc := range convs {
			want, ok := golden[name][nc.name]
			if !ok {
				t.Errorf("%s/%s: no golden", name, nc.name)
				continue
			}
			total++
			opts := nc.conv.options(name)
			opts.BOS, opts.EOS = "<s>", "</s>"
			got, err := Render(string(src), nc.conv.Messages, opts)
			switch {
			case want.Error != "" && err == nil:
				t.Errorf("%s/%s: rendered %d bytes, Python raised %s", name, nc.name, len(got), want.Error)
			case want.Error != "" && errorKind(err) != want.Error:
				t.Errorf("%s/%s: error %v, Python raised %s", name, nc.name, err, want.Error)
			case want.Error == "" && err != nil:
				t.Errorf("%s/%s: %v", name, nc.name, err)
			case want.Error == "":
				sum := sha256.Sum256([]byte(got))
				if hex.EncodeToString(sum[:]) != want.SHA256 {
					t.Errorf("%s/%s: output differs from Python (%d bytes, Python %d)", name, nc.name, len(got), want.Bytes)
					continue
				}
				rendered++
				match++
			default:
				match++
			}
		}
	}
	t.Logf("%d/%d template x conversation renders match Python jinja2 (%d byte-identical outputs, %d identical error classes)",
		match, total, rendered, match-rendered)
}
