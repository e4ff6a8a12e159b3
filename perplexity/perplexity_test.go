package perplexity

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
)

// bigram is a target whose next-token distribution depends on the row's own token only: logit
// hit for token (x+1) mod vocab after x, 0 for every other token. Its log-probabilities are then
// known in closed form: hit - ln(e^hit + vocab - 1) for the successor, -ln(e^hit + vocab - 1)
// otherwise. It records every request.
type bigram struct {
	vocab, maxSeq int
	hit           float32
	requests      []model.Request
	logits        []float32
}

func (b *bigram) Config() model.Config {
	return model.Config{Arch: "bigram", Vocab: b.vocab, MaxSeq: b.maxSeq, BOS: 0}
}
func (b *bigram) NewCache(capacity int) cache.Cache { return cache.NewKV(0, capacity, 0) }
func (b *bigram) Embed(dst []float32, token int)    {}
func (b *bigram) Head() *kernel.Matrix              { return nil }
func (b *bigram) WeightBytes() int64                { return 0 }

func (b *bigram) Forward(c cache.Cache, r model.Request) (model.Result, error) {
	b.requests = append(b.requests, model.Request{Tokens: slices.Clone(r.Tokens), Logits: r.Logits})
	if err := c.(*cache.KV).Advance(len(r.Tokens)); err != nil {
		return model.Result{}, err
	}
	rows := r.Tokens
	switch r.Logits {
	case model.LogitsNone:
		return model.Result{}, nil
	case model.LogitsLast:
		rows = rows[len(rows)-1:]
	}
	b.logits = make([]float32, len(rows)*b.vocab)
	for i, x := range rows {
		b.logits[i*b.vocab+(x+1)%b.vocab] = b.hit
	}
	return model.Result{Logits: b.logits}, nil
}

// lp is log p of the successor (hit) or of any other token under a bigram.
func (b *bigram) lp(hit bool) float64 {
	z := math.Log(math.Exp(float64(b.hit)) + float64(b.vocab-1))
	if hit {
		return float64(b.hit) - z
	}
	return -z
}

