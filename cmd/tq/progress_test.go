package main

import (
	"strings"
	"testing"
	"time"
)

// TestProgressLinesOnNonTerminal: written to a log (not a terminal), convert's progress is a
// plain line at most every progressLineEvery, with the share done and the time left, and
// nothing for the end (the result line follows) or for a short conversion.
func TestProgressLinesOnNonTerminal(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b, "converting")
	if p.tty {
		t.Fatal("a strings.Builder is not a terminal")
	}
	t0 := time.Unix(1000, 0)
	now := t0
	p.now = func() time.Time { return now }
	p.start, p.last = t0, t0
	step := func(d time.Duration, done int64) {
		now = now.Add(d)
		p.update(done, 100<<20)
	}
	step(time.Second, 1<<20)
	step(20*time.Second, 10<<20)
	if b.Len() != 0 {
		t.Fatalf("a line before %v: %q", progressLineEvery, b.String())
	}
	step(10*time.Second, 25<<20) // 31 s in
	want := "converting: 25% (25.0 MiB of 100.0 MiB) after 31s, about 1m33s left\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	step(20*time.Second, 40<<20) // 20 s after the line: none
	step(15*time.Second, 100<<20)
	if b.String() != want {
		t.Fatalf("extra output %q", strings.TrimPrefix(b.String(), want))
	}
	p.finish()
	if b.String() != want {
		t.Fatalf("finish wrote %q", strings.TrimPrefix(b.String(), want))
	}
}
