// Package llamacppref is test support: it locates the repository's llama.cpp reference harness
// (testdata/llamacpp: node-llama-cpp 3.21.1 driven by llama.mjs, llama.cpp's source tree) and
// runs requests against it. A missing reference skips the calling test, or fails it when
// TQ_REQUIRE_REFS=1 (as in CI), so nothing is silently skipped there.
package llamacppref

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Missing skips t (or fails it under TQ_REQUIRE_REFS=1) because the named reference is absent.
func Missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("TQ_REQUIRE_REFS") == "1" {
		t.Fatalf("llama.cpp reference required (TQ_REQUIRE_REFS=1) but %s is missing", what)
	}
	t.Skipf("llama.cpp reference not installed: %s is missing (run make refs)", what)
}

// Path returns testdata/llamacpp/rel, calling Missing when it does not exist.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), "testdata", "llamacpp", rel)
	if _, err := os.Stat(p); err != nil {
		Missing(t, p)
	}
	return p
}

// Bridge returns the path of llama.mjs once node and node-llama-cpp are present.
func Bridge(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), "testdata", "llamacpp")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		Missing(t, "testdata/llamacpp/node_modules/node-llama-cpp")
	} else if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node")
	}
	return filepath.Join(dir, "llama.mjs")
}

// Run sends one JSON request (op "batch" for several) to llama.mjs and decodes its reply into
// resp.
func Run(t testing.TB, req, resp any) {
	t.Helper()
	script := Bridge(t)
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = filepath.Dir(script)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.mjs: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("llama.mjs reply: %v", err)
	}
}
