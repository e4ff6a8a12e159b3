package runner

import (
	"fmt"

	"github.com/dflash/dflash/sample"
)

// Drafter proposes tokens for the decode loop to verify. The loop tells it every row the target
// keeps (Committed) and asks for drafts after the current token (Propose). A Drafter serves one
// request at a time; Restore starts a request and Close ends it.
type Drafter interface {
	// Taps lists the target decoder layers whose outputs Committed needs (nil: none).
	Taps() []int
	// Limit is the most drafts one round can carry.
	Limit() int
	// Controlled reports whether the loop picks each round's depth with the depth controller;
	// otherwise it asks for Limit() drafts every round.
	Controlled() bool
	// Restore starts a request whose target cache keeps its first keep rows, and returns how many
	// of those rows the drafter holds (at most keep). The loop rewinds the target to that count and
	// re-processes the rest, so the drafter sees their taps through Committed.
	Restore(keep int) (int, error)
	// Committed reports rows the target processed and kept: tokens at positions position...,
	// taps[k] holding len(tokens) x hidden floats of layer Taps()[k].
	Committed(tokens []int, taps [][]float32, position int) error
	// Propose drafts up to n tokens after current (the last emitted token, not yet processed by
	// the target). history is every token before the first draft (current included); s is the
	// request's sampler. It returns the drafts and their proposal distributions q (q[i] is d[i]'s);
	// none when it cannot draft. The slices stay valid until the next call.
	Propose(current, n int, history []int, s Sampler) (drafts []int, q []sample.Distribution, err error)
	// Close ends the request, leaving any persistent state consistent with the rows committed.
	Close() error
}

// OracleDrafter proposes a known token sequence, typically the target's own greedy continuation
// of the prompt, to measure the engine's ceiling (every draft accepted at temperature 0). With
// Noise > 0 each draft is replaced by a pseudo-random token with that probability, which makes a
// drafter that is often but not always right. Its proposals are one-hot: given its own random
// stream (independent of the sampler's) a proposal is deterministic, which keeps verification
// exact at any temperature.
type OracleDrafter struct {
	Tokens []int   // the sequence to propose from: prompt then continuation, by position
	Depth  int     // drafts per round
	Noise  float64 // probability a draft is replaced by a random token in [0, Vocab)
	Vocab  int
	Seed   uint64

	frontier int // position of the current token: rows [0, frontier) are committed
	rng      uint64
	drafts   []int
	q        []sample.Distribution
}

func (o *OracleDrafter) Taps() []int      { return nil }
func (o *OracleDrafter) Limit() int       { return o.Depth }
func (o *OracleDrafter) Controlled() bool { return false }

func (o *OracleDrafter) Restore(keep int) (int, error) {
	o.frontier = keep
	o.rng = o.Seed
	return keep, nil
}

func (o *OracleDrafter) Committed(tokens []int, _ [][]float32, position int) error {
	if position > o.frontier {
		return fmt.Errorf("oracle drafter: committed rows start at %d, beyond the frontier %d", position, o.frontier)
	}
	o.frontier = max(o.frontier, position+len(tokens))
	return nil
}

// Propose drafts Tokens[frontier+1 : frontier+1+n] when current matches Tokens[frontier];
// once the output has left the known sequence it has nothing to offer.
func (o *OracleDrafter) Propose(current, n int, _ []int, _ Sampler) ([]int, []sample.Distribution, error) {
	o.drafts = o.drafts[:0]
	if n < 1 || o.frontier >= len(o.Tokens) || o.Tokens[o.frontier] != current {
		return nil, nil, nil
	}
	for i := o.frontier + 1; i < len(o.Tokens) && len(o.drafts) < n; i++ {
		tok := o.Tokens[i]
		if o.Noise > 0 && o.Vocab > 0 && o.uniform() < o.Noise {
			tok = int(o.next() % uint64(o.Vocab))
		}
		o.drafts = append(o.drafts, tok)
	}
	for len(o.q) < len(o.drafts) {
		o.q = append(o.q, sample.Distribution{IDs: make([]int32, 1), P: []float32{1}})
	}
	for i, d := range o.drafts {
		o.q[i].IDs = append(o.q[i].IDs[:0], int32(d))
		o.q[i].P = append(o.q[i].P[:0], 1)
	}
	return o.drafts, o.q[:len(o.drafts)], nil
}

func (o *OracleDrafter) Close() error { return nil }

// next is splitmix64: the oracle's noise needs only to be reproducible and independent of the
// request's sampler.
func (o *OracleDrafter) next() uint64 {
	o.rng += 0x9e3779b97f4a7c15
	z := o.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (o *OracleDrafter) uniform() float64 { return float64(o.next()>>11) / (1 << 53) }