// Chunks of 8 tokens: every chunk starts over with BOS in place of its first token, the first
// half (4 tokens) is context only, rows 4..6 are scored against the tokens after them (the last
// token is never an input), and the 4-token tail is dropped.
//
//	chunk 0: [5 1 2 3 | 4 5 7 0]: 4->5 hit, 5->7 miss, 7->0 hit
//	chunk 1: [3 4 5 6 | 1 2 3 4]: 1->2, 2->3, 3->4 hits
//
// so 6 tokens are scored, 5 hits and 1 miss.
func TestScoresSecondHalfOfEachChunk(t *testing.T) {
	tokens := []int{5, 1, 2, 3, 4, 5, 7, 0, 3, 4, 5, 6, 1, 2, 3, 4, 1, 1, 1, 1}
	m := &bigram{vocab: 8, maxSeq: 64, hit: 2}
	r, err := Score(m, nil, tokens, Options{Ctx: 8, BOS: 0})
	if err != nil {
		t.Fatal(err)
	}
	nll := -(5*m.lp(true) + m.lp(false)) / 6
	if r.Chunks != 2 || r.Tokens != 6 || r.KL != nil || math.Abs(r.NLL-nll) > 1e-12 || math.Abs(r.PPL-math.Exp(nll)) > 1e-12 {
		t.Errorf("result %+v, want 2 chunks, 6 tokens, NLL %g, PPL %g, no KL", r, nll, math.Exp(nll))
	}
	want := []model.Request{
		{Tokens: []int{0, 1, 2, 3}, Logits: model.LogitsNone}, {Tokens: []int{4, 5, 7}, Logits: model.LogitsAll},
		{Tokens: []int{0, 4, 5, 6}, Logits: model.LogitsNone}, {Tokens: []int{1, 2, 3}, Logits: model.LogitsAll},
	}
	if !slices.EqualFunc(m.requests, want, func(a, b model.Request) bool { return slices.Equal(a.Tokens, b.Tokens) && a.Logits == b.Logits }) {
		t.Errorf("forwards %v, want %v", m.requests, want)
	}

	// Batches of 2 rows split the scored half into forwards of [4 5] and [7], and change no
	// figure.
	m2 := &bigram{vocab: 8, maxSeq: 64, hit: 2}
	r2, err := Score(m2, nil, tokens, Options{Ctx: 8, BOS: 0, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r2.NLL != r.NLL || r2.Tokens != r.Tokens || len(m2.requests) != 6 || len(m2.requests[2].Tokens) != 1 {
		t.Errorf("batch 2: NLL %g over %d tokens in forwards %v; batch 128: %g over %d", r2.NLL, r2.Tokens, m2.requests, r.NLL, r.Tokens)
	}

	// Without BOS the chunks are scored as cut; Chunks caps them.
	m3 := &bigram{vocab: 8, maxSeq: 64, hit: 2}
	r3, err := Score(m3, nil, tokens, Options{Ctx: 8, BOS: -1, Chunks: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r3.Chunks != 1 || r3.Tokens != 3 || m3.requests[0].Tokens[0] != 5 {
		t.Errorf("no BOS, 1 chunk: %+v, first forward %v", r3, m3.requests[0])
	}
}

// Against a base whose successor logit is 3 where the model's is 2, every scored token has the
// same two distributions, so KL(base||model) is one closed-form value (every quantile equal to
// the mean), both pick the successor as top token (agreement 1), and ln(PPL/PPL base) is the
// mean NLL difference. Against itself (the same target as base) KL is exactly 0.
func TestKLAgainstBase(t *testing.T) {
	tokens := []int{5, 1, 2, 3, 4, 5, 7, 0, 3, 4, 5, 6, 1, 2, 3, 4}
	m := &bigram{vocab: 8, maxSeq: 64, hit: 2}
	base := &bigram{vocab: 8, maxSeq: 64, hit: 3}
	r, err := Score(m, base, tokens, Options{Ctx: 8, BOS: 0})
	if err != nil {
		t.Fatal(err)
	}
	pb, lpbHit, lpbMiss := math.Exp(base.lp(true)), base.lp(true), base.lp(false)
	kl := pb*(lpbHit-m.lp(true)) + 7*math.Exp(lpbMiss)*(lpbMiss-m.lp(false))
	bnll := -(5*base.lp(true) + base.lp(false)) / 6
	k := r.KL
	if k == nil {
		t.Fatal("no KL figures with a base")
	}
	if math.Abs(k.Mean-kl) > 1e-12 || k.MeanErr > 1e-9 || k.Top1 != 1 || math.Abs(k.BasePPL-math.Exp(bnll)) > 1e-12 ||
		math.Abs(k.LnPPLRatio-(r.NLL-bnll)) > 1e-12 {
		t.Errorf("KL %+v, want mean %g, top-1 1, base PPL %g, ln ratio %g", *k, kl, math.Exp(bnll), r.NLL-bnll)
	}
	if len(k.Quantiles) != len(quantiles) {
		t.Fatalf("%d quantiles, want %d", len(k.Quantiles), len(quantiles))
	}
	for _, q := range k.Quantiles {
		if math.Abs(q.Value-kl) > 1e-12 {
			t.Errorf("quantile %g = %g, want %g", q.Q, q.Value, kl)
		}
	}

	self, err := Score(m, m, tokens, Options{Ctx: 8, BOS: 0})
	if err != nil {
		t.Fatal(err)
	}
	if k := self.KL; k.Mean != 0 || k.Quantiles[0].Value != 0 || k.Top1 != 1 || k.LnPPLRatio != 0 || k.RMSDeltaP != 0 || k.BasePPL != self.PPL {
		t.Errorf("against itself: %+v, want KL 0, top-1 1, ratio 0", *k)
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{0, 1, 2, 3, 4}
	for _, c := range []struct{ q, want float64 }{{0, 0}, {1, 4}, {0.5, 2}, {0.9, 3.6}, {0.125, 0.5}} {
		if got := quantile(v, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile %g of %v = %g, want %g", c.q, v, got, c.want)
		}
	}
}

func TestScoreRefuses(t *testing.T) {
	m := &bigram{vocab: 8, maxSeq: 16, hit: 2}
	tokens := make([]int, 40)
	if _, err := Score(m, nil, tokens[:7], Options{Ctx: 8, BOS: 0}); !errors.Is(err, ErrShortText) || !strings.Contains(err.Error(), "7 tokens") {
		t.Errorf("7 tokens, chunks of 8: %v, want ErrShortText naming the count", err)
	}
	if _, err := Score(m, nil, tokens, Options{Ctx: 32, BOS: 0}); err == nil || !strings.Contains(err.Error(), "exceeds the model's 16") {
		t.Errorf("ctx 32 on a 16-token model: %v", err)
	}
	if _, err := Score(m, nil, tokens, Options{Ctx: 2, BOS: 0}); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("ctx 2: %v", err)
	}
	other := &bigram{vocab: 9, maxSeq: 16, hit: 2}
	if _, err := Score(m, other, tokens, Options{Ctx: 8, BOS: 0}); err == nil || !strings.Contains(err.Error(), "vocabulary 8, base's 9") {
		t.Errorf("vocabularies 8 and 9: %v", err)
	}
}

// On real forwards (a Qwen3 and a Qwen3.5 hybrid target, whose cache cannot rewind but to 0),
// splitting the scored half into forwards of 3 rows gives the figures of one forward bitwise,
// since a row's logits do not depend on the rows beside it; and a target against itself has KL 0
// and full agreement.
func TestScoreOnRealTargets(t *testing.T) {
	tokens := make([]int, 3*24)
	for i := range tokens {
		tokens[i] = (i*37 + 11) % 97
	}
	for name, m := range map[string]model.Target{"qwen3": testmodel.TinyQwen3(t), "qwen3.5": testmodel.TinyQwen35(t)} {
		whole, err := Score(m, nil, tokens, Options{Ctx: 24, BOS: -1})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		split, err := Score(m, m, tokens, Options{Ctx: 24, BOS: -1, Batch: 3})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if whole.Tokens != 3*11 || split.NLL != whole.NLL || split.PPL != whole.PPL {
			t.Errorf("%s: NLL %v over %d tokens in one forward, %v in forwards of 3", name, whole.NLL, whole.Tokens, split.NLL)
		}
		if k := split.KL; k.Mean != 0 || k.Top1 != 1 || k.BasePPL != whole.PPL {
			t.Errorf("%s against itself: %+v", name, *k)
		}
	}
}
