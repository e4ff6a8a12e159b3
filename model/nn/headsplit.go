package nn

import (
	"sync/atomic"

	"github.com/dflash/dflash/kernel"
)

// The attention HeadSplit spreads over the cores is that of at least defaultHeadSplitMinRows rows
// with at least defaultHeadSplitMinWork multiply-adds (keys seen times query heads times head
// size, twice: scores and values). Attention too small to pay for the hand-off stays on the
// caller: on this project's 2-core AMX host a layer of Qwen3-0.6B's shape (16 query heads of 128)
// took about 12 us for 1 row over 65 keys, 24 us for 2 rows over 66 and 600 us for 16 rows over
// 272, on one core; a hand-off to a spinning worker costs a microsecond or two, to a parked one
// several. At 512Ki multiply-adds (about 25 us there) a decode step of that shape splits from 128
// cached keys, a 2-row verification from 64, a 16-row one from 8. A decode step over a long
// context reads its whole cache every token, which one core streams at a third of what two do:
// splitting it took Qwen3-0.6B Q8_0 from 18-20 to 23-25 tok/s at 1104 cached tokens (BENCHMARKS
// section 26).
const (
	defaultHeadSplitMinRows = 1
	defaultHeadSplitMinWork = 1 << 19
)

// headSplitMinRows and headSplitMinWork are the thresholds in force (SetHeadSplit).
var headSplitMinRows, headSplitMinWork atomic.Int64

func init() {
	headSplitMinRows.Store(defaultHeadSplitMinRows)
	headSplitMinWork.Store(defaultHeadSplitMinWork)
}

// SetHeadSplit sets the least rows and the least multiply-adds whose attention HeadSplit spreads
// over the cores, and returns the previous values: 0, 0 spreads every call, a row count past any
// forward's turns the split off. It lets tests force the split either way and a measurement
// compare the two; the bits are the same.
func SetHeadSplit(minRows, minWork int) (prevRows, prevWork int) {
	return int(headSplitMinRows.Swap(int64(minRows))), int(headSplitMinWork.Swap(int64(minWork)))
}

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
	next    atomic.Int64 // the next key/value head a part of a spread call claims
	fn      func(part int)
}

// Attend is Heads.Attend of rows [first, end) of an n-row forward at positions [pos, pos+n) over
// layer li of c (out and q start at row first), spread over scratch's buffers when it has several
// and the rows and their work are enough (SetHeadSplit); scratch[0] serves a call that is not spread.
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
	parts := headSplitParts(h, lo, hi, seqs, vis, len(scratch))
	s.h, s.out, s.q, s.lo, s.hi, s.seqs, s.li, s.vis, s.scratch, s.parts = h, out, q, lo, hi, seqs, li, vis, scratch, parts
	if parts <= 1 {
		s.part(0)
	} else {
		if s.fn == nil {
			s.fn = s.part
		}
		s.next.Store(0)
		kernel.Parallel(parts, s.fn)
	}
	s.h, s.out, s.q, s.seqs, s.scratch = nil, nil, nil, nil, nil
}

// part is part i of a call: all heads for a call not spread, else the key/value heads it claims,
// over every sequence, with scratch buffer i.
func (s *HeadSplit) part(i int) {
	h := s.h
	if s.parts <= 1 {
		s.heads(0, 0, h.Heads)
		return
	}
	// Key/value heads are claimed one at a time rather than dealt out, so that a core the
	// machine deschedules mid-call holds up the others by one head at most, and a part that
	// starts late (or, run on the caller after the others, not at all) takes what is left.
	group := h.Heads / h.KVHeads
	for {
		g := int(s.next.Add(1) - 1)
		if g >= h.KVHeads {
			return
		}
		s.heads(i, g*group, (g+1)*group)
	}
}

// heads is the attention of query heads [h0, h1) over every sequence, with scratch buffer i.
func (s *HeadSplit) heads(i, h0, h1 int) {
	h := s.h
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

// headSplitParts is how many parts AttendSeqs spreads its call over, given buffers buffers: 1
// below the thresholds (SetHeadSplit) or for shapes whose query heads do not group evenly
// (attention then runs head by head, rowEach), else a part per buffer up to the key/value heads.
func headSplitParts(h *Heads, lo, hi int, seqs []Seq, vis Visibility, buffers int) int {
	if buffers < 2 || int64(hi-lo) < headSplitMinRows.Load() || h.KVHeads <= 0 || h.Heads%h.KVHeads != 0 ||
		attentionWork(h, lo, hi, seqs, vis) < headSplitMinWork.Load() {
		return 1
	}
	return min(buffers, h.KVHeads)
}

// attentionWork bounds the multiply-adds of chunk rows [lo, hi) of seqs: each row is taken to see
// as many keys as the last row of its sequence in the chunk (later causal rows see no fewer).
func attentionWork(h *Heads, lo, hi int, seqs []Seq, vis Visibility) int64 {
	var keys int64
	for k := range seqs {
		sq := &seqs[k]
		a, b := sq.overlap(lo, hi)
		if a >= b {
			continue
		}
		klo, khi := vis.Span(sq.Pos+b-1-sq.Lo, sq.Pos, sq.Pos+sq.Hi-sq.Lo)
		keys += int64(b-a) * int64(khi-klo)
	}
	return 2 * keys * int64(h.Heads) * int64(h.HeadDim)
}
