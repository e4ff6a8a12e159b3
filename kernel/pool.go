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
// scheduled) from turning a hand-off into a stall; a worker descheduled in the middle of a chunk
// does stall the join, and then the next products run unsplit for a while (stallBackoffMin).
// MatMulEach hands several products of one input over at once. Hand-off allocates nothing: an idle worker
// polls its state for spinFor after each job (products come in bursts within a forward pass)
// and then parks on a channel.

// splitMin is the least estimated work (see work) for which a product is split. Below it the
// hand-off costs more than the second core saves: inside a forward the products are separated by
// norms, attention and sampling, the workers have often parked, and waking one costs
// microseconds, far more than a tight-loop split suggests. At 2M every 1-row product of
// Qwen3-0.6B's shape (1024x1024 bf16 and up) still splits and nothing of stories260K's does; a
// loaded host can turn splitting off with SetMaxThreads(1). The measurements behind the figure
// are in BENCHMARKS.md ("Thread split thresholds").
// A variable so tests can force the split.
var splitMin int64 = 2 << 20

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

// maxChunkBytes caps the weights of one chunk. At the end of a product the caller waits for
// the others to finish their last chunk, and a thread the machine descheduled holds its chunk
// until it runs again: with a quarter of a thread's share per chunk, a 1-row product of
// Qwen3-0.6B's shape lost about a tenth of its time to that wait. A claim costs one atomic
// add, far less than streaming 256 KiB.
const maxChunkBytes = 256 << 10

// work estimates the cost of a product as weight bytes streamed plus flops/4 (a weight byte
// from memory takes about as long as 4-8 flops on the vector units of one core).
func work(m *Matrix, rows int) int64 {
	return m.Bytes() + int64(rows)*int64(m.N)*int64(m.K)/2
}

// maxSegments is how many products of one input a job can carry (MatMulEach).
const maxSegments = 4

// segment is one matrix of a job, with its output and the chunks it owns.
type segment struct {
	m      *Matrix
	y      []float32
	a      []byte   // quantized activations when m is quantized
	h      []uint16 // split bf16 activations when m is bf16 and the path takes them
	np     int      // panels of m
	per    int      // panels per chunk
	first  int64    // index of its first chunk in the job
	chunks int64
}

// job is the one set of products the pool works on; it is written only by the caller holding
// pool.mu and read by workers between taking an offer and going idle. Its chunks are numbered
// through the segments in order; a chunk never spans two matrices.
type job struct {
	fn      func(part int) // set for a Parallel job: chunk c is fn(c); the fields below are unused
	p       *impl
	x       []float32
	rows    int
	seg     [maxSegments]segment
	nseg    int
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
		if j.fn != nil {
			j.fn(int(c))
			continue
		}
		s := &j.seg[0]
		for k := 1; k < j.nseg && c >= j.seg[k].first; k++ {
			s = &j.seg[k]
		}
		p0 := int(c-s.first) * s.per
		if s.a != nil {
			j.p.qpanels(s.m, s.y, s.a, j.rows, p0, min(p0+s.per, s.np))
			continue
		}
		if s.h != nil {
			j.p.hpanels(s.m, s.y, s.h, j.rows, p0, min(p0+s.per, s.np))
			continue
		}
		j.p.panels(s.m, s.y, j.x, j.rows, p0, min(p0+s.per, s.np))
	}
}

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

// poolCounts counts, since the process started, the products the pool split across threads,
// those it ran on the caller alone because a stall's backoff was in progress, and the stalls.
// They are how a user sees that another process took a core (see PoolCounts).
var poolCounts struct{ split, unsplit, stalls atomic.Int64 }

// PoolCounts returns how many matrix products and multi-row forwards the thread pool has split
// across its threads, how many it ran on one thread because a recent stall (a worker thread
// descheduled mid-product: another process on its core) put it in backoff, and how many stalls
// there were, since the process started. Products too small to split, and those of a
// one-thread setting, are in neither count.
func PoolCounts() (split, unsplit, stalls int64) {
	return poolCounts.split.Load(), poolCounts.unsplit.Load(), poolCounts.stalls.Load()
}

