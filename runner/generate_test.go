package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

// fakeClock advances one millisecond per reading, so timings (and the depth controller's costs)
// are deterministic.
func fakeClock() func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

// run generates on a fresh sequence and returns the emitted tokens.
func run(t *testing.T, target *fake.Target, seq *Sequence, req Request) ([]int, Stats) {
	t.Helper()
	if seq == nil {
		seq = NewSequence(target, 512)
	}
	if req.Clock == nil {
		req.Clock = fakeClock()
	}
	var out []int
	st, err := Generate(context.Background(), seq, req, func(tok Token) error {
		out = append(out, tok.ID)
		return nil
	})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	checkSequence(t, seq)
	return out, st
}

// checkSequence asserts the sequence invariant: its tokens are exactly its cache rows.
func checkSequence(t *testing.T, seq *Sequence) {
	t.Helper()
	rows := seq.Cache().(*fake.Cache).Committed()
	if len(rows) != len(seq.Tokens()) {
		t.Fatalf("sequence lists %d tokens, cache holds %d rows", len(seq.Tokens()), len(rows))
	}
	for i, r := range rows {
		if r.Token != seq.Tokens()[i] {
			t.Fatalf("cache row %d holds %d, sequence says %d", i, r.Token, seq.Tokens()[i])
		}
	}
}

// perfectDraft predicts the fake target's greedy continuation: context tokens plus anchor, then
// greedy steps, with each row wrong (a hashed token) with probability noise.
func perfectDraft(target *fake.Target, noise float64, seed uint64) func(dst []float32, ctx []int, anchor, i int) {
	return func(dst []float32, ctx []int, anchor, i int) {
		seq := append(slices.Clone(ctx), anchor)
		next := target.Greedy(seq, i)
		tok := next[i-1]
		r := rand.New(rand.NewPCG(seed, uint64(len(ctx)*64+i)))
		if r.Float64() < noise {
			tok = r.IntN(len(dst))
		}
		fake.OneHot(dst, tok)
	}
}

type drafterCase struct {
	name string
	make func(target *fake.Target, prompt []int, n int) Drafter
}

func drafterCases() []drafterCase {
	return []drafterCase{
		{"dflash-random", func(target *fake.Target, _ []int, _ int) Drafter {
			// Hashed draft logits: drafts are right about 1 time in 16.
			return NewBlockDrafter(&fake.Draft{Block: 8, Mask: testVocab - 1, Layers: []int{0, 1}, Vocab: testVocab})
		}},
		{"dflash-noisy-perfect", func(target *fake.Target, _ []int, _ int) Drafter {
			return NewBlockDrafter(&fake.Draft{Block: 6, Mask: testVocab - 1, Layers: []int{1}, Vocab: testVocab, Logits: perfectDraft(target, 0.2, 7)})
		}},
		{"oracle-noise", func(target *fake.Target, prompt []int, n int) Drafter {
			seq := append(slices.Clone(prompt), target.Greedy(prompt, n+16)...)
			return &OracleDrafter{Tokens: seq, Limit: 5, Noise: 0.3, Vocab: testVocab, Seed: 3}
		}},
	}
}

func TestGreedySpeculativeEqualsPlain(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 3}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dc := range drafterCases() {
		t.Run(dc.name, func(t *testing.T) {
			var tau float64
			stops := 0
			for trial := range 40 {
				prompt := make([]int, 1+rng.IntN(20))
				for i := range prompt {
					prompt[i] = rng.IntN(testVocab)
				}
				n := 1 + rng.IntN(60)
				// Half the trials stop at token 5, which then may land inside a block.
				var stop []int
				if trial%2 == 0 {
					stop = []int{5, 9}
				}
				want, _ := run(t, target, nil, Request{Prompt: prompt, MaxTokens: n, Stop: stop})
				d := dc.make(target, prompt, n)
				s := d.Open(1024)
				got, st := run(t, target, nil, Request{Prompt: prompt, MaxTokens: n, Stop: stop, Session: s, Depth: d.Depth()})
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("trial %d prompt %v: speculative %v\nwant plain %v", trial, prompt, got, want)
				}
				if st.Reason == StopToken {
					stops++
				}
				tau += st.Tau()
			}
			t.Logf("mean tau %.2f, %d trials ended at a stop token", tau/40, stops)
			if stops == 0 {
				t.Fatal("no trial reached a stop token; the stop path went untested")
			}
		})
	}
}

