package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tq-project/tq/tokenizer/chat/internal/jinja"
)

// Options control Render.
type Options struct {
	// Tools are the tool definitions (passed to the template as "tools";
	// None when there are none). Map keys are sorted because Go maps are
	// unordered; use ToolsJSON to keep a specific key order.
	Tools []map[string]any
	// ToolsJSON are tool definitions as JSON text, parsed keeping key order
	// (like Python dicts loaded from JSON). Appended after Tools.
	ToolsJSON []json.RawMessage
	// AddGenerationPrompt appends the assistant turn header.
	AddGenerationPrompt bool
	// EnableThinking is passed as enable_thinking when non-nil (undefined
	// otherwise, which Qwen templates treat as "thinking on").
	EnableThinking *bool
	// BOS and EOS are passed as bos_token / eos_token when non-empty.
	BOS, EOS string
	// Extra holds additional template variables (e.g. other special tokens,
	// add_vision_id). Names used by Render itself are rejected.
	Extra map[string]any

	// Name identifies the template in error messages (default "chat_template").
	Name string
	// MaxOutput bounds the rendered text and every intermediate string, in
	// bytes (default 16 MiB).
	MaxOutput int
	// MaxSteps bounds the interpreter's work (default 4Mi units, about 20x
	// what a 600 KB Qwen prompt needs; raise it for multi-MB prompts).
	MaxSteps int64
	// Timeout bounds wall-clock time (default 10 s; negative disables).
	Timeout time.Duration
	// Context, when set, cancels rendering.
	Context context.Context
	// Now supplies the time for strftime_now (default time.Now).
	Now func() time.Time
}

var reserved = map[string]bool{
	"messages": true, "tools": true, "documents": true, "add_generation_prompt": true,
	"enable_thinking": true, "bos_token": true, "eos_token": true,
}

// templateCache memoizes compiled templates by source text.
var templateCache struct {
	sync.Mutex
	m map[string]*jinja.Template
}

func compileCached(name, src string) (*jinja.Template, error) {
	templateCache.Lock()
	t := templateCache.m[src]
	templateCache.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := jinja.Compile(name, src)
	if err != nil {
		return nil, err
	}
	templateCache.Lock()
	if templateCache.m == nil || len(templateCache.m) >= 16 {
		templateCache.m = map[string]*jinja.Template{}
	}
	templateCache.m[src] = t
	templateCache.Unlock()
	return t, nil
}

// Render renders template with msgs exactly as transformers'
// apply_chat_template(msgs, tools=..., add_generation_prompt=...,
// enable_thinking=..., tokenize=False) would.
func Render(template string, msgs []Message, opts Options) (string, error) {
	name := opts.Name
	if name == "" {
		name = "chat_template"
	}
	t, err := compileCached(name, template)
	if err != nil {
		return "", err
	}
	vars, err := templateVars(msgs, opts)
	if err != nil {
		return "", fmt.Errorf("template %q: %w", name, err)
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return t.Render(ctx, vars, jinja.Options{
		MaxSteps:  opts.MaxSteps,
		MaxOutput: opts.MaxOutput,
		Timeout:   opts.Timeout,
		Now:       opts.Now,
	})
}

// templateVars builds the render context the way transformers does:
// messages, tools (None when empty), documents=None, add_generation_prompt,
// the special tokens and extra kwargs.
func templateVars(msgs []Message, opts Options) (map[string]any, error) {
	ml := &jinja.List{}
	for i, m := range msgs {
		d, err := messageDict(m)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		ml.Items = append(ml.Items, d)
	}
	vars := map[string]any{
		"messages":              ml,
		"documents":             jinja.None,
		"add_generation_prompt": opts.AddGenerationPrompt,
	}
	if len(opts.Tools) == 0 && len(opts.ToolsJSON) == 0 {
		vars["tools"] = jinja.None
	} else {
		tl := &jinja.List{}
		for i, t := range opts.Tools {
			v, err := jinja.FromGo(t)
			if err != nil {
				return nil, fmt.Errorf("tools[%d]: %w", i, err)
			}
			tl.Items = append(tl.Items, v)
		}
		for i, raw := range opts.ToolsJSON {
			v, err := jinja.ParseJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("tools JSON [%d]: %w", i, err)
			}
			tl.Items = append(tl.Items, v)
		}
		vars["tools"] = tl
	}
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = *opts.EnableThinking
	}
	if opts.BOS != "" {
		vars["bos_token"] = opts.BOS
	}
	if opts.EOS != "" {
		vars["eos_token"] = opts.EOS
	}
	for k, v := range opts.Extra {
		if reserved[k] {
			return nil, fmt.Errorf("Extra variable %q is set by Render itself", k)
		}
		vars[k] = v
	}
	return vars, nil
}

// messageDict converts a Message to the dict the template sees, with keys
// in the order role, content, reasoning_content, tool_calls, name,
// tool_call_id; empty optional fields are absent.
func messageDict(m Message) (*jinja.Dict, error) {
	d := jinja.NewDict()
	d.SetStr("role", m.Role)
	d.SetStr("content", m.Content)
	if m.ReasoningContent != "" {
		d.SetStr("reasoning_content", m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		calls := &jinja.List{}
		for i, tc := range m.ToolCalls {
			fn := jinja.NewDict()
			fn.SetStr("name", tc.Name)
			if tc.Arguments != nil {
				var args jinja.Value
				var err error
				switch a := tc.Arguments.(type) {
				case json.RawMessage:
					args, err = jinja.ParseJSON(a)
				case string:
					args = a
				default:
					args, err = jinja.FromGo(a)
				}
				if err != nil {
					return nil, fmt.Errorf("tool_calls[%d] (%s) arguments: %w", i, tc.Name, err)
				}
				fn.SetStr("arguments", args)
			}
			call := jinja.NewDict()
			if tc.ID != "" {
				call.SetStr("id", tc.ID)
			}
			call.SetStr("type", "function")
			call.SetStr("function", fn)
			calls.Items = append(calls.Items, call)
		}
		d.SetStr("tool_calls", calls)
	}
	if m.Name != "" {
		d.SetStr("name", m.Name)
	}
	if m.ToolCallID != "" {
		d.SetStr("tool_call_id", m.ToolCallID)
	}
	return d, nil
}
