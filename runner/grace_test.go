package runner

import (
	"testing"
	"time"
)

// idleTimer is a grace timer that never fires by itself: the test calls its function.
type idleTimer struct{}

func (idleTimer) Stop() bool { return false }

// TestStaleGraceTimerIgnored: a grace timer that expired during an earlier emit but whose
// function runs only once a later emit has begun (it waited for the Batcher's lock meanwhile)
// does not make the later emit's lane away; that emit's own expiry does.
func TestStaleGraceTimerIgnored(t *testing.T) {
	var timers []func()
	defer func(f func(time.Duration, func()) graceTimer) { afterFunc = f }(afterFunc)
	afterFunc = func(_ time.Duration, f func()) graceTimer {
		timers = append(timers, f)
		return idleTimer{}
	}
	b := NewBatcher(nil)
	l, err := b.join(&Sequence{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.leave(l)
	away := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return l.away
	}
	var stale func()
	if err := l.emit(func(Token) error { stale = timers[len(timers)-1]; return nil }, Token{}); err != nil {
		t.Fatal(err)
	}
	var staleAway, ownAway bool
	if err := l.emit(func(Token) error {
		stale()
		staleAway = away()
		timers[len(timers)-1]()
		ownAway = away()
		return nil
	}, Token{}); err != nil {
		t.Fatal(err)
	}
	if staleAway {
		t.Error("the first emit's expired timer made the second emit's lane away")
	}
	if !ownAway {
		t.Error("the second emit's own expiry did not make its lane away")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.away || b.present != 1 {
		t.Errorf("after the emits: away %v, %d lanes present, want false, 1", l.away, b.present)
	}
}
