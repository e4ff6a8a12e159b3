package runner

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

// The distribution tests check the product's central claim at temperature > 0: with any drafter,
// the emitted sequences are distributed exactly as plain sampling from the target. On a vocabulary
// of 5 and 3 generated tokens there are at most 125 sequences, so the exact distribution can be
// enumerated from the target's filtered distributions, and the empirical counts of seeded runs
// compared with it by a chi-square goodness-of-fit test.

const (
	distVocab = 5
	distSteps = 3
	distRuns  = 20000
)

// exactSequences enumerates P(sequence) for plain sampling: the product of the filtered target
// distributions along it, penalties seeing the prompt and the tokens so far. A stop token ends a
// sequence (key suffix "|stop").
func exactSequences(target *fake.Target, prompt []int, o sample.Options, stop []int) map[string]float64 {
	s := sample.New(o, distVocab)
	out := map[string]float64{}
	var walk func(emitted []int, p float64)
	walk = func(emitted []int, p float64) {
		if len(emitted) == distSteps {
			out[seqKey(emitted, false)] += p
			return
		}
		hist := append(slices.Clone(prompt), emitted...)
		var d sample.Distribution
		s.Distribution(&d, target.Logits(hist), hist)
		for i := range d.Len() {
			id, pi := d.ID(i), float64(d.P[i])
			if pi == 0 {
				continue
			}
			if slices.Contains(stop, id) {
				out[seqKey(emitted, true)] += p * pi
				continue
			}
			walk(append(slices.Clone(emitted), id), p*pi)
		}
	}
	walk(nil, 1)
	return out
}

func seqKey(toks []int, stopped bool) string {
	k := fmt.Sprint(toks)
	if stopped {
		k += "|stop"
	}
	return k
}

// chiSquare is the goodness-of-fit statistic of counts (n runs) against probabilities, cells
// with an expected count under 5 pooled (the usual validity condition of the approximation).
func chiSquare(t *testing.T, counts map[string]int, exact map[string]float64, n int) (stat float64, df int) {
	t.Helper()
	for k := range counts {
		if _, ok := exact[k]; !ok {
			t.Fatalf("sequence %s was generated but has probability 0", k)
		}
	}
	keys := make([]string, 0, len(exact))
	for k := range exact {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return exact[keys[i]] < exact[keys[j]] })
	var poolE, poolO float64
	cells := 0
	for _, k := range keys {
		e, o := exact[k]*float64(n), float64(counts[k])
		if e < 5 || poolE > 0 && poolE < 5 {
			poolE += e
			poolO += o
			if poolE >= 5 {
				stat += (poolO - poolE) * (poolO - poolE) / poolE
				cells++
				poolE, poolO = 0, 0
			}
			continue
		}
		stat += (o - e) * (o - e) / e
		cells++
	}
	if poolE > 0 {
		stat += (poolO - poolE) * (poolO - poolE) / poolE
		cells++
	}
	return stat, cells - 1
}

// chiCritical is the Wilson-Hilferty approximation of the chi-square quantile at z standard
// deviations: z = 3.7 is a one-sided level of about 1e-4.
func chiCritical(df int, z float64) float64 {
	f := float64(df)
	a := 1 - 2/(9*f) + z*math.Sqrt(2/(9*f))
	return f * a * a * a
}

func TestSampledSpeculationMatchesPlainDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("distribution test runs many generations")
	}
	target := &fake.Target{Vocab: distVocab, Layers: 2, Scale: 1.5, Seed: 11}
	prompt := []int{1, 3, 2}
	opts := []struct {
		name string
		o    sample.Options
		stop []int
	}{
		{"T1", sample.Options{Temperature: 1}, nil},
		{"T1-topk3", sample.Options{Temperature: 1, TopK: 3}, nil},
		{"T0.7-topp0.8", sample.Options{Temperature: 0.7, TopP: 0.8}, nil},
		{"T1-penalties-minp", sample.Options{Temperature: 1, RepeatPenalty: 1.6, PresencePenalty: 0.3, MinP: 0.05, PenaltyWindow: -1}, nil},
		{"T1-stop", sample.Options{Temperature: 1.2}, []int{0}},
	}
	// near drafts soft logits close to the target's along its greedy path (high acceptance,
	// bonus tokens); random drafts hashed logits (mostly rejections and residual draws); the
	// oracle proposes one-hot tokens.
	near := func(dst []float32, ctx []int, anchor, i int) {
		seq := append(slices.Clone(ctx), anchor)
		seq = append(seq, target.Greedy(seq, i-1)...)
		copy(dst, target.Logits(seq))
	}
	drafters := []struct {
		name string
		make func() Session
	}{
		{"dflash-random", func() Session {
			return NewBlockSession(&fake.Draft{Block: 4, Mask: 4, Layers: []int{0, 1}, Vocab: distVocab}, 64)
		}},
		{"dflash-near", func() Session {
			return NewBlockSession(&fake.Draft{Block: 4, Mask: 4, Layers: []int{1}, Vocab: distVocab, Logits: near}, 64)
		}},
		{"oracle-noise", func() Session {
			seq := append(slices.Clone(prompt), target.Greedy(prompt, distSteps+2)...)
			return (&OracleDrafter{Tokens: seq, Limit: 3, Noise: 0.4, Vocab: distVocab, Seed: 5}).Open(0)
		}},
	}
	for _, oc := range opts {
		exact := exactSequences(target, prompt, oc.o, oc.stop)
		var total float64
		for _, p := range exact {
			total += p
		}
		if math.Abs(total-1) > 1e-4 {
			t.Fatalf("%s: exact probabilities sum to %v", oc.name, total)
		}
		sample := func(t *testing.T, d Session, seedBase uint64) (map[string]int, Stats) {
			counts := map[string]int{}
			seq := NewSequence(target, 64)
			var all Stats
			for r := range distRuns {
				o := oc.o
				o.Seed = seedBase + uint64(r)
				var out []int
				st, err := Generate(context.Background(), seq, Request{Prompt: prompt, Options: o, MaxTokens: distSteps, Stop: oc.stop, Session: d, Depth: Fixed(3), Clock: fakeClock()},
					func(tok Token) error { out = append(out, tok.ID); return nil })
				if err != nil {
					t.Fatal(err)
				}
				all.Add(st)
				counts[seqKey(out, st.Reason == StopToken)]++
			}
			return counts, all
		}
		t.Run(oc.name+"/plain", func(t *testing.T) {
			counts, _ := sample(t, nil, 1)
			stat, df := chiSquare(t, counts, exact, distRuns)
			if crit := chiCritical(df, 3.7); stat > crit {
				t.Fatalf("plain sampling: chi-square %.1f > %.1f (df %d): the enumeration or the loop is wrong", stat, crit, df)
			}
		})
		for _, dc := range drafters {
			t.Run(oc.name+"/"+dc.name, func(t *testing.T) {
				counts, st := sample(t, dc.make(), 1<<32)
				stat, df := chiSquare(t, counts, exact, distRuns)
				t.Logf("chi-square %.1f, df %d, tau %.2f, accepted %d/%d", stat, df, st.Tau(), st.Accepted, st.Drafted)
				if crit := chiCritical(df, 3.7); stat > crit {
					t.Fatalf("speculative sampling: chi-square %.1f > %.1f (df %d)\n%s", stat, crit, df, worst(counts, exact, distRuns))
				}
				if st.Drafted == 0 {
					t.Fatal("nothing was drafted: the test compared plain with plain")
				}
			})
		}
	}
}

// worst lists the cells furthest from their expectation, for a failure message.
func worst(counts map[string]int, exact map[string]float64, n int) string {
	type cell struct {
		k    string
		e, o float64
	}
	var cs []cell
	for k, p := range exact {
		cs = append(cs, cell{k, p * float64(n), float64(counts[k])})
	}
	sort.Slice(cs, func(i, j int) bool {
		return math.Abs(cs[i].o-cs[i].e)/math.Sqrt(cs[i].e+1) > math.Abs(cs[j].o-cs[j].e)/math.Sqrt(cs[j].e+1)
	})
	var b strings.Builder
	for _, c := range cs[:min(5, len(cs))] {
		fmt.Fprintf(&b, "%s: expected %.1f, observed %.0f\n", c.k, c.e, c.o)
	}
	return b.String()
}

