package sample

import (
	"math"
	"testing"
)

func dist(ids []int32, p ...float32) *Distribution { return &Distribution{IDs: ids, P: p} }

// TestResidual checks norm(max(p - q, 0)) for every combination of dense and sparse p and q:
// the exact expected values, sum one, zero wherever q >= p, and p intact outside a sparse q.
func TestResidual(t *testing.T) {
	for _, tc := range []struct {
		name string
		p, q *Distribution
		want map[int]float64 // nil: residual all zero
	}{
		// max(p-q,0) = [.3, 0, 0, .1] -> [.75, 0, 0, .25]
		{"dense q", dist(nil, .5, .3, .1, .1), dist(nil, .2, .4, .4, 0), map[int]float64{0: .75, 3: .25}},
		// q shorter than p: q is 0 beyond its end.
		{"short dense q", dist(nil, .5, .3, .2), dist(nil, 1), map[int]float64{1: .6, 2: .4}},
		// Sparse q over {1, 3}: id 1 -> max(.3-.5,0) = 0, id 3 -> .1-.05 = .05, ids 0, 2 intact.
		// [.5, 0, .1, .05] / .65
		{"sparse q", dist(nil, .5, .3, .1, .1), dist([]int32{1, 3}, .5, .05), map[int]float64{0: .5 / .65, 2: .1 / .65, 3: .05 / .65}},
		// Sparse q naming an id outside p's vocabulary is ignored.
		{"sparse q out of range", dist(nil, .5, .5), dist([]int32{7, 0}, .6, .4), map[int]float64{0: .1 / .6, 1: .5 / .6}},
		// Sparse p, dense q: [id 4: .6-.1, id 2: .4-.5 -> 0] -> {4: 1}
		{"sparse p dense q", dist([]int32{4, 2}, .6, .4), dist(nil, 0, 0, .5, 0, .1), map[int]float64{4: 1}},
		// Sparse p, sparse q: id 9: .5-.2 = .3, id 1: .3-0 = .3 (absent from q), id 5: .2-.8 -> 0
		{"sparse p sparse q", dist([]int32{9, 1, 5}, .5, .3, .2), dist([]int32{5, 9, 6}, .8, .2, 0), map[int]float64{1: .5, 9: .5}},
		{"p == q dense", dist(nil, .25, .75), dist(nil, .25, .75), nil},
		{"p == q sparse", dist([]int32{3, 1}, .6, .4), dist([]int32{1, 3}, .4, .6), nil},
		{"q dominates", dist(nil, .5, .5), dist([]int32{0, 1}, .5, .6), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Distribution
			ok := Residual(&r, tc.p, tc.q)
			if ok != (tc.want != nil) {
				t.Fatalf("ok = %v, want %v", ok, tc.want != nil)
			}
			if !ok {
				return
			}
			if r.Sparse() != tc.p.Sparse() {
				t.Errorf("residual sparse = %v, p sparse = %v", r.Sparse(), tc.p.Sparse())
			}
			var sum float64
			for i := range r.Len() {
				id, v := r.ID(i), float64(r.P[i])
				sum += v
				if math.Abs(v-tc.want[id]) > 1e-6 {
					t.Errorf("r[%d] = %.7f, want %.7f", id, v, tc.want[id])
				}
				if tc.q.Prob(id) >= tc.p.Prob(id) && v != 0 {
					t.Errorf("r[%d] = %g where q >= p", id, v)
				}
				if i > 0 && r.Sparse() && r.P[i-1] < r.P[i] {
					t.Errorf("sparse residual not sorted by descending p: %v", r.P)
				}
			}
			for id, v := range tc.want {
				if r.Prob(id) == 0 && v != 0 {
					t.Errorf("r[%d] missing, want %g", id, v)
				}
			}
			if math.Abs(sum-1) > 1e-6 {
				t.Errorf("residual sums to %.8f", sum)
			}
		})
	}
}

// TestSpeculativeStepIsExact runs the whole verification of one draft token many times:
// draw tok ~ q, Accept with min(1, p/q), else Resample from the residual. Whatever q is, the
// emitted token must follow p exactly; the chi-square test would see a q-shaped bias (e.g.
// sampling the residual from p instead, or a missing renormalisation) at these sample sizes.
func TestSpeculativeStepIsExact(t *testing.T) {
	pDense := dist(nil, .3, .25, .2, .15, .1, 0)
	for i, tc := range []struct {
		name string
		p, q *Distribution
	}{
		// q puts mass on id 5, where p is 0: every such draft must be rejected.
		{"dense q", pDense, dist(nil, .1, .1, .4, .1, .1, .2)},
		// A top-k proposal: ids 1, 3, 4 (and 5) are outside q's support, so only the residual
		// can emit them.
		{"sparse q excludes p support", pDense, dist([]int32{2, 0, 5}, .5, .3, .2)},
		{"q equals p", pDense, dist(nil, .3, .25, .2, .15, .1, 0)},
		{"sparse p sparse q", dist([]int32{7, 2, 4}, .5, .3, .2), dist([]int32{2, 9}, .9, .1)},
		// Greedy: one-hot p and a one-hot draft on another token always yields argmax p.
		{"one-hot mismatch", dist([]int32{3}, 1), dist([]int32{1}, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 60000
			s := New(Options{Temperature: 1, Seed: uint64(1000 + i)}, 16)
			counts := make([]int, 16)
			accepted := 0
			// Every position takes its draft, accept and residual uniforms from one key, so the
			// counts also show the three purposes are independent at a position.
			for pos := range n {
				tok := s.Draw(tc.q, pos, DrawDraft)
				if s.Accept(tc.p, tc.q, tok, pos) {
					accepted++
				} else {
					tok = s.Resample(tc.p, tc.q, pos)
				}
				counts[tok]++
			}
			p := make([]float64, 16)
			for j := range tc.p.Len() {
				p[tc.p.ID(j)] = float64(tc.p.P[j])
			}
			checkDraws(t, counts, p, n)
			// The acceptance rate is sum min(p, q); check it too (3-sigma binomial band + rounding).
			var want float64
			for id := range 16 {
				want += math.Min(float64(tc.p.Prob(id)), float64(tc.q.Prob(id)))
			}
			got := float64(accepted) / n
			if tol := 3*math.Sqrt(want*(1-want)/n) + 1e-6; math.Abs(got-want) > tol {
				t.Errorf("acceptance rate %.4f, want %.4f ± %.4f", got, want, tol)
			}
		})
	}
}

func TestAcceptEdges(t *testing.T) {
	s := New(Options{Temperature: 1}, 4)
	p, q := dist(nil, .5, .5, 0), dist(nil, .25, 0, .75)
	for pos := range 100 {
		if !s.Accept(p, q, 0, pos) { // p >= q: always
			t.Fatal("rejected a token with p >= q")
		}
		if s.Accept(p, q, 2, pos) { // p = 0: never
			t.Fatal("accepted a token with p = 0")
		}
		if !s.Accept(p, q, 1, pos) { // q = 0, p > 0: ratio infinite
			t.Fatal("rejected a token with q = 0 < p")
		}
	}
}
