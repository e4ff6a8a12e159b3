package main

import (
	"fmt"
	"math"

	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/sample"
)

// Branches is a target positioned after one context that can fork that context into many
// sequences and extend them. The engine implementation (engineBranches) clones the context's
// cache; the tests implement it with closed-form fake targets.
type Branches interface {
	// First is the target's filtered distribution of the token right after the context.
	First() *sample.Distribution
	// Fork discards every branch and starts n new ones, each holding the context only.
	Fork(n int) error
	// Append appends rows[i] to branch i (every branch gets a slice, all of the same length) and
	// returns, for each branch i and row r, the filtered distribution of the token after
	// rows[i][:r+1]. The distributions are valid until the next Append or Fork.
	Append(rows [][]int) ([][]sample.Distribution, error)
}

// Config is what one estimate measures.
type Config struct {
	D       int            // block depth: drafts per round
	M       int            // target continuations behind the marginals q_j
	B       int            // further, independent continuations for the overlap bound
	R       int            // speculative rounds simulated per drafter
	Chunk   int            // branches per Fork while sampling continuations (memory bound)
	Options sample.Options // the target's sampling: temperature, top-p (no penalties)
}

// Drafter names the product proposals a context is measured with.
const (
	Marginal      = iota // q_j = marginal of the target's token j, from all M continuations
	MarginalQuart        // the same from the first M/4 continuations: the estimate's convergence
	Mode                 // q_j one-hot at the marginal's most probable token (a greedy parallel draft)
	nDrafters
)

var drafterNames = [nDrafters]string{"marginal", "marginal M/4", "marginal mode"}

// ContextResult is what one context measured. Every array indexed k holds, at k-1, an estimate
// of P(the first k drafts are accepted), k = 1..D, so tau at depth d is 1 + the sum of the first
// d entries.
type ContextResult struct {
	// Reject[v] is rejection sampling with drafter v, Rao-Blackwellised: each simulated round
	// contributes the product of its accept probabilities min(1, p/q) rather than one coin flip
	// per draft (the same expectation, less variance).
	Reject [nDrafters][]float64
	// RejectFlip[v] is the same rounds decided by the engine's own accept test
	// (sample.Sampler.Accept, one uniform per draft): the plain simulation.
	RejectFlip [nDrafters][]float64
	// Coupled is the Gumbel-coupled race of the engine's --coupled mode with the marginal
	// drafter (M): the draft races q_j, the target races p_j with the same arrival times, and a
	// draft is kept while it equals the target's winner.
	Coupled []float64
	// Overlap is sum over k-token sequences y of min(P(y), Q(y)) for the marginal product Q
	// (M): an upper bound on P(first k accepted) for that drafter under ANY verification rule
	// that leaves the output distributed as the target's.
	Overlap []float64
}

// Tau is 1 + the sum of the first d acceptance probabilities of acc.
func Tau(acc []float64, d int) float64 {
	t := 1.0
	for k := 0; k < d && k < len(acc); k++ {
		t += acc[k]
	}
	return t
}

// dense is a dense distribution accumulated in float64.
type dense []float64

func (a dense) add(d *sample.Distribution, w float64) {
	for i, p := range d.P {
		if p > 0 {
			a[d.ID(i)] += w * float64(p)
		}
	}
}

// toDist normalises a into a dense sample.Distribution.
func (a dense) toDist(dst *sample.Distribution) {
	var sum float64
	for _, v := range a {
		sum += v
	}
	dst.IDs = nil
	dst.P = make([]float32, len(a))
	for i, v := range a {
		dst.P[i] = float32(v / sum)
	}
}

func (a dense) mode() int {
	best := 0
	for i, v := range a {
		if v > a[best] {
			best = i
		}
	}
	return best
}

