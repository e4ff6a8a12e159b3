package runner

import (
	"math"
	"strconv"
	"time"
)

// Depth is a depth policy: how many drafts each round of a drafter's sessions carries. It is
// one of two values, whatever the drafter: Fixed(n) drafts n every round, Adaptive(c) lets the
// controller c choose each round and learn from it. A round never drafts past what the session
// can carry, what may still be emitted, or what the cache holds. The zero Depth is adaptive
// with a controller of its own for each request that uses it.
type Depth struct {
	fixed int
	ctl   *Controller // nil: fixed (or, in the zero Depth, a fresh controller per request)
	set   bool        // false only in the zero Depth
}

// Fixed drafts n tokens every round (n <= 0: plain decoding with a drafter attached).
func Fixed(n int) Depth { return Depth{fixed: max(n, 0), set: true} }

// Adaptive lets c choose every round and learn from it; a nil c gets a fresh controller.
func Adaptive(c *Controller) Depth {
	if c == nil {
		c = &Controller{}
	}
	return Depth{ctl: c, set: true}
}

// Controller is the adaptive policy's controller, nil for a fixed one.
func (p Depth) Controller() *Controller { return p.ctl }

// IsFixed reports whether p drafts a fixed number of tokens, and how many.
func (p Depth) IsFixed() (n int, ok bool) { return p.fixed, p.set && p.ctl == nil }

func (p Depth) String() string {
	if n, ok := p.IsFixed(); ok {
		return "fixed " + strconv.Itoa(n)
	}
	return "adaptive"
}

// Fresh is p with an untrained controller when p is adaptive (p itself when fixed): the policy
// of a cold process, for runs that must not learn from each other.
func (p Depth) Fresh() Depth {
	if _, ok := p.IsFixed(); ok {
		return p
	}
	return Adaptive(nil)
}

// SeededDepth is how many tokens each round of a seeded request drafts when its drafter's policy
// is adaptive (see Depth.Seeded): deep enough to keep most of a good draft's accepted run (the
// published DFlash drafts accept 3 to 5 tokens a round at temperature 1), shallow enough that a
// draft that rarely hits costs at most 4 extra verified rows a round.
const SeededDepth = 4

// Seeded is the policy of a request that must reproduce its output from its seed: p itself when
// fixed, Fixed(SeededDepth) when adaptive.
//
// Keying each position's draws by the seed and the position (sample.Sampler.Uniform) is not enough
// on its own. With rejection sampling the token emitted at position p depends on whether p was
// drafted, and if so on the proposal q_p and the draft drawn from it; q_p depends on the round's
// block (its anchor, and its length: a bidirectional draft's rows change with the number of MASK
// rows). So the output of a seed depends on the depth schedule, and an adaptive controller picks
// depths by measured wall time, which differs run to run and across requests as the controller
// learns. No scheme keeps the output independent of the schedule at rejection sampling's
// acceptance: a coupling whose emitted token ignores the draft (Gumbel-max style) can guarantee
// no more than (1-TV)/(1+TV) acceptance, against rejection sampling's 1-TV. A fixed schedule is
// the price of reproducibility under rejection sampling; a seeded request neither follows nor
// trains the controller. Coupled sampling (sample.Options.Coupled) is that Gumbel-max coupling:
// its output ignores the schedule, so Generate does not call Seeded for it.
func (p Depth) Seeded() Depth {
	if _, ok := p.IsFixed(); ok {
		return p
	}
	return Fixed(SeededDepth)
}

// orFresh is p, with a fresh controller if p is the zero Depth.
func (p Depth) orFresh() Depth {
	if !p.set {
		return Adaptive(nil)
	}
	return p
}

// choose is the next round's depth, at most limit.
func (p Depth) choose(limit int) int {
	if limit <= 0 {
		return 0
	}
	if p.ctl == nil {
		return min(p.fixed, limit)
	}
	return p.ctl.Choose(limit)
}

