//go:build unix && !linux

package safeout

import "errors"

// Device nodes are only created in the Linux tests (mknod's device type differs by OS).
func mknodChar0666(p string, major, minor uint32) error { return errors.ErrUnsupported }
