package kernel

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"
)

// Weight memory. A decode step streams every weight once, gigabytes in 4 KiB pages: far more
// pages than the TLBs hold, so nearly every page costs a page walk on top of its DRAM reads.
// Weight buffers therefore live in anonymous mappings aligned to 2 MiB and advised as huge pages
// (Linux transparent huge pages, which hosts often set to "madvise" only), so one TLB entry
// covers 512 times as much of a matrix. A buffer of at least one huge page gets a mapping of
// its own; smaller ones (most quantized matrices of small models: a 1024x1024 Q4_K matrix is
// 0.6 MB) are carved, 4 KiB-aligned, from shared arenas of arenaSize; tiny ones stay on the Go
// heap. Only where the bytes live changes: the layout, the zeroed start and the arithmetic are
// those of a make'd slice.
//
// Lifetime: a Matrix is immutable and lives as long as whoever holds it (a model, until the
// server unloads it). A mapping belongs to a small owner object (weightMem) each Matrix in it
// points to; a cleanup on the owner unmaps it once no Matrix (nor a copy of one) reaches the
// owner, so an unloaded model's weights go back to the OS at the next garbage collection that
// finds them unreachable (FreeUnused forces one). The arena being filled is held only weakly,
// so it too goes once its matrices do; an arena filled by two models' loads in turn lives as
// long as the longer-lived one (at most one arena per such interleaving). Every exported method
// that reads the weights keeps its Matrix alive to its end (runtime.KeepAlive), since the
// kernels hold only raw pointers into the mapping, which the collector does not see.

// hugeMin is the least buffer that gets its own mapping: one whole huge page.
const hugeMin = 2 << 20

// hugeAlign is the alignment of a mapping, the size of an x86-64 huge page.
const hugeAlign = 2 << 20

// arenaMin is the least buffer carved from an arena; smaller ones (tiny test models) stay on
// the heap, where they cost no arena and no page walks worth saving.
const arenaMin = 64 << 10

// arenaSize is the size of one shared arena: 16 huge pages. Untouched parts of it cost
// address space only.
const arenaSize = 32 << 20

// arenaAlign aligns buffers inside an arena as the Go heap aligns large objects (pages).
const arenaAlign = 4 << 10

// hugeWeights turns the mappings on; DFLASH_HUGEPAGES=0 keeps every weight buffer on the Go
// heap (for comparisons, or a host where mappings misbehave).
var hugeWeights = os.Getenv("DFLASH_HUGEPAGES") != "0"

// mappedBytes counts the bytes of mappings currently held for weights.
var mappedBytes atomic.Int64

// MappedBytes is the size of the huge-page mappings currently holding weights (whole arenas
// included): memory the process holds outside the Go heap, which heap statistics do not show.
func MappedBytes() int64 { return mappedBytes.Load() }

// weightMem owns one mapping; its cleanup unmaps it. It carries no Go pointers and is larger
// than the tiny-allocator size, so the cleanup runs as soon as the owner is unreachable.
type weightMem struct {
	bytes int64
	_     [2]int64
}

// arena is the shared mapping small buffers are being carved from, under its mutex.
var arena struct {
	mu    sync.Mutex
	owner weak.Pointer[weightMem] // nil Value: none yet, or freed since
	buf   []byte                  // the arena's memory, valid while owner's Value is not nil
	used  int
}

// newMapping maps size bytes of huge pages and returns them with their owner, or ok false.
func newMapping(size int) (b []byte, owner *weightMem, ok bool) {
	b, region, ok := mapHuge(size)
	if !ok {
		return nil, nil, false
	}
	owner = &weightMem{bytes: int64(size)}
	mappedBytes.Add(int64(size))
	runtime.AddCleanup(owner, func(r []byte) {
		unmapHuge(r)
		mappedBytes.Add(-int64(size))
	}, region)
	return b, owner, true
}

// carve returns size bytes from the current arena, starting a new one when it is full or gone.
func carve(size int) (b []byte, owner *weightMem, ok bool) {
	arena.mu.Lock()
	defer arena.mu.Unlock()
	owner = arena.owner.Value() // a strong reference from here: the arena cannot be freed
	off := (arena.used + arenaAlign - 1) &^ (arenaAlign - 1)
	if owner == nil || off+size > len(arena.buf) {
		if arena.buf, owner, ok = newMapping(arenaSize); !ok {
			arena.owner, arena.buf, arena.used = weak.Pointer[weightMem]{}, nil, 0
			return nil, nil, false
		}
		arena.owner, off = weak.Make(owner), 0
	}
	arena.used = off + size
	return arena.buf[off : off+size : off+size], owner, true
}

// allocWeights returns a zeroed buffer of n elements for m's weights, in huge-page memory when
// it is large enough and mappings work here (recording the owner in m), else from make.
func allocWeights[T float32 | uint16 | byte](m *Matrix, n int) []T {
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	var (
		b     []byte
		owner *weightMem
		ok    bool
	)
	switch {
	case !hugeWeights || size < arenaMin:
	case size >= hugeMin:
		b, owner, ok = newMapping(size)
	default:
		b, owner, ok = carve(size)
	}
	if !ok {
		return make([]T, n)
	}
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
