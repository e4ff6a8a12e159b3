package runner

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/sample"
)

// SelectorDepth is how many tokens a DFlash2 selector session drafts every round (DFLASH.md
// section 5: the depth controller's shallower picks lose more accepted tokens than they save).
const SelectorDepth = 7

// SelectorSession is the DFlash2 drafting session: the DFlash session's context handling (it is
// a Session underneath: the same buffering, rewinds and restored prefix) with proposals made by
// walking a model.BlockSelector's slots. It implements Drafter with a fixed depth of
// min(SelectorDepth, B-1) and Controlled() false, so it neither follows nor trains the depth
// controller.
//
// The walk starts from the anchor (the current token, slot 1's predecessor); each slot's
// candidates are scored given the token chosen for the slot before. At temperature 0 a slot
// takes its highest score (the earlier candidate, i.e. the higher unary logit, on ties); above
// it the token is drawn from q = softmax(score / T) over the slot's K candidates, with the
// request's temperature only (top-k, top-p, min-p and penalties shape the target's p, not q).
// q is returned as a sparse distribution, so verification's accept test and residual are exact.
// The draft always runs its full block: its attention is bidirectional and its convolutions
// expect whole blocks, so fewer rows would change every slot's scores.
type SelectorSession struct {
	*Session
	sel   *selectorDraft
	depth int

	ids    []int32
	scores []float32
	drafts []int
	q      []sample.Distribution
}

// selectorDraft presents a BlockSelector to the Session as a BlockDraft: its Forward keeps the
// Walk and returns no logits. Only the SelectorSession, which reads the Walk, ever uses it.
type selectorDraft struct {
	model.BlockSelector
	walk model.Walk
}

func (a *selectorDraft) Forward(c cache.Cache, ctx []float32, ctxRows int, block []int) ([]float32, error) {
	w, err := a.BlockSelector.Forward(c, ctx, ctxRows, block)
	a.walk = w
	return nil, err
}

// NewSelectorSession starts a selector session with a fresh draft cache for up to capacity
// target positions (plus room for one block).
func NewSelectorSession(d model.BlockSelector, capacity int) *SelectorSession {
	return NewSelectorSessionCache(d, d.NewCache(capacity+d.BlockSize()))
}

// NewSelectorSessionCache starts a selector session on an existing draft cache whose rows
// [0, c.Offset()) are context rows of the target positions they are at (a restored prefix).
func NewSelectorSessionCache(d model.BlockSelector, c cache.Cache) *SelectorSession {
	a := &selectorDraft{BlockSelector: d}
	return &SelectorSession{Session: NewSessionCache(a, c), sel: a, depth: max(0, min(SelectorDepth, d.BlockSize()-1))}
}

// Limit is the fixed depth: min(SelectorDepth, B-1).
func (s *SelectorSession) Limit() int { return s.depth }

// Controlled is false: the loop asks for Limit() drafts every round and never feeds the depth
// controller this session's rounds.
func (s *SelectorSession) Controlled() bool { return false }

// Propose drafts min(n, Limit()) tokens after current by walking the selector's slots over one
// full-block draft forward (which also writes every pending context row). q[i] is the sparse
// proposal d[i] was drawn from (one-hot at temperature 0).
func (s *SelectorSession) Propose(current, n int, _ []int, smp Sampler) ([]int, []sample.Distribution, error) {
	if n < 1 || s.frontier == 0 || s.depth < 1 {
		return nil, nil, nil
	}
	n = min(n, s.depth)
	s.sel.walk = nil
	if _, err := s.forwardBlock(current, s.draft.BlockSize()-1); err != nil {
		return nil, nil, fmt.Errorf("selector session: %w", err)
	}
	walk := s.sel.walk
	if walk == nil {
		return nil, nil, fmt.Errorf("selector session: the draft returned no walk for a block of %d rows", s.draft.BlockSize())
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
		q := &s.q[slot-1]
		var d int
		if smp.Greedy {
			d = int(s.ids[sample.ArgmaxScore(s.scores)])
			q.OneHot(d)
		} else {
			sample.Proposal(q, s.ids, s.scores, temp)
			d = smp.Draw(q)
		}
		s.drafts = append(s.drafts, d)
		prev = d
	}
	return s.drafts, s.q[:n], nil
}
