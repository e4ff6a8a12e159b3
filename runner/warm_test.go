package runner

import (
	"math/rand/v2"
	"testing"
	"time"
)

// requestTime simulates one request of tokens tokens in a scripted world (acceptance accept,
// round cost cost) under pick, which chooses each round's depth within limit and learns from
// it, and returns the request's total round time. The limit shrinks at the end as the decode
// loop's does, so no round drafts past what may be emitted.
func requestTime(tokens, limit int, accept []float64, cost func(int) time.Duration, seed uint64, pick func(limit int) int, observe func(n, a int, took time.Duration)) time.Duration {
	rng := rand.New(rand.NewPCG(seed, 15))
	var total time.Duration
	for emitted := 0; emitted < tokens; {
		n := pick(min(limit, tokens-emitted-1))
		a := 0
		for a < n && rng.Float64() < accept[a] {
			a++
		}
		observe(n, a, cost(n))
		total += cost(n)
		emitted += a + 1
	}
	return total
}

// TestWarmStartWithinFivePercent: a controller warm-started from costs measured by an earlier
// run (kept in the user cache by dflash) decodes a 200-token request within 5% of the time of the
// best fixed depth for that world, on average over requests; a cold one may not (it spends rounds
// measuring plain decoding and climbing). The worlds: an oracle (every draft right) whose verify
// cost grows slowly, a draft that falls off after 4 positions, one whose rows are dear, and one
// that never helps (plain is best).
func TestWarmStartWithinFivePercent(t *testing.T) {
	const tokens, limit, requests = 200, 15, 40
	worlds := []struct {
		name   string
		accept []float64
		cost   func(int) time.Duration
	}{
		{"oracle", ones(limit), func(n int) time.Duration { return time.Duration(1000+60*n) * time.Microsecond }},
		{"cliff", []float64{0.95, 0.9, 0.85, 0.8, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, func(n int) time.Duration { return time.Duration(1000+200*n) * time.Microsecond }},
		{"dear-rows", fill(limit, 0.7), func(n int) time.Duration {
			if n == 0 {
				return time.Millisecond
			}
			return time.Duration(1300+400*n) * time.Microsecond
		}},
		{"never", fill(limit, 0.05), func(n int) time.Duration { return time.Duration(1000+300*n) * time.Microsecond }},
	}
	for _, w := range worlds {
		mean := func(policy func() (func(int) int, func(int, int, time.Duration))) float64 {
			var sum time.Duration
			for r := range requests {
				pick, observe := policy()
				sum += requestTime(tokens, limit, w.accept, w.cost, uint64(r), pick, observe)
			}
			return sum.Seconds() / requests
		}
		best, bestN := 0.0, -1
		for n := 0; n <= limit; n++ {
			tm := mean(func() (func(int) int, func(int, int, time.Duration)) {
				return func(l int) int { return min(n, l) }, func(int, int, time.Duration) {}
			})
			if bestN < 0 || tm < best {
				best, bestN = tm, n
			}
		}
		// Every request is a new process that starts from what the last one learned and saves
		// what it learned in turn; the first request of all started cold (a new machine).
		var saved Learned
		{
			c := &Controller{}
			requestTime(tokens, limit, w.accept, w.cost, 1<<20, c.Choose, c.Observe)
			saved = c.Learned()
		}
		controlled := func(warm bool) float64 {
			return mean(func() (func(int) int, func(int, int, time.Duration)) {
				c := &Controller{}
				if !warm {
					return c.Choose, c.Observe
				}
				c.Warm(saved)
				return c.Choose, func(n, a int, took time.Duration) {
					c.Observe(n, a, took)
					saved = c.Learned()
				}
			})
		}
		warm, cold := controlled(true), controlled(false)
		t.Logf("%s: best fixed depth %d %.2f ms, warm auto %.2f ms (%+.1f%%), cold auto %.2f ms (%+.1f%%)",
			w.name, bestN, best*1e3, warm*1e3, (warm/best-1)*100, cold*1e3, (cold/best-1)*100)
		if warm > 1.05*best {
			t.Errorf("%s: warm-started auto takes %.2f ms for %d tokens, more than 5%% over the best fixed depth %d (%.2f ms)", w.name, warm*1e3, tokens, bestN, best*1e3)
		}
	}
}

func ones(n int) []float64 { return fill(n, 1) }

func fill(n int, v float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = v
	}
	return xs
}

