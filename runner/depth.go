package runner

import "time"

// Depth chooses each round's draft length n in [0, limit] (DFLASH.md section 4) by maximising
// the expected emitted tokens per unit of round time,
//
//	EV(n) = (1 + sum_{k=1..n} prod_{i<=k} a_i) / cost(n),
//
// where a_i is the acceptance rate at position i given positions < i were accepted and cost(n)
// the measured wall time of a round at depth n. n = 0 is plain decoding. A Depth is a value the
// caller keeps across requests (one per model pair), so what it learned carries over. It is not
// safe for concurrent use.
type Depth struct {
	// Fixed > 0 forces every round to draft min(Fixed, limit) tokens.
	Fixed int
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
	// ProbeEvery makes every ProbeEvery-th choice one step deeper than the best (default 16),
	// so deeper positions and costs keep being measured. Negative disables probing.
	ProbeEvery int

	acc     []average // acc[i-1]: conditional acceptance at position i
	cost    []average // cost[n]: seconds per round at depth n
	choices int
}

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

func (d *Depth) alpha() float64 {
	if d.Alpha > 0 {
		return d.Alpha
	}
	return 0.05
}

func (d *Depth) trust() int {
	if d.Trust > 0 {
		return d.Trust
	}
	return 10
}

func (d *Depth) prior() float64 {
	if d.Prior > 0 {
		return d.Prior
	}
	return 0.5
}

func (d *Depth) probeEvery() int {
	if d.ProbeEvery == 0 {
		return 16
	}
	return d.ProbeEvery
}

// Choose returns the depth for the next round, at most limit.
func (d *Depth) Choose(limit int) int {
	if limit <= 0 {
		return 0
	}
	if d.Fixed > 0 {
		return min(d.Fixed, limit)
	}
	d.choices++
	// Plain decoding's cost anchors the interpolation of every other depth's: measure it first.
	if len(d.cost) == 0 || d.cost[0].n == 0 {
		return 0
	}
	best, bestEV := 0, d.EV(0)
	for n := 1; n <= limit; n++ {
		// Strictly greater: on a tie the shallower depth costs less draft work for nothing.
		if ev := d.EV(n); ev > bestEV {
			best, bestEV = n, ev
		}
	}
	if p := d.probeEvery(); p > 0 && d.choices%p == 0 && best < limit {
		return best + 1
	}
	return best
}

// Observe records a round that drafted n tokens, of which accepted were accepted, and took
// took of wall time (drafting, verification and bookkeeping).
func (d *Depth) Observe(n, accepted int, took time.Duration) {
	for len(d.cost) <= n {
		d.cost = append(d.cost, average{})
	}
	d.cost[n].add(took.Seconds(), d.alpha())
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
func (d *Depth) Rate(i int) float64 {
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
func (d *Depth) Cost(n int) (c float64, ok bool) {
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
func (d *Depth) EV(n int) float64 {
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
