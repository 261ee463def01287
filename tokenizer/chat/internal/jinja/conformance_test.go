package jinja

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/testenv"
)

// fixedNow is render.py's FIXED_NOW.
var fixedNow = func() time.Time { return time.Date(2025, 7, 4, 9, 5, 3, 0, time.Local) }

type confCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars"`
}

type confExpect struct {
	Output *string `json:"output"`
	Error  string  `json:"error"`
}

// knownDeviations are the cases where this interpreter deliberately differs
// from Python jinja2: the case must fail with the given error kind instead.
var knownDeviations = map[string]string{
	// Python raises TypeError (no loader); we reject template loading at
	// compile time.
	"err_include": "TemplateSyntaxError",
	// Python integers are unbounded; ours are 64-bit and overflow is an error.
	"err_int_overflow": "OverflowError",
}

// confExpected is conformance/expected.json: Python's result per case and the
// jinja2 version that produced them.
type confExpected struct {
	Jinja2  string                `json:"jinja2"`
	Results map[string]confExpect `json:"results"`
}

// TestConformance renders every case of testdata/chat/conformance/cases.json
// and compares with the Python jinja2 results in expected.json (produced by
// testdata/chat/render.py): byte-identical output, or an error of the same
// Python exception class.
func TestConformance(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "chat", "conformance")
	var cases []confCase
	readJSON(t, filepath.Join(dir, "cases.json"), &cases)
	var doc confExpected
	readJSON(t, filepath.Join(dir, "expected.json"), &doc)
	expected := doc.Results
	if doc.Jinja2 == "" {
		t.Fatal("expected.json does not record the jinja2 version that produced it")
	}
	if len(cases) < 300 || len(cases) != len(expected) {
		t.Fatalf("%d cases, %d expectations (regenerate with testdata/chat/render.py conformance)", len(cases), len(expected))
	}
	pass := 0
	for _, c := range cases {
		want, ok := expected[c.Name]
		if !ok {
			t.Errorf("%s: no expectation", c.Name)
			continue
		}
		got, err := renderCase(c)
		if kind, ok := knownDeviations[c.Name]; ok {
			if errKind(err) != kind {
				t.Errorf("%s: known deviation expects a %s, got %q, %v", c.Name, kind, got, err)
			}
			continue
		}
		switch {
		case want.Output != nil && err != nil:
			t.Errorf("%s: unexpected error %v\nwant %q", c.Name, err, *want.Output)
		case want.Output != nil && got != *want.Output:
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *want.Output)
		case want.Output == nil && err == nil:
			t.Errorf("%s: rendered %q, want a %s", c.Name, got, want.Error)
		case want.Output == nil && errKind(err) != want.Error:
			t.Errorf("%s: error %v, want a %s", c.Name, err, want.Error)
		default:
			pass++
		}
	}
	t.Logf("%d/%d conformance cases match Python jinja2 %s (%d known deviations)", pass, len(cases), doc.Jinja2, len(knownDeviations))
}

func errKind(err error) string {
	var je *Error
	if errors.As(err, &je) {
		return je.Kind
	}
	return ""
}

func renderCase(c confCase) (string, error) {
	tmpl, err := Compile(c.Name, c.Template)
	if err != nil {
		return "", err
	}
	vars := map[string]any{}
	if len(c.Vars) > 0 {
		v, err := ParseJSON(c.Vars)
		if err != nil {
			return "", err
		}
		d := v.(*Dict)
		for i, k := range d.keys {
			vars[k.(string)] = d.vals[i]
		}
	}
	return tmpl.Render(context.Background(), vars, Options{Now: fixedNow})
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
