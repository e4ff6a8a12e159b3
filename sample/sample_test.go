package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// smallLogits has a clear ranking, a tie (ids 4 and 5 at 1.0) at a top-k boundary, negative
// logits for the repeat penalty's multiply branch, and a -Inf token that must never be drawn.
var smallLogits = []float32{2.5, 2.0, -0.5, 1.5, 1.0, 1.0, 0.2, -1.0, 3.0, float32(math.Inf(-1)), 0.7, -2.0}

var filterCases = []struct {
	name    string
	o       Options
	history []int
}{
	{"temperature 1", Options{Temperature: 1}, nil},
	{"temperature 0.5", Options{Temperature: 0.5}, nil},
	{"temperature 2", Options{Temperature: 2}, nil},
	// Ranking 8, 0, 1, 3, then the tie 4 = 5: k = 5 cuts the tie and keeps 4 (lower id).
	{"top-k 5", Options{Temperature: 1, TopK: 5}, nil},
	{"top-k 1", Options{Temperature: 1, TopK: 1}, nil},
	{"top-p 0.8", Options{Temperature: 1, TopP: 0.8}, nil},
	{"top-p 0.5 T 0.7", Options{Temperature: 0.7, TopP: 0.5}, nil},
	{"min-p 0.2", Options{Temperature: 1, MinP: 0.2}, nil},
	{"min-p 0.05 T 1.5", Options{Temperature: 1.5, MinP: 0.05}, nil},
	{"top-k top-p", Options{Temperature: 0.7, TopK: 5, TopP: 0.8}, nil},
	{"top-k top-p min-p", Options{Temperature: 1.2, TopK: 8, TopP: 0.9, MinP: 0.1}, nil},
	{"top-p min-p", Options{Temperature: 1, TopP: 0.95, MinP: 0.15}, nil},
	// Extreme temperatures stress the pre-filter's logit threshold and the exp cutoff.
	{"top-p T 0.05", Options{Temperature: 0.05, TopP: 0.9}, nil},
	{"top-p T 50", Options{Temperature: 50, TopP: 0.9}, nil},
	{"min-p T 20", Options{Temperature: 20, MinP: 0.9}, nil},
	{"penalties dense", Options{Temperature: 1, RepeatPenalty: 1.3, PresencePenalty: 0.4, FrequencyPenalty: 0.2}, []int{8, 8, 2, 0, 77, -3}},
	{"penalties top-k", Options{Temperature: 1, TopK: 4, RepeatPenalty: 2, FrequencyPenalty: 0.5}, []int{8, 8, 8, 0, 3}},
	{"penalties top-p window 2", Options{Temperature: 0.8, TopP: 0.7, RepeatPenalty: 1.5, PenaltyWindow: 2}, []int{1, 8, 0}},
	{"penalties min-p window all", Options{Temperature: 1, MinP: 0.1, PresencePenalty: 1, PenaltyWindow: -1}, []int{8, 1, 0, 3}},
}

// TestDistributionMatchesReference checks every filter path's probabilities against the slow
// float64 reference: float32 arithmetic keeps them within 1e-5.
func TestDistributionMatchesReference(t *testing.T) {
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.o, len(smallLogits))
			var d Distribution
			s.Distribution(&d, smallLogits, tc.history)
			got := denseOf(t, &d, len(smallLogits))
			want := reference(tc.o, smallLogits, tc.history)
			for id := range want {
				if math.Abs(got[id]-want[id]) > 1e-5 {
					t.Errorf("p[%d] = %.7f, reference %.7f", id, got[id], want[id])
				}
			}
		})
	}
}

// TestLargeVocabPrefilter exercises the top-p histogram pre-filter and top-k heap on a large
// vocabulary with quantised logits (many ties), where a wrong bin or heap boundary would
// change the kept set.
func TestLargeVocabPrefilter(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	logits := randomLogits(r, 20000, 3)
	for i := range logits {
		logits[i] = float32(math.Round(float64(logits[i])*4) / 4)
	}
	hist := []int{5, 17, 17, 19999, 3}
	for _, o := range []Options{
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 1, TopP: 0.3},
		{Temperature: 0.3, TopP: 0.99},
		{Temperature: 1, MinP: 0.01},
		{Temperature: 0.7, TopP: 0.8, MinP: 0.05, RepeatPenalty: 1.1},
		{Temperature: 0.7, TopK: 20, TopP: 0.8},
		{Temperature: 1, TopK: 500, PresencePenalty: 2},
	} {
		s := New(o, len(logits))
		var d Distribution
		s.Distribution(&d, logits, hist)
		got := denseOf(t, &d, len(logits))
		want := reference(o, logits, hist)
		for id := range want {
			if math.Abs(got[id]-want[id]) > 1e-5 || (got[id] == 0) != (want[id] == 0) {
				t.Fatalf("%+v: p[%d] = %.7g, reference %.7g", o, id, got[id], want[id])
			}
		}
	}
}