// Warm fills only what the controller has not measured, ignores means that cannot be costs or
// rates, and weighs a warm mean as at most 1/Alpha observations.
func TestWarmKeepsOwnMeasurementsAndRefusesNonsense(t *testing.T) {
	c := &Controller{}
	c.Observe(1, 1, 2*time.Millisecond)
	c.Warm(Learned{
		Cost:   []Mean{{V: 0.001, N: 500}, {V: 0.5, N: 500}, {V: -1, N: 3}, {V: 0.004, N: 0}, {V: 0.003, N: 7}},
		Accept: []Mean{{V: 0.1, N: 50}, {V: 1.5, N: 50}, {V: 0.6, N: 50}},
	})
	l := c.Learned()
	if got := l.Cost[0]; got != (Mean{V: 0.001, N: 20}) {
		t.Fatalf("warm cost(0) %+v, want 0.001 s standing for 1/Alpha = 20 rounds", got)
	}
	if got := l.Cost[1]; got.V != 0.002 || got.N != 1 {
		t.Fatalf("cost(1) %+v: the controller's own measurement was overwritten", got)
	}
	if l.Cost[2].N != 0 || l.Cost[3].N != 0 || l.Cost[4] != (Mean{V: 0.003, N: 7}) {
		t.Fatalf("costs %+v: a negative or unobserved cost was taken, or a valid one dropped", l.Cost)
	}
	if l.Accept[0].V != 1 || l.Accept[1].N != 0 || l.Accept[2] != (Mean{V: 0.6, N: 20}) {
		t.Fatalf("rates %+v: want position 1 own, 2 refused (1.5), 3 warm", l.Accept)
	}
	// Where drafting pays, a warm controller drafts from its first round; a cold one measures
	// plain decoding first.
	warm := &Controller{}
	warm.Warm(Learned{Cost: []Mean{{V: 0.001, N: 20}, {V: 0.0011, N: 20}}, Accept: []Mean{{V: 0.9, N: 20}}})
	if n := warm.Choose(8); n == 0 {
		t.Fatal("a warm controller measured plain decoding first, as a cold one does")
	}
	if n := (&Controller{}).Choose(8); n != 0 {
		t.Fatalf("a cold controller drafted %d in its first round", n)
	}
}

// TestWarmStartCorrectsStaleCosts: costs learned on a machine where draft rows were nearly free
// (or under another load) do not pin the controller: on the scripted costs of this run it
// converges on the true best depth, as a cold controller does.
func TestWarmStartCorrectsStaleCosts(t *testing.T) {
	accept := []float64{0.95, 0.9, 0.85, 0.8, 0.3, 0.2, 0.1, 0.1}
	cost := func(n int) time.Duration { return time.Duration(1000+200*n) * time.Microsecond }
	best := 0
	for n := range 9 {
		if trueEV(accept, cost, n) > trueEV(accept, cost, best) {
			best = n
		}
	}
	stale := &Controller{}
	for n := range 9 {
		for range 40 {
			stale.Observe(n, n, time.Duration(1000+10*n)*time.Microsecond)
		}
	}
	c := &Controller{}
	c.Warm(stale.Learned())
	if first := c.Choose(8); first != 8 {
		t.Fatalf("warm controller's first depth %d: the stale state (every draft accepted, rows free) should send it to the full block", first)
	}
	chosen := simulate(c, 600, 8, accept, cost, 3)
	if got := modeOf(chosen[300:]); got != best {
		t.Fatalf("after 300 rounds the warm controller settles on %d, the scripted costs' best is %d (choices %v)", got, best, chosen[300:340])
	}
}
