package verify

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/tokenizer/chat"
)

//go:embed data/suite.json
var builtinSuite []byte

//go:embed data/eval.txt
var builtinText []byte

// BuiltinText returns the built-in evaluation text (original prose written for tq).
func BuiltinText() []byte { return builtinText }

// MaxSuiteBytes bounds the size of a tool-call suite file.
const MaxSuiteBytes = 16 << 20

// Conversation is a chat to render with a chat template.
type Conversation struct {
	ID                  string
	Messages            []chat.Message
	Tools               []json.RawMessage // OpenAI tool definitions, key order kept
	AddGenerationPrompt bool
	EnableThinking      *bool // nil: not passed to the template
}

// ToolCase is one tool-call request: a conversation whose next assistant turn should call a
// tool.
type ToolCase struct {
	Conversation
	MaxTokens int // 0: the run's default
}

// Suite is a set of tool-call requests and extra conversations for template fidelity.
type Suite struct {
	Name          string
	SHA256        string // of the suite file
	Cases         []ToolCase
	Conversations []Conversation
}

// suiteFile is the JSON form (docs/verify.md "Tool-call suite format").
type suiteFile struct {
	Name          string                     `json:"name"`
	Tools         map[string]json.RawMessage `json:"tools"`
	Cases         []suiteConv                `json:"cases"`
	Conversations []suiteConv                `json:"conversations"`
}

type suiteConv struct {
	ID                  string            `json:"id"`
	Messages            []chat.Message    `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	EnableThinking      *bool             `json:"enable_thinking"`
	MaxTokens           int               `json:"max_tokens"`
}

// LoadSuite reads a suite file; "" returns the built-in suite.
func LoadSuite(path string) (*Suite, error) {
	data, name := builtinSuite, "built-in suite"
	if path != "" {
		var err error
		if data, err = boundedread.ReadFile(path, "suite file", MaxSuiteBytes); err != nil {
			return nil, err
		}
		name = path
	}
	s, err := ParseSuite(data, name)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ParseSuite parses a suite; name is used in errors.
func ParseSuite(data []byte, name string) (*Suite, error) {
	var f suiteFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	sum := sha256.Sum256(data)
	s := &Suite{Name: f.Name, SHA256: hex.EncodeToString(sum[:])}
	if s.Name == "" {
		s.Name = name
	}
	seen := map[string]bool{}
	conv := func(kind string, i int, c suiteConv, genDefault bool) (Conversation, error) {
		where := fmt.Sprintf("%s: %s[%d]", name, kind, i)
		if c.ID == "" {
			return Conversation{}, fmt.Errorf("%s: no id", where)
		}
		where += " " + c.ID
		if seen[c.ID] {
			return Conversation{}, fmt.Errorf("%s: duplicate id", where)
		}
		seen[c.ID] = true
		if len(c.Messages) == 0 {
			return Conversation{}, fmt.Errorf("%s: no messages", where)
		}
		for j, m := range c.Messages {
			switch m.Role {
			case "system", "user", "assistant", "tool":
			default:
				return Conversation{}, fmt.Errorf("%s: message %d: role %q", where, j, m.Role)
			}
		}
		out := Conversation{ID: c.ID, Messages: c.Messages, AddGenerationPrompt: genDefault, EnableThinking: c.EnableThinking}
		if c.AddGenerationPrompt != nil {
			out.AddGenerationPrompt = *c.AddGenerationPrompt
		}
		for j, t := range c.Tools {
			var ref string
			if json.Unmarshal(t, &ref) == nil {
				def, ok := f.Tools[ref]
				if !ok {
					return Conversation{}, fmt.Errorf("%s: tool %q is not defined in \"tools\"", where, ref)
				}
				t = def
			}
			if _, err := parseTools([]json.RawMessage{t}); err != nil {
				return Conversation{}, fmt.Errorf("%s: tools[%d]: %v", where, j, err)
			}
			out.Tools = append(out.Tools, t)
		}
		if _, err := parseTools(out.Tools); err != nil {
			return Conversation{}, fmt.Errorf("%s: %v", where, err)
		}
		return out, nil
	}
	for i, c := range f.Cases {
		cv, err := conv("cases", i, c, true)
		if err != nil {
			return nil, err
		}
		if len(cv.Tools) == 0 {
			return nil, fmt.Errorf("%s: cases[%d] %s: a tool-call case needs tools", name, i, c.ID)
		}
		if !cv.AddGenerationPrompt {
			return nil, fmt.Errorf("%s: cases[%d] %s: a tool-call case needs add_generation_prompt", name, i, c.ID)
		}
		if cv.EnableThinking == nil {
			off := false
			cv.EnableThinking = &off
		}
		if c.MaxTokens < 0 {
			return nil, fmt.Errorf("%s: cases[%d] %s: negative max_tokens", name, i, c.ID)
		}
		s.Cases = append(s.Cases, ToolCase{Conversation: cv, MaxTokens: c.MaxTokens})
	}
	for i, c := range f.Conversations {
		cv, err := conv("conversations", i, c, false)
		if err != nil {
			return nil, err
		}
		s.Conversations = append(s.Conversations, cv)
	}
	if len(s.Cases) == 0 && len(s.Conversations) == 0 {
		return nil, fmt.Errorf("%s: no cases and no conversations", name)
	}
	return s, nil
}

// AllConversations returns the suite's conversations followed by its tool-call prompts.
func (s *Suite) AllConversations() []Conversation {
	out := append([]Conversation(nil), s.Conversations...)
	for _, c := range s.Cases {
		out = append(out, c.Conversation)
	}
	return out
}

// render renders a conversation with a chat template.
func render(template string, c Conversation, bos, eos string) (string, error) {
	return chat.Render(template, c.Messages, chat.Options{
		ToolsJSON:           c.Tools,
		AddGenerationPrompt: c.AddGenerationPrompt,
		EnableThinking:      c.EnableThinking,
		BOS:                 bos,
		EOS:                 eos,
		Name:                "chat template",
	})
}
