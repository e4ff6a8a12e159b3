package runner

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/sample"
)

// SelectorDepth is how many tokens a DFlash2 drafter's default policy drafts every round
// (DFLASH.md section 5: the depth controller's shallower picks lose more accepted tokens than
// they save).
const SelectorDepth = 7

// SelectorDrafter is the long-lived side of a DFlash2 draft. Its default policy is
// Fixed(min(SelectorDepth, B-1)), which neither follows nor trains a controller.
type SelectorDrafter struct {
	draft model.BlockSelector
}

// NewSelectorDrafter wraps a DFlash2 draft.
func NewSelectorDrafter(d model.BlockSelector) *SelectorDrafter { return &SelectorDrafter{draft: d} }

// Open starts a selector session with a fresh draft cache for up to capacity target positions.
func (s *SelectorDrafter) Open(capacity int) Session { return NewSelectorSession(s.draft, capacity) }

// Depth is Fixed(min(SelectorDepth, B-1)).
func (s *SelectorDrafter) Depth() Depth {
	return Fixed(max(0, min(SelectorDepth, s.draft.BlockSize()-1)))
}

// SelectorSession is the DFlash2 drafting session: the DFlash session's context handling (the
// same buffering, rewinds and restored prefix) with proposals made by walking the Walk that the
// draft's forward returns.
//
// The walk starts from the anchor (the current token, slot 1's predecessor); each slot's
// candidates are scored given the token chosen for the slot before. At temperature 0 a slot
// takes its highest score (the earlier candidate, i.e. the higher unary logit, on ties); above
// it the token is drawn from q = softmax(score / T) over the slot's K candidates (coupled: q's
// race winner, with the arrival times the target races at that position), with the
// request's temperature only (top-k, top-p, min-p and penalties shape the target's p, not q).
// q is returned as a sparse distribution, so verification's accept test and residual are exact.
// A draft whose block attention is bidirectional (the reference's) always runs its full block:
// every row sees every other, so fewer rows would change every slot's scores. A draft that says
// its block is causal (model.CausalBlock: causal attention, convolutions causal inside the block)
// runs only the anchor and the n rows it drafts, whose scores cannot depend on later rows:
// bitwise the full block's for slots 1..n (dflash2's TestCausalBlockRows).
type SelectorSession struct {
	draftContext[model.Walk]
	causal bool // the draft's block is causal: forward n+1 rows, not B

	ids    []int32
	scores []float32
	drafts []int
	q      []sample.Distribution
}

// NewSelectorSession starts a selector session with a fresh draft cache for up to capacity
// target positions (plus room for one block).
func NewSelectorSession(d model.BlockSelector, capacity int) *SelectorSession {
	return NewSelectorSessionCache(d, d.NewCache(capacity+d.BlockSize()))
}

// NewSelectorSessionCache starts a selector session on an existing draft cache whose rows
// [0, c.Offset()) are context rows of the target positions they are at (a restored prefix).
func NewSelectorSessionCache(d model.BlockSelector, c cache.Cache) *SelectorSession {
	cb, ok := d.(model.CausalBlock)
	return &SelectorSession{draftContext: newDraftContext(d.Forward, d.BlockSize(), d.MaskID(), d.TargetLayers(), c),
		causal: ok && cb.CausalBlock()}
}

// Propose drafts min(n, B-1) tokens after current by walking the selector's slots over one
// draft forward (the full block, or n+1 rows for a causal block) (which also writes every pending context row). q[i] is the sparse
// proposal d[i] was drawn from (one-hot at temperature 0); history serves only for d[i]'s
// position, len(history)+i, which keys its draw.
func (s *SelectorSession) Propose(current, n int, history []int, smp Sampler) ([]int, []sample.Distribution, error) {
	if err := s.check("propose"); err != nil {
		return nil, nil, err
	}
	if n < 1 || s.frontier == 0 || s.blockSize < 2 {
		return nil, nil, nil
	}
	n = min(n, s.blockSize-1)
	rows := s.blockSize - 1
	if s.causal {
		rows = n
	}
	walk, err := s.forwardBlock(current, rows)
	if err != nil {
		return nil, nil, fmt.Errorf("selector session: %w", err)
	}
	if walk == nil {
		return nil, nil, fmt.Errorf("selector session: the draft returned no walk for a block of %d rows", s.blockSize)
	}
	var temp float64
	if !smp.Greedy {
		temp = float64(smp.Options().Temperature)
	}
	for len(s.q) < n {
		s.q = append(s.q, sample.Distribution{})
	}
	s.drafts = s.drafts[:0]
	prev := current
	for slot := 1; slot <= n; slot++ {
		s.ids, s.scores = walk.Candidates(slot, prev, s.ids[:0], s.scores[:0])
		if len(s.ids) == 0 || len(s.ids) != len(s.scores) {
			return nil, nil, fmt.Errorf("selector session: slot %d has %d candidates and %d scores", slot, len(s.ids), len(s.scores))
		}
		if m, ok := smp.DraftMask(); !ok {
			break // the output would be complete here: nothing to propose
		} else if m != nil {
			// Under a constraint only allowed candidates are proposed; q is over them.
			k := 0
			for i, id := range s.ids {
				if m.Allows(int(id)) {
					s.ids[k], s.scores[k] = s.ids[i], s.scores[i]
					k++
				}
			}
			if k == 0 {
				break // no candidate fits the grammar: stop drafting
			}
			s.ids, s.scores = s.ids[:k], s.scores[:k]
		}
		q := &s.q[slot-1]
		var d int
		if smp.Greedy {
			d = int(s.ids[sample.ArgmaxScore(s.scores)])
			q.OneHot(d)
		} else {
			sample.Proposal(q, s.ids, s.scores, temp)
			d = smp.Choose(q, len(history)+slot-1, sample.DrawDraft)
		}
		smp.DraftChosen(d)
		s.drafts = append(s.drafts, d)
		prev = d
	}
	return s.drafts, s.q[:len(s.drafts)], nil
}
