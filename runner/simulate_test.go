package runner_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// publishedLike is a histogram over 0..15 accepted drafts whose tau is about 6.3: each draft is
// accepted with probability 0.854 once its predecessors were, and a full block is common.
func publishedLike() []float64 {
	c := make([]float64, 16)
	p := 1.0
	for k := range 15 {
		c[k] = p * 0.146
		p *= 0.854
	}
	c[15] = p
	return c
}

// chiSquareFit is Pearson's statistic of observed draws against the histogram, cells with an
// expected count under 5 merged into their neighbour, and its degrees of freedom.
func chiSquareFit(obs []int, a *runner.Acceptance, n int) (float64, int) {
	var stat, exp, got float64
	cells := 0
	for k := range a.Counts {
		exp += a.P(k) * float64(n)
		if k < len(obs) {
			got += float64(obs[k])
		}
		if exp >= 5 || k == len(a.Counts)-1 {
			if exp > 0 {
				stat += (got - exp) * (got - exp) / exp
				cells++
			}
			exp, got = 0, 0
		}
	}
	return stat, cells - 1
}

// chiSquare001 is the chi-square quantile at p = 0.001 (Wilson-Hilferty, z = 3.0902).
func chiSquare001(df int) float64 {
	f := float64(df)
	a := 1 - 2/(9*f) + 3.0902*math.Sqrt(2/(9*f))
	return f * a * a * a
}

// The draws follow the histogram: 20000 draws from a fixed seed pass a goodness-of-fit test at
// p = 0.001, and the same draws are rejected against a histogram shifted by one, so the test can
// tell a wrong draw from a right one.
func TestAcceptanceDrawsFollowHistogram(t *testing.T) {
	a, err := runner.NewAcceptance(publishedLike())
	if err != nil {
		t.Fatal(err)
	}
	if tau := a.Tau(); math.Abs(tau-6.3) > 0.05 {
		t.Fatalf("constructed histogram has tau %.3f, want about 6.3", tau)
	}
	const n = 20000
	obs := make([]int, 16)
	rng := splitmix.Stream{State: 42}
	for range n {
		obs[a.Draw(rng.Float64())]++
	}
	stat, df := chiSquareFit(obs, a, n)
	if crit := chiSquare001(df); stat > crit {
		t.Errorf("draws do not follow the histogram: chi-square %.1f > %.1f (df %d); observed %v", stat, crit, df, obs)
	}
	shifted, _ := runner.NewAcceptance(append([]float64{0}, publishedLike()[:15]...))
	if stat, df := chiSquareFit(obs, shifted, n); stat <= chiSquare001(df) {
		t.Errorf("a shifted histogram passed: chi-square %.1f (df %d)", stat, df)
	}
}

