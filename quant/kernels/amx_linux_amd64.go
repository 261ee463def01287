//go:build amd64 && linux && !purego

package kernels

import "syscall"

// amxPermit asks Linux for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM with
// XFEATURE_XTILEDATA, Linux 5.16 and later); without it the first tile instruction faults.
func amxPermit() bool {
	const archReqXcompPerm, xfeatureXtiledata = 0x1023, 18
	_, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0)
	return errno == 0
}
