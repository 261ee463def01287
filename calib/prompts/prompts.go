// Package prompts provides calibration prompts: the built-in default set
// (32 chat conversations embedded from data/) and loaders for user-supplied
// prompt files.
//
// The default set mixes what quantized models are asked to do: 12 tool-call
// conversations with JSON-schema tools (some with tool results and a
// follow-up turn), 10 long-document summary requests (2,500-3,500 words of
// original prose each) and 10 multi-step math word problems with worked
// solutions (some in reasoning_content "thinking" form).
package prompts

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/tokenizer/chat"
)

// Prompt kinds.
const (
	KindTool     = "tool"
	KindDocument = "document"
	KindMath     = "math"
	KindText     = "text" // plain text from a .txt file or {"text": ...}
	KindChat     = "chat" // a conversation from a user file without a kind
)

// Prompt is one calibration conversation.
type Prompt struct {
	ID       string
	Kind     string
	Messages []chat.Message
	// Tools are the tool definitions offered to the model (nil if none).
	Tools []map[string]any
	// ToolsJSON holds the same definitions as JSON text, keeping the key
	// order of the source file; pass it to chat.Options.ToolsJSON for
	// renders that match Python byte for byte.
	ToolsJSON []json.RawMessage
}

// ChatOptions returns the render options for the prompt: its tools and a
// generation prompt when the conversation does not end with an assistant
// turn.
func (p Prompt) ChatOptions() chat.Options {
	last := ""
	if n := len(p.Messages); n > 0 {
		last = p.Messages[n-1].Role
	}
	return chat.Options{ToolsJSON: p.ToolsJSON, AddGenerationPrompt: last != "assistant"}
}

//go:embed data/*.json
var dataFS embed.FS

