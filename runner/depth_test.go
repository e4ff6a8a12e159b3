package runner

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/runner/internal/fake"
)

// simulate runs rounds of a scripted world: position i is accepted with probability accept[i-1]
// given the earlier ones were, and a round at depth n costs cost(n). It returns the choices.
func simulate(d *Controller, rounds, limit int, accept []float64, cost func(n int) time.Duration, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0))
	var chosen []int
	for range rounds {
		n := d.Choose(limit)
		a := 0
		for a < n && rng.Float64() < accept[a] {
			a++
		}
		d.Observe(n, a, cost(n))
		chosen = append(chosen, n)
	}
	return chosen
}

func modeOf(xs []int) int {
	count := map[int]int{}
	best := xs[0]
	for _, x := range xs {
		count[x]++
		if count[x] > count[best] || count[x] == count[best] && x < best {
			best = x
		}
	}
	return best
}

func trueEV(accept []float64, cost func(int) time.Duration, n int) float64 {
	tokens, run := 1.0, 1.0
	for k := range n {
		run *= accept[k]
		tokens += run
	}
	return tokens / cost(n).Seconds()
}

func TestDepthConvergesToBestEV(t *testing.T) {
	// Acceptance falls off a cliff after position 4 and each draft row costs 20% of a plain
	// round: EV(n) = 1, 1.63, 2.00, 2.21, 2.29, 2.14, ... per ms, so 4 is best (3 and 5 are
	// 3.5% and 6% worse).
	accept := []float64{0.95, 0.9, 0.85, 0.8, 0.3, 0.2, 0.1, 0.1}
	cost := func(n int) time.Duration { return time.Duration(1000+200*n) * time.Microsecond }
	best := 0
	for n := range 9 {
		if trueEV(accept, cost, n) > trueEV(accept, cost, best) {
			best = n
		}
	}
	if best != 4 {
		t.Fatalf("scenario's best depth is %d, the comment says 4", best)
	}
	d := &Controller{}
	chosen := simulate(d, 3000, 8, accept, cost, 1)
	if got := modeOf(chosen[2000:]); got != best {
		t.Fatalf("most chosen depth over the last 1000 rounds is %d, want %d (rates %.2f %.2f %.2f %.2f %.2f)",
			got, best, d.Rate(1), d.Rate(2), d.Rate(3), d.Rate(4), d.Rate(5))
	}
	// The learned rates are close to the scripted ones where the controller drafts.
	for i := 1; i <= 4; i++ {
		if r := d.Rate(i); r < accept[i-1]-0.2 || r > accept[i-1]+0.2 {
			t.Errorf("rate at %d is %.2f, scripted %.2f", i, r, accept[i-1])
		}
	}
}

func TestDepthZeroWhenDraftsNeverHelpAndProbes(t *testing.T) {
	never := make([]float64, 8)
	cost := func(n int) time.Duration { return time.Duration(1000+500*n) * time.Microsecond }
	d := &Controller{ProbeEvery: 4}
	chosen := simulate(d, 200, 8, never, cost, 2)
	// Once position 1 is trusted (10 rejections) plain decoding wins; every 4th choice probes
	// one deeper than the best, so the tail alternates 0, 0, 0, 1.
	tail := chosen[100:]
	for i, n := range tail {
		want := 0
		if (100+i+1)%4 == 0 {
			want = 1
		}
		if n != want {
			t.Fatalf("choice %d is %d, want %d (tail %v)", 100+i, n, want, tail[:12])
		}
	}
}