// EstimateContext measures one context: it samples cfg.M + cfg.B target continuations of D
// tokens, builds the marginals q_j as the average of the target's conditional distributions along
// the first M (the Rao-Blackwellised estimate: unbiased, exact at j = 1), then simulates cfg.R
// fresh rounds per drafter in which every draft token is drawn independently from its q_j and
// the target's p_j is computed on the drafted prefix, as verification does. seed keys every
// draw of the context (the engine's counter-based uniforms, one unique position per draw).
func EstimateContext(t Branches, cfg Config, vocab int, seed uint64) (ContextResult, error) {
	D := cfg.D
	var res ContextResult
	opts := cfg.Options
	opts.Seed = seed
	s := sample.New(opts, vocab)
	next := 0 // the next unused draw position: every draw of this context has its own
	pos := func() int { next++; return next }

	// 1. Target continuations: the marginals from the first M, the bound samples after them.
	qAll := make([]dense, D)
	qQuart := make([]dense, D)
	for j := range qAll {
		qAll[j] = make(dense, vocab)
		qQuart[j] = make(dense, vocab)
	}
	quart := max(cfg.M/4, 1)
	type boundSample struct {
		y    []int
		logP []float64 // log p_j(y_j) along the sample
	}
	var bound []boundSample
	chunk := max(cfg.Chunk, 1)
	total := cfg.M + cfg.B
	for lo := 0; lo < total; lo += chunk {
		n := min(chunk, total-lo)
		if err := t.Fork(n); err != nil {
			return res, err
		}
		cur := make([]*sample.Distribution, n)
		for i := range cur {
			cur[i] = t.First()
		}
		toks := make([][]int, n)
		ys := make([][]int, n)
		logP := make([][]float64, n)
		for j := 0; j < D; j++ {
			for i := 0; i < n; i++ {
				m := lo + i
				d := cur[i]
				switch {
				case m < cfg.M:
					qAll[j].add(d, 1)
					if m < quart {
						qQuart[j].add(d, 1)
					}
				}
				y := s.Choose(d, pos(), sample.DrawToken)
				if m >= cfg.M {
					ys[i] = append(ys[i], y)
					logP[i] = append(logP[i], math.Log(float64(d.Prob(y))))
				}
				toks[i] = append(toks[i][:0], y)
			}
			if j == D-1 {
				break
			}
			out, err := t.Append(toks)
			if err != nil {
				return res, err
			}
			for i := range cur {
				cur[i] = &out[i][0]
			}
		}
		for i := 0; i < n; i++ {
			if lo+i >= cfg.M {
				bound = append(bound, boundSample{ys[i], logP[i]})
			}
		}
	}
	var q [nDrafters][]sample.Distribution
	for v := range q {
		q[v] = make([]sample.Distribution, D)
	}
	for j := 0; j < D; j++ {
		qAll[j].toDist(&q[Marginal][j])
		qQuart[j].toDist(&q[MarginalQuart][j])
		q[Mode][j].OneHot(qAll[j].mode())
	}

	// 2. The overlap bound: E_{y~P} min(1, Q(y_1..k) / P(y_1..k)) on fresh samples.
	res.Overlap = make([]float64, D)
	for _, b := range bound {
		var lr float64
		for k := 0; k < D; k++ {
			qk := float64(q[Marginal][k].Prob(b.y[k]))
			if qk <= 0 {
				break // Q(y) = 0 from here on
			}
			lr += math.Log(qk) - b.logP[k]
			res.Overlap[k] += math.Min(1, math.Exp(lr)) / float64(len(bound))
		}
	}

	// 3. Simulated rounds. score forks R branches, appends the drafts and returns p_j of each.
	score := func(drafts [][]int) ([][]sample.Distribution, error) {
		if err := t.Fork(len(drafts)); err != nil {
			return nil, err
		}
		if D == 1 {
			return make([][]sample.Distribution, len(drafts)), nil
		}
		rows := make([][]int, len(drafts))
		for r := range rows {
			rows[r] = drafts[r][:D-1]
		}
		return t.Append(rows)
	}
	p := func(out [][]sample.Distribution, r, j int) *sample.Distribution {
		if j == 0 {
			return t.First()
		}
		return &out[r][j-1]
	}
	for v := 0; v < nDrafters; v++ {
		res.Reject[v] = make([]float64, D)
		res.RejectFlip[v] = make([]float64, D)
		drafts := make([][]int, cfg.R)
		keys := make([][]int, cfg.R)
		for r := range drafts {
			for j := 0; j < D; j++ {
				k := pos()
				keys[r] = append(keys[r], k)
				drafts[r] = append(drafts[r], s.Draw(&q[v][j], k, sample.DrawDraft))
			}
		}
		out, err := score(drafts)
		if err != nil {
			return res, err
		}
		for r := range drafts {
			prod, flip := 1.0, true
			for j := 0; j < D; j++ {
				pj, qj, x := p(out, r, j), &q[v][j], drafts[r][j]
				prod *= math.Min(1, float64(pj.Prob(x))/float64(qj.Prob(x)))
				res.Reject[v][j] += prod / float64(cfg.R)
				flip = flip && s.Accept(pj, qj, x, keys[r][j])
				if flip {
					res.RejectFlip[v][j] += 1 / float64(cfg.R)
				}
			}
		}
	}

	// Coupled: the draft is the race winner of q_j at the position's arrival times; the
	// target's winner of p_j(. | drafted prefix) at the same times decides.
	res.Coupled = make([]float64, D)
	drafts := make([][]int, cfg.R)
	keys := make([][]int, cfg.R)
	for r := range drafts {
		for j := 0; j < D; j++ {
			k := pos()
			keys[r] = append(keys[r], k)
			drafts[r] = append(drafts[r], s.Race(&q[Marginal][j], k))
		}
	}
	out, err := score(drafts)
	if err != nil {
		return res, err
	}
	for r := range drafts {
		for j := 0; j < D; j++ {
			if s.Race(p(out, r, j), keys[r][j]) != drafts[r][j] {
				break
			}
			res.Coupled[j] += 1 / float64(cfg.R)
		}
	}
	return res, nil
}

// contextSeed is the seed of context i's draws under run seed seed.
func contextSeed(seed uint64, i int) uint64 {
	return splitmix.Mix(splitmix.Mix(seed) ^ uint64(i)*0x9e3779b97f4a7c15)
}

// Summary is a mean and its standard error over contexts.
type Summary struct{ Mean, SE float64 }

func (s Summary) String() string { return fmt.Sprintf("%.2f ± %.2f", s.Mean, s.SE) }

func summarize(xs []float64) Summary {
	n := float64(len(xs))
	if n == 0 {
		return Summary{math.NaN(), math.NaN()}
	}
	var m float64
	for _, x := range xs {
		m += x
	}
	m /= n
	if n < 2 {
		return Summary{m, math.NaN()}
	}
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return Summary{m, math.Sqrt(v / (n - 1) / n)}
}
