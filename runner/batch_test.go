package runner_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// batchReq is one generation of a batch test: its prompt, budget and sampler, and how many
// tokens it emits before it waits for its batch mates (gate), so that steps are as wide as the
// test says.
type batchReq struct {
	prompt []int
	n      int
	opts   sample.Options
	seeded bool
}

// batchSetup is a target with what each generation drafts with (nil: plain).
type batchSetup struct {
	target model.Target
	draft  runner.Drafter
}

func (s batchSetup) request(r batchReq, session runner.Session) runner.Request {
	req := runner.Request{Prompt: r.prompt, MaxTokens: r.n, Options: r.opts, Seeded: r.seeded, Session: session}
	if session != nil {
		req.Depth = s.draft.Depth()
	}
	return req
}

// alone is what r gives decoded on its own, without a Batcher.
func (s batchSetup) alone(t *testing.T, r batchReq) []int {
	t.Helper()
	var session runner.Session
	if s.draft != nil {
		session = s.draft.Open(256)
		defer session.Close()
	}
	var out []int
	if _, err := runner.Generate(context.Background(), runner.NewSequence(s.target, 256), s.request(r, session),
		func(tok runner.Token) error { out = append(out, tok.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// batched runs reqs together on one Batcher, each on its own sequence. The Batcher is paused
// until every generation has joined, and EmitGrace is long (no step runs without a generation
// that is still emitting), so the first steps hold all of them. cancelAt[i] > 0 cancels
// generation i after that many tokens. It returns each output and error, and the widest step.
func (s batchSetup) batched(t *testing.T, reqs []batchReq, cancelAt []int) ([][]int, []error, int) {
	t.Helper()
	b := runner.NewBatcher(s.target)
	b.EmitGrace = time.Hour
	var mu sync.Mutex
	widest := 0
	b.OnStep = func(w int) {
		mu.Lock()
		widest = max(widest, w)
		mu.Unlock()
	}
	b.Pause()
	outs := make([][]int, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var session runner.Session
			if s.draft != nil {
				session = s.draft.Open(256)
				defer session.Close()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, errs[i] = b.Generate(ctx, runner.NewSequence(s.target, 256), s.request(r, session), func(tok runner.Token) error {
				outs[i] = append(outs[i], tok.ID)
				if cancelAt != nil && cancelAt[i] == len(outs[i]) {
					cancel()
				}
				return nil
			})
		}()
	}
	for b.Width() < len(reqs) {
		runtime.Gosched()
	}
	b.Resume()
	wg.Wait()
	if w := b.Width(); w != 0 {
		t.Fatalf("%d generations still on the batcher after all returned", w)
	}
	mu.Lock()
	defer mu.Unlock()
	return outs, errs, widest
}

func tinyBatchQwen3(t *testing.T) *transformer.Model {
	t.Helper()
	// Heads of 16 take the head-major attention path, the real models' 128 the row-major one;
	// 32 the fused path. 16 is the cheapest that is not llama2.c's special case of 8.
	cfg := model.Config{Arch: transformer.ArchQwen3, Layers: 3, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
		HeadDim: 16, Vocab: 97, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1}
	m, err := transformer.Synthetic(cfg, 18)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// batchReqs are eight generations of different prompt lengths (one longer than a prefill chunk
// of a batched generation) and budgets, so that generations join while others decode and leave
// while others go on.
func batchReqs(vocab int, opts sample.Options, seeded bool) []batchReq {
	var reqs []batchReq
	for i := range 8 {
		prompt := make([]int, 1+(i*13)%40)
		for j := range prompt {
			prompt[j] = (j*7 + i*11 + 1) % vocab
		}
		o := opts
		o.Seed = uint64(100 + i)
		reqs = append(reqs, batchReq{prompt: prompt, n: 6 + (i*5)%17, opts: o, seeded: seeded})
	}
	return reqs
}

// TestBatchedGreedyEqualsAlone: the greedy output of a generation is the same alone and batched
// with 1..7 others, plain and speculative (a random DFlash draft, mostly rejected, at an adaptive
// depth, which the batch's width caps, and at a fixed one), on every kernel path. The widest step must hold
// every generation, or the test would not be testing batches.
func TestBatchedGreedyEqualsAlone(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		target := tinyBatchQwen3(t)
		d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 4, kernel.F32)
		if err != nil {
			t.Fatal(err)
		}
		// A fixed depth puts verify rows of every sequence in each step; the adaptive one is
		// capped by the width (BatchDepth).
		for _, s := range []batchSetup{{target: target}, {target: target, draft: runner.NewBlockDrafter(d)},
			{target: target, draft: runner.WithDepth(runner.NewBlockDrafter(d), runner.Fixed(5))}} {
			checkBatchedEqualsAlone(t, s, batchReqs(target.Config().Vocab, sample.Options{}, false))
		}
	})
}

// TestBatchedSeededSamplingEqualsAlone: a seeded sampled request reproduces its output batched,
// with a draft too: its depth stays fixed whatever the width (Depth.Seeded), and each position's
// draws are keyed by seed and position, never by the batch.
func TestBatchedSeededSamplingEqualsAlone(t *testing.T) {
	target := tinyBatchQwen3(t)
	d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 5, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	opts := sample.Options{Temperature: 0.9, TopK: 20}
	checkBatchedEqualsAlone(t, batchSetup{target: target, draft: runner.NewBlockDrafter(d)}, batchReqs(target.Config().Vocab, opts, true))
}

// TestBatchedStories260K: the same identity on the llama2.c checkpoint, plain and with an oracle
// draft (the target's own greedy continuation with noise: long accepted runs and rejections).
func TestBatchedStories260K(t *testing.T) {
	target, err := transformer.LoadLlama2C(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		reqs := batchReqs(target.Config().Vocab, sample.Options{}, false)
		checkBatchedEqualsAlone(t, batchSetup{target: target}, reqs)
		// An oracle proposes one known sequence: every request here shares its prompt, which
		// the batch still decodes as separate sequences.
		prompt := []int{1, 403, 407, 261, 378}
		plain := batchSetup{target: target}
		full := append(slices.Clone(prompt), plain.alone(t, batchReq{prompt: prompt, n: 40})...)
		o := &runner.OracleDrafter{Tokens: full, Limit: 7, Noise: 0.2, Vocab: target.Config().Vocab, Seed: 3}
		reqs = nil
		for i := range 5 {
			reqs = append(reqs, batchReq{prompt: prompt, n: 10 + 7*i})
		}
		checkBatchedEqualsAlone(t, batchSetup{target: target, draft: o}, reqs)
	})
}

// TestBatchedJoinMidStream: generations that join while others decode (their prompts prefilled
// in chunks between the others' steps) and leave while others go on change no one's output.
// Four start together; the first, at its third token, starts four more and waits in its emit
// until they have joined, so the next step holds all eight: four decoding, four prefilling. On
// the dense and the hybrid target (batchTargets).
func TestBatchedJoinMidStream(t *testing.T) {
	for _, target := range batchTargets(t) {
		testJoinMidStream(t, target)
	}
}

// batchTargets are the targets the Batcher's tests run on: the dense Qwen3 shape and the
// Qwen3.5 hybrid, whose batched forward also carries each sequence's recurrent state and row
// snapshots.
func batchTargets(t *testing.T) []model.Target {
	return []model.Target{tinyBatchQwen3(t), testmodel.TinyQwen35(t)}
}

func testJoinMidStream(t *testing.T, target model.Target) {
	t.Helper()
	d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 7, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []batchSetup{{target: target}, {target: target, draft: runner.WithDepth(runner.NewBlockDrafter(d), runner.Fixed(3))}} {
		reqs := batchReqs(target.Config().Vocab, sample.Options{}, false)
		reqs[0].n = 12
		want := make([][]int, len(reqs))
		for i, r := range reqs {
			want[i] = s.alone(t, r)
		}
		b := runner.NewBatcher(target)
		b.EmitGrace = time.Hour
		var mu sync.Mutex
		widest := 0
		b.OnStep = func(w int) {
			mu.Lock()
			widest = max(widest, w)
			mu.Unlock()
		}
		outs := make([][]int, len(reqs))
		errs := make([]error, len(reqs))
		var wg sync.WaitGroup
		var start func(i int)
		start = func(i int) {
			wg.Go(func() {
				var session runner.Session
				if s.draft != nil {
					session = s.draft.Open(256)
					defer session.Close()
				}
				_, errs[i] = b.Generate(context.Background(), runner.NewSequence(target, 256), s.request(reqs[i], session), func(tok runner.Token) error {
					outs[i] = append(outs[i], tok.ID)
					if i == 0 && len(outs[i]) == 3 {
						for j := 4; j < len(reqs); j++ {
							start(j)
						}
						for b.Width() < len(reqs) {
							runtime.Gosched()
						}
					}
					return nil
				})
			})
		}
		b.Pause()
		for i := range 4 {
			start(i)
		}
		for b.Width() < 4 {
			runtime.Gosched()
		}
		b.Resume()
		wg.Wait()
		for i := range reqs {
			if errs[i] != nil || !slices.Equal(outs[i], want[i]) {
				t.Errorf("%T, draft %v, generation %d: err %v\n got %v\nwant %v", target, s.draft != nil, i, errs[i], outs[i], want[i])
			}
		}
		if widest != len(reqs) {
			t.Errorf("%T, draft %v: the widest step ran %d sequences, want %d", target, s.draft != nil, widest, len(reqs))
		}
	}
}

func checkBatchedEqualsAlone(t *testing.T, s batchSetup, reqs []batchReq) {
	t.Helper()
	want := make([][]int, len(reqs))
	for i, r := range reqs {
		want[i] = s.alone(t, r)
	}
	for w := 2; w <= len(reqs); w++ {
		got, errs, widest := s.batched(t, reqs[:w], nil)
		for i := range got {
			if errs[i] != nil {
				t.Fatalf("width %d, generation %d: %v", w, i, errs[i])
			}
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("draft %v, width %d, generation %d:\n got %v\nwant %v", s.draft != nil, w, i, got[i], want[i])
			}
		}
		if widest != w {
			t.Fatalf("width %d: the widest step ran %d sequences", w, widest)
		}
	}
}

