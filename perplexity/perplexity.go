// Package perplexity judges a model by how well it predicts a text: its perplexity, and against a
// base model (the same weights in another form, typically unquantized) the divergence of its
// next-token distributions from the base's, as llama.cpp's perplexity tool reports them. This is
// how a quantization is judged.
//
// The text is scored in llama.cpp's way, so figures compare with that tool's: the token ids (BOS
// first when the tokenizer adds one) are cut into chunks of Ctx tokens, every chunk is a fresh
// sequence whose first token is replaced by BOS (when there is one), and only the second half of a
// chunk is scored (positions Ctx/2 .. Ctx-2 predicting the token after them), so every scored
// token sees at least Ctx/2 tokens of context. A tail shorter than a chunk is not scored.
//
// It owns no weights and no decoding loop: it runs forwards of the targets it is given and reads
// their logits. Every figure is computed in float64 from the float32 logits.
package perplexity

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
)

// Options say how to score a text.
type Options struct {
	// Ctx is the chunk length in tokens (at least 4, at most the model's context).
	Ctx int
	// BOS replaces the first token of every chunk when >= 0 (llama.cpp does this when the
	// tokenizer adds a BOS); -1 leaves chunks as cut.
	BOS int
	// Chunks caps the chunks scored (0: every whole chunk of the text).
	Chunks int
	// Batch is the most rows one forward runs (0: 128); it bounds the logits held at once
	// (Batch x Vocab floats per model) without changing any figure, because a row's logits do not
	// depend on the rows computed with it.
	Batch int
	// Progress, when set, is called after each chunk with the chunks done and in all, and the
	// running perplexity of the model.
	Progress func(done, total int, ppl float64)
}

// Result is what scoring a text found.
type Result struct {
	Ctx    int `json:"ctx"`
	Chunks int `json:"chunks"`
	// Tokens is the number of scored tokens: Ctx-1-Ctx/2 per chunk.
	Tokens int `json:"tokens"`
	// PPL is exp of the mean negative log-likelihood; PPLErr its standard error (delta method
	// from the NLL's standard error of the mean, as llama.cpp estimates it).
	PPL    float64 `json:"ppl"`
	PPLErr float64 `json:"ppl_err"`
	NLL    float64 `json:"nll"`
	// KL is set when a base model was given.
	KL *KL `json:"kl,omitempty"`
}

// KL compares the model's next-token distributions with the base model's over the same scored
// tokens.
type KL struct {
	BasePPL    float64 `json:"base_ppl"`
	BasePPLErr float64 `json:"base_ppl_err"`
	// LnPPLRatio is ln(PPL(model)/PPL(base)): the mean over tokens of the NLL difference, with
	// its standard error.
	LnPPLRatio    float64 `json:"ln_ppl_ratio"`
	LnPPLRatioErr float64 `json:"ln_ppl_ratio_err"`
	// Mean is the mean of KL(base || model) = sum_v p_base(v) ln(p_base(v)/p_model(v)) per token,
	// in nats, with its standard error; Quantiles are of the same per-token values.
	Mean      float64    `json:"mean"`
	MeanErr   float64    `json:"mean_err"`
	Quantiles []Quantile `json:"quantiles"`
	// Top1 is the fraction of tokens whose most probable next token is the same for both models
	// (llama.cpp's "same top p"), with its standard error.
	Top1    float64 `json:"top1"`
	Top1Err float64 `json:"top1_err"`
	// RMSDeltaP is the root mean square of p_model(t) - p_base(t) at the text's next token t.
	RMSDeltaP float64 `json:"rms_delta_p"`
}

// Quantile is one point of the per-token KL distribution: Q is 0 for the minimum, 1 for the
// maximum.
type Quantile struct {
	Q     float64 `json:"q"`
	Value float64 `json:"value"`
}

// quantiles are the points llama.cpp prints.
var quantiles = []float64{1, 0.999, 0.99, 0.9, 0.5, 0.1, 0.05, 0.01, 0}

