package runner

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/sample"
)

// FlushRows is how many pending context rows trigger a context-only draft forward of their own.
// Fewer wait for the next proposal, whose forward writes them together with its block
// (DFLASH.md section 3), so a round's accepted rows and short prefill chunks cost no forward of
// their own. The cap bounds the pending buffer (FlushRows x taps x hidden floats) and how far
// the draft cache can lag behind the target; the draft forward itself runs any number of rows
// in chunks of nn.ChunkRows.
const FlushRows = 256

// BlockDrafter is the long-lived side of a DFlash draft (DFLASH.md section 2): the draft model
// and an adaptive depth controller that learns from every session it opens.
type BlockDrafter struct {
	draft model.BlockDraft
	depth Depth
}

// NewBlockDrafter wraps a DFlash draft with a fresh adaptive controller.
func NewBlockDrafter(d model.BlockDraft) *BlockDrafter {
	return &BlockDrafter{draft: d, depth: Adaptive(&Controller{})}
}

// Open starts a session with a fresh draft cache for up to capacity target positions.
func (b *BlockDrafter) Open(capacity int) Session { return NewBlockSession(b.draft, capacity) }

// Depth is the drafter's adaptive policy.
func (b *BlockDrafter) Depth() Depth { return b.depth }

// draftContext is the context bookkeeping of a drafting session (DFLASH.md section 3), shared by
// the DFlash and DFlash2 sessions. R is what the draft's forward returns for a block: logits
// for a model.BlockDraft, a model.Walk for a model.BlockSelector. Taking the forward's result
// as a value keeps the DFlash2 candidates out of any side channel.
//
// Invariants:
//   - Draft cache slots [0, written) hold the context rows of target positions [0, written), each
//     derived only from that position's taps, so a slot never needs look-ahead or rewriting.
//   - pending holds the rows of positions [written, frontier), not yet in the draft cache.
//   - After a proposal the cache also holds that block's rows at [written, written+block). Every
//     write path (flush, the next proposal, Restore, Settle) rewinds them first: block K/V are
//     transient, computed for one proposal's forward, and context rows must sit at their true
//     slots, since a context row at slot S is keyed at position S by the next block's attention.
type draftContext[R any] struct {
	forward   func(c cache.Cache, ctx []float32, ctxRows int, block []int) (R, error)
	blockSize int
	mask      int
	cache     cache.Cache
	taps      []int

	written  int // context rows in the draft cache
	frontier int // context rows known: written plus pending
	block    int // block rows sitting on top of the context in the draft cache
	closed   bool

	width   int       // floats per context row (taps x target hidden); 0 until the first rows arrive
	pending []float32 // rows of positions [written, frontier), width floats each

	blockTokens []int
}

func newDraftContext[R any](forward func(cache.Cache, []float32, int, []int) (R, error), blockSize, mask int, taps []int, c cache.Cache) draftContext[R] {
	return draftContext[R]{forward: forward, blockSize: blockSize, mask: mask, cache: c, taps: taps, written: c.Offset(), frontier: c.Offset()}
}

func (s *draftContext[R]) Taps() []int { return s.taps }

// Limit is B-1: the block after its anchor.
func (s *draftContext[R]) Limit() int { return s.blockSize - 1 }

// Frontier is the number of context rows the session knows (written or pending).
func (s *draftContext[R]) Frontier() int { return s.frontier }

// Cache is the draft cache.
func (s *draftContext[R]) Cache() cache.Cache { return s.cache }

func (s *draftContext[R]) check(op string) error {
	if s.closed {
		return fmt.Errorf("dflash session: %s: %w", op, errClosed)
	}
	return nil
}

// Restore drops any block and pending rows, then keeps at most keep context rows.
func (s *draftContext[R]) Restore(keep int) (int, error) {
	if err := s.check("restore"); err != nil {
		return 0, err
	}
	if err := s.dropBlock(); err != nil {
		return 0, err
	}
	s.pending = s.pending[:0]
	s.frontier = s.written
	if keep < s.written {
		if err := s.cache.Rewind(keep); err != nil {
			return 0, fmt.Errorf("dflash session: restore %d rows: %w", keep, err)
		}
		s.written, s.frontier = keep, keep
	}
	return s.written, nil
}

