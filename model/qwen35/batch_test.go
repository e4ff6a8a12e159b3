package qwen35

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

var _ model.BatchTarget = (*Model)(nil)

// batchShape is one sequence of a batched forward: prefix rows already in its cache (forwarded
// alone), then the rows the batch runs on it with the logits it asks for. snap > 0 enables that
// many snapshot rows before the prefix; restore >= 0 then restores that row after the forward
// (a verify round keeping restore+1 rows).
type batchShape struct {
	prefix, rows  int
	logits        model.LogitRows
	snap, restore int
}

// batchShapes mix what a batched step of hybrid sequences holds: plain decode rows, recorded
// verifications restored at their first, a middle and their last row, a new sequence's prefill
// that spans a chunk of the forward (nn.ChunkRows), a sequence with nothing cached yet, and a
// recorded verify whose rows fall on both sides of a chunk boundary of the stacked rows (rows
// 50..65 of the whole batch).
var batchShapes = []batchShape{
	{prefix: 9, rows: 1, logits: model.LogitsLast, restore: -1},
	{prefix: 3, rows: 5, logits: model.LogitsAll, snap: 8, restore: 2},
	{prefix: 0, rows: 40, logits: model.LogitsNone, restore: -1},
	{prefix: 17, rows: 3, logits: model.LogitsLast, restore: -1},
	{prefix: 1, rows: 1, logits: model.LogitsAll, restore: -1},
	{prefix: 30, rows: 16, logits: model.LogitsAll, snap: 16, restore: 9},
	{prefix: 5, rows: 8, logits: model.LogitsAll, snap: 8, restore: 7},
	{prefix: 2, rows: 4, logits: model.LogitsAll, snap: 8, restore: 0},
}

// batchOutputs is what a forward gave one sequence: logits, taps, the logits of one more decode
// step after the restore (if any), and its cache's state.
type batchOutputs struct {
	logits, taps, next []float32
	cache              *cache.Hybrid
}

// shapeTokens is sequence i's tokens: its prefix, its batch rows, then the next decode token.
func shapeTokens(i int, s batchShape, vocab int) []int {
	return randTokens(rand.New(rand.NewPCG(uint64(i), 77)), s.prefix+s.rows+1, vocab)
}

// runBatch builds a cache per shape (its prefix forwarded alone), runs the shapes' rows either
// in one ForwardBatch or one Forward each, restores the rows asked, decodes one more token on
// each sequence alone, and returns what each sequence got.
func runBatch(t *testing.T, m *Model, shapes []batchShape, batched bool) []batchOutputs {
	t.Helper()
	cfg := m.Config()
	taps := []int{0, 1, cfg.Layers - 1}
	items := make([]model.BatchItem, len(shapes))
	for i, s := range shapes {
		c := m.NewCache(96).(*cache.Hybrid)
		c.EnableSnapshots(s.snap)
		toks := shapeTokens(i, s, cfg.Vocab)
		if s.prefix > 0 {
			step(t, m, c, toks[:s.prefix])
		}
		items[i] = model.BatchItem{Cache: c, Request: model.Request{Tokens: toks[s.prefix : s.prefix+s.rows], Logits: s.logits, Taps: taps}}
	}
	out := make([]batchOutputs, len(shapes))
	keep := func(i int, r model.Result) {
		o := &out[i]
		o.logits = slices.Clone(r.Logits)
		for _, tp := range r.Taps {
			o.taps = append(o.taps, tp...)
		}
	}
	if batched {
		res, err := m.ForwardBatch(items)
		if err != nil {
			t.Fatal(err)
		}
		for i := range res {
			keep(i, res[i])
		}
	} else {
		for i, it := range items {
			r, err := m.Forward(it.Cache, it.Request)
			if err != nil {
				t.Fatal(err)
			}
			keep(i, r)
		}
	}
	for i, s := range shapes {
		c := items[i].Cache.(*cache.Hybrid)
		if s.restore >= 0 {
			if err := c.RestoreRow(s.restore); err != nil {
				t.Fatalf("sequence %d: %v", i, err)
			}
		}
		out[i].cache = c
		out[i].next = step(t, m, c, shapeTokens(i, s, cfg.Vocab)[s.prefix+s.rows:])
	}
	return out
}

// checkSame fails unless sequence i's outputs are bitwise equal in want and got.
func checkSame(t *testing.T, what string, i int, want, got batchOutputs) {
	t.Helper()
	if !slices.Equal(want.logits, got.logits) || !slices.Equal(want.taps, got.taps) {
		t.Fatalf("%s: sequence %d (%+v): logits or taps differ batched from alone", what, i, batchShapes[i])
	}
	if !slices.Equal(want.next, got.next) {
		t.Fatalf("%s: sequence %d (%+v): the next step's logits differ batched from alone", what, i, batchShapes[i])
	}
	sameState(t, batchShapes[i].restore, want.cache, got.cache)
}

