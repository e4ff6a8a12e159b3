package runner

import (
	"errors"
	"fmt"

	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/sample"
)

// OracleDrafter proposes a known token sequence, typically the target's own greedy continuation
// of the prompt, to measure the engine's ceiling (every draft accepted at temperature 0). With
// Noise > 0 each draft is replaced by a pseudo-random token with that probability, which makes a
// drafter that is often but not always right. Its proposals are one-hot: given its own random
// stream (independent of the sampler's) a proposal is deterministic, which keeps verification
// exact at any temperature. Its default depth policy is Fixed(Limit).
type OracleDrafter struct {
	Tokens []int   // the sequence to propose from: prompt then continuation, by position
	Limit  int     // most drafts per round
	Noise  float64 // probability a draft is replaced by a random token in [0, Vocab)
	Vocab  int
	Seed   uint64
}

// Open starts an oracle session; it holds no cache, only the frontier and its noise stream.
func (o *OracleDrafter) Open(int) Session { return &oracleSession{o: o} }

// Depth is Fixed(Limit).
func (o *OracleDrafter) Depth() Depth { return Fixed(o.Limit) }

type oracleSession struct {
	o        *OracleDrafter
	frontier int // position of the current token: rows [0, frontier) are committed
	// rng is the noise stream: it needs only to be reproducible and independent of the
	// request's sampler.
	rng    splitmix.Stream
	drafts []int
	q      []sample.Distribution
	closed bool
}

var errClosed = errors.New("session closed")

func (s *oracleSession) Taps() []int { return nil }
func (s *oracleSession) Limit() int  { return s.o.Limit }

func (s *oracleSession) Restore(keep int) (int, error) {
	if s.closed {
		return 0, fmt.Errorf("oracle: restore: %w", errClosed)
	}
	s.frontier = keep
	s.rng = splitmix.Stream{State: s.o.Seed}
	return keep, nil
}

func (s *oracleSession) Committed(tokens []int, _ [][]float32, position int) error {
	if s.closed {
		return fmt.Errorf("oracle: committed: %w", errClosed)
	}
	if position > s.frontier {
		return fmt.Errorf("oracle drafter: committed rows start at %d, beyond the frontier %d", position, s.frontier)
	}
	s.frontier = max(s.frontier, position+len(tokens))
	return nil
}

// Propose drafts Tokens[frontier+1 : frontier+1+n] when current matches Tokens[frontier];
// once the output has left the known sequence it has nothing to offer.
func (s *oracleSession) Propose(current, n int, _ []int, _ Sampler) ([]int, []sample.Distribution, error) {
	if s.closed {
		return nil, nil, fmt.Errorf("oracle: propose: %w", errClosed)
	}
	o := s.o
	s.drafts = s.drafts[:0]
	if n < 1 || s.frontier >= len(o.Tokens) || o.Tokens[s.frontier] != current {
		return nil, nil, nil
	}
	for i := s.frontier + 1; i < len(o.Tokens) && len(s.drafts) < n; i++ {
		tok := o.Tokens[i]
		if o.Noise > 0 && o.Vocab > 0 && s.rng.Float64() < o.Noise {
			tok = int(s.rng.Next() % uint64(o.Vocab))
		}
		s.drafts = append(s.drafts, tok)
	}
	for len(s.q) < len(s.drafts) {
		s.q = append(s.q, sample.Distribution{IDs: make([]int32, 1), P: []float32{1}})
	}
	for i, d := range s.drafts {
		s.q[i].IDs = append(s.q[i].IDs[:0], int32(d))
		s.q[i].P = append(s.q[i].P[:0], 1)
	}
	return s.drafts, s.q[:len(s.drafts)], nil
}

// Settle has nothing to write: the oracle keeps no draft cache.
func (s *oracleSession) Settle() error {
	if s.closed {
		return fmt.Errorf("oracle: settle: %w", errClosed)
	}
	return nil
}

func (s *oracleSession) Close() error {
	if s.closed {
		return fmt.Errorf("oracle: close: %w", errClosed)
	}
	s.closed = true
	return nil
}
