//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"syscall"

	"github.com/ebitengine/purego"
)

// platformSupported reports whether this build can load the CUDA driver.
const platformSupported = true

// dlopen loads a shared library with purego (no cgo needed).
func dlopen(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrNoLibrary, path, err)
	}
	return h, nil
}

// dlsym returns the address of symbol name in library h, or 0 when it is absent.
func dlsym(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0
	}
	return p
}

// ccall calls the C function fn with integer/pointer arguments and returns its (int-sized) result.
// Pointer arguments converted with uintptr(unsafe.Pointer(p)) in the call expression stay valid
// for the duration of the call.
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// gettid returns the calling OS thread's id (graph recording admits only its own thread).
func gettid() int { return syscall.Gettid() }
