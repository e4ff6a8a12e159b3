package kernel

import (
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Weight memory. A decode step streams every weight once, gigabytes in 4 KiB pages: far more
// pages than the TLBs hold, so nearly every page costs a page walk on top of its DRAM reads.
// Large weight buffers therefore live in their own anonymous mappings, aligned to 2 MiB and
// advised as huge pages (Linux transparent huge pages, which hosts often set to "madvise"
// only), so one TLB entry covers 512 times as much of a matrix. Only where the bytes live
// changes: the layout, the zeroed start and the arithmetic are those of a make'd slice.
//
// Lifetime: a Matrix is immutable and lives as long as whoever holds it (a model, until the
// server unloads it). The mapping belongs to a small owner object the Matrix points to; a
// cleanup on the owner unmaps it once no Matrix (nor a copy of one) reaches the owner, so an
// unloaded model's weights go back to the OS at the next garbage collection that finds them
// unreachable (FreeUnused forces one). Every exported method that reads the weights keeps its
// Matrix alive to its end (runtime.KeepAlive), since the kernels hold only raw pointers into
// the mapping, which the collector does not see.

// hugeMin is the least buffer that gets its own mapping: one whole huge page. Smaller buffers
// cannot hold one and stay on the Go heap.
const hugeMin = 2 << 20

// hugeAlign is the alignment of a mapped buffer, the size of an x86-64 huge page.
const hugeAlign = 2 << 20

// hugeWeights turns the mappings on; DFLASH_HUGEPAGES=0 keeps every weight buffer on the Go
// heap (for comparisons, or a host where mappings misbehave).
var hugeWeights = os.Getenv("DFLASH_HUGEPAGES") != "0"

// mappedBytes counts the bytes of weight buffers currently in mappings (tests, diagnostics).
var mappedBytes atomic.Int64

// weightMem owns one mapping; its cleanup unmaps it. It carries no Go pointers and is larger
// than the tiny-allocator size, so the cleanup runs as soon as the owner is unreachable.
type weightMem struct {
	bytes int64
	_     [2]int64
}

// allocWeights returns a zeroed buffer of n elements for m's weights, in a huge-page mapping
// when it is large enough and mappings work here (recording the owner in m), else from make.
func allocWeights[T float32 | uint16 | byte](m *Matrix, n int) []T {
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	if !hugeWeights || size < hugeMin {
		return make([]T, n)
	}
	b, region, ok := mapHuge(size)
	if !ok {
		return make([]T, n)
	}
	owner := &weightMem{bytes: int64(size)}
	mappedBytes.Add(int64(size))
	runtime.AddCleanup(owner, func(r []byte) {
		unmapHuge(r)
		mappedBytes.Add(-int64(size))
	}, region)
	m.mem = owner
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// FreeUnused runs a garbage collection so the weights of matrices nobody holds any more (an
// unloaded model's) go back to the OS now rather than at some later collection: they live
// outside the Go heap, so dropping them does not by itself make a collection due. The unmapping
// itself runs shortly after, on the runtime's cleanup goroutine.
func FreeUnused() { runtime.GC() }

// alignOffset is the offset of the first hugeAlign boundary in b.
func alignOffset(b []byte) int {
	a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return int((hugeAlign - a%hugeAlign) % hugeAlign)
}
