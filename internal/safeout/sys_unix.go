//go:build unix

package safeout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openStream opens a character device or FIFO for writing. A FIFO is opened without
// blocking: with no reader the open fails at once (ENXIO) instead of waiting forever.
func openStream(path, kind string) (*os.File, error) {
	flag := os.O_WRONLY | unix.O_NOCTTY
	if kind == "FIFO" {
		flag |= unix.O_NONBLOCK
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		if kind == "FIFO" && errors.Is(err, unix.ENXIO) {
			return nil, fmt.Errorf("%s is a FIFO without a reader: not waiting for one", path)
		}
		return nil, err
	}
	// What was opened must still be a device or FIFO: a regular file swapped in meanwhile
	// would be overwritten in place.
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(fs.ModeCharDevice|fs.ModeNamedPipe) == 0 {
		f.Close()
		return nil, fmt.Errorf("%s changed while it was opened; not writing to it", path)
	}
	return f, nil
}

// lockTemp takes an exclusive flock on the temporary file f just created as name. held is
// false when a concurrent RemoveStale got there first (the caller takes another name).
// Without flock support the file is used unlocked (and RemoveStale never removes it).
func lockTemp(f *os.File, name string) (held bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = flock(int(fd)) }); err != nil {
		return false, err
	}
	if errors.Is(lerr, unix.EWOULDBLOCK) {
		return false, nil
	}
	pfi, err1 := os.Lstat(name)
	ffi, err2 := f.Stat()
	return err1 == nil && err2 == nil && os.SameFile(pfi, ffi), nil
}

// removeUnlocked removes the regular file p when an exclusive flock on it can be taken
// without waiting, holding the lock while it removes it.
func removeUnlocked(p string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st, pst unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	if flock(fd) != nil {
		return false
	}
	if unix.Lstat(p, &pst) != nil || pst.Dev != st.Dev || pst.Ino != st.Ino {
		return false
	}
	return unix.Unlink(p) == nil
}

// keepOwner gives the replacement the owner and group of the replaced file (root only;
// best effort).
func keepOwner(f *os.File, fi fs.FileInfo) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return
	}
	if ffi, err := f.Stat(); err == nil {
		if fst, ok := ffi.Sys().(*syscall.Stat_t); ok && fst.Uid == st.Uid && fst.Gid == st.Gid {
			return
		}
	}
	_ = f.Chown(int(st.Uid), int(st.Gid))
}

// canWrite reports whether this user may write the existing file path.
func canWrite(path string) error {
	if err := unix.Access(path, unix.W_OK); err != nil {
		return &fs.PathError{Op: "access", Path: path, Err: err}
	}
	return nil
}