// observe reports a round to the controller; a fixed policy learns nothing.
func (p Depth) observe(n, accepted int, took time.Duration) {
	if p.ctl != nil {
		p.ctl.Observe(n, accepted, took)
	}
}

// Controller is the adaptive depth policy's state: it chooses each round's draft length n in
// [0, limit] (DFLASH.md section 4) by maximising the expected emitted tokens per unit of round
// time,
//
//	EV(n) = (1 + sum_{k=1..n} prod_{i<=k} a_i) / cost(n),
//
// where a_i is the acceptance rate at position i given positions < i were accepted and cost(n)
// the measured wall time of a round at depth n. n = 0 is plain decoding. A Controller lives as
// long as its drafter (one per model pair), so what it learned carries over between requests.
// It is not safe for concurrent use.
type Controller struct {
	// Alpha is the weight of a new observation in the moving averages (default 0.05: about
	// the last 40 rounds, a compromise between following a change of content and the noise
	// of 0/1 acceptance observations).
	Alpha float64
	// Trust is how many observations make a position's rate trusted (default 10). An untrusted
	// position inherits the deepest trusted rate: conditional acceptance tends to fall with
	// depth, so the deepest measured rate is the closest evidence.
	Trust int
	// Prior is the acceptance assumed before any position is trusted (default 0.5).
	Prior float64
	// ProbeEvery makes every ProbeEvery-th choice one step deeper than the best, so deeper
	// positions and costs keep being measured. Negative disables probing. The default (0)
	// probes every 16th choice, or less often when a probe round costs so much more than the
	// best depth's that probing every 16th would add more than probeBudget to the run time
	// (a draft that never pays, whose probes are pure loss).
	ProbeEvery int

	acc     []average // acc[i-1]: conditional acceptance at position i
	cost    []average // cost[n]: seconds per round at depth n
	choices int
	probed  int // choices at the last probe (default probing only)
}

// probeBudget is the share of run time default probing may add: one probe per
// (cost(best+1)-cost(best)) / (probeBudget*cost(best)) choices, at least every 16th.
const probeBudget = 0.03

// Round times above outlierRatio times their depth's average, once outlierAfter rounds are
// averaged, count as that bound (see Observe). A genuine change of cost still moves the average
// by up to alpha*(outlierRatio-1) of itself per round.
const (
	outlierRatio = 3
	outlierAfter = 4
)

// maxProbeEvery bounds how rarely default probing measures deeper depths, so that a draft whose
// acceptance improves (new content) is noticed within a few hundred rounds.
const maxProbeEvery = 512

// average is a mean until it has seen 1/alpha observations, a moving average after.
type average struct {
	v float64
	n int
}

func (a *average) add(x, alpha float64) {
	a.n++
	w := max(alpha, 1/float64(a.n))
	a.v += w * (x - a.v)
}

func (d *Controller) alpha() float64 {
	if d.Alpha > 0 {
		return d.Alpha
	}
	return 0.05
}

func (d *Controller) trust() int {
	if d.Trust > 0 {
		return d.Trust
	}
	return 10
}

func (d *Controller) prior() float64 {
	if d.Prior > 0 {
		return d.Prior
	}
	return 0.5
}

func (d *Controller) probeEvery() int {
	if d.ProbeEvery == 0 {
		return 16
	}
	return d.ProbeEvery
}

