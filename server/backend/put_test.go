package backend

import (
	"context"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/server"
)

// closeSession is a drafting session that only reports its Close.
type closeSession struct{ close func() }

func (closeSession) Taps() []int                             { return nil }
func (closeSession) Limit() int                              { return 0 }
func (closeSession) Restore(keep int) (int, error)           { return keep, nil }
func (closeSession) Committed([]int, [][]float32, int) error { return nil }
func (closeSession) Settle() error                           { return nil }
func (s closeSession) Close() error                          { s.close(); return nil }
func (closeSession) Propose(int, int, []int, runner.Sampler) ([]int, []sample.Distribution, error) {
	return nil, nil, nil
}

// TestBrokenSessionClosedUnderBatcherLock: a broken sequence's drafting session is closed (a
// close settles, a draft forward) serialised with the steps of the generations still running.
// Every step writes touched (the model's step observer runs under the Batcher's lock), and so
// does the session's Close: under -race an unserialised close is reported.
func TestBrokenSessionClosedUnderBatcherLock(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	b, err := New(Options{Models: []Spec{{Name: "stories", Path: bin}}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := b.Load(context.Background(), "stories:latest")
	if err != nil {
		t.Fatal(err)
	}
	m := sm.(*Model)
	defer m.Close()
	touched := 0
	m.ObserveSteps(func(int) { touched++ })
	prompt, err := m.Tokenize("Once upon a time")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		n := 0
		_, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 100}, func(server.Token) error {
			if n++; n == 1 {
				close(started)
			}
			return nil
		})
		done <- err
	}()
	<-started
	closed := false
	s := &slot{seq: runner.NewSequence(m.e.Target, m.ctxLen), session: closeSession{close: func() { touched++; closed = true }}}
	m.mu.Lock()
	m.made++
	m.mu.Unlock()
	m.put(s, true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !closed {
		t.Error("the broken sequence's session was not closed")
	}
}