func TestStopTokenInsideBlock(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	prompt := []int{1, 2, 3}
	greedy := target.Greedy(prompt, 40)
	// Stop at the token at greedy index 6: with an exact oracle drafting 8 per round, the first
	// round (after the prompt) drafts greedy[0..7], all accepted, and the stop sits inside it.
	stopTok := greedy[6]
	k := slices.Index(greedy, stopTok)
	oracle := &OracleDrafter{Tokens: append(slices.Clone(prompt), greedy...), Limit: 8}
	seq := NewSequence(target, 128)
	got, st := run(t, target, seq, Request{Prompt: prompt, MaxTokens: 40, Stop: []int{stopTok}, Session: oracle.Open(128), Depth: oracle.Depth()})
	if !slices.Equal(got, greedy[:k]) || st.Reason != StopToken {
		t.Fatalf("got %v (%s), want %v then stop", got, st.Reason, greedy[:k])
	}
	// The cache keeps the rows of the prompt and of every emitted token, not the stop token.
	if want := append(slices.Clone(prompt), greedy[:k]...); !slices.Equal(seq.Tokens(), want) {
		t.Fatalf("cache tokens %v, want %v", seq.Tokens(), want)
	}
}

func TestFullAcceptanceLeavesDraftLevel(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 4}
	d := &fake.Draft{Block: 5, Mask: testVocab - 1, Layers: []int{0, 3}, Vocab: testVocab, Logits: perfectDraft(target, 0, 0)}
	s := NewBlockSession(d, 256)
	prompt := []int{4, 8, 15, 12, 2}
	seq := NewSequence(target, 256)
	got, st := run(t, target, seq, Request{Prompt: prompt, MaxTokens: 41, Session: s, Depth: Fixed(4)})
	if want := target.Greedy(prompt, 41); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Every draft is right: 8 rounds of 4 drafts plus a bonus give 40 tokens; the 9th round has
	// one token left to emit, so it drafts none.
	if st.Accepted != st.Drafted || st.Rounds != 9 || st.Tau() != 41.0/9 {
		t.Fatalf("stats %v: want every draft accepted in 9 rounds", st)
	}
	dc := s.Cache().(*fake.Cache)
	if dc.Offset() != seq.Cache().Offset() {
		t.Fatalf("draft cache at %d, target at %d: want level after Close", dc.Offset(), seq.Cache().Offset())
	}
	checkSlots(t, dc)
	for slot, r := range dc.Committed() {
		if r.Token != seq.Tokens()[slot] {
			t.Fatalf("draft slot %d has context of token %d, target row is %d", slot, r.Token, seq.Tokens()[slot])
		}
	}
}

func TestPromptPrefixReuse(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	d := &fake.Draft{Block: 4, Mask: testVocab - 1, Layers: []int{1}, Vocab: testVocab, Logits: perfectDraft(target, 0.3, 1)}
	s := NewBlockSession(d, 512)
	seq := NewSequence(target, 512)
	depth := Adaptive(nil)
	first := []int{1, 2, 3, 4, 5, 6}
	out1, _ := run(t, target, seq, Request{Prompt: first, MaxTokens: 10, Session: s, Depth: depth})

	// The next turn extends the conversation: every cached row is reused (the last emitted
	// token was never in the cache), and the drafter resumes from the same rows.
	second := append(append(slices.Clone(first), out1...), 7, 8)
	cached := len(seq.Tokens())
	target.Forwards = nil
	out2, st := run(t, target, seq, Request{Prompt: second, MaxTokens: 10, Session: s, Depth: depth})
	if st.Reused != cached || st.PromptTokens != len(second)-1-cached {
		t.Fatalf("reused %d and prefilled %d, want %d and %d", st.Reused, st.PromptTokens, cached, len(second)-1-cached)
	}
	if want := target.Greedy(second, 10); !slices.Equal(out2, want) {
		t.Fatalf("after reuse got %v, want %v", out2, want)
	}
	if got := target.Forwards[0].Tokens; !slices.Equal(got, second[cached:len(second)-1]) {
		t.Fatalf("first forward %v, want only the new prompt rows %v", got, second[cached:len(second)-1])
	}
	checkSlots(t, s.Cache().(*fake.Cache))

	// A prompt that diverges early keeps only the common prefix, in target and draft.
	third := []int{1, 2, 9}
	out3, st := run(t, target, seq, Request{Prompt: third, MaxTokens: 5, Session: s, Depth: depth})
	if st.Reused != 2 {
		t.Fatalf("reused %d rows, want the common prefix of 2", st.Reused)
	}
	if want := target.Greedy(third, 5); !slices.Equal(out3, want) {
		t.Fatalf("got %v, want %v", out3, want)
	}
	// The same prompt again keeps all but its last token, which must be processed for logits.
	out4, st := run(t, target, seq, Request{Prompt: third, MaxTokens: 5})
	if st.Reused != 2 || !slices.Equal(out4, out3) {
		t.Fatalf("repeat: reused %d, got %v; want 2 and %v", st.Reused, out4, out3)
	}
	// A drafter that holds fewer rows than the target makes the target recompute them.
	plainSeq := NewSequence(target, 512)
	run(t, target, plainSeq, Request{Prompt: first, MaxTokens: 3})
	fresh := NewBlockSession(&fake.Draft{Block: 4, Mask: testVocab - 1, Layers: []int{1}, Vocab: testVocab}, 512)
	_, st = run(t, target, plainSeq, Request{Prompt: append(slices.Clone(first), 3), MaxTokens: 3, Session: fresh})
	if st.Reused != 0 {
		t.Fatalf("reused %d rows with an empty drafter, want 0", st.Reused)
	}
	checkSlots(t, fresh.Cache().(*fake.Cache))
}

