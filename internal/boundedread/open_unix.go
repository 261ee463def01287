//go:build unix

package boundedread

import "syscall"

// openFlags makes opening a FIFO return at once instead of waiting for a writer (the fstat
// that follows then refuses it). Reads of regular files ignore O_NONBLOCK.
const openFlags = syscall.O_NONBLOCK