// ErrShortText says the text has fewer tokens than one chunk.
var ErrShortText = errors.New("text shorter than one chunk")

// Score scores tokens (the whole text's ids, BOS first when the tokenizer adds one) by m, and
// against base when base is not nil. The caller checks that both read the text as the same ids
// (the same tokenizer); Score checks that their vocabularies have one size.
func Score(m, base model.Target, tokens []int, o Options) (Result, error) {
	cfg := m.Config()
	if o.Ctx < 4 {
		return Result{}, fmt.Errorf("perplexity: context %d too small (at least 4 tokens)", o.Ctx)
	}
	if cfg.MaxSeq > 0 && o.Ctx > cfg.MaxSeq {
		return Result{}, fmt.Errorf("perplexity: context %d exceeds the model's %d", o.Ctx, cfg.MaxSeq)
	}
	if base != nil {
		bc := base.Config()
		if bc.Vocab != cfg.Vocab {
			return Result{}, fmt.Errorf("perplexity: model vocabulary %d, base's %d: not the same tokenizer", cfg.Vocab, bc.Vocab)
		}
		if bc.MaxSeq > 0 && o.Ctx > bc.MaxSeq {
			return Result{}, fmt.Errorf("perplexity: context %d exceeds the base model's %d", o.Ctx, bc.MaxSeq)
		}
	}
	chunks := len(tokens) / o.Ctx
	if chunks == 0 {
		return Result{}, fmt.Errorf("perplexity: %w: %d tokens, a chunk is %d (lower --ctx or give more text)", ErrShortText, len(tokens), o.Ctx)
	}
	if o.Chunks > 0 {
		chunks = min(chunks, o.Chunks)
	}
	batch := o.Batch
	if batch <= 0 {
		batch = 128
	}
	first := o.Ctx / 2
	s := scorer{vocab: cfg.Vocab, m: m, mc: m.NewCache(o.Ctx), base: base}
	if base != nil {
		s.bc = base.NewCache(o.Ctx)
	}
	chunk := make([]int, o.Ctx)
	for i := range chunks {
		copy(chunk, tokens[i*o.Ctx:(i+1)*o.Ctx])
		if o.BOS >= 0 {
			chunk[0] = o.BOS
		}
		if err := s.mc.Rewind(0); err != nil {
			return Result{}, fmt.Errorf("perplexity: chunk %d: %w", i, err)
		}
		if s.bc != nil {
			if err := s.bc.Rewind(0); err != nil {
				return Result{}, fmt.Errorf("perplexity: chunk %d: base: %w", i, err)
			}
		}
		// The context half needs no logits; the scored half's rows at first..Ctx-2 predict
		// the tokens after them, so the chunk's last token is never an input.
		if err := s.forward(chunk[:first], nil); err != nil {
			return Result{}, fmt.Errorf("perplexity: chunk %d: %w", i, err)
		}
		for at := first; at < o.Ctx-1; at += batch {
			end := min(at+batch, o.Ctx-1)
			if err := s.forward(chunk[at:end], chunk[at+1:end+1]); err != nil {
				return Result{}, fmt.Errorf("perplexity: chunk %d: %w", i, err)
			}
		}
		if o.Progress != nil {
			o.Progress(i+1, chunks, math.Exp(s.nll.mean()))
		}
	}
	return s.result(o.Ctx, chunks), nil
}

// scorer runs the forwards of a scoring and accumulates its per-token figures.
type scorer struct {
	vocab   int
	m, base model.Target
	mc, bc  cache.Cache // bc is nil without a base
	nll     moments
	// With a base model:
	baseNLL, diff, kl, top1, dp2 moments
	kls                          []float64
	lpm, lpb                     []float64 // log-softmax rows, reused
}

