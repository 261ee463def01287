package safeout

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// mknodChar0666 creates a character device node (major, minor) at p.
func mknodChar0666(p string, major, minor uint32) error {
	return syscall.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(major, minor)))
}
