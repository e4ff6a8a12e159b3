package kernel

import "syscall"

// mapHuge maps size bytes (zeroed) at a 2 MiB boundary and advises them as huge pages. It
// returns the aligned buffer and the whole mapping to unmap later (the mapping is up to 2 MiB
// larger than the buffer: address space only, its unused ends are never touched), or ok false
// when the kernel refuses the mapping. Advice the kernel rejects (no THP support) leaves plain
// pages, which work the same.
func mapHuge(size int) (buf, region []byte, ok bool) {
	region, err := syscall.Mmap(-1, 0, size+hugeAlign, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, false
	}
	off := alignOffset(region)
	buf = region[off : off+size : off+size]
	_ = syscall.Madvise(buf, syscall.MADV_HUGEPAGE)
	return buf, region, true
}

// unmapHuge returns a mapping of mapHuge to the OS.
func unmapHuge(region []byte) {
	if err := syscall.Munmap(region); err != nil {
		panic("kernel: unmap weights: " + err.Error()) // only a region mapHuge returned comes here
	}
}
