package nn

import (
	"sync/atomic"

	"github.com/dflash/dflash/kernel"
)

// defaultHeadSplitMinRows is the least rows whose attention HeadSplit spreads over the cores. A
// decode step (one row) stays on the caller: its attention is a few microseconds per layer,
// about what a hand-off costs.
const defaultHeadSplitMinRows = 2

// headSplitMinRows is the threshold in force (SetHeadSplitMinRows).
var headSplitMinRows atomic.Int64

func init() { headSplitMinRows.Store(defaultHeadSplitMinRows) }

// SetHeadSplitMinRows sets the least rows whose attention HeadSplit spreads over the cores and
// returns the previous value: 0 spreads every call, a value past any forward's rows turns the
// split off. It lets tests force the split either way and a measurement compare the two; the
// bits are the same.
func SetHeadSplitMinRows(rows int) int { return int(headSplitMinRows.Swap(int64(rows))) }

// HeadSplit runs the attention of a forward's rows with its key/value heads spread over the
// cores (kernel.Parallel), each core with its own buffer of a PartScratch. It is for forwards
// that run in one part (PartScratch.Parts): on a kernel path whose products split their panels
// across the cores (kernel.RowSplitFrom) a verification no longer splits its rows, and its
// attention would otherwise run on one core.
//
// A key/value head's queries, scores and outputs are its own: a core computes whole key/value
// heads with the arithmetic a single call gives them (Heads.Attend), into output elements no
// other core writes. So the split changes no bit, whoever computes which head.
//
// Its state is bound once (the method value the pool runs), so a call allocates nothing. One
// HeadSplit serves one forward at a time.
type HeadSplit struct {
	h       *Heads
	out, q  []float32
	lo, hi  int
	seqs    []Seq
	one     [1]Seq // the sequence of Attend
	li      int
	vis     Visibility
	scratch PartScratch
	parts   int
	fn      func(part int)
}

// Attend is Heads.Attend of rows [first, end) of an n-row forward at positions [pos, pos+n) over
// layer li of c (out and q start at row first), spread over scratch's buffers when it has several
// and the rows are enough (SetHeadSplitMinRows); scratch[0] serves a call that is not spread.
func (s *HeadSplit) Attend(h *Heads, out, q []float32, first, end, n int, c KV, li, pos int, vis Visibility, scratch PartScratch) {
	s.one[0] = Seq{KV: c, Lo: 0, Hi: n, Pos: pos}
	s.AttendSeqs(h, out, q, first, end, s.one[:], li, vis, scratch)
	s.one[0] = Seq{} // the cache's view must not outlive the forward
}

// AttendSeqs is the attention of chunk rows [lo, hi) of a forward that stacks the rows of seqs
// (see Seq; out and q start at row lo): each sequence's rows attend over layer li of its own
// cache as the rows of a forward of it alone. Spread over the cores, every core takes its key/
// value heads of every sequence, so a batch of several sequences costs one hand-off too.
func (s *HeadSplit) AttendSeqs(h *Heads, out, q []float32, lo, hi int, seqs []Seq, li int, vis Visibility, scratch PartScratch) {
	parts := 1
	if int64(hi-lo) >= headSplitMinRows.Load() && h.KVHeads > 0 && h.Heads%h.KVHeads == 0 {
		parts = min(len(scratch), h.KVHeads)
	}
	s.h, s.out, s.q, s.lo, s.hi, s.seqs, s.li, s.vis, s.scratch, s.parts = h, out, q, lo, hi, seqs, li, vis, scratch, parts
	if parts <= 1 {
		s.part(0)
	} else {
		if s.fn == nil {
			s.fn = s.part
		}
		kernel.Parallel(parts, s.fn)
	}
	s.h, s.out, s.q, s.seqs, s.scratch = nil, nil, nil, nil, nil
}

// part is the attention of part i's key/value heads (all heads for a call not spread) over every
// sequence, with scratch buffer i.
func (s *HeadSplit) part(i int) {
	h := s.h
	h0, h1 := 0, h.Heads
	if s.parts > 1 {
		g0, g1 := PartRows(i, s.parts, h.KVHeads)
		group := h.Heads / h.KVHeads
		h0, h1 = g0*group, g1*group
	}
	qw := h.Heads * h.HeadDim
	for k := range s.seqs {
		sq := &s.seqs[k]
		a, b := sq.overlap(s.lo, s.hi)
		if a >= b {
			continue
		}
		r := (a - s.lo) * qw
		h.attendHeads(s.out[r:], s.q[r:], a-sq.Lo, b-sq.Lo, sq.Hi-sq.Lo, sq.KV, s.li, sq.Pos, s.vis, s.scratch[i], h0, h1)
	}
}
