package sample

import (
	"math"
	"testing"
)

// TestMode: the most probable id, the lowest id on ties, in either layout.
func TestMode(t *testing.T) {
	// Dense: ids 1 and 3 tie at 0.4; 1 wins.
	dense := Distribution{P: []float32{0.1, 0.4, 0.1, 0.4}}
	if got := dense.Mode(); got != 1 {
		t.Errorf("dense mode %d, want 1", got)
	}
	// Sparse with the tie listed higher id first (a layout Distribution permits only through a
	// hand-built value): the lower id still wins.
	sparse := Distribution{IDs: []int32{7, 2, 5}, P: []float32{0.4, 0.4, 0.2}}
	if got := sparse.Mode(); got != 2 {
		t.Errorf("sparse mode %d, want 2", got)
	}
	if got := (&Distribution{}).Mode(); got != -1 {
		t.Errorf("empty mode %d, want -1", got)
	}
}

// TestChoose: a greedy sampler takes the mode and never touches its random stream; a sampling
// one draws.
func TestChoose(t *testing.T) {
	d := Distribution{IDs: []int32{4, 9}, P: []float32{0.5, 0.5}}
	g := New(Options{}, 16)
	for pos := range 10 {
		if got := g.Choose(&d, pos, DrawToken); got != 4 {
			t.Fatalf("greedy Choose %d, want the lower tied id 4", got)
		}
	}
	hot := New(Options{Temperature: 1, Seed: 1}, 16)
	seen := map[int]bool{}
	for pos := range 200 {
		seen[hot.Choose(&d, pos, DrawDraft)] = true
	}
	if !seen[4] || !seen[9] {
		t.Fatalf("sampled Choose saw %v, want both 4 and 9", seen)
	}
}

func TestArgmaxScore(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		scores []float32
		want   int
	}{
		{[]float32{1, 3, 2}, 1},
		{[]float32{3, 1, 3}, 0},        // the earliest of a tie: the higher unary logit
		{[]float32{nan, 1, nan, 2}, 3}, // NaN never wins
		{[]float32{nan, nan}, 0},       // unless every score is NaN
		{[]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
	}
	for _, c := range cases {
		if got := ArgmaxScore(c.scores); got != c.want {
			t.Errorf("ArgmaxScore(%v) = %d, want %d", c.scores, got, c.want)
		}
	}
}

// TestProposal: softmax(scores / temp) over the candidates, sorted by descending probability
// with ties by ascending id; NaN scores get nothing; no finite score gives a one-hot on the
// first candidate.
func TestProposal(t *testing.T) {
	var q Distribution
	Proposal(&q, []int32{5, 3, 8}, []float32{0, 1, 1}, 0.5)
	// exp(0/0.5) : exp(2) : exp(2), normalised; 3 and 8 tie, 3 first.
	e := math.Exp(2)
	want := []struct {
		id int32
		p  float64
	}{{3, e / (1 + 2*e)}, {8, e / (1 + 2*e)}, {5, 1 / (1 + 2*e)}}
	if q.Len() != 3 {
		t.Fatalf("q has %d entries, want 3", q.Len())
	}
	for i, w := range want {
		if q.IDs[i] != w.id || math.Abs(float64(q.P[i])-w.p) > 1e-6 {
			t.Fatalf("entry %d = (%d, %v), want (%d, %v)", i, q.IDs[i], q.P[i], w.id, w.p)
		}
	}
	nan := float32(math.NaN())
	Proposal(&q, []int32{1, 2}, []float32{nan, 0}, 1)
	if q.Prob(1) != 0 || q.Prob(2) != 1 {
		t.Fatalf("NaN score: q = %+v, want all mass on 2", q)
	}
	Proposal(&q, []int32{6, 7}, []float32{nan, nan}, 1)
	if q.Len() != 1 || q.Prob(6) != 1 {
		t.Fatalf("no finite score: q = %+v, want one-hot on the first candidate 6", q)
	}
}
