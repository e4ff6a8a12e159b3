package runner

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/runner/internal/fake"
)

// TestOneDraftForwardPerRound counts the draft's forwards (DFLASH.md section 3, issue 15): a
// round that proposes runs exactly one, which writes the context pending since the last
// proposal together with the block; a context-only forward happens only when FlushRows rows are
// pending, and once when the request ends (Settle) to level the session. Plain rounds of an
// adaptive policy leave their rows pending for the next proposal. Greedy output stays plain
// output throughout.
func TestOneDraftForwardPerRound(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	rng := rand.New(rand.NewPCG(15, 1))
	for _, pc := range []struct {
		name  string
		depth Depth
	}{{"fixed-3", Fixed(3)}, {"fixed-0", Fixed(0)}, {"adaptive", Adaptive(nil)}} {
		for _, promptLen := range []int{1, 9, 600} {
			prompt := make([]int, promptLen)
			for i := range prompt {
				prompt[i] = rng.IntN(testVocab)
			}
			const n = 120
			want, _ := run(t, target, NewSequence(target, 1024), Request{Prompt: prompt, MaxTokens: n})
			draft := &fake.Draft{Block: 6, Mask: testVocab - 1, Layers: []int{0, 1}, Vocab: testVocab, Logits: perfectDraft(target, 0.3, 5)}
			s := NewBlockSession(draft, 1024)
			got, st := run(t, target, NewSequence(target, 1024), Request{Prompt: prompt, MaxTokens: n, Session: s, Depth: pc.depth.Fresh()})
			if !slices.Equal(got, want) {
				t.Fatalf("%s, prompt %d: speculative output differs from plain", pc.name, promptLen)
			}
			proposing := st.Rounds
			if len(st.Depths) > 0 {
				proposing -= st.Depths[0]
			}
			blocks, settles := 0, 0
			for i, c := range draft.Calls {
				switch {
				case c.Block != nil:
					blocks++
				case len(c.CtxPositions) == FlushRows:
				case i == len(draft.Calls)-1 && len(c.CtxPositions) > 0:
					settles++
				default:
					t.Fatalf("%s, prompt %d: draft call %d writes %d context rows alone, neither a flush of %d nor the request's settle", pc.name, promptLen, i, len(c.CtxPositions), FlushRows)
				}
			}
			if blocks != proposing {
				t.Fatalf("%s, prompt %d: %d block forwards for %d proposing rounds (depths %v)", pc.name, promptLen, blocks, proposing, st.Depths)
			}
			if settles > 1 {
				t.Fatalf("%s, prompt %d: %d settle forwards", pc.name, promptLen, settles)
			}
			if pc.name == "fixed-3" && promptLen > 1 && proposing != st.Rounds {
				t.Fatalf("fixed depth 3, prompt %d: %d of %d rounds proposed", promptLen, proposing, st.Rounds)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
