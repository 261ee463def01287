package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"
)

// tqCmd runs the tq command line in-process and returns stdout.
func tqCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, err := tqRun(t, args...)
	if err != nil {
		t.Fatalf("tq %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errs)
	}
	return out
}

// TestPipelineCLI drives the user-facing path on a generated model: convert to Q8_0, inspect
// the file, run it greedily twice (same text both times), and plan it for a small GPU.
func TestPipelineCLI(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3")
	model := filepath.Join(dir, "m-q8_0.gguf")
	tqCmd(t, "convert", hfDir, "--outtype", "q8_0", "-o", model)

	var rep inspectReport
	if err := json.Unmarshal([]byte(tqCmd(t, "inspect", model, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Architecture != "qwen3" || len(rep.Tensors) == 0 {
		t.Fatalf("inspect: arch %q, %d tensors", rep.Architecture, len(rep.Tensors))
	}
	var sawQ8 bool
	for _, ty := range rep.Types {
		sawQ8 = sawQ8 || ty.Type == "q8_0"
	}
	if !sawQ8 {
		t.Errorf("no q8_0 tensors in %+v", rep.Types)
	}

	runOnce := func() runResult {
		var r runResult
		out := tqCmd(t, "run", model, "-p", "The history of printing", "-n", "12", "--temp", "0", "--json", "--ignore-eos")
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("run --json: %v\n%s", err, out)
		}
		return r
	}
	a, b := runOnce(), runOnce()
	if len(a.Tokens) != 12 || len(a.PromptTokens) == 0 {
		t.Fatalf("run generated %d tokens from %d prompt tokens", len(a.Tokens), len(a.PromptTokens))
	}
	if a.Text != b.Text {
		t.Errorf("greedy runs differ: %q vs %q", a.Text, b.Text)
	}

	var plan map[string]any
	if err := json.Unmarshal([]byte(tqCmd(t, "plan", model, "--vram", "1GiB", "--json")), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan) == 0 {
		t.Errorf("empty plan")
	}
}

// TestRunToolCall converts the trained tool-calling model (testdata/verify/toolmodel) to Q8_0
// and asks it, through its chat template with --tools, for the weather: the greedy answer must
// be the tool call it was trained to make.
func TestRunToolCall(t *testing.T) {
	root := llamacppref.RepoRoot(t)
	model := filepath.Join(t.TempDir(), "tool-q8_0.gguf")
	tqCmd(t, "convert", filepath.Join(root, "testdata", "verify", "toolmodel"), "--outtype", "q8_0", "-o", model)
	var r runResult
	out := tqCmd(t, "run", model, "--tools", filepath.Join(root, "testdata", "demo", "tools-weather.json"),
		"-p", "What's the weather like in Lisbon right now?", "-n", "96", "--temp", "0", "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lisbon\"}}\n</tool_call>"
	if strings.TrimSpace(r.Text) != want {
		t.Errorf("generated %q, want %q", r.Text, want)
	}
}
