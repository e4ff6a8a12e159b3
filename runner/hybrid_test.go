package runner_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// gen runs one request on seq and returns what it emitted.
func gen(t *testing.T, seq *runner.Sequence, req runner.Request) ([]int, runner.Stats) {
	t.Helper()
	var out []int
	st, err := runner.Generate(context.Background(), seq, req, func(tok runner.Token) error { out = append(out, tok.ID); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(seq.Tokens()) != seq.Cache().Offset() {
		t.Fatalf("sequence lists %d tokens, cache at %d", len(seq.Tokens()), seq.Cache().Offset())
	}
	return out, st
}

// On a hybrid target (recurrent caches that cannot rewind) greedy speculation goes through the
// snapshot verify path; its output must still equal plain greedy output token for token, with
// random DFlash and DFlash2 drafts (mostly rejected: restores of early rows) and a noisy oracle
// (mostly accepted: restores of late rows and full acceptance), stop tokens inside blocks and
// rounds cut by the context limit.
func TestGreedySpeculationEqualsPlainOnHybrid(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		target := testmodel.TinyQwen35(t)
		vocab := target.Config().Vocab
		rng := rand.New(rand.NewPCG(35, 1))
		d1, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 3, kernel.F32)
		if err != nil {
			t.Fatal(err)
		}
		cfg2 := dflash2.ConfigFor(target.Config(), 2, 8)
		cfg2.SelectorRank, cfg2.SelectorTopK = 8, 6
		dir := t.TempDir()
		if err := dflash2.WriteRandom(dir, target.Config(), cfg2, 5, kernel.BF16); err != nil {
			t.Fatal(err)
		}
		d2, err := dflash2.Load(dir, target, dflash2.Options{})
		if err != nil {
			t.Fatal(err)
		}
		stopsSeen, capped := 0, 0
		for trial := range 6 {
			prompt := make([]int, 1+rng.IntN(12))
			for i := range prompt {
				prompt[i] = rng.IntN(vocab)
			}
			n := 20 + rng.IntN(40)
			capacity := 256
			if trial%3 == 2 {
				capacity = len(prompt) + 9 + rng.IntN(6) // the context ends inside a round
			}
			plain, _ := gen(t, runner.NewSequence(target, capacity), runner.Request{Prompt: prompt, MaxTokens: n})
			var stop []int
			if trial%2 == 1 && len(plain) > 8 {
				stop = []int{plain[3+rng.IntN(5)]}
			}
			want, wst := gen(t, runner.NewSequence(target, capacity), runner.Request{Prompt: prompt, MaxTokens: n, Stop: stop})
			if wst.Reason == runner.StopToken {
				stopsSeen++
			}
			if wst.Reason == runner.StopCapacity {
				capped++
			}
			full := append(slices.Clone(prompt), plain...)
			sessions := map[string]func() (runner.Session, runner.Depth){
				"dflash": func() (runner.Session, runner.Depth) {
					return runner.NewBlockSession(d1, capacity), runner.Fixed(7)
				},
				"dflash-adaptive": func() (runner.Session, runner.Depth) { return runner.NewBlockSession(d1, capacity), runner.Depth{} },
				"dflash2": func() (runner.Session, runner.Depth) {
					return runner.NewSelectorSession(d2, capacity), runner.NewSelectorDrafter(d2).Depth()
				},
				"oracle0.3": func() (runner.Session, runner.Depth) {
					o := &runner.OracleDrafter{Tokens: full, Limit: 7, Noise: 0.3, Vocab: vocab, Seed: uint64(trial)}
					return o.Open(capacity), o.Depth()
				},
				"oracle": func() (runner.Session, runner.Depth) {
					o := &runner.OracleDrafter{Tokens: full, Limit: 7, Vocab: vocab}
					return o.Open(capacity), o.Depth()
				},
			}
			for name, mk := range sessions {
				s, depth := mk()
				got, st := gen(t, runner.NewSequence(target, capacity), runner.Request{Prompt: prompt, MaxTokens: n, Stop: stop, Session: s, Depth: depth})
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("trial %d %s (capacity %d, stop %v):\n got %v\nwant %v", trial, name, capacity, stop, got, want)
				}
				if st.Reason != wst.Reason {
					t.Fatalf("trial %d %s: ended by %s, plain by %s", trial, name, st.Reason, wst.Reason)
				}
				if st.Drafted == 0 {
					t.Fatalf("trial %d %s: nothing drafted", trial, name)
				}
				if name == "oracle" && stop == nil && st.Accepted < st.Drafted {
					t.Fatalf("trial %d exact oracle: accepted %d of %d", trial, st.Accepted, st.Drafted)
				}
			}
		}
		if stopsSeen == 0 || capped == 0 {
			t.Fatalf("%d trials stopped at a token and %d at the context: a path went untested", stopsSeen, capped)
		}
	})
}

