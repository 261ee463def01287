package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/tokenizer/chat/internal/jinja"
)

// TestHostileTemplates checks that untrusted templates fail with a clear
// error, quickly, without panics, unbounded memory or file access.
func TestHostileTemplates(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "hi"}}
	deep := func(open, close string, n int) string {
		return "{{ " + strings.Repeat(open, n) + "1" + strings.Repeat(close, n) + " }}"
	}
	cases := []struct {
		name, tmpl string
		kind       string // expected jinja.Error.Kind
		contains   string // substring of the message
	}{
		{"nested range loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "LimitError", ""},
		{"huge range", "{% for i in range(10**12) %}x{% endfor %}", "OverflowError", "Range too big"},
		{"huge output", "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "LimitError", "output"},
		{"string doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", "LimitError", "limit"},
		{"string repeat", "{{ 'abc' * 10**12 }}", "LimitError", "limit"},
		{"list doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}", "LimitError", ""},
		{"list repeat", "{{ ([0] * 10**12)|length }}", "LimitError", ""},
		{"macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError", "recursion"},
		{"mutual recursion", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}", "RecursionError", "recursion"},
		{"call-block recursion", "{% macro f() %}{{ caller() }}{% call f() %}x{% endcall %}{% endmacro %}{% call f() %}y{% endcall %}", "RecursionError", "recursion"},
		{"caller not accepted", "{% macro f() %}x{% endmacro %}{% call f() %}y{% endcall %}", "TypeError", "caller"},
		{"deep value nesting repr", "{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}", "RecursionError", ""},
		{"deep value nesting tojson", "{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|tojson }}", "RecursionError", ""},
		{"deep value nesting eq", "{% set ns = namespace(l=[], m=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% set ns.m = [ns.m] %}{% endfor %}{{ ns.l == ns.m }}", "RecursionError", ""},
		{"huge comparison", "{% set big = [range(100000)|list] * 1000 %}{% set big2 = [range(100000)|list] * 1000 %}{{ big == big2 }}", "LimitError", "comparison"},
		{"sort of large lists", "{% set l = range(100000)|list %}{% set m = range(100000)|list %}{% for i in range(1000) %}{{ ([l, m] * 500)|sort|length }}{% endfor %}", "LimitError", ""},
		{"dunder class", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "SecurityError", "unsafe"},
		{"dunder globals", "{{ cycler.__init__.__globals__ }}", "SecurityError", "unsafe"},
		{"dunder on dict", "{{ messages[0].__class__.__init__ }}", "SecurityError", "unsafe"},
		{"dunder via item", "{{ ''['__class__']['__mro__'] }}", "SecurityError", "unsafe"},
		{"dunder via attr filter", "{{ (''|attr('__class__'))|attr('__mro__') }}", "SecurityError", "unsafe"},
		{"format attribute escape", "{{ '{0.__class__.__mro__}'.format('') }}", "SecurityError", "unsafe"},
		{"mutating list", "{% set l = [1] %}{{ l.append(2) }}", "SecurityError", "unsafe"},
		{"mutating messages", "{{ messages.pop() }}", "SecurityError", "unsafe"},
		{"mutating dict", "{{ messages[0].update({'role': 'system'}) }}", "SecurityError", "unsafe"},
		{"include", "{% include '/etc/passwd' %}", "TemplateSyntaxError", "not allowed"},
		{"import", "{% import 'x.j2' as x %}", "TemplateSyntaxError", "not allowed"},
		{"from import", "{% from 'x.j2' import y %}", "TemplateSyntaxError", "not allowed"},
		{"extends", "{% extends 'base.html' %}", "TemplateSyntaxError", "not allowed"},
		{"deep parens", deep("(", ")", 5000), "TemplateSyntaxError", "nesting"},
		{"deep lists", deep("[", "]", 5000), "TemplateSyntaxError", "nesting"},
		{"deep unary", "{{ " + strings.Repeat("-", 5000) + "1 }}", "TemplateSyntaxError", "nesting"},
		{"deep not", "{{ " + strings.Repeat("not ", 5000) + "1 }}", "TemplateSyntaxError", "nesting"},
		{"deep ifs", strings.Repeat("{% if true %}", 5000) + strings.Repeat("{% endif %}", 5000), "TemplateSyntaxError", "nesting"},
		{"deep filters chain is fine", "{{ 'a'" + strings.Repeat("|upper", 2000) + " }}", "", ""},
		{"unterminated comment", "{# never closed", "TemplateSyntaxError", "comment"},
		{"unterminated string", "{{ 'abc }}", "TemplateSyntaxError", ""},
		{"raise_exception", "{{ raise_exception('nope') }}", "TemplateError", "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, err := Render(c.tmpl, msgs, Options{Name: "hostile"})
			elapsed := time.Since(start)
			// The work budget normally stops these in well under a second;
			// the default 10 s deadline is the backstop on a loaded machine.
			if elapsed > 20*time.Second {
				t.Errorf("took %v", elapsed)
			}
			if c.kind == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("rendered %d bytes, want a %s", len(out), c.kind)
			}
			var je *jinja.Error
			if !errors.As(err, &je) {
				t.Fatalf("error %T %v is not a *jinja.Error", err, err)
			}
			if je.Kind != c.kind || !strings.Contains(je.Msg, c.contains) {
				t.Errorf("got %v, want kind %s containing %q", err, c.kind, c.contains)
			}
			if !strings.Contains(err.Error(), `"hostile"`) {
				t.Errorf("error %q does not name the template", err)
			}
		})
	}
}