func TestParseAcceptance(t *testing.T) {
	for _, in := range []string{
		"[1, 2, 3, 0]",
		`{"note": "measured", "counts": [1, 2, 3, 0]}`,
		"# accepted 0..3\n1 2\n3, 0 # last\n",
	} {
		a, err := runner.ParseAcceptance([]byte(in))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if !slices.Equal(a.Counts, []float64{1, 2, 3, 0}) {
			t.Errorf("%q: counts %v", in, a.Counts)
		}
		// tau = (0*1 + 1*2 + 2*3) / 6 + 1.
		if math.Abs(a.Tau()-(8.0/6+1)) > 1e-12 {
			t.Errorf("%q: tau %v", in, a.Tau())
		}
	}
	for _, in := range []string{"", "[]", "[0, 0]", "[1, -1]", "1 x 2", `{"counts": "a"}`} {
		if _, err := runner.ParseAcceptance([]byte(in)); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}

// AcceptanceOf turns a run's per-position counts back into the histogram of its rounds: three
// drafting rounds accepting 0, 2 and 2 drafts (depth 3) and one plain round.
func TestAcceptanceOfStats(t *testing.T) {
	st := runner.Stats{Rounds: 4, Depths: []int{1, 0, 0, 3}, DraftedAt: []int{3, 3, 3}, AcceptedAt: []int{2, 2, 0}}
	if got := runner.AcceptanceOf(st); !slices.Equal(got, []int{1, 0, 2, 0}) {
		t.Errorf("histogram %v, want [1 0 2 0]", got)
	}
}

// A simulated drafter on a real (tiny) target and a random DFlash draft: the output is the
// target's plain greedy output token for token, every round accepts exactly the allowed count
// the drafter drew (the run's histogram equals the draws'), and the draws over the run follow
// the histogram.
func TestSimulatedDrafterIsExactAndAcceptsTheDraws(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		target := tinyQwen3(t, 97, 5)
		draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 16), 9, kernel.BF16)
		if err != nil {
			t.Fatal(err)
		}
		a, err := runner.NewAcceptance(publishedLike())
		if err != nil {
			t.Fatal(err)
		}
		inner := runner.NewBlockDrafter(draft)
		rng := rand.New(rand.NewPCG(1, 2))
		drawn := make([]int, 16)
		rounds := 0
		for trial := range 8 {
			prompt := make([]int, 1+rng.IntN(12))
			for i := range prompt {
				prompt[i] = rng.IntN(97)
			}
			const n = 400
			want, _ := generate(t, target, prompt, n, nil, sample.Options{}, nil, runner.Depth{})
			allowed := make([]int, 16)
			sim := &runner.SimulatedDrafter{
				Inner: inner, Tokens: append(slices.Clone(prompt), want...), Accept: a, Vocab: 97, Seed: uint64(trial),
				OnDraw: func(k, al int) { drawn[k]++; allowed[al]++; rounds++ },
			}
			got, st := generate(t, target, prompt, n, nil, sample.Options{}, sim.Open(512), runner.Fixed(15))
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d: simulated speculation left the target's output:\n got %v\nwant %v", trial, got, want)
			}
			hist := runner.AcceptanceOf(st)
			for len(hist) < 16 {
				hist = append(hist, 0)
			}
			if !slices.Equal(hist[:16], allowed) {
				t.Fatalf("trial %d: rounds accepted %v, the drafter allowed %v", trial, hist, allowed)
			}
		}
		stat, df := chiSquareFit(drawn, a, rounds)
		if crit := chiSquare001(df); stat > crit {
			t.Errorf("draws in the loop do not follow the histogram: chi-square %.1f > %.1f (df %d) over %d rounds: %v", stat, crit, df, rounds, drawn)
		}
	})
}

// The simulation on a hybrid target (the snapshot verify path): a Qwen3.5-shaped target with a
// random DFlash draft of block 16 still decodes its plain greedy output, and every round accepts
// exactly what the drafter allowed, as on a dense target. This is what `dflash bench --synthetic
// qwen3.5-4b --draft synthetic: --acceptance FILE` runs at full scale.
func TestSimulatedDrafterOnHybridTarget(t *testing.T) {
	target := testmodel.TinyQwen35(t)
	vocab := target.Config().Vocab
	draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 2, 16), 9, kernel.BF16)
	if err != nil {
		t.Fatal(err)
	}
	a, err := runner.NewAcceptance(publishedLike())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := range 3 {
		prompt := make([]int, 1+rng.IntN(12))
		for i := range prompt {
			prompt[i] = rng.IntN(vocab)
		}
		const n = 120
		want, _ := generate(t, target, prompt, n, nil, sample.Options{}, nil, runner.Depth{})
		allowed := make([]int, 16)
		sim := &runner.SimulatedDrafter{
			Inner: runner.NewBlockDrafter(draft), Tokens: append(slices.Clone(prompt), want...), Accept: a, Vocab: vocab, Seed: uint64(trial),
			OnDraw: func(k, al int) { allowed[al]++ },
		}
		got, st := generate(t, target, prompt, n, nil, sample.Options{}, sim.Open(512), runner.Fixed(15))
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: simulated speculation left the target's output:\n got %v\nwant %v", trial, got, want)
		}
		hist := runner.AcceptanceOf(st)
		for len(hist) < 16 {
			hist = append(hist, 0)
		}
		if !slices.Equal(hist[:16], allowed) || st.Accepted == 0 {
			t.Fatalf("trial %d: rounds accepted %v, the drafter allowed %v", trial, hist, allowed)
		}
	}
}
