package runner

import (
	"strings"
	"testing"

	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

const testVocab = 16

// tapRows builds the taps a fake target reports for tokens at positions position...
func tapRows(layers []int, tokens []int, position int) [][]float32 {
	taps := make([][]float32, len(layers))
	for k, l := range layers {
		for i, tok := range tokens {
			taps[k] = append(taps[k], float32(position+i), float32(tok), float32(l), 0)
		}
	}
	return taps
}

func seqTokens(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (i*7 + 3) % testVocab
	}
	return out
}

func newTestSession(block int) (*BlockSession, *fake.Draft, *fake.Cache) {
	d := &fake.Draft{Block: block, Mask: testVocab - 1, Layers: []int{0, 2}, Vocab: testVocab}
	s := NewBlockSession(d, 4096)
	return s, d, s.Cache().(*fake.Cache)
}

func greedySampler() Sampler { return NewSampler(sample.Options{}, testVocab) }

// commit reports rows [from, to) of seqTokens.
func commit(t *testing.T, s *BlockSession, from, to int) {
	t.Helper()
	toks := seqTokens(to)[from:to]
	if err := s.Committed(toks, tapRows(s.Taps(), toks, from), from); err != nil {
		t.Fatalf("Committed(%d..%d): %v", from, to, err)
	}
}

// checkSlots asserts every committed draft slot holds the context row of its own position.
func checkSlots(t *testing.T, c *fake.Cache) {
	t.Helper()
	for slot, r := range c.Committed() {
		if r.Block || r.Ctx == nil || int(r.Ctx[0]) != slot {
			t.Fatalf("draft slot %d holds %+v, want the context row of position %d", slot, r, slot)
		}
	}
}

func TestSessionFlushesAtCap(t *testing.T) {
	s, d, c := newTestSession(8)
	// 255 pending rows stay buffered: no forward yet.
	commit(t, s, 0, FlushRows-1)
	if len(d.Calls) != 0 {
		t.Fatalf("%d draft forwards for %d pending rows, want none", len(d.Calls), FlushRows-1)
	}
	// The 256th row triggers one context-only forward of all 256 rows at slot 0.
	commit(t, s, FlushRows-1, FlushRows)
	if len(d.Calls) != 1 || len(d.Calls[0].CtxPositions) != FlushRows || d.Calls[0].Block != nil || d.Calls[0].Offset != 0 {
		t.Fatalf("calls %+v, want one context-only write of %d rows at 0", len(d.Calls), FlushRows)
	}
	// 300 more rows at once: one more full write of 256, 44 left pending.
	commit(t, s, FlushRows, FlushRows+300)
	if len(d.Calls) != 2 || len(d.Calls[1].CtxPositions) != FlushRows || d.Calls[1].Offset != FlushRows {
		t.Fatalf("second write %+v, want 256 rows at %d", d.Calls[len(d.Calls)-1], FlushRows)
	}
	if c.Offset() != 2*FlushRows || s.Frontier() != FlushRows+300 {
		t.Fatalf("cache at %d, frontier %d; want %d and %d", c.Offset(), s.Frontier(), 2*FlushRows, FlushRows+300)
	}
	checkSlots(t, c)
}

func TestSessionRefusesGap(t *testing.T) {
	s, _, _ := newTestSession(8)
	commit(t, s, 0, 10)
	// Position 11 after a frontier of 10 would leave position 10 without context.
	toks := seqTokens(12)[11:]
	err := s.Committed(toks, tapRows(s.Taps(), toks, 11), 11)
	if err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("Committed beyond the frontier: err = %v, want a gap error", err)
	}
	if s.Frontier() != 10 {
		t.Fatalf("frontier moved to %d on a refused commit", s.Frontier())
	}
	// Tap widths that disagree with earlier rows are refused too.
	bad := [][]float32{{1, 2}, {3, 4}}
	if err := s.Committed([]int{1}, bad, 10); err == nil {
		t.Fatal("rows of a different width were accepted")
	}
}

