//go:build windows

package mmap

import (
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

func mapFile(f *os.File, size int64) ([]byte, error) {
	h, err := windows.CreateFileMapping(windows.Handle(f.Fd()), nil, windows.PAGE_READONLY,
		uint32(uint64(size)>>32), uint32(size), nil)
	if err != nil {
		return nil, err
	}
	// The view keeps the mapping object alive; the handle is not needed after it exists.
	addr, err := windows.MapViewOfFile(h, windows.FILE_MAP_READ, 0, 0, uintptr(size))
	windows.CloseHandle(h)
	if err != nil {
		return nil, err
	}
	// addr is the address of memory outside Go's heap; reinterpret it without a uintptr →
	// unsafe.Pointer conversion (which vet rightly flags for heap addresses).
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), int(size)), nil
}

func unmapFile(b []byte) error {
	return windows.UnmapViewOfFile(uintptr(unsafe.Pointer(&b[0])))
}
