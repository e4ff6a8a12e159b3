package model

import (
	"errors"
	"fmt"
)

// Outputs is a target's reusable result buffers and the tap index of its current forward: what
// every family's Forward checks and sizes the same way before its layers run. The buffers grow
// when a request needs more than any before it and are reused after, so a decode step allocates
// nothing; the Result that Prepare returns aliases them (valid until the next forward).
type Outputs struct {
	logits []float32
	taps   [][]float32
	hidden []float32
	// TapIdx holds, per decoder layer, the index into Request.Taps of that layer's tap, or -1.
	TapIdx []int
}

// NewOutputs sizes the buffers for one row of logits of a target of vocab tokens and layers
// decoder layers.
func NewOutputs(vocab, layers int) Outputs {
	return Outputs{logits: make([]float32, vocab), TapIdx: make([]int, layers)}
}

// Prepare checks r against a target of vocab tokens and len(TapIdx) layers of width hidden (at
// least one token, every token inside the vocabulary, taps of existing layers asked at most once, a
// known LogitRows), and returns the Result for the forward to fill (len(Logits)/vocab rows of
// logits).
// On error the buffers are unchanged but TapIdx may be partly filled; the next Prepare resets it.
func (o *Outputs) Prepare(r Request, vocab, hidden int) (Result, error) {
	n, layers := len(r.Tokens), len(o.TapIdx)
	if n == 0 {
		return Result{}, errors.New("forward with no tokens")
	}
	for _, t := range r.Tokens {
		if t < 0 || t >= vocab {
			return Result{}, fmt.Errorf("token %d outside vocabulary of %d", t, vocab)
		}
	}
	for i := range o.TapIdx {
		o.TapIdx[i] = -1
	}
	for i, l := range r.Taps {
		if l < 0 || l >= layers {
			return Result{}, fmt.Errorf("tap of layer %d outside [0, %d)", l, layers)
		}
		if o.TapIdx[l] >= 0 {
			return Result{}, fmt.Errorf("layer %d tapped twice", l)
		}
		o.TapIdx[l] = i
	}
	logitRows := 0
	switch r.Logits {
	case LogitsLast:
		logitRows = 1
	case LogitsAll:
		logitRows = n
	case LogitsNone:
	default:
		return Result{}, fmt.Errorf("unknown logit rows %d", r.Logits)
	}
	if need := logitRows * vocab; len(o.logits) < need {
		o.logits = make([]float32, need)
	}
	res := Result{Logits: o.logits[:logitRows*vocab]}
	if len(r.Taps) > 0 {
		for len(o.taps) < len(r.Taps) {
			o.taps = append(o.taps, nil)
		}
		for i := range r.Taps {
			if cap(o.taps[i]) < n*hidden {
				o.taps[i] = make([]float32, n*hidden)
			}
			o.taps[i] = o.taps[i][:n*hidden]
		}
		res.Taps = o.taps[:len(r.Taps)]
	}
	if r.Hidden {
		if cap(o.hidden) < n*hidden {
			o.hidden = make([]float32, n*hidden)
		}
		res.Hidden = o.hidden[:n*hidden]
	}
	return res, nil
}
