//go:build !unix

package safeout

import (
	"os"
	"testing"
)

func newFileMode(perm os.FileMode) os.FileMode { return perm }

func flockSupported(t *testing.T, dir string) bool { return false }
