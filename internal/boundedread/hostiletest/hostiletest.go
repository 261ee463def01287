// Package hostiletest makes the hostile paths the bounded-read tests feed to tq's readers: a
// symlink to /dev/zero and a FIFO. It is imported by _test.go files only, so it stays out of
// the tq binary.
package hostiletest

import (
	"testing"
	"time"
)

// Path is one hostile path and what it is.
type Path struct {
	Path string
	What string // "fifo" or "devzero"
}

// Within runs f and fails the test if it has not returned after d: a reader that blocks on a
// FIFO or reads /dev/zero without end must fail the test, not hang it.
func Within(t testing.TB, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s still running after %v", what, d)
		return nil
	}
}
