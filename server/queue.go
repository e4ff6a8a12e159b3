package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

var (
	// ErrQueueFull is returned when Config.MaxQueue requests already wait.
	ErrQueueFull = errors.New("server busy: request queue is full")
	// ErrQueueTimeout is returned when a request could not start within Config.QueueTimeout.
	ErrQueueTimeout = errors.New("server busy: request could not start before its queue timeout")
	// ErrShuttingDown is returned to requests that arrive or wait while the server stops.
	ErrShuttingDown = errors.New("server is shutting down")
)

// scheduler hands out a fixed number of run slots in arrival order. Invariant: a slot is free
// only while no one waits (a release hands the slot straight to the oldest waiter), so a newly
// arriving request can never overtake one that waits.
type scheduler struct {
	mu       sync.Mutex
	parallel int
	free     int
	maxQueue int
	waiters  []*waiter // FIFO
	closed   bool
	shut     chan struct{} // closed by close: every waiter gives up at once
	onDepth  func(int)     // reports the queue depth after each change
}

type waiter struct {
	ready chan struct{} // closed when the slot is handed over
	done  bool          // slot handed over (guarded by scheduler.mu)
}

func newScheduler(parallel, maxQueue int, onDepth func(int)) *scheduler {
	if parallel < 1 {
		parallel = 1
	}
	if onDepth == nil {
		onDepth = func(int) {}
	}
	return &scheduler{parallel: parallel, free: parallel, maxQueue: maxQueue, onDepth: onDepth, shut: make(chan struct{})}
}

// acquire waits for a slot in FIFO order, at most timeout (<= 0: no limit besides ctx). The
// returned release must be called exactly once.
func (s *scheduler) acquire(ctx context.Context, timeout time.Duration) (release func(), err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrShuttingDown
	}
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return s.releaser(), nil
	}
	if s.maxQueue > 0 && len(s.waiters) >= s.maxQueue {
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.onDepth(len(s.waiters))
	s.mu.Unlock()

	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-w.ready:
		return s.releaser(), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer:
		err = ErrQueueTimeout
	case <-s.shut:
		err = ErrShuttingDown
	}
	s.mu.Lock()
	if w.done {
		// The slot arrived while we gave up: pass it on rather than leak it.
		s.mu.Unlock()
		s.release()
		return nil, err
	}
	s.remove(w)
	closed := s.closed
	s.mu.Unlock()
	if closed && err != ErrQueueTimeout {
		return nil, ErrShuttingDown
	}
	return nil, err
}

func (s *scheduler) releaser() func() {
	var once sync.Once
	return func() { once.Do(s.release) }
}

func (s *scheduler) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters = s.waiters[1:]
		w.done = true
		close(w.ready)
		s.onDepth(len(s.waiters))
		return
	}
	s.free++
}

func (s *scheduler) remove(w *waiter) {
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	s.onDepth(len(s.waiters))
}

// depth is the number of waiting requests.
func (s *scheduler) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// running is the number of slots held.
func (s *scheduler) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parallel - s.free
}

// close rejects new requests and answers every waiting one with ErrShuttingDown at once: a
// queued request would only start after the running ones, which a shutdown is ending, so
// letting it wait out the grace period would only delay its 503.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.shut)
	}
}

// schedulers are the per-model schedulers: each model runs up to its own number of generations
// at once (ModelInfo.Parallel, else Config.Parallel: ollama's OLLAMA_NUM_PARALLEL is per model
// too), and its requests beyond that wait in its own FIFO queue of at most maxQueue. A model's
// scheduler is made at its first request and kept (a few words; the model names are the
// configured ones).
type schedulers struct {
	parallel int // default slots per model
	maxQueue int
	onDepth  func(int) // reports the total queue depth after each change

	mu     sync.Mutex
	byName map[string]*scheduler
	depths map[string]int
	closed bool
}

func newSchedulers(parallel, maxQueue int, onDepth func(int)) *schedulers {
	if onDepth == nil {
		onDepth = func(int) {}
	}
	return &schedulers{parallel: parallel, maxQueue: maxQueue, onDepth: onDepth,
		byName: map[string]*scheduler{}, depths: map[string]int{}}
}

// of is the scheduler of model name, with parallel slots (<= 0: the default) when it is new.
func (ss *schedulers) of(name string, parallel int) *scheduler {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.byName[name]
	if !ok {
		if parallel <= 0 {
			parallel = ss.parallel
		}
		s = newScheduler(parallel, ss.maxQueue, func(n int) { ss.report(name, n) })
		if ss.closed {
			s.close()
		}
		ss.byName[name] = s
	}
	return s
}

// report records model name's queue depth and reports the total. A scheduler calls it under its
// own lock, so it must not call back into one.
func (ss *schedulers) report(name string, n int) {
	ss.mu.Lock()
	ss.depths[name] = n
	total := 0
	for _, d := range ss.depths {
		total += d
	}
	ss.mu.Unlock()
	ss.onDepth(total)
}

func (ss *schedulers) all() []*scheduler {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*scheduler, 0, len(ss.byName))
	for _, s := range ss.byName {
		out = append(out, s)
	}
	return out
}

// depth is the number of waiting requests, all models together.
func (ss *schedulers) depth() int {
	n := 0
	for _, s := range ss.all() {
		n += s.depth()
	}
	return n
}

// running is the number of slots held, all models together.
func (ss *schedulers) running() int {
	n := 0
	for _, s := range ss.all() {
		n += s.running()
	}
	return n
}

// close closes every scheduler, and those made later are born closed.
func (ss *schedulers) close() {
	ss.mu.Lock()
	ss.closed = true
	ss.mu.Unlock()
	for _, s := range ss.all() {
		s.close()
	}
}
