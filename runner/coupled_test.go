package runner_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// TestCoupledSpeculationEqualsPlain: under coupled sampling a seed gives the same tokens with and
// without a draft, at any depth, on every kernel path: 20 seeds with a real Qwen3 forward, random
// DFlash drafts at depths 1 and 7 and adaptive (its depths follow a jittering clock, and the
// request is seeded, which coupled sampling lets keep the adaptive policy), a random DFlash2
// draft, and the output itself as a noisy oracle (mostly accepted), with penalties, top-k/top-p
// and stop tokens in some seeds. The same drafts under rejection sampling must change some
// seed's output, or the comparison would prove nothing.
func TestCoupledSpeculationEqualsPlain(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		const vocab, n = 97, 32
		target := tinyQwen3(t, vocab, 21)
		d1, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 4, kernel.F32)
		if err != nil {
			t.Fatal(err)
		}
		cfg2 := dflash2.ConfigFor(target.Config(), 1, 8)
		cfg2.SelectorRank, cfg2.SelectorTopK = 8, 6
		dir := t.TempDir()
		if err := dflash2.WriteRandom(dir, target.Config(), cfg2, 6, kernel.F32); err != nil {
			t.Fatal(err)
		}
		d2, err := dflash2.Load(dir, target, dflash2.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(15, 6))
		accepted, rejectionDiffers := 0, 0
		for seed := range uint64(20) {
			o := sample.Options{Temperature: []float32{0.8, 1}[seed%2], Seed: 1000 + seed, Coupled: true}
			switch seed % 4 {
			case 1:
				o.TopP = 0.95
			case 2:
				o.TopK, o.RepeatPenalty = 20, 1.1
			case 3:
				o.MinP, o.PresencePenalty = 0.02, 0.5
			}
			prompt := make([]int, 1+rng.IntN(12))
			for i := range prompt {
				prompt[i] = rng.IntN(vocab)
			}
			var stop []int
			if seed%3 == 2 {
				stop = []int{rng.IntN(vocab)}
			}
			plain := func(o sample.Options) []int {
				out, _ := gen(t, runner.NewSequence(target, 256), runner.Request{Prompt: prompt, Options: o, MaxTokens: n, Stop: stop, Seeded: true})
				return out
			}
			want := plain(o)
			full := append(slices.Clone(prompt), want...)
			sessions := []struct {
				name string
				open func() (runner.Session, runner.Depth)
			}{
				{"dflash-1", func() (runner.Session, runner.Depth) { return runner.NewBlockSession(d1, 256), runner.Fixed(1) }},
				{"dflash-7", func() (runner.Session, runner.Depth) { return runner.NewBlockSession(d1, 256), runner.Fixed(7) }},
				{"dflash-adaptive", func() (runner.Session, runner.Depth) { return runner.NewBlockSession(d1, 256), runner.Depth{} }},
				{"dflash2", func() (runner.Session, runner.Depth) {
					return runner.NewSelectorSession(d2, 256), runner.NewSelectorDrafter(d2).Depth()
				}},
				{"oracle0.3", func() (runner.Session, runner.Depth) {
					or := &runner.OracleDrafter{Tokens: full, Limit: 7, Noise: 0.3, Vocab: vocab, Seed: seed}
					return or.Open(256), or.Depth()
				}},
			}
			for _, sc := range sessions {
				s, depth := sc.open()
				got, st := gen(t, runner.NewSequence(target, 256), runner.Request{Prompt: prompt, Options: o, MaxTokens: n, Stop: stop,
					Session: s, Depth: depth, Seeded: true, Clock: jitterClock(seed)})
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d %+v, %s: coupled speculative output differs from plain:\n got %v\nwant %v", seed, o, sc.name, got, want)
				}
				accepted += st.Accepted
			}
			// Rejection sampling, the same seed and a depth-3 draft: its output may differ from
			// plain decoding's, since the emitted token at a drafted position depends on q.
			r := o
			r.Coupled = false
			s := runner.NewBlockSession(d1, 256)
			got, _ := gen(t, runner.NewSequence(target, 256), runner.Request{Prompt: prompt, Options: r, MaxTokens: n, Stop: stop, Session: s, Depth: runner.Fixed(3), Seeded: true})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, plain(r)) {
				rejectionDiffers++
			}
		}
		if accepted == 0 {
			t.Fatal("no draft was ever accepted: only the rejection path was compared")
		}
		if rejectionDiffers == 0 {
			t.Fatal("rejection sampling gave plain decoding's tokens for every seed too: the test cannot tell coupled sampling from it")
		}
		t.Logf("%d drafts accepted; rejection sampling changed %d of 20 seeds' output", accepted, rejectionDiffers)
	})
}

// TestCoupledStoriesMatchesPlain is the same check on stories260K, a trained target whose sampled
// output is varied, with a random draft at several depths (skipped without ../shared/data).
func TestCoupledStoriesMatchesPlain(t *testing.T) {
	target, draft := storiesWithDraft(t)
	prompt := []int{1, 403, 407, 261, 378, 434, 267}
	for seed := range uint64(4) {
		o := sample.Options{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1.1, Seed: seed, Coupled: true}
		want, _ := gen(t, runner.NewSequence(target, 256), runner.Request{Prompt: prompt, Options: o, MaxTokens: 60})
		for _, depth := range []runner.Depth{runner.Fixed(2), runner.Fixed(7), {}} {
			s := runner.NewBlockSession(draft, 256)
			got, _ := gen(t, runner.NewSequence(target, 256), runner.Request{Prompt: prompt, Options: o, MaxTokens: 60, Session: s, Depth: depth})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d depth %v: %s", seed, depth, fmt.Sprintf("got %v\nwant %v", got, want))
			}
		}
	}
}

// TestCoupledSpeculationEqualsPlainOnHybrid: the same on a hybrid target, whose cache cannot
// rewind and is cut back to the kept row's snapshot: coupled output with a DFlash draft (mostly
// rejected: early rows restored) and a noisy oracle (mostly accepted) is plain coupled output.
func TestCoupledSpeculationEqualsPlainOnHybrid(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	vocab := target.Config().Vocab
	d1, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 1, 8), 3, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 5, 9, 2, 7}
	accepted := 0
	for seed := range uint64(5) {
		o := sample.Options{Temperature: 0.8, TopP: 0.95, Seed: 40 + seed, Coupled: true}
		want, _ := gen(t, runner.NewSequence(target, 128), runner.Request{Prompt: prompt, Options: o, MaxTokens: 30})
		full := append(slices.Clone(prompt), want...)
		or := &runner.OracleDrafter{Tokens: full, Limit: 7, Noise: 0.3, Vocab: vocab, Seed: seed}
		for name, s := range map[string]runner.Session{"dflash": runner.NewBlockSession(d1, 128), "oracle": or.Open(128)} {
			got, st := gen(t, runner.NewSequence(target, 128), runner.Request{Prompt: prompt, Options: o, MaxTokens: 30, Session: s, Depth: runner.Fixed(7)})
			accepted += st.Accepted
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d %s: coupled speculative output differs from plain on the hybrid target:\n got %v\nwant %v", seed, name, got, want)
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no draft was accepted: no snapshot restore after an accepted draft was checked")
	}
}
