//go:build !linux

package main

import "syscall"

func childLimits() *syscall.SysProcAttr { return nil }

// setAddressSpaceLimit is Linux only; elsewhere the child runs without a memory cap.
func setAddressSpaceLimit(uint64) {}
