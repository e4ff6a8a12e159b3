package backend

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

// waitQueued waits until s has want waiters.
func waitQueued(t *testing.T, s *weighted, want int) {
	t.Helper()
	for {
		if _, w := s.state(); w == want {
			return
		}
		runtime.Gosched()
	}
}

// TestWeightedFIFOAndCancel: a request that does not fit waits, and later ones wait behind it
// even when they would fit; a waiter whose context ends returns its error holding nothing, and
// the queue behind it moves on.
func TestWeightedFIFOAndCancel(t *testing.T) {
	s := newWeighted(3)
	if err := s.acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	bigCtx, cancelBig := context.WithCancel(context.Background())
	big := make(chan error)
	go func() { big <- s.acquire(bigCtx, 3) }()
	waitQueued(t, s, 1)
	small := make(chan error)
	go func() { small <- s.acquire(context.Background(), 1) }()
	waitQueued(t, s, 2)
	if used, _ := s.state(); used != 1 {
		t.Fatalf("%d units used with a small request queued behind a big one, want 1", used)
	}
	cancelBig()
	if err := <-big; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	if err := <-small; err != nil {
		t.Fatal(err)
	}
	if used, waiting := s.state(); used != 2 || waiting != 0 {
		t.Fatalf("after the cancel: %d used, %d waiting, want 2, 0", used, waiting)
	}
	// A context already ended gives up without queueing when the units are not free.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.acquire(done, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
	s.release(1)
	s.release(1)
	if err := s.acquire(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if used, waiting := s.state(); used != 3 || waiting != 0 {
		t.Fatalf("all taken: %d used, %d waiting", used, waiting)
	}
}