func TestGenerateStopsEarly(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	prompt := []int{1, 2, 3}
	errGone := errors.New("client gone")
	seq := NewSequence(target, 64)
	var got []int
	st, err := Generate(context.Background(), seq, Request{Prompt: prompt, MaxTokens: 20}, func(tok Token) error {
		got = append(got, tok.ID)
		if len(got) == 3 {
			return errGone
		}
		return nil
	})
	if !errors.Is(err, errGone) || len(got) != 3 || st.Reason != StopCanceled {
		t.Fatalf("emit error: err %v after %d tokens (%s), want client gone after 3", err, len(got), st.Reason)
	}
	checkSequence(t, seq)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Generate(ctx, seq, Request{Prompt: prompt, MaxTokens: 20}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: err %v", err)
	}
	checkSequence(t, seq)

	// A full cache ends generation: capacity 8 with a 3-token prompt leaves 6 rounds... the
	// prompt's last token and 5 emitted ones fill rows 2..7, then the 6th emitted token needs
	// no row: 6 tokens.
	small := NewSequence(target, 8)
	out, st := run(t, target, small, Request{Prompt: prompt, MaxTokens: 100})
	if st.Reason != StopCapacity || len(out) != 6 {
		t.Fatalf("full cache: %d tokens (%s), want 6 (capacity)", len(out), st.Reason)
	}

	bad := []Request{
		{Prompt: nil},
		{Prompt: []int{testVocab}},
		{Prompt: []int{1}, Options: sample.Options{Temperature: -1}},
		{Prompt: make([]int, 65)},
	}
	for i, r := range bad {
		if _, err := Generate(context.Background(), seq, r, nil); err == nil {
			t.Errorf("bad request %d accepted", i)
		}
	}
}

func TestStatsAdd(t *testing.T) {
	var a, b Stats
	a.round(3, 2)
	b.round(1, 0)
	b.round(0, 0)
	a.Add(b)
	// Rounds: 3 drafted 2 accepted; 1 drafted 0; plain. tau = (2 + 3) / 3.
	if a.Rounds != 3 || a.Drafted != 4 || a.Accepted != 2 || fmt.Sprint(a.Depths) != "[1 1 0 1]" {
		t.Fatalf("sum %+v", a)
	}
	if a.Tau() != 5.0/3 || a.AcceptanceAt(1) != 0.5 || a.AcceptanceAt(2) != 1 || a.AcceptanceAt(3) != 0 {
		t.Fatalf("tau %v, rates %v %v %v", a.Tau(), a.AcceptanceAt(1), a.AcceptanceAt(2), a.AcceptanceAt(3))
	}
}

func TestOracleCeiling(t *testing.T) {
	target := &fake.Target{Vocab: testVocab, Layers: 2}
	prompt := []int{7, 1}
	greedy := target.Greedy(prompt, 60)
	oracle := &OracleDrafter{Tokens: append(slices.Clone(prompt), greedy...), Limit: 5}
	got, st := run(t, target, nil, Request{Prompt: prompt, MaxTokens: 60, Session: oracle.Open(512), Depth: oracle.Depth()})
	// An exact oracle is always right: 10 rounds of 5 drafts plus a bonus emit 60 tokens, tau 6.
	if !slices.Equal(got, greedy) || st.Accepted != st.Drafted || st.Rounds != 10 || st.Tau() != 6 {
		t.Fatalf("oracle: %d rounds, accepted %d/%d, tau %v", st.Rounds, st.Accepted, st.Drafted, st.Tau())
	}
}

// BenchmarkRoundOverhead measures the loop's own cost per emitted token (verification,
// bookkeeping, drafter) on a fake target whose forward is nearly free.
func BenchmarkRoundOverhead(b *testing.B) {
	target := &fake.Target{Vocab: 1024, Layers: 2}
	prompt := []int{1, 2, 3, 4}
	const n = 256
	greedy := target.Greedy(prompt, n)
	for _, bc := range []struct {
		name string
		d    func() Session
	}{
		{"plain", func() Session { return nil }},
		{"oracle8", func() Session {
			return (&OracleDrafter{Tokens: append(slices.Clone(prompt), greedy...), Limit: 8}).Open(0)
		}},
		{"dflash8", func() Session {
			return NewBlockSession(&fake.Draft{Block: 9, Mask: 1023, Layers: []int{0, 1}, Vocab: 1024}, 1024)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			seq := NewSequence(target, 1024)
			tokens := 0
			for b.Loop() {
				target.Forwards = target.Forwards[:0]
				st, err := Generate(context.Background(), seq, Request{Prompt: prompt, MaxTokens: n, Session: bc.d(), Depth: Fixed(8)}, nil)
				if err != nil {
					b.Fatal(err)
				}
				tokens += st.DecodeTokens
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
		})
	}
}
