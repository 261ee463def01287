//go:build !unix

package safeout

import (
	"io/fs"
	"os"
)

func openStream(path, kind string) (*os.File, error) { return os.OpenFile(path, os.O_WRONLY, 0) }

// Without flock temporary files are not locked, and RemoveStale removes nothing.
func lockTemp(f *os.File, name string) (bool, error) { return true, nil }

func removeUnlocked(p string) bool { return false }

func keepOwner(f *os.File, fi fs.FileInfo) {}

func canWrite(path string) error { return nil }
