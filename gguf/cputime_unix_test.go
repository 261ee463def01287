//go:build unix

package gguf

import "syscall"

// cpuSeconds is the process's user+system CPU time: on a shared, oversubscribed machine
// it is a steadier cost measure than wall time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
