package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// benchLogits imitates a Qwen3 output row: a Gaussian bulk over 151,936 ids with a few dozen
// tokens standing well above it, as after a fluent prefix.
func benchLogits() ([]float32, []int) {
	const vocab = 151936
	r := rand.New(rand.NewPCG(1, 2))
	l := randomLogits(r, vocab, 2.5)
	for i := range 30 {
		l[r.IntN(vocab)] += 8 + float32(i)/3
	}
	hist := make([]int, 200)
	for i := range hist {
		hist[i] = r.IntN(vocab)
	}
	return l, hist
}

func BenchmarkSample(b *testing.B) {
	logits, hist := benchLogits()
	for _, bc := range []struct {
		name string
		o    Options
	}{
		{"greedy", Options{}},
		{"qwen T0.7 k20 p0.8", Options{Temperature: 0.7, TopK: 20, TopP: 0.8}},
		{"qwen T0.7 k20 p0.8 rep1.1", Options{Temperature: 0.7, TopK: 20, TopP: 0.8, RepeatPenalty: 1.1}},
		{"T0.7 p0.9", Options{Temperature: 0.7, TopP: 0.9}},
		{"T1 p0.95 flat", Options{Temperature: 1, TopP: 0.95}},
		{"T1 min-p0.05", Options{Temperature: 1, MinP: 0.05}},
		{"T1 dense", Options{Temperature: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := logits
			if bc.name == "T1 p0.95 flat" {
				// No standout tokens: top-p must reach deep into the bulk.
				l = randomLogits(rand.New(rand.NewPCG(3, 4)), len(logits), 1)
			}
			s := New(bc.o, len(l))
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(l, hist)
			}
		})
	}
}

var sinkF float32

// BenchmarkExpNeg compares the fast exp with math.Exp over the same arguments (a load-
// independent way to see the gain, since both run under the same machine conditions).
func BenchmarkExpNeg(b *testing.B) {
	args := make([]float32, 4096)
	for i := range args {
		args[i] = float32(i) * (expCutoff / 4096.0)
	}
	b.Run("expNeg", func(b *testing.B) {
		var s float32
		for b.Loop() {
			for _, d := range args {
				s += expNeg(d)
			}
		}
		sinkF = s
	})
	b.Run("math.Exp", func(b *testing.B) {
		var s float32
		for b.Loop() {
			for _, d := range args {
				s += float32(math.Exp(-float64(d)))
			}
		}
		sinkF = s
	})
}

// BenchmarkRace is the coupled race over a dense distribution of Qwen3's vocabulary: one hash and
// a comparison per id, the logarithm only for the few ids the bound lets through.
func BenchmarkRace(b *testing.B) {
	logits, _ := benchLogits()
	s := New(Options{Temperature: 1, Coupled: true}, len(logits))
	var d Distribution
	s.Distribution(&d, logits, nil)
	b.ResetTimer()
	for i := range b.N {
		s.Race(&d, i)
	}
}