// Two requests in a row on one hybrid sequence: one whose prompt extends everything the cache
// holds reuses all of it (no rewind needed), one that diverges starts the sequence over; both
// decode exactly what a fresh sequence decodes, with a drafter attached throughout.
func TestHybridRequestsInARow(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 6), 4, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	fresh := func(prompt []int, n int) []int {
		out, _ := gen(t, runner.NewSequence(target, 256), runner.Request{Prompt: prompt, MaxTokens: n})
		return out
	}
	seq := runner.NewSequence(target, 256)
	s := runner.NewBlockSession(d, 256)
	defer s.Close()
	first := []int{5, 17, 3, 3, 42, 8}
	out1, _ := gen(t, seq, runner.Request{Prompt: first, MaxTokens: 12, Session: s, Depth: runner.Fixed(5)})
	if want := fresh(first, 12); !slices.Equal(out1, want) {
		t.Fatalf("first: got %v, want %v", out1, want)
	}
	second := append(append(slices.Clone(first), out1...), 9, 1)
	cached := len(seq.Tokens())
	out2, st := gen(t, seq, runner.Request{Prompt: second, MaxTokens: 12, Session: s, Depth: runner.Fixed(5)})
	if st.Reused != cached {
		t.Fatalf("extending prompt reused %d rows, want all %d", st.Reused, cached)
	}
	if want := fresh(second, 12); !slices.Equal(out2, want) {
		t.Fatalf("second: got %v, want %v", out2, want)
	}
	third := []int{5, 17, 60, 2}
	out3, st := gen(t, seq, runner.Request{Prompt: third, MaxTokens: 12, Session: s, Depth: runner.Fixed(5)})
	if st.Reused != 0 {
		t.Fatalf("diverging prompt reused %d rows of a cache that cannot rewind, want 0", st.Reused)
	}
	if want := fresh(third, 12); !slices.Equal(out3, want) {
		t.Fatalf("third: got %v, want %v", out3, want)
	}
	// The same prompt again shares all but the cache's rows past it: it resumes from the
	// checkpoint saved at the end of its own prefill (len(third)-1 rows, so its last token is
	// processed again) and gives the same output.
	out4, st4 := gen(t, seq, runner.Request{Prompt: third, MaxTokens: 12})
	if st4.Reused != len(third)-1 {
		t.Errorf("repeat reused %d rows, want the %d of its own prompt's checkpoint", st4.Reused, len(third)-1)
	}
	if !slices.Equal(out4, out3) {
		t.Fatalf("repeat: got %v, want %v", out4, out3)
	}
}

