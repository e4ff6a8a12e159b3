package runner

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/sample"
)

// Acceptance is a measured distribution of acceptance per round: Counts[k] is how many rounds
// (or what weight of them) accepted exactly k drafts. It is what a simulation draws each round's
// acceptance from, so that a draft of real cost and shape can stand in for a trained one whose
// weights are out of reach.
type Acceptance struct {
	Counts []float64
	cum    []float64 // cum[k] = sum of Counts[0..k] / total
}

// NewAcceptance checks counts (non-negative, some positive) and prepares drawing from them.
func NewAcceptance(counts []float64) (*Acceptance, error) {
	if len(counts) == 0 {
		return nil, fmt.Errorf("acceptance histogram: no counts")
	}
	var total float64
	for k, c := range counts {
		if c < 0 || c != c {
			return nil, fmt.Errorf("acceptance histogram: count %v for %d accepted drafts", c, k)
		}
		total += c
	}
	if total <= 0 {
		return nil, fmt.Errorf("acceptance histogram: every count is zero")
	}
	a := &Acceptance{Counts: append([]float64(nil), counts...), cum: make([]float64, len(counts))}
	var run float64
	for k, c := range counts {
		run += c
		a.cum[k] = run / total
	}
	a.cum[len(a.cum)-1] = 1
	return a, nil
}

// ParseAcceptance reads a histogram in one of three forms: a JSON array of counts, a JSON object
// whose "counts" field is that array (other fields, such as a note of where it came from, are
// ignored), or text of counts separated by spaces, commas or newlines, with '#' starting a
// comment. Entry k counts the rounds that accepted exactly k drafts.
func ParseAcceptance(data []byte) (*Acceptance, error) {
	s := strings.TrimSpace(string(data))
	var counts []float64
	switch {
	case strings.HasPrefix(s, "["):
		if err := json.Unmarshal([]byte(s), &counts); err != nil {
			return nil, fmt.Errorf("acceptance histogram: %w", err)
		}
	case strings.HasPrefix(s, "{"):
		var obj struct {
			Counts []float64 `json:"counts"`
		}
		if err := json.Unmarshal([]byte(s), &obj); err != nil {
			return nil, fmt.Errorf("acceptance histogram: %w", err)
		}
		counts = obj.Counts
	default:
		for _, line := range strings.Split(s, "\n") {
			line, _, _ = strings.Cut(line, "#")
			for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
				v, err := strconv.ParseFloat(f, 64)
				if err != nil {
					return nil, fmt.Errorf("acceptance histogram: entry %d: %w", len(counts), err)
				}
				counts = append(counts, v)
			}
		}
	}
	return NewAcceptance(counts)
}

// Draw maps a uniform u in [0, 1) to an acceptance count by the inverse of the cumulative
// histogram.
func (a *Acceptance) Draw(u float64) int {
	for k, c := range a.cum {
		if u < c {
			return k
		}
	}
	return len(a.cum) - 1
}

// P is the probability of accepting exactly k drafts.
func (a *Acceptance) P(k int) float64 {
	if k < 0 || k >= len(a.cum) {
		return 0
	}
	if k == 0 {
		return a.cum[0]
	}
	return a.cum[k] - a.cum[k-1]
}

// Tau is the histogram's acceptance length, mean accepted + 1, when every round drafts at least
// len(Counts)-1 tokens.
func (a *Acceptance) Tau() float64 {
	var m float64
	for k := range a.cum {
		m += float64(k) * a.P(k)
	}
	return m + 1
}

// AcceptanceOf is the histogram of a run's drafting rounds (rounds that verified no draft are
// left out): entry k counts rounds that accepted exactly k drafts. AcceptedAt[i] counts rounds
// that accepted at least i+1 drafts, so neighbouring entries differ by the rounds that stopped
// there. It is the input --acceptance reads.
func AcceptanceOf(st Stats) []int {
	drafting := st.Rounds
	if len(st.Depths) > 0 {
		drafting -= st.Depths[0]
	}
	out := make([]int, len(st.AcceptedAt)+1)
	prev := drafting
	for i, c := range st.AcceptedAt {
		out[i] = prev - c
		prev = c
	}
	out[len(st.AcceptedAt)] = prev
	return out
}

