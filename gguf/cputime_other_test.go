//go:build !unix

package gguf

import "time"

var processStart = time.Now()

// cpuSeconds falls back to wall time where getrusage is not available.
func cpuSeconds() float64 { return time.Since(processStart).Seconds() }
