package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/dflash/dflash/model"
)

// Pooling says how the final-normed states of a text's rows become its one embedding.
type Pooling int

const (
	// PoolMean averages every row, BOS and special tokens included: sentence-transformers'
	// mean pooling over an unpadded input, and dflash's default for a model that names none.
	PoolMean Pooling = iota
	// PoolLast takes the last row (sentence-transformers' lasttoken: Qwen3-Embedding's), the
	// only one a causal model lets see the whole text.
	PoolLast
	// PoolFirst takes the first row (cls).
	PoolFirst
)

// String names the pooling as sentence-transformers' pooling_mode_* keys do.
func (p Pooling) String() string {
	switch p {
	case PoolMean:
		return "mean"
	case PoolLast:
		return "lasttoken"
	case PoolFirst:
		return "cls"
	}
	return fmt.Sprintf("Pooling(%d)", int(p))
}

// Embed is tokens' embedding under target: the last hidden state after the final norm of every
// row (model.Request.Hidden), pooled, not normalized (the caller normalizes as its API says).
// It runs on a cache of its own sized to tokens, so a sequence being decoded on the same target
// is untouched, but it uses the target's workspace: the caller serialises it with the target's
// other forwards. Rows go in chunks of chunk (<= 0: DefaultPrefillChunk); ctx is checked
// between them.
func Embed(ctx context.Context, target model.Target, tokens []int, pool Pooling, chunk int) ([]float32, error) {
	cfg := target.Config()
	switch {
	case len(tokens) == 0:
		return nil, errors.New("embed: no tokens")
	case len(tokens) > cfg.MaxSeq:
		return nil, fmt.Errorf("embed: %d tokens exceed the model's context of %d", len(tokens), cfg.MaxSeq)
	}
	for i, t := range tokens {
		if t < 0 || t >= cfg.Vocab {
			return nil, fmt.Errorf("embed: token %d is %d, outside the vocabulary of %d", i, t, cfg.Vocab)
		}
	}
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	c := target.NewCache(len(tokens))
	sum := make([]float64, cfg.Hidden)
	out := make([]float32, cfg.Hidden)
	for start := 0; start < len(tokens); start += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rows := tokens[start:min(start+chunk, len(tokens))]
		res, err := target.Forward(c, model.Request{Tokens: rows, Logits: model.LogitsNone, Hidden: true})
		if err != nil {
			return nil, fmt.Errorf("embed: forward at %d: %w", start, err)
		}
		if len(res.Hidden) != len(rows)*cfg.Hidden {
			return nil, fmt.Errorf("embed: target %T returned %d hidden values for %d rows of %d: it does not give hidden states", target, len(res.Hidden), len(rows), cfg.Hidden)
		}
		switch pool {
		case PoolMean:
			for r := range rows {
				for j, v := range res.Hidden[r*cfg.Hidden : (r+1)*cfg.Hidden] {
					sum[j] += float64(v)
				}
			}
		case PoolFirst:
			if start == 0 {
				copy(out, res.Hidden[:cfg.Hidden])
			}
		case PoolLast:
			copy(out, res.Hidden[(len(rows)-1)*cfg.Hidden:])
		default:
			return nil, fmt.Errorf("embed: unknown %v", pool)
		}
	}
	if pool == PoolMean {
		for j, s := range sum {
			out[j] = float32(s / float64(len(tokens)))
		}
	}
	return out, nil
}
