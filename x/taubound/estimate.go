package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"

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

// RawBranches is a Branches that also gives the raw logits behind its distributions, for the
// soft-target drafter (drafterName says what it is). KeepRaw(true) asks the next Appends to keep
// them; FirstLogits and Logits(i, r) (branch i, row r of the last Append) return them.
type RawBranches interface {
	Branches
	KeepRaw(on bool)
	FirstLogits() []float32
	Logits(i, r int) []float32
}

// Config is what one estimate measures.
type Config struct {
	D       int            // block depth: drafts per round
	M       int            // target continuations behind the marginals q_j
	B       int            // further, independent continuations for the overlap bound
	R       int            // speculative rounds simulated per drafter
	Chunk   int            // branches per Fork while sampling continuations (memory bound)
	Options sample.Options // the target's sampling: temperature, top-p (no penalties)
	Powers  []float64      // extra drafters: marginal^power, normalised
}

// Drafter names the product proposals a context is measured with.
const (
	Marginal      = iota // q_j = marginal of the target's token j, from all M continuations
	MarginalQuart        // the same from the first M/4 continuations: the estimate's convergence
	Mode                 // q_j one-hot at the marginal's most probable token (a greedy parallel draft)
	// Drafter Mode+1+i is q_j proportional to marginal^Config.Powers[i]: sharper (power > 1)
	// or flatter products than the marginal, to see whether the marginal is the best product.
)

// drafterName names drafter v of cfg.
func drafterName(cfg Config, v int) string {
	switch v {
	case Marginal:
		return "marginal"
	case MarginalQuart:
		return "marginal M/4"
	case Mode:
		return "marginal mode"
	}
	if i := v - Mode - 1; i < len(cfg.Powers) {
		return fmt.Sprintf("marginal^%g", cfg.Powers[i])
	}
	return "soft-target draft optimum"
}

// Drafters is how many drafters cfg measures.
func (cfg Config) Drafters() int { return Mode + 1 + len(cfg.Powers) }

// ContextResult is what one context measured. Every array indexed k holds, at k-1, an estimate
// of P(the first k drafts are accepted), k = 1..D, so tau at depth d is 1 + the sum of the first
// d entries.
type ContextResult struct {
	// Reject[v] is rejection sampling with drafter v, Rao-Blackwellised: each simulated round
	// contributes the product of its accept probabilities min(1, p/q) rather than one coin flip
	// per draft (the same expectation, less variance).
	Reject [][]float64
	// RejectFlip[v] is the same rounds decided by the engine's own accept test
	// (sample.Sampler.Accept, one uniform per draft): the plain simulation.
	RejectFlip [][]float64
	// Coupled is the Gumbel-coupled race of the engine's --coupled mode with the marginal
	// drafter (M): the draft races q_j, the target races p_j with the same arrival times, and a
	// draft is kept while it equals the target's winner.
	Coupled []float64
	// Overlap is sum over k-token sequences y of min(P(y), Q(y)) for the marginal product Q
	// (M): an upper bound on P(first k accepted) for that drafter under ANY verification rule
	// that leaves the output distributed as the target's.
	Overlap []float64
	// PairBound bounds P(first 2 accepted) for EVERY product drafter q_1 x q_2 under every
	// verification rule: sum min(P, q_1 x q_2) <= sum sqrt(P(a,b) q_1(a) q_2(b)) <= sigma_max of
	// the matrix sqrt(P(a,b)), P(a,b) = p_1(a) p_2(b|a) computed exactly (one forward per
	// first token a, over the most probable a carrying all but Tail of p_1's mass, Tail added).
	// The largest singular value is bounded from above by the Collatz-Wielandt ratio of power
	// iteration on S S^T, so the figure is rigorous, not an estimate.
	PairBound float64
	// Exact2 is P(first 2 accepted) for the marginal drafter under rejection sampling computed
	// without sampling: sum_a p_1(a) sum_b min(p_2(b|a), q_2(b)), q_2 = sum_a p_1(a) p_2(.|a),
	// on the same truncated support (a check of Reject[Marginal][1]).
	Exact2 float64
	Tail   float64 // p_1 mass left out of PairBound's and Exact2's sums
}

// pairMass is the p_1 mass the pair computation covers, and pairMaxTokens its most first tokens.
const (
	pairMass      = 0.999
	pairMaxTokens = 512
)