// A prompt that diverges from a hybrid sequence's rows after the end of an earlier prompt
// resumes from the checkpoint saved there: it reuses exactly those rows, prefills only the rest,
// and leaves output and recurrent state bitwise equal to a fresh sequence's, with a drafter
// attached (restored to the same rows) and without one.
func TestHybridResumesFromCheckpoint(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	vocab := target.Config().Vocab
	d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 6), 4, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	seq := runner.NewSequence(target, 256)
	s := runner.NewBlockSession(d, 256)
	defer s.Close()
	check := func(name string, prompt []int, session runner.Session, reused int) []int {
		t.Helper()
		req := runner.Request{Prompt: prompt, MaxTokens: 12}
		if session != nil {
			req.Session, req.Depth = session, runner.Fixed(4)
		}
		out, st := gen(t, seq, req)
		if st.Reused != reused || st.PromptTokens != len(prompt)-1-reused {
			t.Fatalf("%s: reused %d and prefilled %d rows, want %d and %d", name, st.Reused, st.PromptTokens, reused, len(prompt)-1-reused)
		}
		fresh := runner.NewSequence(target, 256)
		want, _ := gen(t, fresh, runner.Request{Prompt: prompt, MaxTokens: 12})
		if !slices.Equal(out, want) {
			t.Fatalf("%s: got %v, a fresh sequence %v", name, out, want)
		}
		h, f := seq.Cache().(*cache.Hybrid), fresh.Cache().(*cache.Hybrid)
		for l := range h.State {
			if !slices.Equal(h.State[l], f.State[l]) || !slices.Equal(h.Conv[l], f.Conv[l]) {
				t.Fatalf("%s: recurrent layer %d differs from a fresh sequence's", name, l)
			}
		}
		return out
	}
	first := []int{5, 17, 3, 3, 42, 8, 11, 29}
	out1 := check("first", first, s, 0)
	// Diverge right after the first prompt: the cache holds first+out1[:11], the checkpoint is
	// at len(first)-1.
	second := append(slices.Clone(first), (out1[0]+1)%vocab, 7, 13)
	out2 := check("second", second, s, len(first)-1)
	third := append(slices.Clone(second), (out2[0]+1)%vocab, 2)
	check("third", third, nil, len(second)-1)
	// The checkpoints are now at the ends of the three prompts (len(first)-1, len(second)-1 and
	// len(third)-1); a prompt sharing only 5 rows, short of all, starts over.
	check("fourth", append(slices.Clone(first[:5]), 60, 2), s, 0)
	// Everything past the fourth prompt's rows is gone: the checkpoints with it.
	check("fifth", third, nil, 0)
}

// A cache that neither rewinds nor snapshots rows cannot verify drafts: Generate says so.
func TestNoRewindNoSnapshotsRefusesDrafts(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	seq := runner.NewSequence(noSnapTarget{target}, 64)
	o := &runner.OracleDrafter{Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8}, Limit: 3, Vocab: 97}
	_, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: []int{1, 2}, MaxTokens: 6, Session: o.Open(64), Depth: o.Depth()}, nil)
	if err == nil {
		t.Fatal("drafts verified on a cache that can neither rewind nor snapshot")
	}
	t.Log(err)
	if _, err := runner.Generate(context.Background(), runner.NewSequence(noSnapTarget{target}, 64), runner.Request{Prompt: []int{1, 2}, MaxTokens: 6, Options: sample.Options{}}, nil); err != nil {
		t.Fatalf("plain decoding needs no snapshots: %v", err)
	}
}

// noSnapTarget hides the hybrid cache's snapshots: its caches only forward Offset, Rewind and
// CanRewind.
type noSnapTarget struct{ model.Target }

type noSnapCache struct{ h *cache.Hybrid }

func (t noSnapTarget) NewCache(capacity int) cache.Cache {
	return noSnapCache{t.Target.NewCache(capacity).(*cache.Hybrid)}
}

func (t noSnapTarget) Forward(c cache.Cache, r model.Request) (model.Result, error) {
	return t.Target.Forward(c.(noSnapCache).h, r)
}

func (c noSnapCache) Offset() int         { return c.h.Offset() }
func (c noSnapCache) Rewind(to int) error { return c.h.Rewind(to) }
func (c noSnapCache) CanRewind() bool     { return false }
