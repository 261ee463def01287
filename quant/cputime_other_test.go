//go:build !unix

package quant

import "time"

var startWall = time.Now()

// cpuTime falls back to wall time where getrusage is unavailable.
func cpuTime() time.Duration { return time.Since(startWall) }
