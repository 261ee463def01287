//go:build !unix

package boundedread

// openFlags: this platform has no O_NONBLOCK; the checks before and after opening remain.
const openFlags = 0