// TestDrawsFollowDistribution samples each filter case end to end (Sample) and tests the
// counts against the reference probabilities. Sample decides the position after history, whose
// uniform is fixed by the seed, so every draw is a request of its own seed (as a server's
// unseeded requests are).
func TestDrawsFollowDistribution(t *testing.T) {
	const n = 40000
	for i, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			counts := make([]int, len(smallLogits))
			for r := range n {
				tc.o.Seed = uint64(i)<<32 + uint64(r)
				counts[New(tc.o, len(smallLogits)).Sample(smallLogits, tc.history)]++
			}
			checkDraws(t, counts, reference(tc.o, smallLogits, tc.history), n)
		})
	}
}

// TestPenaltiesExact checks the effective logits value by value: only ids inside the window
// change, by llama.cpp's repeat rule (divide positive, multiply negative), presence once and
// frequency per occurrence. Values are dyadic so float32 results are exact.
func TestPenaltiesExact(t *testing.T) {
	logits := []float32{2, -1, 4, 0.5, -3, 1, 6, 0}
	// Window 5 is history[2:] = [1 3 -1 100 6]: ids 1, 3 and 6 once each; -1 and 100 are
	// outside the vocabulary and ignored; the leading 0 and the first 1 fall outside the window.
	history := []int{0, 1, 1, 3, -1, 100, 6}
	o := Options{Temperature: 1, RepeatPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25, PenaltyWindow: 5}
	s := New(o, len(logits))
	s.penalise(logits, history)
	got := slices.Clone(s.effective(logits))
	s.clearPenalties()
	want := []float32{
		2,                    // id 0: only outside the window
		-1*2 - 0.5 - 1*0.25,  // id 1: once in the window (negative: multiplied)
		4,                    // id 2: never seen
		0.5/2 - 0.5 - 1*0.25, // id 3: once (positive: divided)
		-3, 1,                // ids 4, 5: unseen
		6/2 - 0.5 - 1*0.25, // id 6: once
		0,                  // id 7: unseen
	}
	if !slices.Equal(got, want) {
		t.Errorf("effective logits %v, want %v", got, want)
	}
	if !slices.Equal(logits, []float32{2, -1, 4, 0.5, -3, 1, 6, 0}) {
		t.Errorf("caller's logits modified: %v", logits)
	}
	for id, c := range s.count {
		if c != 0 {
			t.Fatalf("count[%d] = %d left over after the call", id, c)
		}
	}

	// Frequency counts occurrences; repeat and presence apply once. Window -1 sees all.
	o = Options{Temperature: 1, RepeatPenalty: 4, PresencePenalty: 1, FrequencyPenalty: 0.5, PenaltyWindow: -1}
	s = New(o, len(logits))
	s.penalise(logits, []int{2, 2, 2, 0})
	got = slices.Clone(s.effective(logits))
	s.clearPenalties()
	want = []float32{2.0/4 - 1 - 0.5, -1, 4.0/4 - 1 - 3*0.5, 0.5, -3, 1, 6, 0}
	if !slices.Equal(got, want) {
		t.Errorf("window all: effective logits %v, want %v", got, want)
	}

	// The public path sees the same values: at T = 1 the dense log-ratios are logit differences.
	var d Distribution
	s.Distribution(&d, logits, []int{2, 2, 2, 0})
	for id := 1; id < len(want); id++ {
		r := math.Log(float64(d.P[id]) / float64(d.P[0]))
		if math.Abs(r-float64(want[id]-want[0])) > 1e-5 {
			t.Errorf("log p[%d]/p[0] = %.6f, want %.6f", id, r, want[id]-want[0])
		}
	}
}

