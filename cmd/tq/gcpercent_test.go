package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// tq convert runs with the collector's target at convertGCPercent and restores it after;
// a GOGC the user set wins.
func TestConvertGCHeadroom(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)

	t.Run("default", func(t *testing.T) {
		// t.Setenv restores the variable afterwards; Unsetenv then removes it for the test
		t.Setenv("GOGC", "")
		os.Unsetenv("GOGC")
		restore := lowerGCHeadroom()
		if got := debug.SetGCPercent(convertGCPercent); got != convertGCPercent {
			t.Errorf("during convert GOGC is %d, want %d", got, convertGCPercent)
		}
		restore()
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("after convert GOGC is %d, want it restored to 100", got)
		}
	})
	t.Run("user GOGC", func(t *testing.T) {
		t.Setenv("GOGC", "100")
		restore := lowerGCHeadroom()
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("with GOGC=100 set by the user, convert changed it to %d", got)
		}
		restore()
	})
}
