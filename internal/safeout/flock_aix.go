//go:build aix

package safeout

import "golang.org/x/sys/unix"

// AIX has no flock: temporary files are not locked and RemoveStale removes nothing.
func flock(fd int) error { return unix.ENOSYS }