// TestGreedy: argmax takes the lowest id among ties, NaN never wins, the greedy distribution is
// the one-hot argmax after penalties, and Sample agrees.
func TestGreedy(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		logits []float32
		want   int
	}{
		{[]float32{1, 3, 2, 3}, 1},
		{[]float32{5, 5, 5}, 0},
		{[]float32{nan, 1, nan, 1}, 1},
		{[]float32{-1, inf, inf}, 1},
		{[]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
		{[]float32{nan, float32(math.Inf(-1))}, 1},
		{[]float32{nan}, 0},
		{nil, -1},
	} {
		if got := Argmax(tc.logits); got != tc.want {
			t.Errorf("Argmax(%v) = %d, want %d", tc.logits, got, tc.want)
		}
	}

	// Penalties: id 1 (4) is penalised to 4/2 = 2, tying id 3 (2); lower id 1 wins the tie.
	// Id 0 (3) is then the maximum.
	logits := []float32{3, 4, 1, 2}
	s := New(Options{RepeatPenalty: 2}, 4)
	if got := s.Sample(logits, []int{1}); got != 0 {
		t.Errorf("greedy with penalty on id 1: %d, want 0", got)
	}
	s = New(Options{RepeatPenalty: 2}, 4)
	if got := s.Sample([]float32{1, 4, 0, 2}, []int{1}); got != 1 {
		t.Errorf("penalised id 1 ties id 3 at 2: got %d, want the lower id 1", got)
	}
	var d Distribution
	s.Distribution(&d, []float32{1, 4, 0, 2}, []int{1})
	if !d.Sparse() || d.Len() != 1 || d.IDs[0] != 1 || d.P[0] != 1 {
		t.Errorf("greedy distribution %+v, want one-hot on 1", d)
	}
}

// TestSeed: the same seed replays the same draws; another seed does not (40 draws from a
// near-uniform 12-way distribution coincide by chance with probability ~12^-40).
func TestSeed(t *testing.T) {
	flat := make([]float32, 12)
	history := make([]int, 0, 40)
	run := func(seed uint64) []int {
		s := New(Options{Temperature: 1, Seed: seed}, len(flat))
		var out []int
		for i := range 40 {
			out = append(out, s.Sample(flat, history[:i]))
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Errorf("seed 42 twice: %v vs %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same draws %v", a)
	}
}

// TestDrawsKeyedByPosition: a position's draw depends on the seed, the position and the purpose
// only, never on how many draws came before, which is what lets a seeded speculative request
// reproduce whatever its rounds drafted. One sampler draws positions 0..63 in order; another of
// the same seed draws them backwards, with draws of every other purpose in between (as rounds of
// varying depth would make); every position must get the same token.
func TestDrawsKeyedByPosition(t *testing.T) {
	flat := make([]float32, 12)
	o := Options{Temperature: 1, Seed: 7}
	a, b := New(o, len(flat)), New(o, len(flat))
	var d Distribution
	a.Distribution(&d, flat, nil)
	want := make([]int, 64)
	for pos := range want {
		want[pos] = a.Draw(&d, pos, DrawToken)
	}
	for pos := len(want) - 1; pos >= 0; pos-- {
		for _, why := range []Purpose{DrawDraft, DrawAccept, DrawResidual} {
			b.Draw(&d, pos+1, why)
			b.Uniform(pos, why)
		}
		if got := b.Draw(&d, pos, DrawToken); got != want[pos] {
			t.Fatalf("position %d: %d after other draws, %d in order", pos, got, want[pos])
		}
	}
	if u1, u2 := a.Uniform(3, DrawAccept), New(o, 0).Uniform(3, DrawAccept); u1 != u2 || u1 < 0 || u1 >= 1 {
		t.Fatalf("Uniform(3, accept): %v vs %v", u1, u2)
	}
}

// TestUniformKeyed checks the counter-based generator the draws come from: along positions (one
// request's tokens), along seeds at one position (many requests' same token) and for every
// purpose, the uniforms fill 16 equal bins as a uniform would; and the pairs of purposes that meet
// at one position (draft and accept, accept and residual, draft and residual, token and draft)
// fill a 4x4 grid evenly, which a correlation between them would not.
func TestUniformKeyed(t *testing.T) {
	const n = 32000
	purposes := []Purpose{DrawToken, DrawDraft, DrawAccept, DrawResidual}
	even := func(k int) []float64 {
		p := make([]float64, k)
		for i := range p {
			p[i] = 1 / float64(k)
		}
		return p
	}
	bin := func(u float64, k int) int { return min(int(u*float64(k)), k-1) }
	for _, why := range purposes {
		s := New(Options{Seed: 11}, 0)
		alongPos, alongSeed := make([]int, 16), make([]int, 16)
		for i := range n {
			alongPos[bin(s.Uniform(i, why), 16)]++
			alongSeed[bin(New(Options{Seed: uint64(i)}, 0).Uniform(5, why), 16)]++
		}
		checkDraws(t, alongPos, even(16), n)
		checkDraws(t, alongSeed, even(16), n)
	}
	s := New(Options{Seed: 3}, 0)
	for _, pair := range [][2]Purpose{{DrawDraft, DrawAccept}, {DrawAccept, DrawResidual}, {DrawDraft, DrawResidual}, {DrawToken, DrawDraft}} {
		grid := make([]int, 16)
		for pos := range n {
			grid[4*bin(s.Uniform(pos, pair[0]), 4)+bin(s.Uniform(pos, pair[1]), 4)]++
		}
		checkDraws(t, grid, even(16), n)
	}
}

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	for _, tc := range []struct {
		o     Options
		field string // "" = valid
	}{
		{Options{}, ""},
		{Options{Temperature: 0.7, TopK: 20, TopP: 0.8, MinP: 0.05, RepeatPenalty: 1.1, PresencePenalty: -1.5, FrequencyPenalty: 2, PenaltyWindow: -1}, ""},
		{Options{TopP: 1, MinP: 1}, ""},
		{Options{Temperature: -0.1}, "temperature"},
		{Options{Temperature: nan}, "temperature"},
		{Options{Temperature: float32(math.Inf(1))}, "temperature"},
		{Options{TopK: -1}, "top_k"},
		{Options{TopP: 1.01}, "top_p"},
		{Options{TopP: -0.2}, "top_p"},
		{Options{MinP: 1.5}, "min_p"},
		{Options{MinP: nan}, "min_p"},
		{Options{RepeatPenalty: -1}, "repeat_penalty"},
		{Options{PresencePenalty: nan}, "presence_penalty"},
		{Options{FrequencyPenalty: float32(math.Inf(-1))}, "frequency_penalty"},
		{Options{PenaltyWindow: -2}, "repeat_last_n"},
	} {
		err := tc.o.Validate()
		var oe *OptionError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.o, err)
		case tc.field != "" && !errors.As(err, &oe):
			t.Errorf("%+v: error %v, want an *OptionError for %s", tc.o, err, tc.field)
		case tc.field != "" && oe.Field != tc.field:
			t.Errorf("%+v: error names %q, want %q (%v)", tc.o, oe.Field, tc.field, err)
		}
	}
	if !(Options{}).Greedy() || (Options{Temperature: 0.1}).Greedy() {
		t.Error("Greedy: temperature 0 must be greedy, 0.1 must not")
	}
}

