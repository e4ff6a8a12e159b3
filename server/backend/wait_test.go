package backend_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// returned is what done delivers; a request that never returns fails the test (a deadlock
// guard, not a timing check: the wait is a minute).
func returned(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return after its context ended", what)
		return nil
	}
}

// waitQueued waits until m has want requests waiting for its semaphore.
func waitQueued(m *backend.Model, want int) {
	for {
		if _, w := backend.Queued(m); w == want {
			return
		}
		runtime.Gosched()
	}
}

// TestWaitersGiveUpOnCancel: an embedding waiting for a running generation, and a generation
// waiting behind that embedding, each return their context's error as soon as it is
// cancelled, while the running generation goes on; afterwards nothing is held, the model
// serves both kinds of request, and no goroutine is left behind.
func TestWaitersGiveUpOnCancel(t *testing.T) {
	m := loadStories(t, false)
	prompt, err := m.Tokenize("Once upon a time")
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	req := server.GenRequest{Prompt: prompt, MaxTokens: 5, Options: greedy}
	started, release := make(chan struct{}), make(chan struct{})
	running := make(chan error, 1)
	go func() {
		first := true
		_, err := m.Generate(context.Background(), req, func(server.Token) error {
			if first {
				first = false
				close(started)
				<-release
			}
			return nil
		})
		running <- err
	}()
	<-started

	embedCtx, cancelEmbed := context.WithCancel(context.Background())
	defer cancelEmbed()
	embedding := make(chan error, 1)
	go func() {
		_, err := m.Embed(embedCtx, prompt)
		embedding <- err
	}()
	waitQueued(m, 1)
	lateCtx, cancelLate := context.WithCancel(context.Background())
	defer cancelLate()
	late := make(chan error, 1)
	go func() {
		_, err := m.Generate(lateCtx, req, func(server.Token) error { return nil })
		late <- err
	}()
	waitQueued(m, 2)

	cancelLate()
	if err := returned(t, "a generation queued behind an embedding", late); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled generation: %v, want context.Canceled", err)
	}
	cancelEmbed()
	if err := returned(t, "an embedding waiting for a generation", embedding); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled embedding: %v, want context.Canceled", err)
	}
	if used, waiting := backend.Queued(m); used != 1 || waiting != 0 {
		t.Errorf("with one generation running: %d units used, %d waiting, want 1, 0", used, waiting)
	}
	close(release)
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	if used, waiting := backend.Queued(m); used != 0 || waiting != 0 {
		t.Errorf("idle: %d units used, %d waiting, want 0, 0", used, waiting)
	}
	if _, err := m.Embed(context.Background(), prompt); err != nil {
		t.Errorf("embedding after the cancellations: %v", err)
	}
	generate(t, m, prompt, 5)
	waitGoroutines(t, base)
}
