package runner_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

// jitterClock is a fake clock whose every reading advances by a pseudo-random 0.1 to 5 ms drawn
// from run: each run's rounds seem to take different times, as a loaded machine's do, so an
// adaptive controller fed by it chooses a different depth schedule in every run.
func jitterClock(run uint64) func() time.Time {
	t := time.Unix(0, 0)
	r := splitmix.Stream{State: run}
	return func() time.Time {
		t = t.Add(time.Duration(100+r.Next()%4900) * time.Microsecond)
		return t
	}
}

// storiesWithDraft is stories260K and a random one-layer, block-8 DFlash draft for it: a real
// trained target whose sampled output is varied, and a draft that is sometimes right.
func storiesWithDraft(t *testing.T) (model.Target, model.BlockDraft) {
	t.Helper()
	target, err := transformer.LoadLlama2C(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 1, 8), 7, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	return target, draft
}

// TestSeededSpeculationReproduces: a seeded request at temperature 1, top-p 0.9 gives the same
// tokens five times over with a DFlash draft whose adaptive controller is shared by the runs
// (it learns from each) and fed different round times in each. Runs 0-2 start on fresh caches;
// runs 3 and 4 continue run 2's sequence and session, so they reuse the prompt's cached rows.
// The same runs unseeded (Seeded false, the same Seed) must differ in their depth schedules,
// which shows the clock really moves the controller: without a fixed schedule for seeded
// requests, the outputs would differ too.
//
// The fake pair runs without test data; stories260K, a real trained target with a random draft,
// is the case the issue asks for.
func TestSeededSpeculationReproduces(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		target := &fake.Target{Vocab: 24, Layers: 2, Scale: 2, Seed: 3}
		draft := &fake.Draft{Block: 8, Mask: 23, Layers: []int{0, 1}, Vocab: 24}
		seededReproduces(t, target, draft, []int{1, 5, 7, 2})
	})
	t.Run("stories260K", func(t *testing.T) {
		target, draft := storiesWithDraft(t)
		seededReproduces(t, target, draft, []int{1, 403, 407, 261, 378, 434, 267, 302, 270}) // BOS, a few story tokens
	})
}

func seededReproduces(t *testing.T, target model.Target, draft model.BlockDraft, prompt []int) {
	opts := sample.Options{Temperature: 1, TopP: 0.9, Seed: 20261202}
	const n = 120
	decode := func(seeded bool) (outs [][]int, depths [][]int, drafted int) {
		dr := runner.NewBlockDrafter(draft) // one controller for all five runs, as a server's
		var seq *runner.Sequence
		var session runner.Session
		for run := range 5 {
			if run <= 2 {
				if session != nil {
					if err := session.Close(); err != nil {
						t.Fatal(err)
					}
				}
				seq, session = runner.NewSequence(target, 512), dr.Open(512)
			}
			var out []int
			st, err := runner.Generate(context.Background(), seq, runner.Request{
				Prompt: prompt, Options: opts, MaxTokens: n, Session: session, Depth: dr.Depth(),
				Seeded: seeded, Clock: jitterClock(uint64(run)),
			}, func(tok runner.Token) error { out = append(out, tok.ID); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if run >= 3 && st.Reused == 0 {
				t.Fatalf("run %d reused no prompt rows: the continuation case is not tested", run)
			}
			outs, depths, drafted = append(outs, out), append(depths, st.Depths), drafted+st.Drafted
		}
		if err := session.Close(); err != nil {
			t.Fatal(err)
		}
		return outs, depths, drafted
	}

	outs, depths, drafted := decode(true)
	if drafted == 0 {
		t.Fatal("nothing was drafted: the test compared plain with plain")
	}
	for run, out := range outs {
		if len(out) != n {
			t.Fatalf("run %d emitted %d tokens, want %d", run, len(out), n)
		}
		if !slices.Equal(out, outs[0]) {
			t.Fatalf("seeded run %d differs from run 0:\n got %v\nwant %v", run, out, outs[0])
		}
	}
	for run := range depths {
		// Every round drafts SeededDepth, except a first round before any context (plain) and
		// the last ones, which what may still be emitted caps.
		for d, rounds := range depths[run] {
			if rounds > 0 && d > runner.SeededDepth {
				t.Fatalf("seeded run %d drafted %d in %d rounds, more than SeededDepth %d", run, d, rounds, runner.SeededDepth)
			}
		}
	}

	_, free, _ := decode(false)
	if slices.EqualFunc(free[1:], free[:len(free)-1], slices.Equal) {
		t.Fatalf("the adaptive controller chose the same depths in every run %v: the clock does not vary the schedule, so the seeded runs prove nothing", free)
	}
}

// TestSeededPlainReproduces: without a draft, a seeded request gives the same tokens every time,
// on a fresh sequence and on one that reuses the prompt's rows; another seed gives other tokens.
func TestSeededPlainReproduces(t *testing.T) {
	target, _ := storiesWithDraft(t)
	prompt := []int{1, 403, 407, 261, 378}
	decode := func(seq *runner.Sequence, seed uint64) []int {
		var out []int
		if _, err := runner.Generate(context.Background(), seq, runner.Request{
			Prompt: prompt, Options: sample.Options{Temperature: 1, TopP: 0.9, Seed: seed}, MaxTokens: 80, Seeded: true,
		}, func(tok runner.Token) error { out = append(out, tok.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	seq := runner.NewSequence(target, 512)
	want := decode(seq, 5)
	for run := range 4 {
		if run%2 == 0 {
			seq = runner.NewSequence(target, 512)
		}
		if got := decode(seq, 5); !slices.Equal(got, want) {
			t.Fatalf("seeded plain run %d differs:\n got %v\nwant %v", run+1, got, want)
		}
	}
	if other := decode(runner.NewSequence(target, 512), 6); slices.Equal(other, want) {
		t.Fatalf("seeds 5 and 6 gave the same 80 tokens %v", want)
	}
}