// forward runs in through m (and base) and, when next is not nil, scores row j's prediction of
// next[j].
func (s *scorer) forward(in, next []int) error {
	logits := model.LogitsNone
	if next != nil {
		logits = model.LogitsAll
	}
	m, base := s.m, s.base
	r, err := m.Forward(s.mc, model.Request{Tokens: in, Logits: logits})
	if err != nil {
		return err
	}
	var rb model.Result
	if base != nil {
		if base == m {
			// One target's result buffers serve one forward at a time.
			r.Logits = slices.Clone(r.Logits)
		}
		if rb, err = base.Forward(s.bc, model.Request{Tokens: in, Logits: logits}); err != nil {
			return fmt.Errorf("base: %w", err)
		}
	}
	if next == nil {
		return nil
	}
	V := s.vocab
	for j, t := range next {
		s.lpm = logSoftmax(s.lpm, r.Logits[j*V:(j+1)*V])
		s.nll.add(-s.lpm[t])
		if base == nil {
			continue
		}
		s.lpb = logSoftmax(s.lpb, rb.Logits[j*V:(j+1)*V])
		s.baseNLL.add(-s.lpb[t])
		s.diff.add(s.lpb[t] - s.lpm[t])
		// KL(base || model); a token the base gives probability 0 contributes nothing.
		var kl float64
		for v, lb := range s.lpb {
			if pb := math.Exp(lb); pb > 0 {
				kl += pb * (lb - s.lpm[v])
			}
		}
		s.kl.add(kl)
		s.kls = append(s.kls, kl)
		same := 0.0
		if argmax(r.Logits[j*V:(j+1)*V]) == argmax(rb.Logits[j*V:(j+1)*V]) {
			same = 1
		}
		s.top1.add(same)
		d := math.Exp(s.lpm[t]) - math.Exp(s.lpb[t])
		s.dp2.add(d * d)
	}
	return nil
}

func (s *scorer) result(ctx, chunks int) Result {
	ppl := math.Exp(s.nll.mean())
	r := Result{Ctx: ctx, Chunks: chunks, Tokens: s.nll.n, NLL: s.nll.mean(), PPL: ppl, PPLErr: ppl * s.nll.stderr()}
	if s.base == nil {
		return r
	}
	bppl := math.Exp(s.baseNLL.mean())
	k := &KL{
		BasePPL: bppl, BasePPLErr: bppl * s.baseNLL.stderr(),
		LnPPLRatio: s.diff.mean(), LnPPLRatioErr: s.diff.stderr(),
		Mean: s.kl.mean(), MeanErr: s.kl.stderr(),
		Top1: s.top1.mean(), Top1Err: s.top1.stderr(),
		RMSDeltaP: math.Sqrt(s.dp2.mean()),
	}
	slices.Sort(s.kls)
	for _, q := range quantiles {
		k.Quantiles = append(k.Quantiles, Quantile{Q: q, Value: quantile(s.kls, q)})
	}
	r.KL = k
	return r
}

// quantile of sorted values, linearly interpolated between the two nearest ranks.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// logSoftmax writes the log-probabilities of logits into dst (grown as needed).
func logSoftmax(dst []float64, logits []float32) []float64 {
	dst = slices.Grow(dst[:0], len(logits))[:len(logits)]
	mx := float64(slices.Max(logits))
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v) - mx)
	}
	lz := mx + math.Log(z)
	for i, v := range logits {
		dst[i] = float64(v) - lz
	}
	return dst
}

// argmax is the first index of the largest logit, the greedy choice.
func argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// moments accumulates a mean and the standard error of the mean.
type moments struct {
	n       int
	sum, sq float64
}

func (m *moments) add(x float64) { m.n++; m.sum += x; m.sq += x * x }

func (m *moments) mean() float64 {
	if m.n == 0 {
		return 0
	}
	return m.sum / float64(m.n)
}

// stderr is the sample standard deviation over sqrt(n-1), llama.cpp's estimate.
func (m *moments) stderr() float64 {
	if m.n < 2 {
		return 0
	}
	mean := m.mean()
	v := m.sq/float64(m.n) - mean*mean
	if v <= 0 {
		return 0
	}
	return math.Sqrt(v / float64(m.n-1))
}
