package runner_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
)

// A long prompt on a hybrid sequence leaves a checkpoint every Every rows and one at its end. A
// second prompt that diverges from the rows held at any point d resumes from the longest
// checkpoint at or below d: at each boundary, between two, and past the prompt's end. The
// resumed request must then be indistinguishable from one on a fresh sequence: the same output
// (plain greedy's), the same recurrent state bitwise, and, for the DFlash and DFlash2 drafts
// restored by rewinding their context caches to the same rows, the same proposals every round.
func TestHybridResumesAtEveryCheckpoint(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	vocab := target.Config().Vocab
	d1, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 6), 4, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := dflash2.ConfigFor(target.Config(), 2, 6)
	cfg2.SelectorRank, cfg2.SelectorTopK = 8, 6
	dir := t.TempDir()
	if err := dflash2.WriteRandom(dir, target.Config(), cfg2, 5, kernel.F32); err != nil {
		t.Fatal(err)
	}
	d2, err := dflash2.Load(dir, target, dflash2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	drafts := map[string]func() runner.Session{
		"dflash":  func() runner.Session { return runner.NewBlockSession(d1, 128) },
		"dflash2": func() runner.Session { return runner.NewSelectorSession(d2, 128) },
	}
	const every = 4
	policy := runner.CheckpointPolicy{Every: every, Max: 16}
	rng := rand.New(rand.NewPCG(16, 4))
	base := make([]int, 23)
	for i := range base {
		base[i] = rng.IntN(vocab)
	}
	// run decodes prompt on seq with session s (plainly when nil), recording the proposals.
	run := func(seq *runner.Sequence, s runner.Session, prompt []int) ([]int, runner.Stats, [][]int) {
		t.Helper()
		var proposed [][]int
		req := runner.Request{Prompt: prompt, MaxTokens: 8, Trace: func(r runner.Round) { proposed = append(proposed, slices.Clone(r.Proposed)) }}
		if s != nil {
			req.Session, req.Depth = s, runner.Fixed(3)
		}
		out, st := gen(t, seq, req)
		return out, st, proposed
	}
	for name, open := range drafts {
		for d := 0; d <= len(base)+1; d++ {
			seq := runner.NewSequence(target, 128)
			seq.SetCheckpoints(policy)
			s := open()
			run(seq, s, base)
			// Boundaries 4, 8, ..., 20 and the prompt's end at 22 (its last token is decoded).
			if want := []int{4, 8, 12, 16, 20, 22}; !slices.Equal(seq.Checkpoints(), want) {
				t.Fatalf("checkpoints %v after a %d-token prompt, want %v", seq.Checkpoints(), len(base), want)
			}
			held := seq.Tokens()
			// The second prompt shares exactly d rows with the ones held, then two others.
			prompt := append(slices.Clone(held[:d]), (held[d]+1)%vocab, (held[d]+7)%vocab)
			reuse := 0
			for _, c := range seq.Checkpoints() {
				if c <= d {
					reuse = c
				}
			}
			got, st, gotProp := run(seq, s, prompt)
			if st.Reused != reuse || st.PromptTokens != len(prompt)-1-reuse {
				t.Fatalf("%s d=%d: reused %d and prefilled %d rows, want %d and %d", name, d, st.Reused, st.PromptTokens, reuse, len(prompt)-1-reuse)
			}
			fresh := runner.NewSequence(target, 128)
			fs := open()
			want, _, wantProp := run(fresh, fs, prompt)
			plain, _, _ := run(runner.NewSequence(target, 128), nil, prompt)
			if !slices.Equal(got, want) || !slices.Equal(got, plain) {
				t.Fatalf("%s d=%d: resumed %v, fresh %v, plain %v", name, d, got, want, plain)
			}
			if !slices.ContainsFunc(gotProp, func(p []int) bool { return len(p) > 0 }) {
				t.Fatalf("%s d=%d: nothing drafted", name, d)
			}
			if !slices.EqualFunc(gotProp, wantProp, slices.Equal[[]int]) {
				t.Fatalf("%s d=%d: the restored draft proposed %v, a fresh one %v", name, d, gotProp, wantProp)
			}
			h, f := seq.Cache().(*cache.Hybrid), fresh.Cache().(*cache.Hybrid)
			for l := range h.State {
				if !slices.Equal(h.State[l], f.State[l]) || !slices.Equal(h.Conv[l], f.Conv[l]) {
					t.Fatalf("%s d=%d: recurrent layer %d differs from a fresh sequence's", name, d, l)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := fs.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The checkpoint budget: with Every 2 and Max 4, a prompt of 15 tokens saves at 2, 4, ..., 14
// and evicts, at each save past four, the older checkpoint whose removal leaves the smallest
// gap (ties to the later one), never the newest:
//
//	[2 4 6 8] +10: gaps 4 4 4 -> drop 6 -> [2 4 8 10]
//	+12: gaps 4 6 6 -> drop 2 -> [4 8 10 12]
//	+14: gaps 8 6 4 -> drop 10 -> [4 8 12 14]
//
// The memory held is four states, and lowering Max evicts the same way.
func TestHybridCheckpointBudget(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	seq := runner.NewSequence(target, 64)
	seq.SetCheckpoints(runner.CheckpointPolicy{Every: 2, Max: 4})
	prompt := make([]int, 15)
	for i := range prompt {
		prompt[i] = (5*i + 3) % target.Config().Vocab
	}
	gen(t, seq, runner.Request{Prompt: prompt, MaxTokens: 2})
	if want := []int{4, 8, 12, 14}; !slices.Equal(seq.Checkpoints(), want) {
		t.Fatalf("checkpoints %v, want %v", seq.Checkpoints(), want)
	}
	state := seq.Cache().(*cache.Hybrid).StateBytes()
	if got := seq.CheckpointBytes(); got != 4*state {
		t.Fatalf("checkpoints hold %d bytes, want 4 states of %d", got, state)
	}
	// Max 2: [4 8 12 14] gaps 8 8 6 -> drop 12 -> [4 8 14]: gaps 8 10 -> drop 4 -> [8 14].
	seq.SetCheckpoints(runner.CheckpointPolicy{Every: 2, Max: 2})
	if want := []int{8, 14}; !slices.Equal(seq.Checkpoints(), want) {
		t.Fatalf("checkpoints %v after Max 2, want %v", seq.Checkpoints(), want)
	}
	// Max 0 keeps none, and a diverging prompt then starts over.
	seq.SetCheckpoints(runner.CheckpointPolicy{})
	_, st := gen(t, seq, runner.Request{Prompt: append(slices.Clone(prompt[:10]), 1, 2), MaxTokens: 2})
	if len(seq.Checkpoints()) != 0 || st.Reused != 0 {
		t.Fatalf("no-checkpoint policy: checkpoints %v, reused %d", seq.Checkpoints(), st.Reused)
	}
}

// The snapshot slots of a hybrid sequence are allocated once, when its first drafting round
// enables them, and reused by every later round and request: the slots stay the same memory
// (Limit() states), and a request of many more rounds allocates hardly more than a short one
// (a per-round allocation of slots would add one per layer and slot every round).
func TestHybridSnapshotsAllocatedOnce(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	d, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 8), 4, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	seq := runner.NewSequence(target, 256)
	s := runner.NewBlockSession(d, 256)
	defer s.Close()
	prompt := []int{5, 17, 3, 3, 42, 8}
	req := func(n int) runner.Request {
		return runner.Request{Prompt: prompt, MaxTokens: n, Session: s, Depth: runner.Fixed(7)}
	}
	gen(t, seq, req(10))
	h := seq.Cache().(*cache.Hybrid)
	slot, _ := h.Snapshot(0, 0)
	first, bytes := &slot[0], h.SnapshotBytes()
	if want := int64(s.Limit()) * h.StateBytes(); bytes != want {
		t.Fatalf("snapshot slots hold %d bytes, want %d (one state per draft of a full block)", bytes, want)
	}
	var rounds [2]int
	var allocs [2]float64
	for i, n := range []int{8, 48} {
		allocs[i] = testing.AllocsPerRun(5, func() {
			// The same prompt each time: it resumes from its own checkpoint, so every run does
			// the same work.
			st, err := runner.Generate(context.Background(), seq, req(n), nil)
			if err != nil {
				t.Fatal(err)
			}
			rounds[i] = st.Rounds
		})
	}
	if slot, _ := h.Snapshot(0, 0); &slot[0] != first || h.SnapshotBytes() != bytes {
		t.Fatalf("snapshot slots were reallocated (%d bytes, first %d)", h.SnapshotBytes(), bytes)
	}
	extra := rounds[1] - rounds[0]
	t.Logf("%v allocations for %d rounds, %v for %d", allocs[0], rounds[0], allocs[1], rounds[1])
	if extra < 20 {
		t.Fatalf("only %d more rounds: the comparison shows nothing", extra)
	}
	if grown := allocs[1] - allocs[0]; grown >= float64(extra)/2 {
		t.Errorf("%v more allocations for %d more rounds: something is allocated per round", grown, extra)
	}
}

// Prefill forwards on a hybrid sequence record no row snapshots (every row of them is kept, so
// the copies would be wasted), also when a chunk is short enough to be recorded, while verify
// rounds still do; the output stays plain greedy's.
func TestHybridPrefillRecordsNothing(t *testing.T) {
	inner := testmodel.TinyQwen35(t)
	target := &recordSpy{Target: inner}
	d, err := dflash.Random(inner, dflash.ConfigFor(inner.Config(), 2, 8), 4, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	seq := runner.NewSequence(target, 256)
	seq.SetCheckpoints(runner.CheckpointPolicy{Every: 4, Max: 4})
	s := runner.NewBlockSession(d, 256)
	defer s.Close()
	first := []int{5, 17, 3, 3, 42, 8, 9, 1, 4}
	out, _ := gen(t, seq, runner.Request{Prompt: first, MaxTokens: 10, Session: s, Depth: runner.Fixed(7)})
	// The second prompt extends the rows held by a few tokens: short prefill chunks, cut at the
	// checkpoint boundaries, on a cache whose snapshots are on.
	second := append(append(slices.Clone(first), out...), 7, 7, 2, 60, 11)
	got, _ := gen(t, seq, runner.Request{Prompt: second, MaxTokens: 10, Session: s, Depth: runner.Fixed(7)})
	want, _ := gen(t, runner.NewSequence(inner, 256), runner.Request{Prompt: second, MaxTokens: 10})
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, plain %v", got, want)
	}
	if target.prefillRecorded != 0 || target.shortPrefill == 0 || target.verifyRecorded == 0 {
		t.Fatalf("%d prefill forwards recorded (%d short enough to), %d verify forwards did", target.prefillRecorded, target.shortPrefill, target.verifyRecorded)
	}
}

// recordSpy counts, per kind of forward, whether the hybrid cache recorded it.
type recordSpy struct {
	model.Target
	prefillRecorded, shortPrefill, verifyRecorded int
}

func (r *recordSpy) Forward(c cache.Cache, req model.Request) (model.Result, error) {
	h := c.(*cache.Hybrid)
	n := len(req.Tokens)
	switch {
	case req.Logits == model.LogitsNone:
		if n > 1 && n <= h.SnapshotRows() {
			r.shortPrefill++
		}
		if h.Records(n) {
			r.prefillRecorded++
		}
	case req.Logits == model.LogitsAll && h.Records(n):
		r.verifyRecorded++
	}
	return r.Target.Forward(c, req)
}

// A chat turn's prompt is the history and a generation prompt; the next turn's template may
// render the reply without how the generation prompt began it, so the next prompt diverges
// right after the history, before this prompt's end, where its end checkpoint lies.
// Request.Checkpoint asks for one where the history ends: with it the next turn reuses the
// history, without it (and no boundary checkpoints, Every 0) it starts over. Both decode what a
// fresh sequence does.
func TestHybridCheckpointAtHistoryEnd(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	history := []int{5, 17, 3, 3, 42, 8, 9, 1, 4, 30, 31}
	genPrompt := []int{60, 61, 62} // "assistant\n<think>\n", say
	first := append(slices.Clone(history), genPrompt...)
	next := append(slices.Clone(history), 60, 70, 71, 72) // the reply rendered without <think>
	for _, at := range []int{0, len(history)} {
		seq := runner.NewSequence(target, 128)
		seq.SetCheckpoints(runner.CheckpointPolicy{Max: 4})
		gen(t, seq, runner.Request{Prompt: first, MaxTokens: 6, Checkpoint: at})
		want := []int{len(first) - 1}
		if at > 0 {
			want = []int{at, len(first) - 1}
		}
		if !slices.Equal(seq.Checkpoints(), want) {
			t.Fatalf("Checkpoint %d: checkpoints %v, want %v", at, seq.Checkpoints(), want)
		}
		got, st := gen(t, seq, runner.Request{Prompt: next, MaxTokens: 6})
		if st.Reused != at {
			t.Errorf("Checkpoint %d: the next turn reused %d rows, want %d", at, st.Reused, at)
		}
		fresh, _ := gen(t, runner.NewSequence(target, 128), runner.Request{Prompt: next, MaxTokens: 6})
		if !slices.Equal(got, fresh) {
			t.Fatalf("Checkpoint %d: got %v, a fresh sequence %v", at, got, fresh)
		}
	}
}
