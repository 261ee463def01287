//go:build unix

package tokenizer

import "syscall"

// processCPUSeconds returns the user+system CPU time of this process, so benchmarks can
// report throughput per CPU-second, which stays meaningful on a loaded machine.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
