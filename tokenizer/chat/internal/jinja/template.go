// Package jinja is a small, sandboxed Jinja2 interpreter for chat templates.
//
// It reproduces what Hugging Face transformers does when it renders a chat
// template: jinja2's ImmutableSandboxedEnvironment with trim_blocks=True,
// lstrip_blocks=True, the loopcontrols extension, a tojson filter that is
// json.dumps(ensure_ascii=False), raise_exception and strftime_now globals.
// Output is meant to be byte-identical to Python jinja2 3.1 for the template
// features chat templates use (see docs/chat-templates.md).
//
// Templates are untrusted input: there is no file access (include, import,
// extends are rejected), rendering is bounded by a work budget, a deadline
// and an output size limit, recursion is bounded, and internal panics are
// converted into errors.
package jinja

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Default limits.
const (
	DefaultMaxSteps      = 4 << 20
	DefaultMaxOutput     = 16 << 20
	DefaultMaxDepth      = 100
	DefaultTimeout       = 10 * time.Second
	DefaultMaxSource     = 4 << 20
	maxTokensPerTemplate = 1 << 20
)

// Error is a template compile or render error.
type Error struct {
	Template string // template name
	Line     int    // 1-based line, 0 when unknown
	Kind     string // Python exception class, e.g. TemplateSyntaxError, UndefinedError, TemplateError
	Msg      string
	Err      error // underlying error (e.g. *LimitError)
}

func (e *Error) Error() string {
	loc := fmt.Sprintf("template %q", e.Template)
	if e.Line > 0 {
		loc += fmt.Sprintf(" line %d", e.Line)
	}
	if e.Kind != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Kind, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Template is a compiled template. It is safe for concurrent use.
type Template struct {
	name  string
	nodes []node
}

// Compile parses a template. name is used in error messages.
func Compile(name, src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, &Error{Template: name, Kind: "InternalError", Msg: fmt.Sprintf("panic while parsing: %v", r)}
		}
	}()
	if len(src) > DefaultMaxSource {
		return nil, &Error{Template: name, Kind: "TemplateSyntaxError", Msg: fmt.Sprintf("template source is %d bytes, limit %d", len(src), DefaultMaxSource)}
	}
	toks, err := tokenize(src, maxTokensPerTemplate)
	if err != nil {
		var le *lexError
		if errors.As(err, &le) {
			return nil, &Error{Template: name, Line: le.line, Kind: "TemplateSyntaxError", Msg: le.msg}
		}
		return nil, &Error{Template: name, Kind: "TemplateSyntaxError", Msg: err.Error()}
	}
	nodes, err := parseTemplate(toks)
	if err != nil {
		var se *syntaxError
		if errors.As(err, &se) {
			kind := se.kind
			if kind == "" {
				kind = "TemplateSyntaxError"
			}
			return nil, &Error{Template: name, Line: se.line, Kind: kind, Msg: se.msg}
		}
		return nil, &Error{Template: name, Kind: "TemplateSyntaxError", Msg: err.Error()}
	}
	return &Template{name: name, nodes: nodes}, nil
}

// Options bounds a render. Zero fields take the defaults.
type Options struct {
	MaxSteps  int64         // work budget (statements, expressions, bytes/16 copied)
	MaxOutput int           // limit on the output and on any single string value, bytes
	MaxDepth  int           // macro call depth
	Timeout   time.Duration // wall-clock limit; negative disables
	Now       func() time.Time
}

// Render renders the template with the given variables (already converted
// with FromGo / ParseJSON, or plain Go values that FromGo accepts).
func (t *Template) Render(ctx context.Context, vars map[string]any, opts Options) (out string, err error) {
	e := &evaluator{ctx: ctx, steps: opts.MaxSteps, maxOutput: opts.MaxOutput, maxDepth: opts.MaxDepth, now: opts.Now}
	if e.steps <= 0 {
		e.steps = DefaultMaxSteps
	}
	if e.maxOutput <= 0 {
		e.maxOutput = DefaultMaxOutput
	}
	if e.maxDepth <= 0 {
		e.maxDepth = DefaultMaxDepth
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout > 0 {
		e.deadline = time.Now().Add(timeout)
	}
	e.out = &strings.Builder{}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", &Error{Template: t.name, Line: e.line, Kind: "InternalError", Msg: fmt.Sprintf("panic while rendering: %v", r)}
		}
	}()
	root := newScope(nil)
	for k, v := range vars {
		cv, err := FromGo(v)
		if err != nil {
			return "", &Error{Template: t.name, Kind: "TypeError", Msg: fmt.Sprintf("variable %q: %v", k, err)}
		}
		root.set(k, cv)
	}
	if err := e.execNodes(t.nodes, root); err != nil {
		return "", t.wrapErr(err)
	}
	return e.out.String(), nil
}

func (t *Template) wrapErr(err error) error {
	out := &Error{Template: t.name, Err: err}
	var le *lineError
	if errors.As(err, &le) {
		out.Line = le.line
		err = le.err
	}
	var re *RuntimeError
	var lim *LimitError
	switch {
	case errors.As(err, &re):
		out.Kind, out.Msg = re.Kind, re.Msg
	case errors.As(err, &lim):
		out.Kind, out.Msg = lim.Kind, lim.Msg
		if out.Kind == "" {
			out.Kind = "LimitError"
		}
	case err == errBreak || err == errContinue:
		out.Kind, out.Msg = "TemplateSyntaxError", err.Error()
	default:
		out.Msg = err.Error()
	}
	return out
}

// IsLimit reports whether err is a resource-limit error.
func IsLimit(err error) bool {
	var lim *LimitError
	return errors.As(err, &lim)
}
