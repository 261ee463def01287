//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"fmt"
	"runtime"
)

const platformSupported = false

func dlopen(path string) (uintptr, error) {
	return 0, fmt.Errorf("%w (%s/%s)", ErrUnsupported, runtime.GOOS, runtime.GOARCH)
}

func dlsym(uintptr, string) uintptr { return 0 }

func ccall(uintptr, ...uintptr) uintptr { panic("cuda: no driver on this platform") }

func gettid() int { return 0 }
