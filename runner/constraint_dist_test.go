package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/sample/grammar"
)

// errEnough ends a sampled generation after distSteps tokens (no budget, so no steering).
var errEnough = errors.New("enough tokens")

// Under a grammar at T > 0 speculative sampling must give exactly the masked target's
// distribution, as plain constrained sampling does. Five tokens, an array of 0s and 1s: the
// first token is forced ('['), then the masks change with every token ("[0" allows ',' and ']'
// only; "[]" ends the output). The exact distribution of the first three tokens is enumerated
// from the masked, filtered target distributions and compared by chi-square with plain runs and
// with speculative runs whose drafts often break the grammar.
func TestConstrainedSamplingMatchesMaskedDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("distribution test runs many generations")
	}
	toks := [][]byte{[]byte("["), []byte("0"), []byte("1"), []byte(","), []byte("]")}
	g, err := grammar.CompileSchema([]byte(`{"type":"array","items":{"type":"integer","minimum":0,"maximum":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, grammar.NewVocab(toks, nil))
	target := &fake.Target{Vocab: distVocab, Layers: 2, Scale: 1.5, Seed: 11}
	prompt := []int{1, 3, 2}
	exact := func(o sample.Options) map[string]float64 {
		s := sample.New(o, distVocab)
		out := map[string]float64{}
		var walk func(emitted []int, st any, p float64)
		walk = func(emitted []int, st any, p float64) {
			m := c.Allowed(st, 0)
			if len(emitted) == distSteps || m.Count == 0 {
				out[seqKey(emitted, m.Count == 0)] += p
				return
			}
			hist := append(slices.Clone(prompt), emitted...)
			var d sample.Distribution
			s.Distribution(&d, m.Apply(nil, target.Logits(hist)), hist)
			for i := range d.Len() {
				if id, pi := d.ID(i), float64(d.P[i]); pi > 0 {
					next, _ := c.Advance(st, id)
					walk(append(slices.Clone(emitted), id), next, p*pi)
				}
			}
		}
		walk(nil, c.Start(), 1)
		return out
	}
	drafters := []struct {
		name string
		make func() Session
	}{
		{"plain", func() Session { return nil }},
		{"dflash-random", func() Session {
			return NewBlockSession(&fake.Draft{Block: 4, Mask: 4, Layers: []int{0, 1}, Vocab: distVocab}, 64)
		}},
		{"dflash2-script", func() Session {
			// Every token a candidate, scores varying with the previous token; masked to the
			// grammar's allowed ones before the proposal is drawn.
			s, _ := newScriptSession(4, func(slot, prev int) ([]int32, []float32) {
				return []int32{0, 1, 2, 3, 4}, []float32{float32(prev % 3), 1, 0.5, 2, float32(slot % 2)}
			})
			return s
		}},
		{"oracle-noise", func() Session {
			return (&OracleDrafter{Tokens: []int{1, 3, 2, 0, 1, 3, 2, 4}, Limit: 3, Noise: 0.4, Vocab: distVocab, Seed: 5}).Open(0)
		}},
	}
	for _, oc := range []struct {
		name string
		o    sample.Options
	}{{"T1", sample.Options{Temperature: 1}}, {"T0.7-topp0.8", sample.Options{Temperature: 0.7, TopP: 0.8}}} {
		want := exact(oc.o)
		var total float64
		for _, p := range want {
			total += p
		}
		if math.Abs(total-1) > 1e-4 || len(want) < 3 {
			t.Fatalf("%s: exact distribution %v sums to %v", oc.name, want, total)
		}
		for _, dc := range drafters {
			t.Run(fmt.Sprintf("%s/%s", oc.name, dc.name), func(t *testing.T) {
				d := dc.make()
				seq := NewSequence(target, 64)
				counts := map[string]int{}
				var all Stats
				for r := range distRuns {
					o := oc.o
					o.Seed = 1<<20 + uint64(r)
					var out []int
					st, err := Generate(context.Background(), seq, Request{Prompt: prompt, Options: o, Constraint: c, Session: d, Depth: Fixed(3), Clock: fakeClock()},
						func(tok Token) error {
							out = append(out, tok.ID)
							if len(out) == distSteps {
								return errEnough
							}
							return nil
						})
					if err != nil && !errors.Is(err, errEnough) {
						t.Fatal(err)
					}
					all.Add(st)
					// An output that is whole with nothing to follow has ended, as the
					// enumeration marks it, even when the third token's emit stopped it.
					cs := c.Start()
					for _, id := range out {
						cs, _ = c.Advance(cs, id)
					}
					counts[seqKey(out, c.Allowed(cs, 0).Count == 0)]++
				}
				stat, df := chiSquare(t, counts, want, distRuns)
				t.Logf("chi-square %.1f, df %d, accepted %d/%d", stat, df, all.Accepted, all.Drafted)
				if crit := chiCritical(df, 3.7); stat > crit {
					t.Fatalf("chi-square %.1f > %.1f (df %d)\n%s", stat, crit, df, worst(counts, want, distRuns))
				}
				if d != nil && all.Drafted == 0 {
					t.Fatal("nothing was drafted")
				}
			})
		}
	}
}
