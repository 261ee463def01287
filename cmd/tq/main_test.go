package main

import (
	"os"
	"testing"
)

// TestMain lets a test run this test binary as the tq command (TQ_TEST_MAIN=1, the
// command line after the binary name), so that signals and exit codes can be tested on a
// real process.
func TestMain(m *testing.M) {
	if os.Getenv("TQ_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
