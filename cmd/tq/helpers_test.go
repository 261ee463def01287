package main

import (
	"os"
	"path/filepath"
	"testing"
)

// repoRoot walks up from the working directory to the directory holding go.mod.
func repoRoot(t testing.TB) string {
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

// refPath returns a path under testdata/llamacpp, skipping the test when it is missing
// (failing instead when TQ_REQUIRE_REFS=1, as in CI).
func refPath(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), "testdata", "llamacpp", rel)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("TQ_REQUIRE_REFS") == "1" {
			t.Fatalf("reference missing (TQ_REQUIRE_REFS=1): %s", p)
		}
		t.Skipf("reference missing (run make refs): %s", p)
	}
	return p
}
