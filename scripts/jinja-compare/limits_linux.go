//go:build linux

package main

import "syscall"

func childLimits() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// setAddressSpaceLimit caps the child's virtual memory, so an unbounded allocation fails.
func setAddressSpaceLimit(n uint64) {
	_ = syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: n, Max: n})
}