func TestSessionRestoredPrefixResumesAtRightSlot(t *testing.T) {
	d := &fake.Draft{Block: 8, Mask: testVocab - 1, Layers: []int{1}, Vocab: testVocab}
	c := fake.NewCache(64)
	// A previous request left context rows for positions 0..4 in the draft cache.
	toks := seqTokens(8)
	taps := tapRows(d.Layers, toks[:5], 0)
	if _, err := d.Forward(c, taps[0], 5, nil); err != nil {
		t.Fatal(err)
	}
	s := NewBlockSessionCache(d, c)
	if s.Frontier() != 5 {
		t.Fatalf("frontier %d, want the 5 restored rows", s.Frontier())
	}
	// The target re-reports positions 0..7: the first 5 are skipped, 5..7 become pending.
	if err := s.Committed(toks, tapRows(d.Layers, toks, 0), 0); err != nil {
		t.Fatal(err)
	}
	drafts, _, err := s.Propose(toks[7], 3, toks, greedySampler())
	if err != nil || len(drafts) != 3 {
		t.Fatalf("Propose: %v drafts, err %v", drafts, err)
	}
	last := d.Calls[len(d.Calls)-1]
	if last.Offset != 5 || len(last.CtxPositions) != 3 || last.CtxPositions[0] != 5 || last.CtxPositions[2] != 7 {
		t.Fatalf("propose call %+v, want context positions 5..7 written at slot 5", last)
	}
	// Block rows sit at 8..11, after the context.
	if got := c.Offset(); got != 8+4 {
		t.Fatalf("draft cache at %d, want 8 context + 4 block rows", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkSlots(t, c)
}

func TestSessionProposeDeclinesAndCaps(t *testing.T) {
	s, d, _ := newTestSession(4)
	// No context at all: nothing to condition on, so the loop must decode plainly.
	if drafts, _, err := s.Propose(3, 3, nil, greedySampler()); err != nil || drafts != nil || len(d.Calls) != 0 {
		t.Fatalf("Propose without context: %v, %v, %d calls; want nothing", drafts, err, len(d.Calls))
	}
	commit(t, s, 0, 2)
	if drafts, _, _ := s.Propose(3, 0, nil, greedySampler()); drafts != nil || len(d.Calls) != 0 {
		t.Fatalf("Propose(n=0) drafted %v", drafts)
	}
	// n = 100 with B = 4 drafts B-1 = 3 in one forward whose block is [anchor, MASK x 3].
	drafts, q, err := s.Propose(3, 100, seqTokens(2), greedySampler())
	if err != nil || len(drafts) != 3 || len(q) != 3 {
		t.Fatalf("Propose(n=100): %v, %d proposals, %v; want 3", drafts, len(q), err)
	}
	call := d.Calls[0]
	if len(call.Block) != 4 || call.Block[0] != 3 || len(call.CtxPositions) != 2 {
		t.Fatalf("call %+v, want block [3, MASK x 3] with the 2 pending context rows", call)
	}
	// Greedy proposals are one-hot at the draft token.
	for i, tok := range drafts {
		if q[i].Prob(tok) != 1 {
			t.Fatalf("q[%d](%d) = %v, want 1 at temperature 0", i, tok, q[i].Prob(tok))
		}
	}
}

func TestSessionRewindsBlockBeforeContextWrite(t *testing.T) {
	s, d, c := newTestSession(8)
	commit(t, s, 0, 3)
	if _, _, err := s.Propose(seqTokens(4)[3], 3, nil, greedySampler()); err != nil {
		t.Fatal(err)
	}
	// The block [anchor, MASK x 3] sits at slots 3..6.
	if c.Offset() != 7 {
		t.Fatalf("draft cache at %d after propose, want 7", c.Offset())
	}
	// Verification kept the anchor and one draft: positions 3 and 4 become context.
	commit(t, s, 3, 5)
	if _, _, err := s.Propose(seqTokens(6)[5], 2, nil, greedySampler()); err != nil {
		t.Fatal(err)
	}
	call := d.Calls[1]
	if call.Offset != 3 || len(call.CtxPositions) != 2 || call.CtxPositions[0] != 3 {
		t.Fatalf("second propose %+v: the old block was not rewound before context rows 3, 4", call)
	}
	if !containsInOrder(c.Log, "rewind 7->3", "draft 5@3") {
		t.Fatalf("log %v: want the block rewound before the next write", c.Log)
	}
	// A flush at the cap while a block is outstanding rewinds it first too.
	commit(t, s, 5, 5+FlushRows)
	if c.Offset() != 5+FlushRows {
		t.Fatalf("draft cache at %d, want %d context rows", c.Offset(), 5+FlushRows)
	}
	checkSlots(t, c)
}

func containsInOrder(log []string, want ...string) bool {
	for _, l := range log {
		if len(want) > 0 && l == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}

func TestSessionSettleAndCloseDrain(t *testing.T) {
	s, _, c := newTestSession(8)
	commit(t, s, 0, 4)
	if _, _, err := s.Propose(1, 5, nil, greedySampler()); err != nil {
		t.Fatal(err)
	}
	// Nothing is pending, but the block of 6 rows must still leave the cache.
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	if c.Offset() != 4 {
		t.Fatalf("draft cache at %d after Settle, want the 4 context rows", c.Offset())
	}
	// Close settles too: pending rows are written and an outstanding block drained.
	commit(t, s, 4, 9)
	if _, _, err := s.Propose(2, 3, nil, greedySampler()); err != nil {
		t.Fatal(err)
	}
	commit(t, s, 9, 11)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Offset() != 11 {
		t.Fatalf("draft cache at %d after Close with 2 pending rows over a block, want 11", c.Offset())
	}
	checkSlots(t, c)
	// A closed session refuses every later call: its opener has ended it.
	if err := s.Close(); err == nil {
		t.Fatal("a second Close was accepted")
	}
	if _, err := s.Restore(0); err == nil {
		t.Fatal("Restore on a closed session was accepted")
	}
	if _, _, err := s.Propose(1, 2, nil, greedySampler()); err == nil {
		t.Fatal("Propose on a closed session was accepted")
	}
}

func TestSessionDraftFailureLeavesStateUsable(t *testing.T) {
	s, d, c := newTestSession(8)
	commit(t, s, 0, 3)
	d.Fail = true
	if _, _, err := s.Propose(1, 2, nil, greedySampler()); err == nil {
		t.Fatal("a failing draft forward was not reported")
	}
	// The pending rows are still pending and are written by the next propose.
	if _, _, err := s.Propose(1, 2, nil, greedySampler()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Offset() != 3 {
		t.Fatalf("draft cache at %d, want 3", c.Offset())
	}
	checkSlots(t, c)
}