var pool struct {
	once    sync.Once
	mu      sync.Mutex // held by the one product that owns the workers and job
	workers []*worker
	job     job
	unsplit int // products left to run unsplit after a stall (see stallBackoffMin); under mu
	backoff int // the unsplit run the next stall starts; under mu
	clean   int // split products since the last stall or shrink of backoff; under mu
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
// for a taken one to run out of chunks (which the caller has just exhausted). It reports
// whether that wait took longer than stall: the worker's thread was descheduled mid-chunk.
func (w *worker) finish(stall time.Duration) (stalled bool) {
	if w.state.CompareAndSwap(offered, idle) {
		return false
	}
	var start time.Time
	for spin := 0; w.state.Load() != idle; spin++ {
		if spin == 64 {
			start = time.Now()
		}
		if spin > 1000 {
			runtime.Gosched()
		}
	}
	return !start.IsZero() && time.Since(start) > stall
}

// stallWait is a join wait no chunk explains: a chunk of maxChunkBytes of work (see work) takes
// about ten microseconds of streaming, so a worker that takes this long lost its core to another
// process. Chunks hold at least 8 panels, which for a large K is far more work (a 1-row bf16
// 2560x9728 product's chunk is 2.5 MB): a job's wait scales with its largest chunk (chunkStall).
const stallWait = 50 * time.Microsecond

// chunkStall is the join wait that counts as a stall for a job whose largest chunk is w of work:
// stallWait per maxChunkBytes. With stallWait alone, the caller's ordinary wait for the
// worker's last chunk of such a product (a hundred microseconds and more) read as a stall on
// nearly every product, so products of Qwen3-4B's shapes ran on one thread, the backoff at its
// cap (one measurement: 2 stalls in 4 split products, then 878 products unsplit).
func chunkStall(w int64) time.Duration {
	return max(stallWait, time.Duration(int64(stallWait)*w/maxChunkBytes))
}

// After a stall the next products run on the caller alone, for a backoff that doubles with each
// stall (from stallBackoffMin up to stallBackoffMax) and halves after every cleanBeforeShrink
// split products in a row that did not stall. On a machine whose cores other processes keep
// busy, a split product waits for a descheduled worker for a whole time slice, and such stalls
// come often enough to drive the backoff to its cap within a few; a fixed backoff instead would
// turn the occasional stall of a mostly quiet machine into thousands of one-thread products.
// The measurements are in BENCHMARKS.md ("Thread split thresholds").
const (
	stallBackoffMin   = 16
	stallBackoffMax   = 1024
	cleanBeforeShrink = 8
)

// afterJoin updates the backoff after a split product (under pool.mu): a stall doubles it and
// starts an unsplit run that long; cleanBeforeShrink clean joins in a row halve it.
func afterJoin(stalled bool) {
	switch {
	case stalled:
		pool.backoff = min(max(2*pool.backoff, stallBackoffMin), stallBackoffMax)
		pool.unsplit, pool.clean = pool.backoff, 0
	case pool.backoff > 0:
		if pool.clean++; pool.clean >= cleanBeforeShrink {
			pool.backoff, pool.clean = pool.backoff/2, 0
		}
	}
}

// acquire takes the pool for one job and returns how many workers (at most want; want <= 0:
// all) to offer it to, or 0 when the job must run inline: no worker may help (SetMaxThreads, one core), another
// job holds the pool, or a stall's backoff run is in progress (which this call shortens).
func acquire(want int) int {
	pool.once.Do(startPool)
	helpers := len(pool.workers)
	if want > 0 {
		helpers = min(helpers, want)
	}
	if c := int(maxThreads.Load()); c > 0 {
		helpers = min(helpers, c-1)
	}
	if helpers <= 0 || !pool.mu.TryLock() {
		return 0
	}
	if pool.unsplit > 0 {
		pool.unsplit--
		poolCounts.unsplit.Add(1)
		pool.mu.Unlock()
		return 0
	}
	return helpers
}

// runJob runs pool.job, already set up, on the caller and helpers workers, joins them and
// updates the stall backoff; the caller still holds pool.mu and releases it after clearing
// the job. A join is a stall past minStall (at least stallWait) and, with ownTime, past the
// caller's own share of the time too.
func runJob(helpers int, minStall time.Duration, ownTime bool) {
	j := &pool.job
	j.next.Store(0)
	for _, w := range pool.workers[:helpers] {
		w.offer()
	}
	t0 := time.Now()
	j.claim()
	stall := max(stallWait, minStall)
	if ownTime {
		stall = max(stall, time.Since(t0))
	}
	stalled := false
	for _, w := range pool.workers[:helpers] {
		stalled = w.finish(stall) || stalled
	}
	poolCounts.split.Add(1)
	if stalled {
		poolCounts.stalls.Add(1)
	}
	afterJoin(stalled)
}

// matmul runs p over all panels of m, split across the pool when the product is large enough
// and the pool is free (a concurrent product simply runs on its own goroutine).
func matmul(p *impl, m *Matrix, y, x []float32, rows int) {
	matmulEach(p, x, rows, Product{M: m, Y: y})
}

// matmulEach runs the products ps (at most maxSegments, all with K = len(x)/rows) with one
// hand-off to the pool, or inline when their work together is small.
func matmulEach(p *impl, x []float32, rows int, ps ...Product) {
	var total int64
	np := 0
	// Quantized matrices take their activations quantized, once per kind for the call, and
	// bf16 ones on a path with splitBF16 split into bf16 planes, once for the call (all
	// products share K).
	var acts [maxSegments][]byte
	var hs [maxSegments][]uint16
	var split []uint16
	var scratch *actScratch
	for k, q := range ps {
		total += work(q.M, rows)
		np += q.M.panels()
		if q.M.DType == BF16 && p.splitBF16 != nil {
			if scratch == nil {
				scratch = actPool.Get().(*actScratch)
			}
			if split == nil {
				split = scratch.splitBF16(p, x, rows, q.M.K)
			}
			hs[k] = split
			continue
		}
		if qi, ok := qinfos[q.M.DType]; ok {
			if scratch == nil {
				scratch = actPool.Get().(*actScratch)
			}
			for k2 := range k {
				if ok2 := ps[k2].M.DType.Quantized(); ok2 && qinfos[ps[k2].M.DType].kind == qi.kind {
					acts[k] = acts[k2]
					break
				}
			}
			if acts[k] == nil {
				acts[k] = scratch.quantized(p, qi.kind, x, rows, q.M.K)
			}
		}
	}
	if scratch != nil {
		defer actPool.Put(scratch)
	}
	inline := func() {
		for k, q := range ps {
			if acts[k] != nil {
				p.qpanels(q.M, q.Y, acts[k], rows, 0, q.M.panels())
				continue
			}
			if hs[k] != nil {
				p.hpanels(q.M, q.Y, hs[k], rows, 0, q.M.panels())
				continue
			}
			p.panels(q.M, q.Y, x, rows, 0, q.M.panels())
		}
	}
	if np < 2 || total < splitMin {
		inline()
		return
	}
	helpers := acquire(0)
	if helpers == 0 {
		inline()
		return
	}
	j := &pool.job
	j.p, j.x, j.rows, j.nseg = p, x, rows, len(ps)
	j.nchunks = 0
	for k, q := range ps {
		s := &j.seg[k]
		s.m, s.y, s.a, s.h, s.np = q.M, q.Y, acts[k], hs[k], q.M.panels()
		// Each matrix gets chunks in proportion to its share of the work, at least
		// chunksPerThread per participant over the whole job.
		s.per = max(1, int(int64(s.np)*total/work(q.M, rows))/(chunksPerThread*(helpers+1)))
		s.per = min(s.per, s.np, max(8, maxChunkBytes/q.M.panelBytes()))
		if s.per > 8 {
			s.per = s.per / 8 * 8 // whole 8-panel passes of the kernels
		}
		s.first = j.nchunks
		s.chunks = int64((s.np + s.per - 1) / s.per)
		j.nchunks += s.chunks
	}
	var longest int64 // work of the job's largest chunk
	for _, s := range j.seg[:j.nseg] {
		longest = max(longest, int64(s.per)*work(s.m, rows)/int64(s.np))
	}
	runJob(helpers, chunkStall(longest), false)
	j.x = nil // drop references to the caller's buffers
	for k := range j.seg[:j.nseg] {
		j.seg[k].m, j.seg[k].y, j.seg[k].a, j.seg[k].h = nil, nil, nil, nil
	}
	pool.mu.Unlock()
}

// Parallel runs fn(0) .. fn(parts-1), each exactly once, on the calling goroutine and the pool's
// idle workers, and returns when all have returned. Parts are claimed from a shared counter, so
// a worker that does not start in time leaves its parts to the caller: Parallel never waits for
// a goroutine that has not begun, and on a loaded machine (or with SetMaxThreads(1), a busy pool,
// or after a stall, see afterJoin) it simply runs every part on the caller in order. fn must
// therefore give the same results whichever goroutine runs a part and in whatever order; parts
// usually own disjoint rows of a forward. Products fn runs find the pool taken and run unsplit.
// It reports whether the parts may have run concurrently.
//
// It allocates nothing; callers on a hot path pass a method value they built once.
func Parallel(parts int, fn func(part int)) (split bool) {
	inline := func() {
		for i := 0; i < parts; i++ {
			fn(i)
		}
	}
	if parts < 2 {
		inline()
		return false
	}
	helpers := acquire(parts - 1)
	if helpers == 0 {
		inline()
		return false
	}
	j := &pool.job
	j.fn, j.nchunks = fn, int64(parts)
	// A part may be long (a layer of many rows), and parts of equal rows need not take equal
	// time: a join counts as a stall only when a worker takes longer again than the caller's
	// whole share did, beyond the usual stallWait.
	runJob(helpers, stallWait, true)
	j.fn = nil
	pool.mu.Unlock()
	return true
}
