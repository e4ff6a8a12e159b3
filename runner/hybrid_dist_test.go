package runner

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/sample"
)

// tinyHybrid is TinyQwen35's shape over a vocabulary of distVocab, so the output distribution of
// a few sampled tokens can be enumerated exactly.
func tinyHybrid(t *testing.T) *qwen35.Model {
	t.Helper()
	m, err := qwen35.Synthetic(qwen35.Config{
		Config: model.Config{
			Arch: qwen35.ArchCausalLM, Layers: 4, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
			HeadDim: 16, Vocab: distVocab, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 1e7, BOS: -1,
		},
		LayerTypes: []qwen35.LayerType{qwen35.Linear, qwen35.Full, qwen35.Linear, qwen35.Linear},
		KeyHeads:   2, ValueHeads: 4, KeyDim: 8, ValueDim: 8, ConvKernel: 4, RotaryDim: 8,
	}, 11)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exactHybrid enumerates P(sequence) for plain sampling from target, each history's logits from
// a forward of the whole history on a fresh cache (no speculation, no snapshots involved).
func exactHybrid(t *testing.T, target model.Target, prompt []int, o sample.Options) map[string]float64 {
	s := sample.New(o, distVocab)
	out := map[string]float64{}
	var walk func(emitted []int, p float64)
	walk = func(emitted []int, p float64) {
		if len(emitted) == distSteps {
			out[seqKey(emitted, false)] += p
			return
		}
		hist := append(slices.Clone(prompt), emitted...)
		res, err := target.Forward(target.NewCache(16), model.Request{Tokens: hist, Logits: model.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		var d sample.Distribution
		s.Distribution(&d, res.Logits[:distVocab], hist)
		for i := range d.Len() {
			if pi := float64(d.P[i]); pi > 0 {
				walk(append(slices.Clone(emitted), d.ID(i)), p*pi)
			}
		}
	}
	walk(nil, 1)
	return out
}

// TestSampledSpeculationMatchesPlainOnHybrid is distribution_test.go's chi-square test on a
// hybrid target: at T > 0 with top-k or top-p, speculative output through the snapshot verify
// path (random DFlash drafts: early rejections; a noisy oracle: late ones and full acceptance) is
// distributed as plain sampling. Every run reuses one sequence, whose cache holds more than the
// repeated prompt's prefix, so each request also starts the recurrent state over.
func TestSampledSpeculationMatchesPlainOnHybrid(t *testing.T) {
	if testing.Short() {
		t.Skip("distribution test runs many generations")
	}
	target := tinyHybrid(t)
	prompt := []int{1, 3, 2}
	draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 1, 4), 5, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	for _, oc := range []struct {
		name string
		o    sample.Options
	}{
		{"T1-topk3", sample.Options{Temperature: 1, TopK: 3}},
		{"T0.7-topp0.8", sample.Options{Temperature: 0.7, TopP: 0.8}},
	} {
		exact := exactHybrid(t, target, prompt, oc.o)
		var total float64
		for _, p := range exact {
			total += p
		}
		if math.Abs(total-1) > 1e-4 {
			t.Fatalf("%s: exact probabilities sum to %v", oc.name, total)
		}
		greedy := sample.Options{}
		plain := func(hist []int, n int) []int {
			var out []int
			_, err := Generate(context.Background(), NewSequence(target, 64), Request{Prompt: hist, Options: greedy, MaxTokens: n}, func(tok Token) error { out = append(out, tok.ID); return nil })
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		oracleSeq := append(slices.Clone(prompt), plain(prompt, distSteps+2)...)
		for _, dc := range []struct {
			name string
			make func() Session
		}{
			{"plain", func() Session { return nil }},
			{"dflash-random", func() Session { return NewBlockSession(draft, 64) }},
			{"oracle-noise", func() Session {
				return (&OracleDrafter{Tokens: oracleSeq, Limit: 3, Noise: 0.4, Vocab: distVocab, Seed: 5}).Open(64)
			}},
		} {
			t.Run(oc.name+"/"+dc.name, func(t *testing.T) {
				d := dc.make()
				seq := NewSequence(target, 64)
				counts := map[string]int{}
				var all Stats
				for r := range distRuns {
					o := oc.o
					o.Seed = 1<<34 + uint64(r)
					var out []int
					st, err := Generate(context.Background(), seq, Request{Prompt: prompt, Options: o, MaxTokens: distSteps, Session: d, Depth: Fixed(3), Clock: fakeClock()},
						func(tok Token) error { out = append(out, tok.ID); return nil })
					if err != nil {
						t.Fatal(err)
					}
					all.Add(st)
					counts[seqKey(out, false)]++
				}
				stat, df := chiSquare(t, counts, exact, distRuns)
				t.Logf("chi-square %.1f, df %d, accepted %d/%d", stat, df, all.Accepted, all.Drafted)
				if crit := chiCritical(df, 3.7); stat > crit {
					t.Fatalf("chi-square %.1f > %.1f (df %d)\n%s", stat, crit, df, worst(counts, exact, distRuns))
				}
				if d != nil && (all.Drafted == 0 || all.Accepted == 0) {
					t.Fatalf("drafted %d, accepted %d: verification went unexercised", all.Drafted, all.Accepted)
				}
			})
		}
	}
}
