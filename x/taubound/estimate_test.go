package main

import (
	"math"
	"slices"
	"testing"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/sample"
)

// fakeBranches is a target given by its conditional distribution of the next token after the
// tokens that follow the context.
type fakeBranches struct {
	cond     func(prefix []int) sample.Distribution
	first    sample.Distribution
	branches [][]int
	out      [][]sample.Distribution
}

func newFake(cond func([]int) sample.Distribution) *fakeBranches {
	return &fakeBranches{cond: cond, first: cond(nil)}
}

func (f *fakeBranches) First() *sample.Distribution { return &f.first }

func (f *fakeBranches) Fork(n int) error {
	f.branches = make([][]int, n)
	return nil
}

func (f *fakeBranches) Append(rows [][]int) ([][]sample.Distribution, error) {
	f.out = make([][]sample.Distribution, len(rows))
	for i, r := range rows {
		for _, tok := range r {
			f.branches[i] = append(f.branches[i], tok)
			f.out[i] = append(f.out[i], f.cond(slices.Clone(f.branches[i])))
		}
	}
	return f.out, nil
}

func denseDist(p ...float32) sample.Distribution { return sample.Distribution{P: p} }

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol || got != got {
		t.Errorf("%s = %.4f, want %.4f ± %.4f", what, got, want, tol)
	}
}

var sampled = sample.Options{Temperature: 1}

