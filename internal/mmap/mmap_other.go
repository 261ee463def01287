//go:build !unix && !windows

package mmap

import (
	"io"
	"os"
)

// mapFile reads the file: this platform has no mapping in golang.org/x/sys.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), b); err != nil {
		return nil, err
	}
	return b, nil
}

func unmapFile([]byte) error { return nil }
