//go:build unix && !aix

package safeout

import "golang.org/x/sys/unix"

// flock takes an exclusive lock on fd without waiting.
func flock(fd int) error {
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}