// A target whose next-token distribution ignores the prefix: the marginal drafter is the target
// itself, so every draft is accepted (rejection and coupled) and tau = D+1.
func TestPrefixFreeTargetAcceptsEverything(t *testing.T) {
	f := newFake(func([]int) sample.Distribution { return denseDist(0.5, 0.3, 0.15, 0.05) })
	cfg := Config{D: 6, M: 64, B: 64, R: 200, Chunk: 32, Options: sampled}
	r, err := EstimateContext(f, cfg, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{Marginal, MarginalQuart} {
		near(t, "rejection tau, "+drafterName(cfg, v), Tau(r.Reject[v], cfg.D), 7, 1e-4)
		near(t, "engine-coin tau, "+drafterName(cfg, v), Tau(r.RejectFlip[v], cfg.D), 7, 1e-9)
	}
	near(t, "coupled tau", Tau(r.Coupled, cfg.D), 7, 1e-9)
	near(t, "overlap bound", Tau(r.Overlap, cfg.D), 7, 1e-4)
	// sqrt(pi(a) pi(b)) has rank one and singular value sum(pi) = 1.
	near(t, "pair bound", r.PairBound, 1, 1e-4)
	near(t, "exact P(acc>=2)", r.Exact2, 1, 1e-6)
	// The mode drafter proposes token 0 always: accepted with probability 0.5 each.
	want := 1.0
	for k := 1; k <= cfg.D; k++ {
		want += math.Pow(0.5, float64(k))
	}
	near(t, "mode drafter tau (Rao-Blackwellised: exact)", Tau(r.Reject[Mode], cfg.D), want, 1e-4)
}

// A deterministic target (what T = 0 makes of any model) has one-hot marginals: tau = D+1.
func TestDeterministicChainAcceptsEverything(t *testing.T) {
	f := newFake(func(prefix []int) sample.Distribution {
		var d sample.Distribution
		d.OneHot((len(prefix)*3 + 1) % 5)
		return d
	})
	cfg := Config{D: 15, M: 4, B: 4, R: 8, Chunk: 4, Options: sample.Options{}, Powers: []float64{0.5, 2}}
	r, err := EstimateContext(f, cfg, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	for v := 0; v < cfg.Drafters(); v++ {
		near(t, "tau, "+drafterName(cfg, v), Tau(r.Reject[v], cfg.D), 16, 0)
	}
	near(t, "coupled", Tau(r.Coupled, cfg.D), 16, 0)
}

// Two tokens, p_1 = (1/2, 1/2) and each later token copies the previous one with probability a:
// the marginals are (1/2, 1/2) at every position. With D = 2, the first draft is always accepted
// (q_1 = p_1) and the second with E min(1, p_2(x_2|x_1) / (1/2)) = (min(1, 2a) + min(1, 2(1-a)))/2,
// 0.6 at a = 0.9; the overlap sum min(P, Q) over the four pairs is 0.25+0.05+0.05+0.25 = 0.6 too;
// and the coupled race agrees with probability P(R<1) + P(R>=9) = 1/2 + 1/10 = 0.6, R = E_0/E_1
// (P(R < r) = r/(1+r)). So tau = 2.6 for all three.
func TestCopyChainByHand(t *testing.T) {
	const a = 0.9
	f := newFake(func(prefix []int) sample.Distribution {
		if len(prefix) == 0 {
			return denseDist(0.5, 0.5)
		}
		if prefix[len(prefix)-1] == 0 {
			return denseDist(a, 1-a)
		}
		return denseDist(1-a, a)
	})
	cfg := Config{D: 2, M: 20000, B: 20000, R: 20000, Chunk: 5000, Options: sampled}
	r, err := EstimateContext(f, cfg, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	// Standard errors: the Rao-Blackwellised accept (values 1 or 0.2) ~0.003, a coin ~0.0035,
	// the overlap ~0.003; q_2 itself is off by ~0.003 (M = 20000).
	near(t, "P(acc>=1)", r.Reject[Marginal][0], 1, 1e-3)
	near(t, "rejection tau", Tau(r.Reject[Marginal], 2), 2.6, 0.02)
	near(t, "engine-coin tau", Tau(r.RejectFlip[Marginal], 2), 2.6, 0.02)
	near(t, "coupled tau", Tau(r.Coupled, 2), 2.6, 0.02)
	near(t, "overlap bound", Tau(r.Overlap, 2), 2.6, 0.02)
	// Without sampling: P(acc>=2) = 0.6 exactly, and sqrt(P) = [[s, c], [c, s]] with
	// s = sqrt(0.45), c = sqrt(0.05) has largest singular value s + c = 0.894.
	near(t, "exact P(acc>=2)", r.Exact2, 0.6, 1e-6)
	near(t, "pair bound", r.PairBound, math.Sqrt(0.45)+math.Sqrt(0.05), 1e-4)
	// The mode drafter: q_1's tie goes to token 0, accepted with probability 1/2; q_2's mode is
	// whichever token the estimate favours (a coin flip here), accepted after x_1 = 0 with
	// probability a if it is 0 and 1-a if it is 1.
	near(t, "mode P(acc>=1)", r.Reject[Mode][0], 0.5, 1e-3)
	if got := Tau(r.Reject[Mode], 2); math.Abs(got-(1.5+0.5*a)) > 1e-3 && math.Abs(got-(1.5+0.5*(1-a))) > 1e-3 {
		t.Errorf("mode tau = %.4f, want %.2f or %.2f", got, 1.5+0.5*a, 1.5+0.5*(1-a))
	}
}

// A three-token target where the coupled race and rejection sampling differ, against values
// computed by summing over every outcome (the overlap, rejection) and by the two-token race
// formula generalised: P(race agrees) = sum_i 1 / sum_j max(p_j/p_i, q_j/q_i) (the race picks i
// under both iff E_j > E_i max(p_j/p_i, q_j/q_i) for every j).
func TestThreeTokensAgainstEnumeration(t *testing.T) {
	p1 := []float64{0.6, 0.3, 0.1}
	p2 := [][]float64{{0.1, 0.2, 0.7}, {0.5, 0.4, 0.1}, {0.3, 0.3, 0.4}}
	f := newFake(func(prefix []int) sample.Distribution {
		var ps []float64
		switch len(prefix) {
		case 0:
			ps = p1
		default:
			ps = p2[prefix[0]]
		}
		return denseDist(float32(ps[0]), float32(ps[1]), float32(ps[2]))
	})
	q2 := make([]float64, 3)
	for a := range p1 {
		for b := range q2 {
			q2[b] += p1[a] * p2[a][b]
		}
	}
	var rej, over, race float64
	for a := range p1 {
		for b := range q2 {
			rej += p1[a] * q2[b] * math.Min(1, p2[a][b]/q2[b])
			over += math.Min(p1[a]*p2[a][b], p1[a]*q2[b])
		}
		for i := range q2 {
			var s float64
			for j := range q2 {
				s += math.Max(p2[a][j]/p2[a][i], q2[j]/q2[i])
			}
			race += p1[a] / s
		}
	}
	cfg := Config{D: 2, M: 60000, B: 60000, R: 60000, Chunk: 20000, Options: sampled}
	r, err := EstimateContext(f, cfg, 3, 11)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("by enumeration: rejection %.4f, overlap %.4f, race %.4f", rej, over, race)
	if !(race < rej-0.012) {
		t.Fatalf("test target does not separate the race (%.4f) from rejection (%.4f)", race, rej)
	}
	near(t, "rejection P(acc>=2)", r.Reject[Marginal][1], rej, 0.006)
	near(t, "engine-coin P(acc>=2)", r.RejectFlip[Marginal][1], rej, 0.006)
	near(t, "overlap P(acc>=2)", r.Overlap[1], over, 0.006)
	near(t, "coupled P(acc>=2)", r.Coupled[1], race, 0.006)
	near(t, "exact P(acc>=2)", r.Exact2, rej, 1e-6)
	// sigma_max of sqrt(P(a,b)) by plain power iteration, to convergence.
	S := make([][]float64, 3)
	for a := range S {
		for b := 0; b < 3; b++ {
			S[a] = append(S[a], math.Sqrt(p1[a]*p2[a][b]))
		}
	}
	v := []float64{1, 1, 1}
	var sigma float64
	for it := 0; it < 1000; it++ {
		u := make([]float64, 3)
		for a := range S {
			for b := range v {
				u[a] += S[a][b] * v[b]
			}
		}
		w := make([]float64, 3)
		for b := range w {
			for a := range u {
				w[b] += S[a][b] * u[a]
			}
		}
		sigma = math.Sqrt(math.Sqrt(w[0]*w[0]+w[1]*w[1]+w[2]*w[2]) / math.Sqrt(v[0]*v[0]+v[1]*v[1]+v[2]*v[2]))
		n := math.Sqrt(w[0]*w[0] + w[1]*w[1] + w[2]*w[2])
		for b := range v {
			v[b] = w[b] / n
		}
	}
	t.Logf("sigma_max(sqrt P) = %.4f", sigma)
	if r.PairBound < sigma-1e-9 || r.PairBound > sigma*(1+1e-3) {
		t.Errorf("pair bound %.6f, want sigma_max %.6f (from above, within 0.1%%)", r.PairBound, sigma)
	}
	if r.PairBound < over {
		t.Errorf("pair bound %.4f below the marginal product's overlap %.4f", r.PairBound, over)
	}
}

// cloneKV must leave a branch exactly as a prefill of the context would: the next forward's
// logits are bitwise equal, on a shape with head-major copies (head 8) and one without (head 32).
func TestCloneKVIsBitwisePrefill(t *testing.T) {
	for _, hd := range []int{8, 32} {
		cfg := model.Config{Arch: transformer.ArchQwen3, Layers: 2, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
			HeadDim: hd, Vocab: 64, MaxSeq: 128, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1}
		m, err := transformer.Synthetic(cfg, 5)
		if err != nil {
			t.Fatal(err)
		}
		ctx := []int{3, 9, 27, 17, 51, 25, 11}
		next := []int{4, 40, 8}
		fresh := m.NewCache(64)
		if _, err := m.Forward(fresh, model.Request{Tokens: ctx}); err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward(fresh, model.Request{Tokens: next, Logits: model.LogitsAll})
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(res.Logits)

		br := newEngineBranches(m, sampled, 64)
		if err := br.SetContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := br.Fork(3); err != nil {
			t.Fatal(err)
		}
		// Dirty the clones' dead rows first: a clone must not depend on them.
		items := []model.BatchItem{}
		for i := 0; i < 3; i++ {
			items = append(items, model.BatchItem{Cache: br.pool[i], Request: model.Request{Tokens: []int{1, 2, 5, 7, 60}}})
		}
		if _, err := m.ForwardBatch(items); err != nil {
			t.Fatal(err)
		}
		if err := br.Fork(3); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			items[i].Request = model.Request{Tokens: next, Logits: model.LogitsAll}
		}
		got, err := m.ForwardBatch(items)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !slices.Equal(got[i].Logits, want) {
				t.Errorf("head %d: branch %d's logits differ from a fresh prefill's", hd, i)
			}
		}
	}
}

// rawFake is a prefix-free target given by logits, with the engine's sampler making p.
type rawFake struct {
	*fakeBranches
	logits []float32
}

func (f *rawFake) KeepRaw(bool)              {}
func (f *rawFake) FirstLogits() []float32    { return f.logits }
func (f *rawFake) Logits(i, r int) []float32 { return f.logits }

// The soft-target drafter on a prefix-free target: the average of the temperature-1
// probabilities is softmax(z), and the runner's Distribution of its log at (T, top-p) is p
// itself, so every draft is accepted at any temperature and top-p.
func TestSoftTargetDrafterOnPrefixFreeTarget(t *testing.T) {
	z := []float32{2, 1.5, 0.3, -1, 0.9, -3}
	o := sample.Options{Temperature: 0.7, TopP: 0.8}
	smp := sample.New(o, len(z))
	var p sample.Distribution
	smp.Distribution(&p, z, nil)
	f := &rawFake{newFake(func([]int) sample.Distribution {
		return sample.Distribution{IDs: slices.Clone(p.IDs), P: slices.Clone(p.P)}
	}), z}
	cfg := Config{D: 5, M: 16, B: 16, R: 64, Chunk: 16, Options: o}
	r, err := EstimateContext(f, cfg, len(z), 2)
	if err != nil {
		t.Fatal(err)
	}
	v := len(r.Reject) - 1
	if v != cfg.Drafters() || drafterName(cfg, v) != "soft-target draft optimum" {
		t.Fatalf("drafter %d is %q, want the soft-target one", v, drafterName(cfg, v))
	}
	near(t, "soft-target drafter tau", Tau(r.Reject[v], cfg.D), 6, 1e-4)
	near(t, "marginal tau", Tau(r.Reject[Marginal], cfg.D), 6, 1e-4)
}
