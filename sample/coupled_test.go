package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCoupledDrawsFollowDistribution is TestDrawsFollowDistribution with Options.Coupled: the
// race over every filter path's distribution samples exactly the reference probabilities.
func TestCoupledDrawsFollowDistribution(t *testing.T) {
	const n = 40000
	for i, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Coupled = true
			counts := make([]int, len(smallLogits))
			for r := range n {
				o.Seed = uint64(i)<<32 + uint64(r)
				counts[New(o, len(smallLogits)).Sample(smallLogits, tc.history)]++
			}
			checkDraws(t, counts, reference(o, smallLogits, tc.history), n)
		})
	}
}

// TestRaceOverPositions: with one seed, the race at successive positions is a sequence of
// independent draws from P (the arrival times of different positions are unrelated), for a
// dense and a sparse distribution with a long tail of small probabilities.
func TestRaceOverPositions(t *testing.T) {
	const n = 60000
	tail := make([]float32, 40)
	for i := range tail {
		tail[i] = 0.2 / 40
	}
	dense := dist(nil, append([]float32{0.5, 0.2, 0.1, 0, 0}, tail...)...)
	sparseIDs := []int32{12, 3, 30, 7}
	sparse := dist(sparseIDs, 0.4, 0.3, 0.2, 0.1)
	for _, tc := range []struct {
		name string
		d    *Distribution
	}{{"dense", dense}, {"sparse", sparse}} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{Temperature: 1, Coupled: true, Seed: 99}, 64)
			counts := make([]int, 64)
			for pos := range n {
				counts[s.Race(tc.d, pos)]++
			}
			p := make([]float64, 64)
			for j := range tc.d.Len() {
				p[tc.d.ID(j)] = float64(tc.d.P[j])
			}
			checkDraws(t, counts, p, n)
		})
	}
}

// TestRaceEqualsEveryRatio: the pruned race returns what evaluating Arrival/P for every id of the
// support returns, on distributions shaped like a real vocabulary's (a few likely ids and
// thousands of tiny ones, dense and sparse), at many positions. The pruning may only skip ids
// that cannot win.
func TestRaceEqualsEveryRatio(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const vocab = 3000
	s := New(Options{Temperature: 1, Coupled: true, Seed: 5}, vocab)
	for trial := range 40 {
		var d Distribution
		o := Options{Temperature: 0.5 + r.Float32(), TopP: float32(trial%2) * 0.95, Coupled: true}
		New(o, vocab).Distribution(&d, randomLogits(r, vocab, 3), nil)
		for pos := range 50 {
			want, wantR := -1, math.Inf(1)
			for i := range d.Len() {
				if !(d.P[i] > 0) {
					continue
				}
				id := d.ID(i)
				ratio := s.Arrival(pos, id) / float64(d.P[i])
				if ratio < wantR || ratio == wantR && id < want {
					want, wantR = id, ratio
				}
			}
			if got := s.Race(&d, pos); got != want {
				t.Fatalf("trial %d (sparse %v, %d entries) position %d: Race %d, every ratio gives %d", trial, d.Sparse(), d.Len(), pos, got, want)
			}
		}
	}
}

// TestRaceCouplesCloseDistributions: a draft racing q and a target racing p with the same
// arrival times agree far more often than independent draws would (sum p·q), within the bounds
// of the Gumbel coupling, (1-TV)/(1+TV) <= P(agree) <= 1-TV, TV the total variation distance.
// It is what makes coupled speculation accept drafts at all.
func TestRaceCouplesCloseDistributions(t *testing.T) {
	const n = 40000
	p := dist(nil, .3, .25, .2, .15, .1)
	q := dist(nil, .25, .3, .15, .2, .1)
	var tv, indep float64
	for id := range 5 {
		tv += math.Abs(float64(p.P[id]-q.P[id])) / 2
		indep += float64(p.P[id] * q.P[id])
	}
	s := New(Options{Temperature: 1, Coupled: true, Seed: 8}, 5)
	agree := 0
	for pos := range n {
		if s.Race(p, pos) == s.Race(q, pos) {
			agree++
		}
	}
	got := float64(agree) / n
	lo, hi := (1-tv)/(1+tv), 1-tv
	band := 3 * math.Sqrt(hi*(1-hi)/n)
	t.Logf("agreement %.4f: coupling bounds [%.4f, %.4f], independent %.4f", got, lo, hi, indep)
	if got < lo-band || got > hi+band {
		t.Fatalf("agreement %.4f outside the coupling bounds [%.4f, %.4f] ± %.4f", got, lo, hi, band)
	}
}

// TestChooseCoupled: a coupled sampler's Choose is the race, whatever the purpose (draft and
// target must share the noise); greedy ignores Coupled.
func TestChooseCoupled(t *testing.T) {
	d := dist(nil, .3, .25, .2, .15, .1)
	s := New(Options{Temperature: 1, Coupled: true, Seed: 2}, 5)
	differs := false
	for pos := range 200 {
		race := s.Race(d, pos)
		if a, b := s.Choose(d, pos, DrawDraft), s.Choose(d, pos, DrawToken); a != race || b != race {
			t.Fatalf("position %d: Choose gave %d (draft) and %d (token), Race %d", pos, a, b, race)
		}
		if s.Draw(d, pos, DrawToken) != race {
			differs = true
		}
	}
	if !differs {
		t.Fatal("the race always equalled the plain draw: it is not its own noise")
	}
	g := New(Options{Coupled: true, Seed: 2}, 5)
	if got := g.Choose(d, 0, DrawToken); got != 0 {
		t.Fatalf("greedy coupled Choose %d, want the mode 0", got)
	}
	if g.Options().Race() {
		t.Fatal("a greedy sampler reports Race")
	}
}
