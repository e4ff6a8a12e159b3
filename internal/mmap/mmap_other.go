//go:build !unix

package mmap

import (
	"fmt"
	"io"
	"os"
)

// File reads the whole file where memory mapping is not available; the data then lives on the
// Go heap and release only drops the reference.
func File(f *os.File, size int64) ([]byte, func() error, error) {
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file size %d does not fit in memory on this platform", size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	return data, func() error { return nil }, nil
}
