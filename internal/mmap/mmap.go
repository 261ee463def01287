// Package mmap maps whole files read-only, so that model weights (GGUF, safetensors) are used
// in place without reading them into memory: the operating system pages them in on demand and
// can drop them again under memory pressure. Unix systems use mmap(2), Windows a read-only file
// mapping view; other systems read the file (the only platforms without a mapping).
package mmap

import (
	"fmt"
	"os"
)

// Map maps size bytes of f read-only. f must be a regular file (open it with
// internal/boundedread.Open, which never blocks on a FIFO); Map checks that again with fstat
// and refuses anything else, and a size beyond the file's. The mapping stays valid after f is
// closed; release it with Unmap. A zero size gives an empty, non-nil slice.
func Map(f *os.File, size int64) ([]byte, error) {
	if size < 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %s: file of %d bytes cannot be mapped on this platform", f.Name(), size)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("mmap %s: not a regular file (mode %v)", f.Name(), st.Mode().Type())
	}
	if size > st.Size() {
		return nil, fmt.Errorf("mmap %s: %d bytes requested, the file has %d", f.Name(), size, st.Size())
	}
	if size == 0 {
		return []byte{}, nil
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
