package runner

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/sample"
)

// FlushRows is how many pending context rows trigger a context-only draft forward. Buffering
// lets prefill chunks and rounds share draft forwards; the cap bounds the draft's workspace.
const FlushRows = 256

// Session is the DFlash drafting session (DFLASH.md section 3): it turns the target's committed
// rows into draft context and proposes blocks. It implements Drafter. One Session serves one
// request at a time; its draft cache persists across requests (Restore keeps a shared prefix).
//
// Invariants:
//   - Draft cache slots [0, written) hold the context rows of target positions [0, written), each
//     derived only from that position's taps, so a slot never needs look-ahead or rewriting.
//   - pending holds the rows of positions [written, frontier), not yet in the draft cache.
//   - After a Propose the cache also holds that block's rows at [written, written+block); they are
//     rewound before any context write, so context always lands at its true slot.
type Session struct {
	draft model.BlockDraft
	cache cache.Cache
	taps  []int

	written  int // context rows in the draft cache
	frontier int // context rows known: written plus pending
	block    int // block rows sitting on top of the context in the draft cache

	width   int       // floats per context row (taps x target hidden); 0 until the first rows arrive
	pending []float32 // rows of positions [written, frontier), width floats each

	blockTokens []int
	drafts      []int
	q           []sample.Distribution
	hist        []int
}

// NewSession starts a session with a fresh draft cache for up to capacity target positions
// (plus room for one block).
func NewSession(d model.BlockDraft, capacity int) *Session {
	return NewSessionCache(d, d.NewCache(capacity+d.BlockSize()))
}

// NewSessionCache starts a session on an existing draft cache whose rows [0, c.Offset()) are
// context rows of the target positions they are at (a restored prefix); Committed skips them.
func NewSessionCache(d model.BlockDraft, c cache.Cache) *Session {
	return &Session{draft: d, cache: c, taps: d.TargetLayers(), written: c.Offset(), frontier: c.Offset()}
}

func (s *Session) Taps() []int      { return s.taps }
func (s *Session) Limit() int       { return s.draft.BlockSize() - 1 }
func (s *Session) Controlled() bool { return true }

// Frontier is the number of context rows the session knows (written or pending).
func (s *Session) Frontier() int { return s.frontier }

// Cache is the draft cache.
func (s *Session) Cache() cache.Cache { return s.cache }

// Restore drops any block and pending rows, then keeps at most keep context rows.
func (s *Session) Restore(keep int) (int, error) {
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
func (s *Session) Committed(tokens []int, taps [][]float32, position int) error {
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

// Propose drafts min(n, B-1) tokens after current in one draft forward that also writes every
// pending context row. current sits at position frontier; draft row i predicts position
// frontier+i. At temperature 0 each draft is the argmax of its proposal (after penalties); above
// it q_i is the sampler's distribution over row i's logits with history + d_1..d_{i-1}, the same
// filtering the target's p_i gets, and d_i is drawn from it.
func (s *Session) Propose(current, n int, history []int, smp Sampler) ([]int, []sample.Distribution, error) {
	if n < 1 || s.frontier == 0 {
		return nil, nil, nil
	}
	n = min(n, s.draft.BlockSize()-1)
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
		smp.Distribution(q, logits[i*vocab:(i+1)*vocab], s.hist)
		d := smp.Choose(q)
		s.drafts = append(s.drafts, d)
		s.hist = append(s.hist, d)
	}
	return s.drafts, s.q[:n], nil
}

// forwardBlock runs the draft forward that writes every pending context row and the block
// [current, MASK x n] at the frontier, leaving the block's rows on top of the context for the
// next context write to rewind. It returns what the draft returned.
func (s *Session) forwardBlock(current, n int) ([]float32, error) {
	if err := s.dropBlock(); err != nil {
		return nil, err
	}
	s.blockTokens = append(s.blockTokens[:0], current)
	for range n {
		s.blockTokens = append(s.blockTokens, s.draft.MaskID())
	}
	ctxRows := s.frontier - s.written
	before := s.cache.Offset()
	logits, err := s.draft.Forward(s.cache, s.pending, ctxRows, s.blockTokens)
	if err != nil {
		return nil, fmt.Errorf("dflash session: propose %d at position %d: %w", n, s.frontier, err)
	}
	if got := s.cache.Offset(); got != before+ctxRows+n+1 {
		return nil, fmt.Errorf("dflash session: draft forward of %d context and %d block rows moved the cache from %d to %d", ctxRows, n+1, before, got)
	}
	s.written = s.frontier
	s.pending = s.pending[:0]
	s.block = n + 1
	return logits, nil
}

// Settle writes every pending context row and drops any block, leaving the draft cache level
// with the rows committed.
func (s *Session) Settle() error {
	if err := s.dropBlock(); err != nil {
		return err
	}
	if s.frontier > s.written {
		return s.flush(s.frontier - s.written)
	}
	return nil
}

// Close settles the session: an outstanding block is drained even when nothing is pending.
func (s *Session) Close() error { return s.Settle() }

// dropBlock rewinds the last proposal's block rows out of the draft cache.
func (s *Session) dropBlock() error {
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
func (s *Session) flush(rows int) error {
	if err := s.dropBlock(); err != nil {
		return err
	}
	if _, err := s.draft.Forward(s.cache, s.pending[:rows*s.width], rows, nil); err != nil {
		return fmt.Errorf("dflash session: write %d context rows at %d: %w", rows, s.written, err)
	}
	if got := s.cache.Offset(); got != s.written+rows {
		return fmt.Errorf("dflash session: context write of %d rows moved the cache from %d to %d", rows, s.written, got)
	}
	s.written += rows
	s.pending = s.pending[:copy(s.pending, s.pending[rows*s.width:])]
	return nil
}
