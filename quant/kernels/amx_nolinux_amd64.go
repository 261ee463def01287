//go:build amd64 && !linux && !purego

package kernels

// amxPermit: the tile state is only requested on Linux.
func amxPermit() bool { return false }
