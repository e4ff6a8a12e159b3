package runner_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

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

// hybridDrafts are a random DFlash and a random DFlash2 draft of the tiny hybrid target.
func hybridDrafts(t *testing.T, target model.Target) (*dflash.Draft, *dflash2.Draft) {
	t.Helper()
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
	return d1, d2
}

// TestBatchedHybridEqualsAlone: on the Qwen3.5 hybrid, whose steps run as one ForwardBatch, a
// generation's greedy output is the same alone and batched with 1..7 others, plain and
// speculative with DFlash and DFlash2 drafts at an adaptive depth (capped by the width) and at
// fixed ones (every step then holds recorded verifies of several sequences, each restored to
// its own row), on every kernel path.
func TestBatchedHybridEqualsAlone(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		target := testmodel.TinyQwen35(t)
		if _, ok := any(target).(model.BatchTarget); !ok {
			t.Fatal("the hybrid target does not batch")
		}
		d1, d2 := hybridDrafts(t, target)
		reqs := batchReqs(target.Config().Vocab, sample.Options{}, false)
		for _, s := range []batchSetup{
			{target: target},
			{target: target, draft: runner.NewBlockDrafter(d1)},
			{target: target, draft: runner.WithDepth(runner.NewBlockDrafter(d1), runner.Fixed(5))},
			{target: target, draft: runner.NewSelectorDrafter(d2)},
			{target: target, draft: runner.WithDepth(runner.NewSelectorDrafter(d2), runner.Fixed(4))},
		} {
			checkBatchedEqualsAlone(t, s, reqs)
		}
	})
}

// TestBatchedHybridSeededSamplingEqualsAlone: a seeded sampled request on the hybrid reproduces
// its output batched, with a DFlash2 draft (its depth fixed by the seed, Depth.Seeded).
func TestBatchedHybridSeededSamplingEqualsAlone(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	_, d2 := hybridDrafts(t, target)
	opts := sample.Options{Temperature: 0.9, TopK: 20}
	checkBatchedEqualsAlone(t, batchSetup{target: target, draft: runner.NewSelectorDrafter(d2)}, batchReqs(target.Config().Vocab, opts, true)[:5])
}

// onBatcher runs reqs[i] on seqs[i] together on b, paused until all have joined (so the first
// step holds every one), and returns each output, Stats and error.
func onBatcher(t *testing.T, b *runner.Batcher, seqs []*runner.Sequence, reqs []runner.Request) ([][]int, []runner.Stats, []error) {
	t.Helper()
	outs := make([][]int, len(reqs))
	stats := make([]runner.Stats, len(reqs))
	errs := make([]error, len(reqs))
	b.Pause()
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			stats[i], errs[i] = b.Generate(context.Background(), seqs[i], reqs[i], func(tok runner.Token) error {
				outs[i] = append(outs[i], tok.ID)
				return nil
			})
		})
	}
	for b.Width() < len(reqs) {
		runtime.Gosched()
	}
	b.Resume()
	wg.Wait()
	return outs, stats, errs
}

// TestBatchedHybridCheckpointReuse: prefix reuse through state checkpoints across batched
// requests. Four hybrid sequences, each with its own drafting session, decode their prompts
// together; then a second batch gives each a prompt that shares a different number of rows with
// what it holds. Each must resume from its last checkpoint at or below the shared rows (or
// start over), prefill only the rest, and end with the output and the recurrent state of a
// fresh sequence decoding that prompt alone.
func TestBatchedHybridCheckpointReuse(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	vocab := target.Config().Vocab
	d1, d2 := hybridDrafts(t, target)
	b := runner.NewBatcher(target)
	b.EmitGrace = time.Hour
	policy := runner.CheckpointPolicy{Every: 4, Max: 16}
	const n = 4
	seqs := make([]*runner.Sequence, n)
	sessions := make([]runner.Session, n)
	first := make([]runner.Request, n)
	for i := range seqs {
		seqs[i] = runner.NewSequence(target, 128)
		seqs[i].SetCheckpoints(policy)
		if i%2 == 0 {
			sessions[i] = runner.NewBlockSession(d1, 128)
		} else {
			sessions[i] = runner.NewSelectorSession(d2, 128)
		}
		defer sessions[i].Close()
		prompt := make([]int, 13+3*i)
		for j := range prompt {
			prompt[j] = (j*5 + i*17 + 3) % vocab
		}
		first[i] = runner.Request{Prompt: prompt, MaxTokens: 8, Session: sessions[i], Depth: runner.Fixed(3)}
	}
	if _, _, errs := onBatcher(t, b, seqs, first); slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		t.Fatalf("first batch: %v", errs)
	}
	// The second prompts share 0, 6, 13 and 20 rows with what their sequences hold (the last
	// reaches past the first prompt into the generated tokens), then diverge.
	shared := []int{0, 6, 13, 20}
	second := make([]runner.Request, n)
	reuse := make([]int, n)
	for i, seq := range seqs {
		held := seq.Tokens()
		d := shared[i]
		prompt := append(slices.Clone(held[:d]), (held[d]+1)%vocab, (held[d]+7)%vocab)
		for _, c := range seq.Checkpoints() {
			if c <= d {
				reuse[i] = c
			}
		}
		second[i] = runner.Request{Prompt: prompt, MaxTokens: 10, Session: sessions[i], Depth: runner.Fixed(3)}
	}
	if reuse[2] == 0 || reuse[3] <= reuse[2] {
		t.Fatalf("checkpoints to reuse %v: the test would not test resuming", reuse)
	}
	outs, stats, errs := onBatcher(t, b, seqs, second)
	for i, r := range second {
		if errs[i] != nil {
			t.Fatalf("sequence %d: %v", i, errs[i])
		}
		if st := stats[i]; st.Reused != reuse[i] || st.PromptTokens != len(r.Prompt)-1-reuse[i] {
			t.Fatalf("sequence %d: reused %d and prefilled %d rows, want %d and %d", i, st.Reused, st.PromptTokens, reuse[i], len(r.Prompt)-1-reuse[i])
		}
		fresh := runner.NewSequence(target, 128)
		want, _ := gen(t, fresh, runner.Request{Prompt: r.Prompt, MaxTokens: r.MaxTokens})
		if !slices.Equal(outs[i], want) {
			t.Fatalf("sequence %d: got %v, a fresh sequence alone %v", i, outs[i], want)
		}
		h, f := seqs[i].Cache().(*cache.Hybrid), fresh.Cache().(*cache.Hybrid)
		for l := range h.State {
			if !slices.Equal(h.State[l], f.State[l]) || !slices.Equal(h.Conv[l], f.Conv[l]) {
				t.Fatalf("sequence %d: recurrent layer %d differs from a fresh sequence's", i, l)
			}
		}
	}
}
