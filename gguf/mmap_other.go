//go:build !unix

package gguf

import (
	"io"
	"os"
)

// mapFile reads the whole file on platforms without mmap support in this package.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), b); err != nil {
		return nil, err
	}
	return b, nil
}

func unmapFile(b []byte) error { return nil }