func TestDepthCostAndRateEstimates(t *testing.T) {
	d := &Controller{Alpha: 0.01}
	if _, ok := d.Cost(3); ok {
		t.Fatal("a cost was estimated before anything was measured")
	}
	d.Observe(0, 0, 1*time.Second)
	d.Observe(4, 0, 3*time.Second)
	// Measured at 0 (1 s) and 4 (3 s): 2 s halfway, the nearest measured cost beyond 4.
	for _, c := range []struct {
		n    int
		want float64
	}{{0, 1}, {2, 2}, {4, 3}, {7, 3}} {
		if got, _ := d.Cost(c.n); got != c.want {
			t.Errorf("Cost(%d) = %v, want %v", c.n, got, c.want)
		}
	}

	d = &Controller{Alpha: 0.01}
	for range 10 {
		d.Observe(2, 2, time.Second)
		d.Observe(2, 0, time.Second)
	}
	// Position 1: 20 observations, half accepted. Position 2: reached 10 times, always accepted
	// (trusted at 10). Position 3 was never drafted: it inherits the deepest trusted rate, 1.
	if d.Rate(1) != 0.5 || d.Rate(2) != 1 || d.Rate(3) != 1 {
		t.Fatalf("rates %v %v %v, want 0.5 1 1", d.Rate(1), d.Rate(2), d.Rate(3))
	}
	// Before anything is trusted, the prior stands in.
	if r := (&Controller{Prior: 0.7}).Rate(2); r != 0.7 {
		t.Fatalf("untrained rate %v, want the prior 0.7", r)
	}
	// Forced depth, capped by the limit.
	if n := Fixed(5).choose(3); n != 3 {
		t.Fatalf("forced depth 5 under limit 3 chose %d", n)
	}
}

// timedTarget charges simulated time per forward: 1 ms plus 0.3 ms per row, so deeper rounds
// cost more, as verification does on a real machine.
type timedTarget struct {
	*fake.Target
	now *time.Time
}

func (t timedTarget) Forward(c cache.Cache, r model.Request) (model.Result, error) {
	*t.now = t.now.Add(time.Millisecond + time.Duration(len(r.Tokens))*300*time.Microsecond)
	return t.Target.Forward(c, r)
}

func TestDepthInLoop(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	ft := &fake.Target{Vocab: testVocab, Layers: 2}
	target := timedTarget{ft, &now}
	randomDraft := func() *BlockSession {
		return NewBlockSession(&fake.Draft{Block: 8, Mask: testVocab - 1, Layers: []int{0}, Vocab: testVocab}, 512)
	}
	generate := func(prompt []int, s Session, depth Depth) Stats {
		t.Helper()
		seq := NewSequence(target, 512)
		_, st := runTarget(t, seq, Request{Prompt: prompt, MaxTokens: 60, Session: s, Depth: depth, Clock: clock})
		return st
	}

	// A one-token prompt leaves the draft without context: the first round decodes plainly.
	ft.Forwards = nil
	st := generate([]int{3}, randomDraft(), Fixed(3))
	if len(ft.Forwards[0].Tokens) != 1 || st.Depths[0] < 1 {
		t.Fatalf("first forward %v, depths %v: want a plain first round", ft.Forwards[0].Tokens, st.Depths)
	}
	// Forced depth 3: every round drafts 3 except the plain first one and at most 3 at the end,
	// where fewer than 4 tokens are left to emit.
	if st.Depths[3] < st.Rounds-4 || len(st.Depths) > 4 {
		t.Fatalf("forced depth 3: histogram %v over %d rounds", st.Depths, st.Rounds)
	}

	// Random drafts are accepted about 1 time in 16: a fresh controller starts deep (the prior
	// is 0.5), learns, and settles on plain decoding with probes.
	depth := &Controller{}
	first := generate([]int{1, 2, 3}, randomDraft(), Adaptive(depth))
	if len(first.Depths) < 8 || first.Depths[7] == 0 {
		t.Fatalf("a fresh controller never tried the full block: %v", first.Depths)
	}
	learned := depth.acc[0].n
	// The next request keeps what was learned: no round deeper than a probe from plain decoding.
	second := generate([]int{4, 5, 6}, randomDraft(), Adaptive(depth))
	if len(second.Depths) > 2 {
		t.Fatalf("second request depths %v: the learned state was not kept", second.Depths)
	}
	if depth.acc[0].n <= learned {
		t.Fatalf("position 1 observations went from %d to %d: the second request did not add to them", learned, depth.acc[0].n)
	}
	if slices.Max(second.Depths) == 0 {
		t.Fatalf("no probe in the second request: %v", second.Depths)
	}
}

// runTarget is run for any target.
func runTarget(t *testing.T, seq *Sequence, req Request) ([]int, Stats) {
	t.Helper()
	var out []int
	st, err := Generate(t.Context(), seq, req, func(tok Token) error { out = append(out, tok.ID); return nil })
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return out, st
}