// Default returns the built-in calibration set in a stable order (tool,
// document, math; by id within each kind).
func Default() ([]Prompt, error) {
	names, err := fs.Glob(dataFS, "data/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Prompt
	for _, name := range names {
		data, err := dataFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ps, err := parseJSONPrompts(data, path.Base(name))
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	order := map[string]int{KindTool: 0, KindDocument: 1, KindMath: 2}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return order[out[i].Kind] < order[out[j].Kind]
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Builtin is the dataset name that LoadFiles reads as the built-in set (a prompt file's name
// has a .txt, .jsonl or .json extension, so none is taken).
const Builtin = "@builtin"

// maxFileSize bounds user prompt files.
const maxFileSize = 256 << 20

// maxLine bounds one line of a .jsonl file.
const maxLine = 64 << 20

// LoadFiles reads user-supplied prompts:
//   - .txt: the whole file is one user message;
//   - .jsonl: one prompt per non-empty line, either {"text": "..."} or
//     {"messages": [...], "tools": [...]} (optionally with "id", "kind");
//   - .json: one prompt object in the format of the built-in set
//     ({"id", "kind", "messages", "tools"}), or an array of them.
//
// The name Builtin stands for the built-in set (Default), so that it can be combined with
// files of the user's own domain.
//
// Errors name the file (and line for .jsonl).
func LoadFiles(paths ...string) ([]Prompt, error) {
	var out []Prompt
	for _, p := range paths {
		var ps []Prompt
		var err error
		if p == Builtin {
			ps, err = Default()
		} else {
			ps, err = loadFile(p)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	return out, nil
}

func loadFile(p string) ([]Prompt, error) {
	if err := boundedread.CheckRegular(p, "prompt file"); err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	base := filepath.Base(p)
	stem := strings.TrimSuffix(base, filepath.Ext(base))
	switch strings.ToLower(filepath.Ext(p)) {
	case ".txt":
		data, err := boundedread.ReadFile(p, "prompt file", maxFileSize)
		if err != nil {
			return nil, fmt.Errorf("prompts: %w", err)
		}
		text := string(data)
		if strings.TrimSpace(text) == "" {
			return nil, fmt.Errorf("prompts: %s: empty prompt", p)
		}
		return []Prompt{{ID: stem, Kind: KindText, Messages: []chat.Message{{Role: "user", Content: text}}}}, nil
	case ".json":
		data, err := boundedread.ReadFile(p, "prompt file", maxFileSize)
		if err != nil {
			return nil, fmt.Errorf("prompts: %w", err)
		}
		ps, err := parseJSONPrompts(data, base)
		if err != nil {
			return nil, fmt.Errorf("prompts: %s: %w", p, err)
		}
		return ps, nil
	case ".jsonl":
		return loadJSONL(p, stem)
	}
	return nil, fmt.Errorf("prompts: %s: unsupported extension (want .txt, .json or .jsonl, or %s for the built-in set)", p, Builtin)
}

func loadJSONL(p, stem string) ([]Prompt, error) {
	f, st, err := boundedread.Open(p, "prompt file")
	if err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	defer f.Close()
	if st.Size() > maxFileSize {
		return nil, fmt.Errorf("prompts: %s is %d bytes, limit %d", p, st.Size(), maxFileSize)
	}
	sc := bufio.NewScanner(boundedread.LimitReader(f, p, "prompt file", maxFileSize))
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []Prompt
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var probe struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			return nil, fmt.Errorf("prompts: %s:%d: %w", p, line, err)
		}
		id := fmt.Sprintf("%s:%d", stem, line)
		if probe.Text != nil {
			if strings.TrimSpace(*probe.Text) == "" {
				return nil, fmt.Errorf("prompts: %s:%d: empty text", p, line)
			}
			out = append(out, Prompt{ID: id, Kind: KindText, Messages: []chat.Message{{Role: "user", Content: *probe.Text}}})
			continue
		}
		pr, err := parsePrompt(b, id)
		if err != nil {
			return nil, fmt.Errorf("prompts: %s:%d: %w", p, line, err)
		}
		out = append(out, pr)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("prompts: %s:%d: line longer than %d bytes", p, line+1, maxLine)
		}
		return nil, fmt.Errorf("prompts: %s: %w", p, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("prompts: %s: no prompts", p)
	}
	return out, nil
}

// parseJSONPrompts parses one prompt object or an array of them.
func parseJSONPrompts(data []byte, name string) ([]Prompt, error) {
	stem := strings.TrimSuffix(name, path.Ext(name))
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, err
		}
		if len(raws) == 0 {
			return nil, errors.New("empty prompt array")
		}
		var out []Prompt
		for i, r := range raws {
			p, err := parsePrompt(r, fmt.Sprintf("%s:%d", stem, i))
			if err != nil {
				return nil, fmt.Errorf("prompt %d: %w", i, err)
			}
			out = append(out, p)
		}
		return out, nil
	}
	p, err := parsePrompt(trimmed, stem)
	if err != nil {
		return nil, err
	}
	return []Prompt{p}, nil
}

type filePrompt struct {
	ID       string            `json:"id"`
	Kind     string            `json:"kind"`
	Messages []chat.Message    `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
}

var validRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

var toolNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// parsePrompt decodes and validates one prompt object; defaultID is used
// when it has no "id".
func parsePrompt(data []byte, defaultID string) (Prompt, error) {
	var fp filePrompt
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fp); err != nil {
		return Prompt{}, err
	}
	if dec.More() {
		return Prompt{}, errors.New("trailing data after the prompt object")
	}
	p := Prompt{ID: fp.ID, Kind: fp.Kind, Messages: fp.Messages}
	if p.ID == "" {
		p.ID = defaultID
	}
	if p.Kind == "" {
		p.Kind = KindChat
	}
	if len(p.Messages) == 0 {
		return Prompt{}, errors.New(`no "messages"`)
	}
	for i, m := range p.Messages {
		if !validRoles[m.Role] {
			return Prompt{}, fmt.Errorf("messages[%d]: invalid role %q", i, m.Role)
		}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return Prompt{}, fmt.Errorf("messages[%d]: tool_calls on a %s message", i, m.Role)
		}
	}
	for i, raw := range fp.Tools {
		var t map[string]any
		if err := json.Unmarshal(raw, &t); err != nil {
			return Prompt{}, fmt.Errorf("tools[%d]: %w", i, err)
		}
		if name := ToolName(t); !toolNameRe.MatchString(name) {
			return Prompt{}, fmt.Errorf("tools[%d]: missing or invalid function name %q", i, name)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return Prompt{}, fmt.Errorf("tools[%d]: %w", i, err)
		}
		p.Tools = append(p.Tools, t)
		p.ToolsJSON = append(p.ToolsJSON, compact.Bytes())
	}
	return p, nil
}

// ToolName returns the function name of a tool definition in OpenAI form
// ({"type": "function", "function": {"name": ...}}) or bare form
// ({"name": ...}).
func ToolName(t map[string]any) string {
	if fn, ok := t["function"].(map[string]any); ok {
		name, _ := fn["name"].(string)
		return name
	}
	name, _ := t["name"].(string)
	return name
}