// TestBatchedCancelLeavesOthers: cancelling one batched generation mid-stream ends it with the
// context's error and a prefix of its alone output, and changes nothing in the others' outputs,
// on the dense and the hybrid target.
func TestBatchedCancelLeavesOthers(t *testing.T) {
	for _, target := range batchTargets(t) {
		d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 6, kernel.F32)
		if err != nil {
			t.Fatal(err)
		}
		testCancelLeavesOthers(t, target, d)
	}
}

func testCancelLeavesOthers(t *testing.T, target model.Target, d *dflash.Draft) {
	t.Helper()
	for _, s := range []batchSetup{{target: target}, {target: target, draft: runner.NewBlockDrafter(d)}} {
		reqs := batchReqs(target.Config().Vocab, sample.Options{}, false)[:5]
		for i := range reqs {
			reqs[i].n = 20
		}
		want := make([][]int, len(reqs))
		for i, r := range reqs {
			want[i] = s.alone(t, r)
		}
		cancelAt := []int{0, 4, 0, 0, 9}
		got, errs, _ := s.batched(t, reqs, cancelAt)
		for i := range reqs {
			if cancelAt[i] == 0 {
				if errs[i] != nil || !slices.Equal(got[i], want[i]) {
					t.Errorf("%T, draft %v: generation %d (not cancelled): err %v\n got %v\nwant %v", target, s.draft != nil, i, errs[i], got[i], want[i])
				}
				continue
			}
			// Cancellation is seen at the next round, which may emit a few more accepted tokens.
			if !errors.Is(errs[i], context.Canceled) || len(got[i]) < cancelAt[i] || !slices.Equal(got[i], want[i][:len(got[i])]) {
				t.Errorf("%T, draft %v: cancelled generation %d: err %v, got %v, want a prefix of %v of at least %d", target, s.draft != nil, i, errs[i], got[i], want[i], cancelAt[i])
			}
		}
	}
}

