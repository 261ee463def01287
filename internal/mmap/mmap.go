// Package mmap maps whole files read-only, so that model weights (GGUF, safetensors) are used
// in place without reading them into memory: the operating system pages them in on demand and
// can drop them again under memory pressure. Unix systems use mmap(2), Windows a read-only file
// mapping view; other systems read the file (the only platforms without a mapping).
package mmap

import (
	"fmt"
	"os"
)

// Map maps size bytes of f read-only. The mapping stays valid after f is closed; release it
// with Unmap. A zero size gives an empty, non-nil slice.
func Map(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	if size < 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %s: file of %d bytes cannot be mapped on this platform", f.Name(), size)
	}
	b, err := mapFile(f, size)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return b, nil
}

// Unmap releases a mapping returned by Map.
func Unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unmapFile(b)
}
