package runner

import "github.com/dflash/dflash/sample"

// Drafter is a draft's long-lived side: one per model pair, shared by every request and, with
// batched serving, by every sequence. It holds what outlives a request (the draft's weights, the
// depth policy and an adaptive controller's learned rates and costs) and opens one Session per
// sequence. It holds no per-sequence state, so sessions it opened are independent.
type Drafter interface {
	// Open starts a session for one sequence of up to capacity target positions. Whoever opens a
	// session closes it: Generate only restores and settles the session it is given.
	Open(capacity int) Session
	// Depth is the policy that picks each round's draft length for this drafter's sessions. An
	// adaptive policy's controller is the drafter's, so what one request teaches it carries over
	// to the next.
	Depth() Depth
}

// Session is one sequence's drafting state: the draft cache and the context rows not yet in it.
// The decode loop reports every row the target keeps (Committed) and asks for drafts after the
// current token (Propose). A Session outlives a request: the next request on the same sequence
// calls Restore to keep the prefix both caches share.
type Session interface {
	// Taps lists the target decoder layers whose outputs Committed needs (nil: none).
	Taps() []int
	// Limit is the most drafts one round can carry (B-1 for a block draft).
	Limit() int
	// Restore starts a request whose target cache keeps its first keep rows, and returns how many
	// of those rows the session holds (at most keep). The loop rewinds the target to that count and
	// re-processes the rest, so the session sees their taps through Committed.
	Restore(keep int) (int, error)
	// Committed reports rows the target processed and kept: tokens at positions position...,
	// taps[k] holding len(tokens) x hidden floats of layer Taps()[k].
	Committed(tokens []int, taps [][]float32, position int) error
	// Propose drafts up to n tokens after current (the last emitted token, not yet processed by
	// the target). history is every token before the first draft (current included); s is the
	// request's sampler. It returns the drafts and their proposal distributions q (q[i] is d[i]'s);
	// none when it cannot draft. d[i] is the token at position len(history)+i, and a sampled draft
	// is drawn with s's sample.DrawDraft uniform of that position, so its randomness does not
	// depend on earlier rounds. The slices stay valid until the next call.
	Propose(current, n int, history []int, s Sampler) (drafts []int, q []sample.Distribution, err error)
	// Settle writes any pending context and drops any outstanding proposal, leaving the session
	// level with the rows committed. The loop settles when a request ends, never between rounds:
	// a proposal's forward writes the pending context itself (one draft forward a round).
	Settle() error
	// Close settles the session and ends it; a closed session refuses every later call.
	Close() error
}

// WithDepth is d with its depth policy replaced by p: a fixed depth asked for on the command
// line, or an adaptive controller shared with another drafter.
func WithDepth(d Drafter, p Depth) Drafter { return withDepth{d, p} }

type withDepth struct {
	Drafter
	p Depth
}

func (w withDepth) Depth() Depth { return w.p }
