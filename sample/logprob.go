package sample

import "math"

// MaxTopLogprobs is the most alternatives Logprobs reports per position: OpenAI's and ollama's
// limit for top_logprobs.
const MaxTopLogprobs = 20

// Alt is a token and its log probability.
type Alt struct {
	ID      int
	Logprob float64
}

// Logprobs is the model's own log probability of token under logits (log-softmax at temperature
// 1 of the raw logits: before penalties, temperature and the top-k/top-p/min-p filters, as ollama
// and OpenAI report it), and the top most likely tokens in decreasing order (ties: the lower id
// first), appended to alts[:0]. top is clamped to [0, MaxTopLogprobs].
//
// The sum runs in float64 over the logits in index order, so the same logits give the same bits
// whatever else shares their forward: a speculative round's row of the verification forward and
// a plain decode step give identical values. NaN logits count as -Inf, as everywhere in sample;
// a token with a -Inf logit has log probability -Inf (json cannot carry it, so callers clamp).
func Logprobs(logits []float32, token, top int, alts []Alt) (float64, []Alt) {
	alts = alts[:0]
	top = min(max(top, 0), MaxTopLogprobs, len(logits))
	hi := math.Inf(-1)
	for _, l := range logits {
		if v := float64(l); v > hi { // NaN compares false: skipped
			hi = v
		}
	}
	if math.IsInf(hi, -1) {
		// Every logit is -Inf or NaN: no distribution. Report it as certain nothing.
		return math.Inf(-1), alts
	}
	var sum float64
	for _, l := range logits {
		if v := float64(l); v == v {
			sum += math.Exp(v - hi)
		}
	}
	lse := hi + math.Log(sum)
	lp := func(i int) float64 {
		v := float64(logits[i])
		if v != v {
			return math.Inf(-1)
		}
		return v - lse
	}
	for i := range logits {
		v := lp(i)
		if len(alts) == top && (top == 0 || v <= alts[top-1].Logprob) {
			continue // not above the worst kept (an equal value keeps the lower id already held)
		}
		if len(alts) < top {
			alts = append(alts, Alt{})
		}
		j := len(alts) - 1
		for j > 0 && alts[j-1].Logprob < v {
			alts[j] = alts[j-1]
			j--
		}
		alts[j] = Alt{ID: i, Logprob: v}
	}
	if token < 0 || token >= len(logits) {
		return math.Inf(-1), alts
	}
	return lp(token), alts
}
