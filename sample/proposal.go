package sample

import "math"

// Mode is d's most probable id, the lowest id winning ties whatever d's layout (sparse or
// dense), so a greedy draft and a greedy target agree on tied rows; -1 for an empty d.
func (d *Distribution) Mode() int {
	best, bi := float32(-1), -1
	for i := range d.Len() {
		p, id := d.P[i], d.ID(i)
		if p > best || (p == best && id < bi) {
			best, bi = p, id
		}
	}
	return bi
}

// Choose picks the token at position pos from d: its Mode when the sampler is greedy, the Race
// winner when it is coupled, a Draw for purpose why otherwise. Drafts and verification both choose
// through it, so at temperature 0 they break ties alike, and coupled they race with the same
// arrival times: a coupled choice ignores why on purpose, because that shared noise is what lets
// a draft's choice equal the target's.
func (s *Sampler) Choose(d *Distribution, pos int, why Purpose) int {
	if s.opt.Greedy() {
		return d.Mode()
	}
	if s.opt.Coupled {
		return s.Race(d, pos)
	}
	return s.Draw(d, pos, why)
}

// ArgmaxScore is the index of the largest score, the earliest winning ties; NaN never wins
// unless every score is NaN (then 0). A DFlash2 walk lists a slot's candidates by descending
// unary logit, so the earliest index on a tie is the higher unary logit.
func ArgmaxScore(scores []float32) int {
	best, bi := float32(math.Inf(-1)), 0
	found := false
	for i, v := range scores {
		if v > best || !found && v == best {
			best, bi, found = v, i, true
		}
	}
	return bi
}

// Proposal writes q = softmax(scores / temp) over the candidate ids as a sparse distribution
// (sorted by descending probability, ties by ascending id, as Distribution requires). temp must
// be positive. NaN scores get probability 0; when no score is finite q is one-hot on the first
// candidate. It is the proposal a DFlash2 selector draws from, and verification's accept test
// and residual use it as is, which keeps sampled speculation exact.
func Proposal(q *Distribution, ids []int32, scores []float32, temp float64) {
	q.IDs = append(q.IDs[:0], ids...)
	q.P = q.P[:0]
	m := math.Inf(-1)
	for _, v := range scores {
		if x := float64(v); x > m {
			m = x
		}
	}
	var sum float64
	for _, v := range scores {
		p := 0.0
		if x := float64(v); x == x && !math.IsInf(m, -1) {
			p = math.Exp((x - m) / temp)
		}
		sum += p
		q.P = append(q.P, float32(p))
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		q.IDs = append(q.IDs[:0], ids[0])
		q.P = append(q.P[:0], 1)
		return
	}
	inv := 1 / sum
	for i := range q.P {
		q.P[i] = float32(float64(q.P[i]) * inv)
	}
	// K is small (16 in published drafts): an insertion sort keeps the pairs together.
	for i := 1; i < len(q.P); i++ {
		for j := i; j > 0 && (q.P[j] > q.P[j-1] || q.P[j] == q.P[j-1] && q.IDs[j] < q.IDs[j-1]); j-- {
			q.P[j], q.P[j-1] = q.P[j-1], q.P[j]
			q.IDs[j], q.IDs[j-1] = q.IDs[j-1], q.IDs[j]
		}
	}
}