// TestForwardBatchBitwise: every sequence of a batched forward gets the bits, logits, taps,
// conv windows, recurrent states, key/value rows and row snapshots alike, that a forward of it
// alone gives, whatever the batch around it (every width 1..8 of batchShapes), on every kernel
// path and key/value layout: heads of 16 (head-major keys), 32 (the fused path), 72 (row-major,
// as the real 256-wide heads). Forcing three row parts makes parts that straddle sequences
// (their keys go through the staging) and parts inside one. Each restored verify is also
// checked against decoding its prefix and its kept rows one by one.
func TestForwardBatchBitwise(t *testing.T) {
	fused := tinyCausal()
	fused.headDim = 32
	wide := tinyCausal()
	wide.headDim = 72
	tns := []*tiny{tinyCausal(), tinyConditional(), fused, wide}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for ti, tn := range tns {
			m := load(t, tn, uint64(40+ti))
			for _, parts := range []int{0, 3} {
				if parts > 0 {
					saved := m.partScores
					m.partScores = make(nn.PartScratch, parts) // NewCache sizes the buffers
					defer func() { m.partScores = saved }()
				}
				want := runBatch(t, m, batchShapes, false)
				for w := 1; w <= len(batchShapes); w++ {
					got := runBatch(t, m, batchShapes[:w], true)
					for i := range got {
						checkSame(t, fmt.Sprintf("model %d, parts %d, width %d", ti, parts, w), i, want[i], got[i])
					}
				}
				// Against plain decoding: a restored verify leaves the state of its prefix and
				// its kept rows decoded one by one.
				for i, s := range batchShapes {
					if s.restore < 0 {
						continue
					}
					// want's cache has decoded the next token after the restore, so plain does.
					toks := shapeTokens(i, s, m.cfg.Vocab)
					plain := m.NewCache(96).(*cache.Hybrid)
					for _, tok := range append(slices.Clone(toks[:s.prefix+s.restore+1]), toks[s.prefix+s.rows]) {
						step(t, m, plain, []int{tok})
					}
					sameState(t, s.restore, plain, want[i].cache)
				}
			}
		}
	})
}

// TestForwardBatchSynthetic: the same property on the synthetic 0.8B-kind shape with bf16
// weights, the kind the server batches.
func TestForwardBatchSynthetic(t *testing.T) {
	m := tinySynthetic(t)
	kerneltest.ForEachPath(t, func(t *testing.T) {
		want := runBatch(t, m, batchShapes, false)
		got := runBatch(t, m, batchShapes, true)
		for i := range got {
			checkSame(t, "synthetic", i, want[i], got[i])
		}
	})
}

// TestForwardBatchRefusals: a batch that cannot run changes no cache and says which sequence is
// at fault.
func TestForwardBatchRefusals(t *testing.T) {
	m := load(t, tinyCausal(), 1)
	a, b := m.NewCache(8).(*cache.Hybrid), m.NewCache(8).(*cache.Hybrid)
	shared := cache.NewHybrid(a.KV, a.Layers) // another hybrid over a's keys and values
	ok := model.Request{Tokens: []int{1, 2}, Logits: model.LogitsLast}
	for _, c := range []struct {
		items []model.BatchItem
		want  string
	}{
		{nil, "no sequences"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: a, Request: ok}}, "sequence 1: the cache of sequence 1 is also sequence 0's"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: shared, Request: ok}}, "sequence 1: the cache of sequence 1 is also sequence 0's"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: []int{50}}}}, "sequence 1: token 50 outside"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: make([]int, 9)}}}, "sequence 1: 9 rows at offset 0 exceed cache capacity 8"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: []int{1}, Taps: []int{0}}}}, "sequence 1 taps layers [0]"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: []int{1}, Hidden: true}}}, "sequence 1 asks for hidden states"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: cache.NewKV(1, 4, 3), Request: ok}}, "sequence 1: forward needs the *cache.Hybrid"},
	} {
		if _, err := m.ForwardBatch(c.items); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
		if a.Offset() != 0 || b.Offset() != 0 {
			t.Fatalf("a refused batch moved the caches to %d and %d", a.Offset(), b.Offset())
		}
		for l := range a.State {
			if slices.ContainsFunc(a.State[l], func(x float32) bool { return x != 0 }) ||
				slices.ContainsFunc(b.Conv[l], func(x float32) bool { return x != 0 }) {
				t.Fatal("a refused batch changed a recurrent state")
			}
		}
	}
}

// TestBatchDecodeDoesNotAllocate: a decode step of four sequences, and a verify round of four
// recorded sequences with their restores, allocate nothing once the buffers have grown to that
// width.
func TestBatchDecodeDoesNotAllocate(t *testing.T) {
	m := tinySynthetic(t)
	decode := make([]model.BatchItem, 4)
	verify := make([]model.BatchItem, 4)
	for i := range decode {
		c := m.NewCache(512).(*cache.Hybrid)
		c.EnableSnapshots(6)
		decode[i] = model.BatchItem{Cache: c, Request: model.Request{Tokens: []int{i + 1}, Logits: model.LogitsLast, Taps: []int{0, 1}}}
		verify[i] = model.BatchItem{Cache: c, Request: model.Request{Tokens: []int{i + 1, 2, 3, 4, 5, 6}, Logits: model.LogitsAll, Taps: []int{0, 1}}}
	}
	round := func() {
		if _, err := m.ForwardBatch(decode); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ForwardBatch(verify); err != nil {
			t.Fatal(err)
		}
		for i := range verify {
			if err := verify[i].Cache.(*cache.Hybrid).RestoreRow(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
		t.Fatalf("a batched decode step and verify round allocate %v times", allocs)
	}
}
