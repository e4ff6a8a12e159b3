package kernel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Threading: a product large enough to gain is cut into chunks of whole panels that the calling
// goroutine and a persistent pool of GOMAXPROCS-1 workers claim from a shared counter. Each
// panel's outputs are computed by exactly one goroutine with the same kernel, so a split changes
// no bit of the result. The caller never waits for a worker that has not started: it retracts
// the offer and does the work itself, which keeps a loaded machine (a worker thread not
// scheduled) from turning a hand-off into a stall. Hand-off allocates nothing: an idle worker
// polls its state for spinFor after each job (products come in bursts within a forward pass)
// and then parks on a channel.

// splitMin is the least estimated work (see work) for which a product is split. Below it the
// hand-off costs more than the second core saves. Measured with BenchmarkSplit (bf16, avx512) on
// the shared 2-core development machine, with the other sessions' load low: a forced split
// costs about 0.33 us on a 64x64 matvec (work 10K) and about 0.08 us on 512x64 (80K); it wins
// from 512x128 (160K: 1.03 -> 0.79 us) and halves 1024x256 (640K) and larger. Under heavy load
// from other processes no split won, which SetMaxThreads(1) lets a host choose.
// A variable so tests can force the split.
var splitMin int64 = 256 << 10

// maxThreads caps the goroutines one product uses (SetMaxThreads).
var maxThreads atomic.Int32

// SetMaxThreads caps the goroutines one MatMul may use, the caller included, and returns the
// previous cap; n <= 0 means GOMAXPROCS (the default) and 1 disables splitting. It lets a
// benchmark or a loaded host compare one thread against all without restarting.
func SetMaxThreads(n int) int {
	prev := int(maxThreads.Swap(int32(max(n, 0))))
	if prev == 0 {
		prev = runtime.GOMAXPROCS(0)
	}
	return prev
}

// spinFor is how long an idle worker polls for the next job before parking.
const spinFor = 50 * time.Microsecond

// chunksPerThread is how many chunks each participant gets on average: enough that a late or
// slow participant leaves work for the others, few enough that claims stay cheap.
const chunksPerThread = 4

// work estimates the cost of a product as weight bytes streamed plus flops/4 (a weight byte
// from memory takes about as long as 4-8 flops on the vector units of one core).
func work(m *Matrix, rows int) int64 {
	return m.Bytes() + int64(rows)*int64(m.N)*int64(m.K)/2
}

// job is the one product the pool works on; it is written only by the caller holding pool.mu
// and read by workers between taking an offer and going idle.
type job struct {
	p       *impl
	m       *Matrix
	y, x    []float32
	rows    int
	np      int // panels of m
	per     int // panels per chunk
	nchunks int64
	next    atomic.Int64 // chunks claimed so far
}

// claim computes chunks until none is left.
func (j *job) claim() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.nchunks {
			return
		}
		p0 := int(c) * j.per
		j.p.panels(j.m, j.y, j.x, j.rows, p0, min(p0+j.per, j.np))
	}
}

// Worker states. idle -> offered by the caller; offered -> taken by the worker, or back to idle
// by the caller (retracted); taken -> idle by the worker when the job has no chunk left.
const (
	idle uint32 = iota
	offered
	taken
)

type worker struct {
	state    atomic.Uint32
	sleeping atomic.Bool // parked, or about to park, on wake
	wake     chan struct{}
	_        [64]byte // keeps neighbouring workers' flags off one cache line
}

var pool struct {
	once    sync.Once
	mu      sync.Mutex // held by the one product that owns the workers and job
	workers []*worker
	job     job
}

func startPool() {
	n := runtime.GOMAXPROCS(0) - 1
	for i := 0; i < n; i++ {
		w := &worker{wake: make(chan struct{}, 1)}
		pool.workers = append(pool.workers, w)
		go w.loop()
	}
}

func (w *worker) loop() {
	for {
		w.await()
		if !w.state.CompareAndSwap(offered, taken) {
			continue // retracted before this worker got to it
		}
		pool.job.claim()
		w.state.Store(idle)
	}
}

// await returns once an offer may be pending. The sleeping flag and the state form a handshake:
// whichever side sees the other's write first is the one that sends or skips the wake token, so
// an offer is never slept through and no token is left over.
func (w *worker) await() {
	start := time.Now()
	for i := 0; ; i++ {
		if w.state.Load() == offered {
			return
		}
		if i&255 == 255 && time.Since(start) > spinFor {
			break
		}
	}
	w.sleeping.Store(true)
	if w.state.Load() == offered && w.sleeping.CompareAndSwap(true, false) {
		return
	}
	<-w.wake
}

func (w *worker) offer() {
	w.state.Store(offered)
	if w.sleeping.Load() && w.sleeping.CompareAndSwap(true, false) {
		w.wake <- struct{}{}
	}
}

// finish returns once w no longer reads the job: it retracts an offer not yet taken, or waits
// for a taken one to run out of chunks (which the caller has just exhausted).
func (w *worker) finish() {
	if w.state.CompareAndSwap(offered, idle) {
		return
	}
	for spin := 0; w.state.Load() != idle; spin++ {
		if spin > 1000 {
			runtime.Gosched()
		}
	}
}

// matmul runs p over all panels of m, split across the pool when the product is large enough
// and the pool is free (a concurrent product simply runs on its own goroutine).
func matmul(p *impl, m *Matrix, y, x []float32, rows int) {
	np := m.panels()
	if np < 2 || work(m, rows) < splitMin {
		p.panels(m, y, x, rows, 0, np)
		return
	}
	pool.once.Do(startPool)
	helpers := len(pool.workers)
	if c := int(maxThreads.Load()); c > 0 {
		helpers = min(helpers, c-1)
	}
	if helpers <= 0 || !pool.mu.TryLock() {
		p.panels(m, y, x, rows, 0, np)
		return
	}
	j := &pool.job
	j.p, j.m, j.y, j.x, j.rows, j.np = p, m, y, x, rows, np
	j.per = max(1, np/(chunksPerThread*(helpers+1)))
	if j.per > 8 {
		j.per = j.per / 8 * 8 // whole 8-panel passes of the kernels
	}
	j.nchunks = int64((np + j.per - 1) / j.per)
	j.next.Store(0)
	for _, w := range pool.workers[:helpers] {
		w.offer()
	}
	j.claim()
	for _, w := range pool.workers[:helpers] {
		w.finish()
	}
	j.m, j.y, j.x = nil, nil, nil // drop references to the caller's buffers
	pool.mu.Unlock()
}