// Committed buffers the context rows of target positions [position, position+len(tokens)).
// Rows the session already has (a restored prefix) are skipped; rows starting beyond the frontier
// would leave a hole in the context and are refused as a bug of the caller.
func (s *draftContext[R]) Committed(tokens []int, taps [][]float32, position int) error {
	if err := s.check("committed"); err != nil {
		return err
	}
	rows := len(tokens)
	if rows == 0 {
		return nil
	}
	if position > s.frontier {
		return fmt.Errorf("dflash session: committed rows start at %d, beyond the frontier %d (a gap)", position, s.frontier)
	}
	if position < 0 {
		return fmt.Errorf("dflash session: committed rows at negative position %d", position)
	}
	if len(taps) != len(s.taps) {
		return fmt.Errorf("dflash session: %d taps committed, the draft needs %d", len(taps), len(s.taps))
	}
	hidden := len(taps[0]) / rows
	for k, t := range taps {
		if len(t) != rows*hidden || hidden == 0 {
			return fmt.Errorf("dflash session: tap %d (layer %d) has %d floats for %d rows", k, s.taps[k], len(t), rows)
		}
	}
	width := hidden * len(taps)
	if s.width == 0 {
		s.width = width
	} else if width != s.width {
		return fmt.Errorf("dflash session: committed rows are %d floats wide, earlier ones %d", width, s.width)
	}
	skip := s.frontier - position
	for r := skip; r < rows; r++ {
		for _, t := range taps {
			s.pending = append(s.pending, t[r*hidden:(r+1)*hidden]...)
		}
	}
	if skip < rows {
		s.frontier = position + rows
	}
	for s.frontier-s.written >= FlushRows {
		if err := s.flush(FlushRows); err != nil {
			return err
		}
	}
	return nil
}

// forwardBlock runs the draft forward that writes every pending context row and the block
// [current, MASK x n] at the frontier, leaving the block's rows on top of the context for the
// next write to rewind. It returns what the draft returned.
func (s *draftContext[R]) forwardBlock(current, n int) (R, error) {
	var none R
	if err := s.dropBlock(); err != nil {
		return none, err
	}
	s.blockTokens = append(s.blockTokens[:0], current)
	for range n {
		s.blockTokens = append(s.blockTokens, s.mask)
	}
	ctxRows := s.frontier - s.written
	before := s.cache.Offset()
	out, err := s.forward(s.cache, s.pending, ctxRows, s.blockTokens)
	if err != nil {
		return none, fmt.Errorf("dflash session: propose %d at position %d: %w", n, s.frontier, err)
	}
	if got := s.cache.Offset(); got != before+ctxRows+n+1 {
		return none, fmt.Errorf("dflash session: draft forward of %d context and %d block rows moved the cache from %d to %d", ctxRows, n+1, before, got)
	}
	s.written = s.frontier
	s.pending = s.pending[:0]
	s.block = n + 1
	return out, nil
}

// Settle writes every pending context row and drops any block, leaving the draft cache level
// with the rows committed.
func (s *draftContext[R]) Settle() error {
	if err := s.check("settle"); err != nil {
		return err
	}
	if err := s.dropBlock(); err != nil {
		return err
	}
	if s.frontier > s.written {
		return s.flush(s.frontier - s.written)
	}
	return nil
}

// Close settles the session (an outstanding block is drained even when nothing is pending)
// and ends it.
func (s *draftContext[R]) Close() error {
	if err := s.Settle(); err != nil {
		return err
	}
	s.closed = true
	return nil
}

// dropBlock rewinds the last proposal's block rows out of the draft cache.
func (s *draftContext[R]) dropBlock() error {
	if s.block == 0 {
		return nil
	}
	if err := s.cache.Rewind(s.written); err != nil {
		return fmt.Errorf("dflash session: rewind block of %d rows: %w", s.block, err)
	}
	s.block = 0
	return nil
}