// Choose returns the depth for the next round, at most limit.
func (d *Controller) Choose(limit int) int {
	if limit <= 0 {
		return 0
	}
	d.choices++
	// Plain decoding's cost anchors the interpolation of every other depth's: measure it first.
	if len(d.cost) == 0 || d.cost[0].n == 0 {
		return 0
	}
	// Until one depth past plain is measured, and then while a draft row is dear, exploration
	// climbs by doubling: never more than one past twice the deepest depth measured. A fresh
	// controller believes its prior, and the cost of an unmeasured depth is the nearest measured
	// one, so it would otherwise open with a full block; when each row measured so far cost more
	// than half a plain round, that one round loses several plain steps (stories260K with its
	// DFlash draft: a 16-row round costs 15 plain ones). Cheap rows keep the optimistic jump,
	// which costs little and learns deep rates sooner.
	deepest := 0
	for m := range d.cost {
		if d.cost[m].n > 0 {
			deepest = m
		}
	}
	if deepest == 0 || (d.cost[deepest].v-d.cost[0].v)/float64(deepest) > d.cost[0].v/2 {
		limit = min(limit, 2*deepest+1)
	}
	best, bestEV := 0, 0.0
	// EV(n) for every n in one pass: the running product and sum are EV's own, term by term, and
	// the rate and cost lookups walk forward instead of rescanning for each n (Choose runs every
	// round; rescanning cost as much as a tenth of a small model's decode step).
	tokens, run := 1.0, 1.0
	trusted, haveTrusted := 0.0, false
	lo, hi := -1, -1 // nearest measured depths <= n and >= n
	for n := 0; n <= limit; n++ {
		if n > 0 {
			// Rate(n): position n's own rate when trusted, else the deepest trusted rate below
			// it (all of them once n is past the measured positions), else the prior.
			r := d.prior()
			if n <= len(d.acc) && d.acc[n-1].n >= d.trust() {
				trusted, haveTrusted = d.acc[n-1].v, true
			}
			if haveTrusted {
				r = trusted
			}
			run *= r
			tokens += run
		}
		if n < len(d.cost) && d.cost[n].n > 0 {
			lo = n
		}
		if hi < n {
			hi = -1
			for m := n; m < len(d.cost); m++ {
				if d.cost[m].n > 0 {
					hi = m
					break
				}
			}
		}
		ev := tokens
		if c, ok := d.costBetween(n, lo, hi); ok && c > 0 {
			ev = tokens / c
		}
		// Strictly greater: on a tie the shallower depth costs less draft work for nothing.
		if n == 0 || ev > bestEV {
			best, bestEV = n, ev
		}
	}
	if best < limit && d.probeNow(best) {
		return best + 1
	}
	return best
}

// probeNow reports whether this choice probes one step deeper than best.
func (d *Controller) probeNow(best int) bool {
	p := d.probeEvery()
	if p <= 0 {
		return false
	}
	if d.ProbeEvery != 0 {
		return d.choices%p == 0
	}
	cb, okb := d.Cost(best)
	cp, okp := d.Cost(best + 1)
	if okb && okp && cb > 0 && cp > cb {
		p = max(p, min(maxProbeEvery, int((cp-cb)/(probeBudget*cb))))
	}
	if d.choices-d.probed < p {
		return false
	}
	d.probed = d.choices
	return true
}

// Observe records a round that drafted n tokens, of which accepted were accepted, and took
// took of wall time (drafting, verification and bookkeeping; the decode loop leaves out the
// draft's context writes, which every kept row costs at any depth).
func (d *Controller) Observe(n, accepted int, took time.Duration) {
	for len(d.cost) <= n {
		d.cost = append(d.cost, average{})
	}
	x := took.Seconds()
	if c := &d.cost[n]; c.n >= outlierAfter && x > outlierRatio*c.v {
		// A round this much slower than its depth's average was preempted or hit a collection,
		// not made dearer by its depth: counted in full, one such round among the first twenty
		// of a fast depth would multiply its mean and send the controller after deep drafts.
		x = outlierRatio * c.v
	}
	d.cost[n].add(x, d.alpha())
	for len(d.acc) < n {
		d.acc = append(d.acc, average{})
	}
	// Position i is observed only when positions < i were accepted: the rounds that reach it.
	for i := 1; i <= min(accepted+1, n); i++ {
		x := 0.0
		if i <= accepted {
			x = 1
		}
		d.acc[i-1].add(x, d.alpha())
	}
}

// Rate is the acceptance rate used for position i (1-based).
func (d *Controller) Rate(i int) float64 {
	if i <= len(d.acc) && d.acc[i-1].n >= d.trust() {
		return d.acc[i-1].v
	}
	for j := min(i, len(d.acc)) - 1; j >= 0; j-- {
		if d.acc[j].n >= d.trust() {
			return d.acc[j].v
		}
	}
	return d.prior()
}

