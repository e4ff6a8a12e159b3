package backend

import (
	"context"
	"slices"
	"sync"
)

// weighted is a semaphore of size units that waiters take in arrival order (FIFO): a request for
// more units than are free waits, and so does every later one, so a large request (an embedding
// that takes all of them) is not starved by a stream of small ones (generations of one unit),
// nor do small ones overtake it. A waiter whose context ends gives up at once.
//
// Invariant (under mu): 0 <= used <= size; waiters are in arrival order, and the first of them
// asks for more than size-used (else it would have been granted).
type weighted struct {
	size int

	mu      sync.Mutex
	used    int
	waiters []*waiter
}

type waiter struct {
	n     int
	ready chan struct{} // closed once the units are granted
}

func newWeighted(size int) *weighted { return &weighted{size: size} }

// acquire takes n units (1 <= n <= size), waiting its turn; it returns ctx's error, holding
// nothing, if ctx ends first.
func (s *weighted) acquire(ctx context.Context, n int) error {
	s.mu.Lock()
	if len(s.waiters) == 0 && s.size-s.used >= n {
		s.used += n
		s.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return err
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.ready:
		// Granted while ctx ended: the caller is told it failed, so the units go back.
		s.used -= n
	default:
		s.waiters = slices.DeleteFunc(s.waiters, func(x *waiter) bool { return x == w })
	}
	// Either way the queue's head may now fit (this waiter was it, or units came back).
	s.grantLocked()
	return ctx.Err()
}

// release returns n units taken by acquire.
func (s *weighted) release(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used -= n
	if s.used < 0 {
		panic("backend: semaphore released more than acquired")
	}
	s.grantLocked()
}

// grantLocked hands units to the waiters at the head of the queue while they fit.
func (s *weighted) grantLocked() {
	for len(s.waiters) > 0 && s.size-s.used >= s.waiters[0].n {
		w := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		s.used += w.n
		close(w.ready)
	}
}

// state is the units in use and the waiters queued, for tests.
func (s *weighted) state() (used, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, len(s.waiters)
}