// SimulatedDrafter stands in for a trained draft that is out of reach: every round it runs Inner
// (a draft of the real shape, e.g. random weights) at full cost and discards its proposal, then
// proposes the target's own continuation cut at an acceptance drawn from Accept. It proposes
// as many drafts as Inner did: the first k (the draw) are Tokens' next ones, the (k+1)-th is
// wrong and the rest are Tokens' again, which verification rejects after the wrong one. So a
// greedy round accepts exactly min(k, drafts) and verifies the rows a real round would: the
// round costs what the real draft's would, and the output is the target's, as with any drafter.
//
// Tokens must be the target's greedy sequence (prompt then continuation, by position), as for
// OracleDrafter; the simulation is for temperature 0 only. Once the output leaves Tokens (it
// cannot at temperature 0, but a caller may give a short one) it proposes nothing.
type SimulatedDrafter struct {
	Inner  Drafter
	Tokens []int
	Accept *Acceptance
	Vocab  int    // wrong drafts are the right token + 1 modulo Vocab
	Seed   uint64 // seeds the stream of draws; a session's draws depend only on it
	// OnDraw, when set, sees every draw k and the acceptance the proposal allows (min(k, drafts,
	// tokens left in Tokens)); tests check the draws against Accept and the run against it.
	OnDraw func(drawn, allowed int)
}

// Open opens Inner's session and wraps it.
func (d *SimulatedDrafter) Open(capacity int) Session {
	return &simSession{d: d, inner: d.Inner.Open(capacity), rng: splitmix.Stream{State: d.Seed}}
}

// Depth is Inner's policy: an adaptive controller learns from the simulated acceptance and the
// real costs, as it would from a trained draft's.
func (d *SimulatedDrafter) Depth() Depth { return d.Inner.Depth() }

type simSession struct {
	d        *SimulatedDrafter
	inner    Session
	frontier int // position of the current token: rows [0, frontier) are committed
	rng      splitmix.Stream
	drafts   []int
	q        []sample.Distribution
}

func (s *simSession) Taps() []int { return s.inner.Taps() }
func (s *simSession) Limit() int  { return s.inner.Limit() }

func (s *simSession) Restore(keep int) (int, error) {
	k, err := s.inner.Restore(keep)
	if err != nil {
		return 0, fmt.Errorf("simulated drafter: %w", err)
	}
	s.frontier = k
	return k, nil
}

func (s *simSession) Committed(tokens []int, taps [][]float32, position int) error {
	if err := s.inner.Committed(tokens, taps, position); err != nil {
		return fmt.Errorf("simulated drafter: %w", err)
	}
	s.frontier = max(s.frontier, position+len(tokens))
	return nil
}

// Propose runs the real draft's proposal for its cost and replaces it; see SimulatedDrafter.
func (s *simSession) Propose(current, n int, history []int, smp Sampler) ([]int, []sample.Distribution, error) {
	real, _, err := s.inner.Propose(current, n, history, smp)
	if err != nil {
		return nil, nil, fmt.Errorf("simulated drafter: %w", err)
	}
	n = len(real)
	toks := s.d.Tokens
	s.drafts = s.drafts[:0]
	if n == 0 || s.frontier >= len(toks) || toks[s.frontier] != current {
		return nil, nil, nil
	}
	k := s.d.Accept.Draw(s.rng.Float64())
	next := toks[s.frontier+1:]
	n = min(n, len(next))
	allowed := min(k, n)
	for i := range n {
		t := next[i]
		if i == allowed {
			t = (t + 1) % max(s.d.Vocab, 2)
		}
		s.drafts = append(s.drafts, t)
	}
	if s.d.OnDraw != nil {
		s.d.OnDraw(k, allowed)
	}
	for len(s.q) < len(s.drafts) {
		s.q = append(s.q, sample.Distribution{IDs: make([]int32, 1), P: []float32{1}})
	}
	for i, t := range s.drafts {
		s.q[i].IDs = append(s.q[i].IDs[:0], int32(t))
		s.q[i].P = append(s.q[i].P[:0], 1)
	}
	return s.drafts, s.q[:len(s.drafts)], nil
}

func (s *simSession) Settle() error { return s.inner.Settle() }
func (s *simSession) Close() error  { return s.inner.Close() }
