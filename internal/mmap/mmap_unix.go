//go:build unix

package mmap

import (
	"fmt"
	"os"
	"syscall"
)

// File maps the whole of f (size bytes) read-only. The returned release function unmaps it;
// after that every slice into the mapping is invalid (touching it faults), which is why the
// formats document that tensors must not outlive the file holding them.
func File(f *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return nil, func() error { return nil }, nil
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file size %d does not fit in memory on this platform", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