// flush writes the first rows pending context rows in one context-only draft forward.
func (s *draftContext[R]) flush(rows int) error {
	if err := s.dropBlock(); err != nil {
		return err
	}
	if _, err := s.forward(s.cache, s.pending[:rows*s.width], rows, nil); err != nil {
		return fmt.Errorf("dflash session: write %d context rows at %d: %w", rows, s.written, err)
	}
	if got := s.cache.Offset(); got != s.written+rows {
		return fmt.Errorf("dflash session: context write of %d rows moved the cache from %d to %d", rows, s.written, got)
	}
	s.written += rows
	s.pending = s.pending[:copy(s.pending, s.pending[rows*s.width:])]
	return nil
}

// BlockSession is the DFlash drafting session: it turns the target's committed rows into draft
// context and proposes blocks from the draft's logits. Its draft cache persists across the
// requests of its sequence (Restore keeps a shared prefix).
type BlockSession struct {
	draftContext[[]float32]

	drafts []int
	q      []sample.Distribution
	hist   []int
}

// NewBlockSession starts a session with a fresh draft cache for up to capacity target positions
// (plus room for one block).
func NewBlockSession(d model.BlockDraft, capacity int) *BlockSession {
	return NewBlockSessionCache(d, d.NewCache(capacity+d.BlockSize()))
}

// NewBlockSessionCache starts a session on an existing draft cache whose rows [0, c.Offset())
// are context rows of the target positions they are at (a restored prefix); Committed skips them.
func NewBlockSessionCache(d model.BlockDraft, c cache.Cache) *BlockSession {
	return &BlockSession{draftContext: newDraftContext(d.Forward, d.BlockSize(), d.MaskID(), d.TargetLayers(), c)}
}

// Propose drafts min(n, B-1) tokens after current in one draft forward that also writes every
// pending context row. current sits at position frontier; draft row i predicts position
// frontier+i. At temperature 0 each draft is the argmax of its proposal (after penalties); above
// it q_i is the sampler's distribution over row i's logits with history + d_1..d_{i-1}, the same
// filtering the target's p_i gets, and d_i is drawn from it.
//
// Drafting n < B-1 sends the block [anchor, MASK x n], not a full block. That stays exact: for
// causal draft layers the first n rows are what a full block would give; for bidirectional ones
// (the default) the missing MASK rows change the rows that remain, so q is a slightly different
// proposal, but verification uses that real q, which is all exactness needs (DFLASH.md
// section 1).
func (s *BlockSession) Propose(current, n int, history []int, smp Sampler) ([]int, []sample.Distribution, error) {
	if err := s.check("propose"); err != nil {
		return nil, nil, err
	}
	if n < 1 || s.frontier == 0 {
		return nil, nil, nil
	}
	n = min(n, s.blockSize-1)
	logits, err := s.forwardBlock(current, n)
	if err != nil {
		return nil, nil, err
	}
	if len(logits)%(n+1) != 0 || len(logits) == 0 {
		return nil, nil, fmt.Errorf("dflash session: draft returned %d logits for %d block rows", len(logits), n+1)
	}
	vocab := len(logits) / (n + 1)

	s.hist = append(s.hist[:0], history...)
	s.drafts = s.drafts[:0]
	for len(s.q) < n {
		s.q = append(s.q, sample.Distribution{})
	}
	for i := 1; i <= n; i++ {
		q := &s.q[i-1]
		row, ok := smp.MaskDraft(logits[i*vocab : (i+1)*vocab])
		if !ok {
			break
		}
		smp.Distribution(q, row, s.hist)
		d := smp.Choose(q, len(s.hist), sample.DrawDraft)
		smp.DraftChosen(d)
		s.drafts = append(s.drafts, d)
		s.hist = append(s.hist, d)
	}
	return s.drafts, s.q[:len(s.drafts)], nil
}
