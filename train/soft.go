package train

import (
	"math"

	"github.com/dflash/dflash/model/dflash2"
)

// Soft targets and the distillation loss.
//
// The soft targets are the target's probabilities at temperature 1, whatever temperature the
// continuation was sampled at. Verification at temperature T compares the draft's proposal q_T
// with the target's p_T, and both are made from logits the same way (softmax(z / T), then top-p):
// a draft whose logits match the target's log-probabilities up to a constant has q_T = p_T at
// every T at once. Distilling p_T for one training T would instead bake that T into the draft's
// logits, which the request's temperature then applies a second time, and a data set mixing
// temperatures would give the same context contradicting targets. So the sampled continuations
// choose the contexts the draft learns in (those a sampled request reaches), and the T = 1
// distribution is what it learns there.

// softScratch is the per-continuation scratch of the soft-target top-K.
type softScratch struct {
	ids  []int32
	vals []float32
}

// append adds the k most probable tokens of logits and their probabilities at temperature 1
// (the full-vocabulary softmax, summed in float64) to ids and p.
func (s *softScratch) append(ids []int32, p []float32, logits []float32, k int) ([]int32, []float32) {
	k = min(k, len(logits))
	s.ids, s.vals = resize(s.ids, k), resize(s.vals, k)
	dflash2.TopK(s.ids, s.vals, logits)
	m := s.vals[0]
	var sum float64
	for _, v := range logits {
		if v == v { // a NaN logit has no probability (and TopK never picks it before a number)
			sum += math.Exp(float64(v - m))
		}
	}
	for i, id := range s.ids {
		ids = append(ids, id)
		p = append(p, float32(math.Exp(float64(s.vals[i]-m))/sum))
	}
	return ids, p
}

// lossMix is the weight of the soft term in a DraftConfig's loss: 0 for "hard", 1 for "soft",
// SoftWeight for "mix".
func (c DraftConfig) lossMix() float64 {
	switch c.Loss {
	case LossSoft:
		return 1
	case LossMix:
		return c.SoftWeight
	}
	return 0
}

// The values of DraftConfig.Loss ("" is hard).
const (
	LossHard = "hard"
	LossSoft = "soft"
	LossMix  = "mix"
)

// distilCE is the block position's loss (1-mix) * CE(label) + mix * CE(t), where CE(t) is the
// cross-entropy of softmax(logits) against the soft targets t over ids renormalised to sum 1
// (the KL divergence from them plus their entropy, a constant: the same gradient). It leaves
// softmax(logits) in logits, as softmaxCE does, for distilGrad. The log-partition is taken in
// float64 from the logits themselves, so a candidate the draft gives a vanishing probability
// costs its true log-probability, not the log of a float32 that underflowed.
func distilCE(logits []float32, label int, ids []int32, t []float32, mix float64) float64 {
	m := logits[0]
	for _, v := range logits[1:] {
		m = max(m, v)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - m))
	}
	lse := float64(m) + math.Log(sum)
	var loss float64
	if mix < 1 {
		loss += (1 - mix) * (lse - float64(logits[label]))
	}
	if mix > 0 {
		var tz, ts float64
		for j, id := range ids {
			tz += float64(t[j]) * float64(logits[id])
			ts += float64(t[j])
		}
		loss += mix * (lse - tz/ts)
	}
	inv := 1 / sum
	for i, v := range logits {
		logits[i] = float32(math.Exp(float64(v-m)) * inv)
	}
	return loss
}

// distilGrad turns probs (distilCE's softmax) into f times the gradient of distilCE with
// respect to the logits: f * (p - (1-mix) onehot(label) - mix * t/sum(t)).
func distilGrad(probs []float32, label int, ids []int32, t []float32, mix float64, f float32) {
	for j := range probs {
		probs[j] *= f
	}
	if mix < 1 {
		probs[label] -= f * float32(1-mix)
	}
	if mix > 0 {
		var ts float64
		for _, v := range t {
			ts += float64(v)
		}
		g := float64(f) * mix / ts
		for j, id := range ids {
			probs[id] -= float32(g * float64(t[j]))
		}
	}
}
