package transformer

import (
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// batchShape is one sequence of a batched forward: prefix rows already in its cache, then the
// rows the batch runs on it, with the logits it asks for.
type batchShape struct {
	prefix, rows int
	logits       model.LogitRows
}

// batchShapes mix what a batched decode step holds: plain decode rows, verifications, a new
// sequence's prefill chunk that spans several chunks of the forward, and a sequence with nothing
// cached yet.
var batchShapes = []batchShape{
	{prefix: 9, rows: 1, logits: model.LogitsLast},
	{prefix: 3, rows: 5, logits: model.LogitsAll},
	{prefix: 0, rows: 40, logits: model.LogitsNone},
	{prefix: 17, rows: 3, logits: model.LogitsLast},
	{prefix: 1, rows: 1, logits: model.LogitsAll},
	{prefix: 30, rows: 16, logits: model.LogitsAll},
}

// batchOutputs is what a forward gave one sequence: logits, taps and its cache's keys and values.
type batchOutputs struct {
	logits, taps, keys, values []float32
	offset                     int
}

// runBatch builds a cache per shape (its prefix forwarded alone), then runs the shapes' rows
// either in one ForwardBatch or one Forward each, and returns what each sequence got.
func runBatch(t *testing.T, m *Model, shapes []batchShape, batched bool) []batchOutputs {
	t.Helper()
	cfg := m.Config()
	taps := []int{0, cfg.Layers - 1}
	items := make([]model.BatchItem, len(shapes))
	for i, s := range shapes {
		c := m.NewCache(96)
		toks := testTokens(s.prefix+s.rows+i, cfg.Vocab)[i:]
		if s.prefix > 0 {
			if _, err := m.Forward(c, model.Request{Tokens: toks[:s.prefix]}); err != nil {
				t.Fatal(err)
			}
		}
		items[i] = model.BatchItem{Cache: c, Request: model.Request{Tokens: toks[s.prefix:], Logits: s.logits, Taps: taps}}
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
	for i, it := range items {
		kv, _ := nn.AsKV(it.Cache)
		o := &out[i]
		o.offset = kv.Offset()
		for l := 0; l < kv.Layers; l++ {
			k, v := kv.RowsF32(l, 0, o.offset) // a bf16 cache's rows widened: equal bits iff equal rows
			o.keys = append(o.keys, k...)
			o.values = append(o.values, v...)
		}
	}
	return out
}

// TestForwardBatchBitwise: every sequence of a batched forward gets the bits, logits, taps and
// cache rows alike, that a forward of it alone gives, whatever the batch around it, on every
// kernel path and attention layout: head sizes 8 and 16 (head-major keys), 32 (the fused
// head-major path) and 128 (row-major, batched per key/value head). Forcing three row parts makes
// parts that straddle sequences (their keys go through the staging) and parts inside one.
func TestForwardBatchBitwise(t *testing.T) {
	for _, hd := range []int{8, 16, 32, 128} {
		cfg := model.Config{Arch: ArchQwen3, Layers: 2, Hidden: 32, Intermediate: 48, Heads: 4, KVHeads: 2,
			HeadDim: hd, Vocab: 61, MaxSeq: 128, RMSEps: 1e-6, RopeTheta: 1e6, BOS: -1}
		m, err := Synthetic(cfg, uint64(hd))
		if err != nil {
			t.Fatal(err)
		}
		forEachPath(t, func(t *testing.T) {
			for _, parts := range []int{0, 3} {
				if parts > 0 {
					saved := m.partScores
					m.partScores = make(nn.PartScratch, parts) // NewCache sizes the buffers
					defer func() { m.partScores = saved }()
				}
				want := runBatch(t, m, batchShapes, false)
				got := runBatch(t, m, batchShapes, true)
				for i := range want {
					w, g := want[i], got[i]
					if w.offset != g.offset || !slices.Equal(w.logits, g.logits) || !slices.Equal(w.taps, g.taps) ||
						!slices.Equal(w.keys, g.keys) || !slices.Equal(w.values, g.values) {
						t.Errorf("head %d, parts %d: sequence %d (%+v) differs batched from alone", hd, parts, i, batchShapes[i])
					}
				}
				// Every sub-batch, too: a sequence's bits do not depend on how many share it.
				for w := 1; w <= len(batchShapes); w++ {
					got := runBatch(t, m, batchShapes[:w], true)
					for i := range got {
						if !slices.Equal(got[i].logits, want[i].logits) || !slices.Equal(got[i].keys, want[i].keys) {
							t.Errorf("head %d, parts %d, width %d: sequence %d differs from alone", hd, parts, w, i)
						}
					}
				}
			}
		})
	}
}

// TestForwardBatchStories260K: the same property on the llama2.c checkpoint (adjacent-pair RoPE,
// heads of 8).
func TestForwardBatchStories260K(t *testing.T) {
	m := loadStories(t) // skips without ../shared/data
	forEachPath(t, func(t *testing.T) {
		want := runBatch(t, m, batchShapes, false)
		got := runBatch(t, m, batchShapes, true)
		for i := range want {
			if !slices.Equal(want[i].logits, got[i].logits) || !slices.Equal(want[i].taps, got[i].taps) || !slices.Equal(want[i].keys, got[i].keys) {
				t.Errorf("sequence %d (%+v) differs batched from alone", i, batchShapes[i])
			}
		}
	})
}

// TestForwardBatchRefusals: a batch that cannot run changes no cache and says which sequence is
// at fault.
func TestForwardBatchRefusals(t *testing.T) {
	cfg := model.Config{Arch: ArchQwen3, Layers: 2, Hidden: 32, Intermediate: 48, Heads: 4, KVHeads: 2,
		HeadDim: 16, Vocab: 20, MaxSeq: 64, RMSEps: 1e-6, RopeTheta: 1e6, BOS: -1}
	m, err := Synthetic(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.NewCache(8), m.NewCache(8)
	ok := model.Request{Tokens: []int{1, 2}, Logits: model.LogitsLast}
	for _, c := range []struct {
		items []model.BatchItem
		want  string
	}{
		{nil, "no sequences"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: a, Request: ok}}, "sequence 1: the cache of sequence 1 is also sequence 0's"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: []int{20}}}}, "sequence 1: token 20 outside"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: make([]int, 9)}}}, "sequence 1: 9 rows at offset 0 exceed cache capacity 8"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: b, Request: model.Request{Tokens: []int{1}, Taps: []int{0}}}}, "sequence 1 taps layers [0]"},
		{[]model.BatchItem{{Cache: a, Request: ok}, {Cache: cache.NewKV(1, 4, 3), Request: ok}}, "sequence 1: cache of 1 layers"},
	} {
		if _, err := m.ForwardBatch(c.items); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
		if a.Offset() != 0 || b.Offset() != 0 {
			t.Fatalf("a refused batch moved the caches to %d and %d", a.Offset(), b.Offset())
		}
	}
}

// TestBatchDecodeDoesNotAllocate: a decode step of four sequences allocates nothing once the
// buffers have grown to that width.
func TestBatchDecodeDoesNotAllocate(t *testing.T) {
	cfg := model.Config{Arch: ArchQwen3, Layers: 2, Hidden: 32, Intermediate: 48, Heads: 4, KVHeads: 2,
		HeadDim: 16, Vocab: 64, MaxSeq: 256, RMSEps: 1e-6, RopeTheta: 1e6, BOS: -1}
	m, err := Synthetic(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]model.BatchItem, 4)
	for i := range items {
		items[i] = model.BatchItem{Cache: m.NewCache(200), Request: model.Request{Tokens: []int{i + 1}, Logits: model.LogitsLast, Taps: []int{0, 1}}}
	}
	if _, err := m.ForwardBatch(items); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := m.ForwardBatch(items); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a batched decode step allocates %v times", allocs)
	}
}
