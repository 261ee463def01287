// Package testenv is test support shared by the tests of every tq package: the repository
// root and the reader of the ggml golden vectors (testdata/golden). Only tests and other
// test-support packages import it; the tq binary never links it (TestPackageTable in this
// package checks that with `go list -deps ./cmd/tq`).
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot returns the repository root: the nearest directory at or above the working
// directory (a test's package directory) that holds go.mod. It fails t when there is none.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("testenv: working directory: %v", err)
	}
	for start := dir; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("testenv: no go.mod in %s or any directory above it", start)
		}
		dir = parent
	}
}
