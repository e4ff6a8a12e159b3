package sample

import (
	"math"
	"sort"
	"testing"
)

// TestLogprobsIsLogSoftmax checks Logprobs against the definition, log(exp(l_i) / sum exp(l_j)),
// computed naively here in float64 (the logits are small, so the naive sum does not overflow),
// and that the top alternatives are the largest, in order, with ties broken by the lower id.
func TestLogprobsIsLogSoftmax(t *testing.T) {
	logits := []float32{1.5, -2, 3.25, 3.25, 0, float32(math.NaN()), -7, 2}
	var z float64
	for _, l := range logits {
		if l == l {
			z += math.Exp(float64(l))
		}
	}
	for tok, l := range logits {
		got, _ := Logprobs(logits, tok, 0, nil)
		want := math.Log(math.Exp(float64(l)) / z)
		if l != l {
			want = math.Inf(-1)
		}
		if math.Abs(got-want) > 1e-12 && !(math.IsInf(want, -1) && math.IsInf(got, -1)) {
			t.Errorf("token %d: logprob %v, want %v", tok, got, want)
		}
	}
	var mass float64
	for tok := range logits {
		lp, _ := Logprobs(logits, tok, 0, nil)
		mass += math.Exp(lp)
	}
	if math.Abs(mass-1) > 1e-12 {
		t.Errorf("probabilities sum to %v, want 1", mass)
	}

	_, top := Logprobs(logits, 0, 4, nil)
	// Largest first: ids 2 and 3 tie at 3.25 (the lower id first), then 2.0 (id 7), then 1.5 (id 0).
	wantIDs := []int{2, 3, 7, 0}
	if len(top) != len(wantIDs) {
		t.Fatalf("top has %d entries, want %d", len(top), len(wantIDs))
	}
	for i, a := range top {
		if a.ID != wantIDs[i] {
			t.Errorf("top[%d] is token %d, want %d (top %v)", i, a.ID, wantIDs[i], top)
		}
		if lp, _ := Logprobs(logits, a.ID, 0, nil); lp != a.Logprob {
			t.Errorf("top[%d] logprob %v differs from the token's own %v", i, a.Logprob, lp)
		}
	}
}

// TestLogprobsTopBounds: top is clamped to MaxTopLogprobs and to the vocabulary, and a wide
// vocabulary's top list is what a full sort gives.
func TestLogprobsTopBounds(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32((i*7919)%1000) / 100
	}
	_, top := Logprobs(logits, 0, 50, nil)
	if len(top) != MaxTopLogprobs {
		t.Fatalf("top 50 gave %d entries, want the cap %d", len(top), MaxTopLogprobs)
	}
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
	for i, a := range top {
		if a.ID != ids[i] {
			t.Fatalf("top[%d] = %d, full sort says %d", i, a.ID, ids[i])
		}
	}
	if _, top := Logprobs(logits[:3], 0, 10, nil); len(top) != 3 {
		t.Errorf("top 10 of 3 tokens gave %d entries", len(top))
	}
	if lp, top := Logprobs(logits, 5000, -1, nil); !math.IsInf(lp, -1) || len(top) != 0 {
		t.Errorf("token outside the vocabulary: %v %v, want -Inf and no alternatives", lp, top)
	}
}

// BenchmarkLogprobs is the per-token cost of logprobs with 5 alternatives at Qwen3's vocabulary.
func BenchmarkLogprobs(b *testing.B) {
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32((i*7919)%4001)/400 - 5
	}
	var alts []Alt
	for b.Loop() {
		_, alts = Logprobs(logits, 17, 5, alts)
	}
}