// TestRenderLimitsAreConfigurable checks MaxOutput, MaxSteps, Timeout and
// context cancellation.
func TestRenderLimitsAreConfigurable(t *testing.T) {
	msgs := []Message{{Role: "user", Content: strings.Repeat("y", 1000)}}
	tmpl := "{% for m in messages %}{{ m.content }}{% endfor %}"
	if _, err := Render(tmpl, msgs, Options{MaxOutput: 999}); !jinja.IsLimit(err) {
		t.Errorf("MaxOutput 999 with 1000-byte output: err = %v", err)
	}
	if out, err := Render(tmpl, msgs, Options{MaxOutput: 1000}); err != nil || len(out) != 1000 {
		t.Errorf("MaxOutput 1000: %d bytes, %v", len(out), err)
	}
	loop := "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
	if _, err := Render(loop, msgs, Options{MaxSteps: 10000}); !jinja.IsLimit(err) {
		t.Errorf("MaxSteps: err = %v", err)
	}
	start := time.Now()
	_, err := Render(loop, msgs, Options{MaxSteps: 1 << 40, Timeout: 50 * time.Millisecond})
	if !jinja.IsLimit(err) || !strings.Contains(err.Error(), "time limit") {
		t.Errorf("Timeout: err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Timeout of 50ms took %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Render(loop, msgs, Options{MaxSteps: 1 << 40, Context: ctx})
	if !jinja.IsLimit(err) || !strings.Contains(err.Error(), "cancel") {
		t.Errorf("cancelled context: err = %v", err)
	}
}

// TestRenderErrorNamesLine checks that runtime errors carry the line.
func TestRenderErrorNamesLine(t *testing.T) {
	tmpl := "line1\n{% set x = 1 %}\n{{ messages[0].content.nosuch.attr }}\n"
	_, err := Render(tmpl, []Message{{Role: "user", Content: "c"}}, Options{Name: "tmpl.jinja"})
	var je *jinja.Error
	if !errors.As(err, &je) || je.Line != 3 || je.Template != "tmpl.jinja" || je.Kind != "UndefinedError" {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), `template "tmpl.jinja" line 3`) {
		t.Errorf("message %q", err)
	}
}