// TestChooseIsBestEV: Choose's one pass over depths must pick what the definition says, the
// shallowest depth of maximal EV(n), for states with trusted, untrusted and unmeasured
// positions and costs measured at scattered depths (probing off and the full block measured, so
// nothing else moves it).
func TestChooseIsBestEV(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 300 {
		d := &Controller{ProbeEvery: -1, Trust: 1 + rng.IntN(5)}
		for range rng.IntN(60) {
			n := rng.IntN(12)
			d.Observe(n, rng.IntN(n+1), time.Duration(1000+rng.IntN(400)*(n+1))*time.Microsecond)
		}
		d.Observe(0, 0, time.Duration(500+rng.IntN(1500))*time.Microsecond)
		// A measured full block lifts the exploration cap (see Choose): every depth competes.
		d.Observe(15, rng.IntN(16), time.Duration(1000+rng.IntN(9000))*time.Microsecond)
		limit := 1 + rng.IntN(15)
		want, wantEV := 0, d.EV(0)
		for n := 1; n <= limit; n++ {
			if ev := d.EV(n); ev > wantEV {
				want, wantEV = n, ev
			}
		}
		if got := d.Choose(limit); got != want {
			t.Fatalf("trial %d: Choose(%d) = %d, best EV at %d (EV %v vs %v)", trial, limit, got, want, d.EV(got), wantEV)
		}
	}
}

// TestDefaultProbingFollowsCost: with the default ProbeEvery, a probe that costs far more than
// plain decoding (here 4x: 3 ms extra on 1 ms) comes at most once per 3/probeBudget = 100
// choices, while a cheap one (0.1 ms extra) keeps the every-16th rhythm.
func TestDefaultProbingFollowsCost(t *testing.T) {
	never := make([]float64, 8)
	for _, c := range []struct {
		extra    time.Duration
		min, max int // probes in 1000 choices
	}{{3 * time.Millisecond, 5, 11}, {100 * time.Microsecond, 55, 64}} {
		cost := func(n int) time.Duration {
			if n == 0 {
				return time.Millisecond
			}
			return time.Millisecond + c.extra*time.Duration(n)
		}
		d := &Controller{}
		simulate(d, 200, 8, never, cost, 3) // learn that drafts never pass
		chosen := simulate(d, 1000, 8, never, cost, 4)
		probes := 0
		for _, n := range chosen {
			if n > 0 {
				probes++
			}
		}
		if probes < c.min || probes > c.max {
			t.Errorf("probe extra cost %v: %d probes in 1000 choices, want %d..%d", c.extra, probes, c.min, c.max)
		}
	}
}

// TestExplorationClimbsWhenRowsAreDear: one draft row costing 1.5 plain rounds (measured at
// depth 1) keeps a fresh controller from jumping to the full block on its prior: it may try
// depth 3 (twice 1, plus 1) but nothing deeper, and drafts that never pass bring it back to 0.
func TestExplorationClimbsWhenRowsAreDear(t *testing.T) {
	never := make([]float64, 15)
	cost := func(n int) time.Duration { return time.Duration(1000+1500*n) * time.Microsecond }
	chosen := simulate(&Controller{ProbeEvery: -1}, 50, 15, never, cost, 5)
	if m := slices.Max(chosen); m > 3 {
		t.Fatalf("a fresh controller drafted %d rows with rows costing 1.5 plain rounds: %v", m, chosen)
	}
	if tail := chosen[40:]; slices.Max(tail) != 0 {
		t.Fatalf("never-accepted drafts still drafted at the end: %v", tail)
	}
}

// TestSeededDepth: a seeded request keeps a fixed policy as it is and replaces an adaptive one
// (the zero Depth included) by Fixed(SeededDepth), so no measured time reaches its schedule.
func TestSeededDepth(t *testing.T) {
	for _, tc := range []struct {
		p    Depth
		want int
	}{{Fixed(2), 2}, {Fixed(0), 0}, {Adaptive(&Controller{}), SeededDepth}, {Depth{}, SeededDepth}} {
		if n, ok := tc.p.Seeded().IsFixed(); !ok || n != tc.want {
			t.Errorf("%v seeded: %v, want fixed %d", tc.p, tc.p.Seeded(), tc.want)
		}
	}
}