// pairBound computes ContextResult's PairBound, Exact2 and Tail.
func pairBound(t Branches, res *ContextResult, vocab int) error {
	p1 := t.First()
	type entry struct {
		id int
		p  float64
	}
	var es []entry
	for i, p := range p1.P {
		if p > 0 {
			es = append(es, entry{p1.ID(i), float64(p)})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(b.p, a.p) })
	var cum float64
	n := 0
	for n < len(es) && n < pairMaxTokens && cum < pairMass {
		cum += es[n].p
		n++
	}
	es = es[:n]
	res.Tail = max(0, 1-cum)
	if err := t.Fork(n); err != nil {
		return err
	}
	rows := make([][]int, n)
	for i, e := range es {
		rows[i] = []int{e.id}
	}
	out, err := t.Append(rows)
	if err != nil {
		return err
	}
	// Sparse rows of S = sqrt(p_1(a) p_2(b|a)), and the truncated q_2.
	type srow struct {
		ids []int32
		v   []float64
	}
	S := make([]srow, n)
	q2 := make([]float64, vocab)
	for i, e := range es {
		d := &out[i][0]
		for k, p := range d.P {
			if p > 0 {
				S[i].ids = append(S[i].ids, int32(d.ID(k)))
				S[i].v = append(S[i].v, math.Sqrt(e.p*float64(p)))
				q2[d.ID(k)] += e.p * float64(p)
			}
		}
	}
	for b := range q2 {
		q2[b] /= cum
	}
	for i, e := range es {
		d := &out[i][0]
		var m float64
		for k, p := range d.P {
			if p > 0 {
				m += math.Min(float64(p), q2[d.ID(k)])
			}
		}
		res.Exact2 += e.p * m
	}
	// Power iteration on A = S S^T (non-negative, positive diagonal p_1(a)), x > 0 throughout;
	// rho(A) <= max_i (Ax)_i / x_i for any positive x (Collatz-Wielandt).
	x := make([]float64, n)
	for i := range x {
		x[i] = 1
	}
	y := make([]float64, vocab)
	ax := make([]float64, n)
	upper := math.Inf(1)
	for it := 0; it < 200; it++ {
		clear(y)
		for i, r := range S {
			for k, b := range r.ids {
				y[b] += r.v[k] * x[i]
			}
		}
		hi, norm, xax, xx := 0.0, 0.0, 0.0, 0.0
		for i, r := range S {
			var s float64
			for k, b := range r.ids {
				s += r.v[k] * y[b]
			}
			ax[i] = s
			hi = math.Max(hi, s/x[i])
			norm = math.Max(norm, s)
			xax += x[i] * s
			xx += x[i] * x[i]
		}
		upper = math.Min(upper, hi)
		// The Rayleigh quotient is a lower bound on rho(A): stop when the two meet.
		if upper-xax/xx < 1e-4*upper {
			break
		}
		for i := range x {
			// Any positive x gives a valid bound: the floor only keeps it positive.
			x[i] = max(ax[i]/norm, 1e-100)
		}
	}
	res.PairBound = math.Min(1, math.Sqrt(upper)+res.Tail)
	return nil
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

// toDist writes a^power, normalised, into a dense sample.Distribution.
func (a dense) toDist(dst *sample.Distribution, power float64) {
	w := make([]float64, len(a))
	var sum float64
	for i, v := range a {
		if v > 0 {
			w[i] = math.Pow(v, power)
		}
		sum += w[i]
	}
	dst.IDs = nil
	dst.P = make([]float32, len(a))
	for i, v := range w {
		dst.P[i] = float32(v / sum)
	}
}

// addSoftmax adds softmax(logits) at temperature 1.
func (a dense) addSoftmax(logits []float32) {
	m := float32(math.Inf(-1))
	for _, v := range logits {
		m = max(m, v)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - m))
	}
	for i, v := range logits {
		a[i] += math.Exp(float64(v-m)) / sum
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
	// The soft-target drafter: what a draft trained by cross-entropy on the target's
	// temperature-1 probabilities along T-sampled continuations converges to (their average,
	// qSoft[j]), proposed as the runner proposes from a draft's logits: Distribution of
	// log qSoft[j] at the request's temperature and top-p.
	rb, raw := t.(RawBranches)
	var qSoft []dense
	if raw {
		rb.KeepRaw(true)
		defer rb.KeepRaw(false)
		qSoft = make([]dense, D)
		for j := range qSoft {
			qSoft[j] = make(dense, vocab)
		}
	}
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
					if raw {
						lg := rb.FirstLogits()
						if j > 0 {
							lg = rb.Logits(i, 0)
						}
						qSoft[j].addSoftmax(lg)
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
	nd := cfg.Drafters()
	if raw {
		nd++
	}
	res.Reject, res.RejectFlip = make([][]float64, nd), make([][]float64, nd)
	q := make([][]sample.Distribution, nd)
	for v := range q {
		q[v] = make([]sample.Distribution, D)
	}
	for j := 0; j < D; j++ {
		qAll[j].toDist(&q[Marginal][j], 1)
		qQuart[j].toDist(&q[MarginalQuart][j], 1)
		q[Mode][j].OneHot(qAll[j].mode())
		for i, pw := range cfg.Powers {
			qAll[j].toDist(&q[Mode+1+i][j], pw)
		}
		if raw {
			lg := make([]float32, vocab)
			for i, v := range qSoft[j] {
				lg[i] = float32(math.Log(v))
			}
			s.Distribution(&q[nd-1][j], lg, nil)
		}
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

	if D >= 2 {
		if err := pairBound(t, &res, vocab); err != nil {
			return res, err
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
	// propose draws cfg.R rounds of D drafts, draft j of a round by draw(j, k) at a fresh
	// position key k, and returns the drafts with their keys.
	propose := func(draw func(j, k int) int) (drafts, keys [][]int) {
		drafts, keys = make([][]int, cfg.R), make([][]int, cfg.R)
		for r := range drafts {
			for j := 0; j < D; j++ {
				k := pos()
				keys[r] = append(keys[r], k)
				drafts[r] = append(drafts[r], draw(j, k))
			}
		}
		return drafts, keys
	}
	for v := 0; v < nd; v++ {
		res.Reject[v] = make([]float64, D)
		res.RejectFlip[v] = make([]float64, D)
		drafts, keys := propose(func(j, k int) int { return s.Draw(&q[v][j], k, sample.DrawDraft) })
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
	drafts, keys := propose(func(j, k int) int { return s.Race(&q[Marginal][j], k) })
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