// TestBatcherRefusesSharedSequence: two running generations on one sequence would corrupt its
// cache; the second is refused.
func TestBatcherRefusesSharedSequence(t *testing.T) {
	target := tinyBatchQwen3(t)
	b := runner.NewBatcher(target)
	seq := runner.NewSequence(target, 64)
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := b.Generate(context.Background(), seq, runner.Request{Prompt: []int{1, 2}, MaxTokens: 3}, func(runner.Token) error {
			select {
			case <-started:
			default:
				close(started)
				<-release
			}
			return nil
		})
		done <- err
	}()
	<-started
	_, err := b.Generate(context.Background(), seq, runner.Request{Prompt: []int{1}, MaxTokens: 1}, nil)
	close(release)
	if err == nil || !errors.Is(<-done, nil) {
		t.Fatalf("second generation on a running sequence: err %v, want a refusal", err)
	}
	other := runner.NewSequence(tinyBatchQwen3(t), 8)
	if _, err := b.Generate(context.Background(), other, runner.Request{Prompt: []int{1}, MaxTokens: 1}, nil); err == nil {
		t.Fatal("a sequence of another target was accepted")
	}
}

// BenchmarkBatchedDecode is the aggregate decode rate of streams generations decoded together on
// one Batcher (greedy, plain, 64 tokens each after a short prompt), against one stream alone:
// on a CPU a decode step reads every weight once whatever its rows, so streams share the reads.
// stories260K is small enough to be bound by per-row work instead; the synthetic Qwen3-0.6B
// shape (random bf16 weights, built in memory) is bandwidth-bound like real models. The
// synthetic Qwen3.5-0.8B hybrid (32 tokens a stream) runs each width twice, alternated: batched
// (one ForwardBatch a step) and in turns (the same Batcher over a target that hides
// ForwardBatch, one forward per sequence a step, as hybrids ran before they batched).
//
// The "/oracle" rows give every stream an oracle drafter proposing its own greedy continuation
// (computed alone first), so each round accepts all it drafts: the ceiling of speculation under
// batching, where the Batcher caps a round's drafts as the batch widens (BatchDepth).
//
//	go test ./runner -run '^$' -bench BatchedDecode -benchtime 3x
//	go test ./runner -run '^$' -bench 'BatchedDecode/qwen3.5' -benchtime 1x   # builds 1.7 GB
func BenchmarkBatchedDecode(b *testing.B) {
	targets := []struct {
		name    string
		tokens  int
		streams []int
		turns   bool // also run each width in turns, unbatched
		load    func(b *testing.B) model.Target
	}{
		{"stories260K", 64, []int{1, 2, 4, 8}, false, func(b *testing.B) model.Target {
			m, err := transformer.LoadLlama2C(shareddata.Path(b, "stories260K/stories260K.bin"))
			if err != nil {
				b.Fatal(err)
			}
			return m
		}},
		{"qwen3-0.6b", 64, []int{1, 2, 4, 8}, false, func(b *testing.B) model.Target {
			if testing.Short() {
				b.Skip("builds a 1.2 GB model")
			}
			cfg, err := transformer.SyntheticConfig("qwen3-0.6b")
			if err != nil {
				b.Fatal(err)
			}
			m, err := transformer.Synthetic(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}},
		{"qwen3.5-0.8b", 32, []int{1, 2, 4}, true, func(b *testing.B) model.Target {
			if testing.Short() {
				b.Skip("builds a 1.7 GB model")
			}
			cfg, err := qwen35.SyntheticConfig("qwen3.5-0.8b")
			if err != nil {
				b.Fatal(err)
			}
			m, err := qwen35.Synthetic(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}},
	}
	for _, tg := range targets {
		var target model.Target
		for _, streams := range tg.streams {
			modes := []string{"", "/oracle"}
			if tg.turns {
				modes = []string{"/batched", "/turns"}
			}
			for _, mode := range modes {
				b.Run(fmt.Sprintf("%s/streams=%d%s", tg.name, streams, mode), func(b *testing.B) {
					if target == nil {
						target = tg.load(b)
					}
					t := target
					if mode == "/turns" {
						t = unbatched{target}
					}
					benchStreams(b, t, streams, tg.tokens, mode == "/oracle")
				})
			}
		}
	}
}

// unbatched is a target without ForwardBatch: a Batcher runs its steps one forward per sequence.
type unbatched struct{ model.Target }

// benchStreams decodes tokens tokens on each of streams sequences together on one Batcher, all
// joined before the first step, and reports the aggregate rate and the mean step width.
func benchStreams(b *testing.B, target model.Target, streams, tokens int, oracle bool) {
	bt := runner.NewBatcher(target)
	seqs := make([]*runner.Sequence, streams)
	oracles := make([]*runner.OracleDrafter, streams)
	for i := range seqs {
		seqs[i] = runner.NewSequence(target, 256)
		if oracle {
			// A prompt that differs per stream, so no rows are reused.
			prompt := []int{1, 10 + i, 20 + i}
			var ids []int
			if _, err := runner.Generate(context.Background(), runner.NewSequence(target, 256), runner.Request{Prompt: prompt, MaxTokens: tokens},
				func(t runner.Token) error { ids = append(ids, t.ID); return nil }); err != nil {
				b.Fatal(err)
			}
			oracles[i] = &runner.OracleDrafter{Tokens: append(prompt, ids...), Limit: 15}
		}
	}
	var steps, width atomic.Int64
	bt.OnStep = func(w int) { steps.Add(1); width.Add(int64(w)) }
	total := 0
	for b.Loop() {
		// Every stream joins before the first step, as if they had all been running.
		bt.Pause()
		var wg sync.WaitGroup
		for i := range seqs {
			wg.Go(func() {
				// A prompt that differs per stream, so no rows are reused.
				req := runner.Request{Prompt: []int{1, 10 + i, 20 + i}, MaxTokens: tokens}
				if o := oracles[i]; o != nil {
					req.Session, req.Depth = o.Open(256), o.Depth()
				}
				if _, err := bt.Generate(context.Background(), seqs[i], req, nil); err != nil {
					b.Error(err)
				}
			})
		}
		for bt.Width() < streams {
			runtime.Gosched()
		}
		bt.Resume()
		wg.Wait()
		total += streams * tokens
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(width.Load())/float64(max(steps.Load(), 1)), "width")
}