// Cost is the estimated seconds of a round at depth n: measured, interpolated linearly between
// the nearest measured depths, or the nearest measured cost beyond them (an optimistic guess that
// the controller then measures). ok is false when nothing has been measured.
func (d *Controller) Cost(n int) (c float64, ok bool) {
	lo, hi := -1, -1
	for m := range d.cost {
		if d.cost[m].n == 0 {
			continue
		}
		if m <= n {
			lo = m
		}
		if m >= n && hi < 0 {
			hi = m
		}
	}
	return d.costBetween(n, lo, hi)
}

// costBetween is Cost(n) given the nearest measured depths lo <= n and hi >= n (-1: none).
func (d *Controller) costBetween(n, lo, hi int) (float64, bool) {
	switch {
	case lo < 0 && hi < 0:
		return 0, false
	case lo < 0:
		return d.cost[hi].v, true
	case hi < 0 || lo == hi:
		return d.cost[lo].v, true
	}
	f := float64(n-lo) / float64(hi-lo)
	return d.cost[lo].v + f*(d.cost[hi].v-d.cost[lo].v), true
}

// EV is the expected tokens per second of a round at depth n (per round when no cost is known).
func (d *Controller) EV(n int) float64 {
	tokens, run := 1.0, 1.0
	for k := 1; k <= n; k++ {
		run *= d.Rate(k)
		tokens += run
	}
	c, ok := d.Cost(n)
	if !ok || c <= 0 {
		return tokens
	}
	return tokens / c
}

// Learned is what a controller measured, in a form another process can start from: Cost[n] is
// the mean wall time in seconds of a round at depth n, Accept[i] the conditional acceptance
// rate at position i+1, each with the number of observations it stands for (0: not measured).
// Round costs belong to the model pair, the kernel path and the thread count; rates to the pair
// and the temperature, and they vary with content. A process that starts from what the last
// one learned decodes its first rounds at the depth the last one ended on, where a cold
// controller spends a short request measuring (dflash keeps Learned in the user cache).
type Learned struct {
	Cost   []Mean `json:"cost"`
	Accept []Mean `json:"accept"`
}

// Mean is a moving average and how many observations it stands for.
type Mean struct {
	V float64 `json:"v"`
	N int     `json:"n"`
}

// Learned is a snapshot of what d has measured.
func (d *Controller) Learned() Learned {
	snap := func(as []average) []Mean {
		ms := make([]Mean, len(as))
		for i, a := range as {
			ms[i] = Mean{V: a.v, N: a.n}
		}
		return ms
	}
	return Learned{Cost: snap(d.cost), Accept: snap(d.acc)}
}

// Warm starts d from what an earlier controller of the same model pair learned, for what d has
// not measured itself. Each warm mean stands for at most 1/Alpha observations, so this run's own
// rounds move it at the moving average's full rate from the first: a stale cost (another load on
// the machine) or rate (other content) is corrected within a few dozen rounds. It still counts
// as trusted (1/Alpha >= Trust by default), which is the point: a warm controller neither
// measures plain decoding first nor climbs through depths it already knows. Means that are not
// finite, a cost that is not positive and a rate outside [0, 1] are ignored.
func (d *Controller) Warm(l Learned) {
	weight := int(math.Ceil(1 / d.alpha()))
	warm := func(dst []average, src []Mean, ok func(float64) bool) []average {
		for i, m := range src {
			if m.N <= 0 || math.IsNaN(m.V) || math.IsInf(m.V, 0) || !ok(m.V) {
				continue
			}
			for len(dst) <= i {
				dst = append(dst, average{})
			}
			if dst[i].n == 0 {
				dst[i] = average{v: m.V, n: min(m.N, weight)}
			}
		}
		return dst
	}
	d.cost = warm(d.cost, l.Cost, func(v float64) bool { return v > 0 })
	d.acc = warm(d.acc, l.Accept, func(v float64) bool { return v >= 0 && v <= 1 })
}
