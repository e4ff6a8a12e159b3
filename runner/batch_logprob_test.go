package runner_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dflash/dflash/runner"
)

// TestBatchedAwayLaneKeepsLogprobs: a batched generation whose emit outlasts the grace (its
// lane goes away, the other generation's steps run meanwhile and reuse the target's workspace)
// reports, for every token of a round of accepted drafts, the same logprobs as alone, bitwise.
// The other generation emits only with the first's leave: each emit of the first lets it emit
// twice and waits for both, so the second of them comes from a step whose forward ran, over
// eight verify rows, while the first generation was inside its emit; and the other cannot run
// ahead of the first and end before it.
func TestBatchedAwayLaneKeepsLogprobs(t *testing.T) {
	const n, top = 24, 3
	target := tinyBatchQwen3(t)
	prompt := []int{3, 14, 15, 92, 65}
	plain := batchSetup{target: target}
	full := append(slices.Clone(prompt), plain.alone(t, batchReq{prompt: prompt, n: n})...)
	oracle := &runner.OracleDrafter{Tokens: full, Limit: 7, Vocab: target.Config().Vocab}
	request := func(s runner.Session) runner.Request {
		return runner.Request{Prompt: prompt, MaxTokens: n, Session: s, Depth: oracle.Depth(), Logprobs: true, TopLogprobs: top}
	}

	var want []runner.Token
	if _, err := runner.Generate(context.Background(), runner.NewSequence(target, 256), request(oracle.Open(256)),
		func(tok runner.Token) error { want = append(want, tok); return nil }); err != nil {
		t.Fatal(err)
	}
	// The oracle's rounds are of several tokens, or no later token of a round would be at risk.
	if len(want) != n || !slices.Equal(tokenIDs(want), full[len(prompt):]) {
		t.Fatalf("alone output %v is not the oracle's %v", tokenIDs(want), full[len(prompt):])
	}

	// The other generation verifies eight rows a step (its drafts are all noise, so it emits
	// about one token a step), overwriting every logits row of the first one's rounds.
	otherPrompt := []int{7, 1, 8}
	const otherN = 4*n + 16
	otherFull := append(slices.Clone(otherPrompt), plain.alone(t, batchReq{prompt: otherPrompt, n: otherN})...)
	noise := &runner.OracleDrafter{Tokens: otherFull, Limit: 7, Noise: 1, Vocab: target.Config().Vocab, Seed: 5}
	b := runner.NewBatcher(target)
	b.EmitGrace = time.Nanosecond
	permits := make(chan struct{}, 2*n)
	acks := make(chan struct{}, 2*n)
	firstDone, otherDone := make(chan struct{}), make(chan struct{})
	enough := errors.New("the first generation has ended")
	var got []runner.Token
	var errA, errB error
	early := false // the other generation ended before the first: tokens went unchecked
	var wg sync.WaitGroup
	b.Pause() // both start together
	wg.Go(func() {
		defer close(firstDone)
		_, errA = b.Generate(context.Background(), runner.NewSequence(target, 256), request(oracle.Open(256)), func(tok runner.Token) error {
			got = append(got, tok)
			permits <- struct{}{}
			permits <- struct{}{}
			for range 2 {
				select {
				case <-acks:
				case <-otherDone:
					early = true
					return nil
				}
			}
			return nil
		})
	})
	wg.Go(func() {
		defer close(otherDone)
		other := runner.Request{Prompt: otherPrompt, MaxTokens: otherN, Session: noise.Open(256), Depth: noise.Depth()}
		_, errB = b.Generate(context.Background(), runner.NewSequence(target, 256), other, func(runner.Token) error {
			select {
			case <-permits:
				acks <- struct{}{}
				return nil
			case <-firstDone:
				return enough
			}
		})
	})
	for b.Width() < 2 {
		runtime.Gosched()
	}
	b.Resume()
	wg.Wait()
	if early {
		t.Error("the other generation ended before the first one's last emit")
	}
	if errA != nil || !errors.Is(errB, enough) {
		t.Fatalf("generations: %v and %v, want nil and %q", errA, errB, enough)
	}
	sameLogprobs(t, "away lane vs alone", got, want)
}

func tokenIDs(toks []runner.Token) []int {
	ids := make([]int, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	return ids
}
