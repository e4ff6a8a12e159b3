package kernel

import (
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// sumF32 is the read loop of ProbeBandwidth; len(a) must be a multiple of 64. amd64 replaces it
// with an AVX2 loop that keeps eight loads in flight.
var sumF32 = sumGo

// probeSink keeps the probe's sums observable so the reads cannot be dropped.
var probeSink float32

// ProbeBandwidth measures memory read bandwidth in GB/s (1e9 bytes per second): GOMAXPROCS
// goroutines each stream their own share of a bytes-sized buffer over and over for about d.
// bytes should exceed the last-level cache (1 GiB is a safe choice) so the figure is DRAM's.
// The buffer is written once first so every page is backed by real memory, not the zero page.
// It lives where large weights do (huge pages, see hugemem.go; the Go heap with
// DFLASH_HUGEPAGES=0), so the ceiling is measured under the same page walks as the products it
// bounds, and it is unmapped before returning. It returns 0 if bytes or d is too small to measure.
func ProbeBandwidth(bytes int64, d time.Duration) float64 {
	threads := runtime.GOMAXPROCS(0)
	per := bytes / 4 / int64(threads) / 64 * 64 // float32s per thread, whole loop blocks
	if per == 0 || d <= 0 {
		return 0
	}
	bufs := make([][]float32, threads)
	for t := range bufs {
		if size := int(per) * 4; hugeWeights && size >= hugeMin {
			if b, region, ok := mapHuge(size); ok {
				defer unmapHuge(region)
				bufs[t] = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), per)
				continue
			}
		}
		bufs[t] = make([]float32, per)
	}
	return probeBuffers(bufs, d)
}

// probeBuffers is ProbeBandwidth over the given buffers, one goroutine each (tests pass buffers
// in other memory, such as huge pages, to see what the placement costs).
func probeBuffers(bufs [][]float32, d time.Duration) float64 {
	threads := len(bufs)
	for t := range bufs {
		for i := range bufs[t] {
			bufs[t][i] = 1
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
		sink  float32
	)
	start := time.Now()
	deadline := start.Add(d)
	for t := 0; t < threads; t++ {
		wg.Add(1)
		go func(b []float32) {
			defer wg.Done()
			var n int64
			var s float32
			for {
				s += sumF32(b)
				n += int64(len(b)) * 4
				if time.Now().After(deadline) {
					break
				}
			}
			mu.Lock()
			total += n
			sink += s
			mu.Unlock()
		}(bufs[t])
	}
	wg.Wait()
	el := time.Since(start)
	probeSink = sink
	return float64(total) / el.Seconds() / 1e9
}