// TestDegenerateInputs: empty, all-NaN and all -Inf logits give a distribution and a token
// instead of a panic.
func TestDegenerateInputs(t *testing.T) {
	nan, ninf := float32(math.NaN()), float32(math.Inf(-1))
	for _, o := range []Options{{Temperature: 1}, {Temperature: 1, TopK: 2}, {Temperature: 1, TopP: 0.5}, {}} {
		s := New(o, 0)
		if got := s.Sample(nil, nil); got != -1 {
			t.Errorf("%+v: Sample(empty) = %d, want -1", o, got)
		}
		for _, l := range [][]float32{{nan, nan, nan}, {ninf, ninf, ninf}} {
			if got := s.Sample(l, []int{0, 5}); got < 0 || got >= len(l) {
				t.Errorf("%+v: Sample(%v) = %d", o, l, got)
			}
		}
	}
}

// TestExpNeg bounds the fast exp against math.Exp over its whole domain [0, 32): the relative
// error stays within float32 rounding (2^-23 = 1.2e-7, doubled for the polynomial's own error).
func TestExpNeg(t *testing.T) {
	worst := 0.0
	for i := range 320001 {
		d := float32(i) / 10000
		if d >= expCutoff {
			break
		}
		want := math.Exp(-float64(d))
		if rel := math.Abs(float64(expNeg(d))-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 2.4e-7 {
		t.Errorf("expNeg worst relative error %.3g, want <= 2.4e-7", worst)
	}
	if expNeg(0) != 1 {
		t.Errorf("expNeg(0) = %v, want exactly 1 (the top token's weight)", expNeg(0))
	}
}

// TestTopKTies: at the top-k boundary the lower id wins, for ids met in the scan and for a
// penalised id that joins the heap afterwards with its adjusted logit.
func TestTopKTies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Options
		logits  []float32
		history []int
		want    []int32
	}{
		{"scan", Options{Temperature: 1, TopK: 2}, []float32{1, 3, 3, 3, 0}, nil, []int32{1, 2}},
		{"all tied", Options{Temperature: 1, TopK: 3}, []float32{2, 2, 2, 2, 2}, nil, []int32{0, 1, 2}},
		// Id 0 drops from 5 to 3 (presence 2) and ties ids 1..3: it is the lowest, so it stays
		// and pushes out id 2.
		{"penalised joins tie", Options{Temperature: 1, TopK: 2, PresencePenalty: 2}, []float32{5, 3, 3, 3}, []int{0}, []int32{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Distribution
			New(tc.o, len(tc.logits)).Distribution(&d, tc.logits, tc.history)
			if !slices.Equal(d.IDs, tc.want) {
				t.Errorf("kept %v, want %v", d.IDs, tc.want)
			}
		})
	}
}
