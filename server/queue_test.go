package server

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestSchedulersArePerModel: each model has its own slots (its Parallel, else the default) and
// its own queue, the reported depth is all queues together, and closing ends every queue, those
// of models first asked for later too.
func TestSchedulersArePerModel(t *testing.T) {
	var depth atomic.Int64
	ss := newSchedulers(1, 4, func(n int) { depth.Store(int64(n)) })
	ctx := context.Background()
	relA, err := ss.of("a", 0).acquire(ctx, 0) // a: the default, one slot
	if err != nil {
		t.Fatal(err)
	}
	// b has two slots of its own: a's running generation does not hold it up.
	var relB []func()
	for range 2 {
		r, err := ss.of("b", 2).acquire(ctx, 0)
		if err != nil {
			t.Fatalf("b: %v", err)
		}
		relB = append(relB, r)
	}
	if ss.running() != 3 {
		t.Errorf("running %d, want 3", ss.running())
	}
	// A second request for a queues behind the first; a queued one for b too.
	waitA := make(chan error, 1)
	go func() {
		r, err := ss.of("a", 0).acquire(ctx, 0)
		if err == nil {
			r()
		}
		waitA <- err
	}()
	waitB := make(chan error, 1)
	go func() {
		_, err := ss.of("b", 0).acquire(ctx, 0) // the Parallel of a known model is its first
		waitB <- err
	}()
	for ss.depth() != 2 || depth.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	relA()
	if err := <-waitA; err != nil {
		t.Fatalf("queued a: %v", err)
	}
	ss.close()
	if err := <-waitB; !errors.Is(err, ErrShuttingDown) {
		t.Errorf("queued b at close: %v, want ErrShuttingDown", err)
	}
	if _, err := ss.of("c", 0).acquire(ctx, 0); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("a model first asked for after close: %v, want ErrShuttingDown", err)
	}
	for _, r := range relB {
		r()
	}
}
