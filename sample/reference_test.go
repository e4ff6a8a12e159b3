package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// reference is the filter chain written the slow, obvious way in float64 (full sort, full
// softmax), against which the sampler's selection-based paths are checked. It returns p over
// the whole vocabulary.
func reference(o Options, logits []float32, history []int) []float64 {
	v := len(logits)
	z := make([]float64, v)
	for i, l := range logits {
		z[i] = float64(l)
	}
	if o.penaltiesActive() {
		w := o.PenaltyWindow
		if w == 0 {
			w = DefaultPenaltyWindow
		}
		win := history
		if w > 0 && len(history) > w {
			win = history[len(history)-w:]
		}
		count := map[int]int{}
		for _, t := range win {
			if t >= 0 && t < v {
				count[t]++
			}
		}
		for id, c := range count {
			l := float64(logits[id])
			if rp := float64(o.RepeatPenalty); rp > 0 && rp != 1 {
				if l > 0 {
					l /= rp
				} else {
					l *= rp
				}
			}
			z[id] = l - float64(o.PresencePenalty) - float64(c)*float64(o.FrequencyPenalty)
		}
	}
	p := make([]float64, v)
	order := make([]int, v)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return z[order[a]] > z[order[b]] })
	if o.Greedy() {
		p[order[0]] = 1
		return p
	}
	keep := order
	if o.TopK > 0 && o.TopK < v {
		keep = keep[:o.TopK]
	}
	w := make([]float64, len(keep))
	var sum float64
	for i, id := range keep {
		w[i] = math.Exp((z[id] - z[keep[0]]) / float64(o.Temperature))
		sum += w[i]
	}
	n := len(keep)
	if o.TopP > 0 && o.TopP < 1 {
		var cum float64
		for i := range keep {
			cum += w[i] / sum
			if cum >= float64(o.TopP) {
				n = i + 1
				break
			}
		}
	}
	if o.MinP > 0 {
		for i := 1; i < n; i++ {
			if w[i] < float64(o.MinP)*w[0] {
				n = i
				break
			}
		}
	}
	sum = 0
	for i := range n {
		sum += w[i]
	}
	for i := range n {
		p[keep[i]] = w[i] / sum
	}
	return p
}

// dense spreads a Distribution over the vocabulary, checking the sparse ordering invariant.
func denseOf(t *testing.T, d *Distribution, vocab int) []float64 {
	t.Helper()
	p := make([]float64, vocab)
	for i := range d.Len() {
		p[d.ID(i)] += float64(d.P[i])
		if d.Sparse() && i > 0 {
			a, b := d.P[i-1], d.P[i]
			if a < b || (a == b && d.IDs[i-1] > d.IDs[i]) {
				t.Fatalf("sparse entries %d,%d out of order: (%d, %g) before (%d, %g)", i-1, i, d.IDs[i-1], a, d.IDs[i], b)
			}
		}
	}
	return p
}

// chiSquareCritical is the upper-alpha quantile of the chi-square distribution with df degrees
// of freedom, by the Wilson-Hilferty cube approximation
//
//	x = df * (1 - 2/(9 df) + z * sqrt(2/(9 df)))^3,
//
// with z the standard normal upper quantile (3.0902 for alpha = 0.001). At this alpha it
// slightly overestimates the exact quantile (df 1: 11.16 vs 10.83; df 4: 18.72 vs 18.47;
// df 20: 45.44 vs 45.32), so it errs on the safe side; the 10% margin on top covers the
// chi-square approximation of the Pearson statistic itself at finite counts (cells with
// expected count >= 5). A correct sampler therefore fails with probability below 0.001 per
// test. The seeds are fixed, so the tests are deterministic anyway; alpha says how unlucky a
// seed would have to be. A wrong filter (even a 5% temperature error) gives statistics in the
// hundreds or thousands at these sample sizes.
func chiSquareCritical(df int) float64 {
	const z = 3.0902 // alpha = 0.001
	k := float64(df)
	c := 1 - 2/(9*k) + z*math.Sqrt(2/(9*k))
	return 1.1 * k * c * c * c
}

// checkDraws runs a chi-square goodness-of-fit test of counts against probabilities p. Cells
// with expected count below 5 are pooled into one cell (the usual validity condition); a
// draw of a token with p = 0 fails outright, since no amount of chance explains it.
func checkDraws(t *testing.T, counts []int, p []float64, n int) {
	t.Helper()
	var stat, poolObs, poolExp float64
	cells := 0
	for id, c := range counts {
		e := p[id] * float64(n)
		if p[id] == 0 {
			if c != 0 {
				t.Fatalf("token %d has probability 0 but was drawn %d times", id, c)
			}
			continue
		}
		if e < 5 {
			poolObs += float64(c)
			poolExp += e
			continue
		}
		stat += (float64(c) - e) * (float64(c) - e) / e
		cells++
	}
	if poolExp > 0 {
		stat += (poolObs - poolExp) * (poolObs - poolExp) / poolExp
		cells++
	}
	if cells < 2 {
		return // one cell: nothing random left to test
	}
	// Probabilities are fixed in advance, so df = cells - 1.
	if crit := chiSquareCritical(cells - 1); stat > crit {
		t.Errorf("chi-square %.2f > critical %.2f (df %d, alpha 0.001): draws do not follow p\ncounts %v\np %v", stat, crit, cells-1, counts, p)
	}
}

func randomLogits(r *rand.Rand, n int, scale float64) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * scale)
	}
	return l
}