// TestCoupledSamplingMatchesPlainDistribution: coupled sampling (sample.Options.Coupled) without a
// draft follows the exact distribution of plain sampling from the target (chi-square over the
// enumerated sequences), and with a draft gives, seed for seed, the very same sequence, so the
// speculative counts are the plain ones. The near draft's tau beside rejection sampling's shows
// what the coupling costs in acceptance (logged; DFLASH.md section 1 bounds it).
func TestCoupledSamplingMatchesPlainDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("distribution test runs many generations")
	}
	// Fewer runs than the rejection test's: the speculative runs are compared seed for seed, so
	// only the plain counts meet the chi-square test, which 8000 runs still make sharp.
	const runs = 8000
	target := &fake.Target{Vocab: distVocab, Layers: 2, Scale: 1.5, Seed: 11}
	prompt := []int{1, 3, 2}
	near := func(dst []float32, ctx []int, anchor, i int) {
		seq := append(slices.Clone(ctx), anchor)
		seq = append(seq, target.Greedy(seq, i-1)...)
		copy(dst, target.Logits(seq))
	}
	for _, oc := range []struct {
		name string
		o    sample.Options
		stop []int
	}{
		{"T1", sample.Options{Temperature: 1}, nil},
		{"T0.7-topp0.8", sample.Options{Temperature: 0.7, TopP: 0.8}, nil},
		{"T1-penalties-minp-stop", sample.Options{Temperature: 1, RepeatPenalty: 1.6, PresencePenalty: 0.3, MinP: 0.05, PenaltyWindow: -1}, []int{0}},
	} {
		t.Run(oc.name, func(t *testing.T) {
			exact := exactSequences(target, prompt, oc.o, oc.stop)
			counts := map[string]int{}
			seq := NewSequence(target, 64)
			nearS := NewBlockSession(&fake.Draft{Block: 4, Mask: 4, Layers: []int{1}, Vocab: distVocab, Logits: near}, 64)
			randS := NewBlockSession(&fake.Draft{Block: 4, Mask: 4, Layers: []int{0, 1}, Vocab: distVocab}, 64)
			var coupled, rejection Stats
			for r := range runs {
				o := oc.o
				o.Seed, o.Coupled = uint64(r)+7<<40, true
				run := func(d Session, o sample.Options) ([]int, Stats) {
					var out []int
					st, err := Generate(context.Background(), seq, Request{Prompt: prompt, Options: o, MaxTokens: distSteps, Stop: oc.stop, Session: d, Depth: Fixed(3), Clock: fakeClock()},
						func(tok Token) error { out = append(out, tok.ID); return nil })
					if err != nil {
						t.Fatal(err)
					}
					return out, st
				}
				plain, pst := run(nil, o)
				counts[seqKey(plain, pst.Reason == StopToken)]++
				drafts := []Session{nearS}
				if r%4 == 0 {
					drafts = append(drafts, randS)
				}
				for _, d := range drafts {
					if got, st := run(d, o); !slices.Equal(got, plain) {
						t.Fatalf("seed %d: coupled speculative %v, plain %v", o.Seed, got, plain)
					} else if d == nearS {
						coupled.Add(st)
					}
				}
				if r%4 == 1 {
					o.Coupled = false
					_, st := run(nearS, o)
					rejection.Add(st)
				}
			}
			stat, df := chiSquare(t, counts, exact, runs)
			t.Logf("chi-square %.1f, df %d; near draft tau coupled %.2f, rejection %.2f", stat, df, coupled.Tau(), rejection.Tau())
			if crit := chiCritical(df, 3.7); stat > crit {
				t.Fatalf("coupled sampling: chi-square %.1f > %.1f (df %d)\n%s", stat, crit, df, worst(counts, exact, runs))
			}
			if coupled.Accepted == 0 {
				t.Fatal("the near draft was never accepted: only rejections were compared")
			}
		})
	}
}
