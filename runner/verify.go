package runner

import "github.com/dflash/dflash/sample"

// Sampler is a request's sampler, whether it decodes greedily and whether it samples by the
// coupled race. Drafters and the verifier choose tokens through it (sample.Sampler.Choose) so
// that a draft and the target filter logits and break ties the same way, and when coupled race
// with the same arrival times.
type Sampler struct {
	*sample.Sampler
	Greedy  bool
	Coupled bool // sampled (not greedy) by sample.Sampler.Race
	// drafts, under a constraint, follows a round's proposals so that a drafter masks them as
	// verification will (MaskDraft, DraftChosen); nil without one.
	drafts *draftMask
}

// draftMask is the constraint's state along the round's proposals so far.
type draftMask struct {
	c      Constraint
	state  any
	budget int // tokens that may be emitted from the first proposal on (0: no limit)
	slot   int // proposals chosen so far
	buf    []float32
}

// MaskDraft returns the logits row of the next proposal masked by the request's constraint at
// the proposals chosen so far (the row itself without a constraint), and false when nothing may
// be proposed there (the output would be complete): the drafter then stops proposing. Masked
// proposals are ones the target can keep; q stays the distribution the proposal was drawn
// from, so verification is exact either way. The row is valid until the next call.
func (s Sampler) MaskDraft(row []float32) ([]float32, bool) {
	m, ok := s.DraftMask()
	if m == nil || !ok {
		return row, ok
	}
	dm := s.drafts
	dm.buf = m.Apply(dm.buf, row)
	return dm.buf, true
}

// DraftMask is the mask of the next proposal (nil without a constraint), and false when nothing
// may be proposed there. For drafters that choose among candidates rather than from a logits row.
func (s Sampler) DraftMask() (*sample.Mask, bool) {
	dm := s.drafts
	if dm == nil {
		return nil, true
	}
	b := 0
	if dm.budget > 0 {
		b = max(dm.budget-dm.slot, 1)
	}
	m := dm.c.Allowed(dm.state, b)
	return m, m.Count > 0
}

// DraftChosen records the proposal a drafter chose from MaskDraft's row.
func (s Sampler) DraftChosen(token int) {
	if dm := s.drafts; dm != nil {
		dm.state, _ = dm.c.Advance(dm.state, token)
		dm.slot++
	}
}

// NewSampler builds the sampler for options o over vocab tokens.
func NewSampler(o sample.Options, vocab int) Sampler {
	return Sampler{Sampler: sample.New(o, vocab), Greedy: o.Greedy(), Coupled: o.Race()}
}

// verifier decides a round from the target's logits over [current, d_1..d_n] (DFLASH.md
// section 1; coupled, a draft is kept while it equals the target's race winner, which is the token
// plain coupled decoding would have chosen there). Row i's target distribution p_{i+1} is built with history + d_1..d_i, the same
// history the drafter used for q_{i+1}, so penalties see the drafts as generated tokens. Row i
// decides the token at position len(history)+i, and its draws (accept test, residual, bonus) are
// keyed by that position, the position the drafter drew d_{i+1} at.
//
// Under a constraint, row i is masked by the constraint's state after d_1..d_i (the state the
// token it decides follows), so p is the masked target p'. Greedy keeps a draft while it is the
// masked argmax; rejection sampling tests d against p' with the draft's own (unmasked) q, which
// is exact for any q: a disallowed draft has p'(d) = 0 and is always rejected, and the residual
// norm(max(p' - q, 0)) lies within the allowed tokens. The output is distributed as p' exactly,
// as plain constrained decoding samples it.
type verifier struct {
	s      Sampler
	p      sample.Distribution
	hist   []int
	out    []int
	masked []float32
}

// decide returns the round's new tokens: the accepted drafts then one token from the target
// (the correction at the first rejection, or the bonus when every draft was accepted).
// accepted is the number of drafts kept. logits holds len(drafts)+1 rows of vocab floats. A
// constraint c (nil: none) in state cs masks each row, with budget (0: none) the tokens that may
// be emitted from row 0's token on.
func (v *verifier) decide(logits []float32, vocab int, drafts []int, q []sample.Distribution, history []int, c Constraint, cs any, budget int) (out []int, accepted int) {
	v.hist = append(v.hist[:0], history...)
	v.out = v.out[:0]
	for i := 0; i <= len(drafts); i++ {
		pos := len(v.hist)
		row := logits[i*vocab : (i+1)*vocab]
		if c != nil {
			b := 0
			if budget > 0 {
				b = max(budget-i, 1)
			}
			m := c.Allowed(cs, b)
			if m.Count == 0 {
				// The drafts kept completed the output and nothing may follow (no stop token
				// either): the round ends with them, as plain decoding ends there. i > 0, since
				// the round starts only where something is allowed.
				break
			}
			v.masked = m.Apply(v.masked, row)
			row = v.masked
		}
		v.s.Distribution(&v.p, row, v.hist)
		if i == len(drafts) {
			v.out = append(v.out, v.s.Choose(&v.p, pos, sample.DrawToken))
			break
		}
		d := drafts[i]
		if v.s.Greedy {
			if top := v.p.Mode(); top != d {
				v.out = append(v.out, top)
				break
			}
		} else if v.s.Coupled {
			// The race winner is the token plain decoding emits at pos; q plays no part, so the
			// output is the target's whatever the draft proposed.
			if top := v.s.Race(&v.p, pos); top != d {
				v.out = append(v.out, top)
				break
			}
		} else if !v.s.Accept(&v.p, &q[i], d, pos) {
			// Resampling from the residual norm(max(p - q, 0)) is what makes accept-or-resample
			// distributed exactly as p (sample.Resample falls back to p when p == q).
			v.out = append(v.out, v.s.Resample(&v.p, &q[i], pos))
			break
		}
		if c != nil {
			// d was kept, so the masked target allows it: the advance succeeds.
			cs, _ = c.Advance(cs, d)
		}
		v.out = append(v.out, d)
		v.hist = append(v.hist, d)
		accepted++
	}
	return v.out, accepted
}
