package model

import (
	"errors"
	"fmt"
	"slices"
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
	// LogitRow holds, after PrepareBatch, the row of the stacked logits each stacked row of the
	// forward writes, or -1 for a row without logits.
	LogitRow []int

	ntaps    int         // taps of the last Prepare or PrepareBatch
	results  []Result    // PrepareBatch's, reused
	itemTaps [][]float32 // the per-item tap slices of results, reused
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
	logitRows, err := o.check(r, vocab)
	if err != nil {
		return Result{}, err
	}
	n := len(r.Tokens)
	o.size(logitRows, n, len(r.Taps), vocab, hidden)
	res := Result{Logits: o.logits[:logitRows*vocab]}
	if len(r.Taps) > 0 {
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

// check validates r (see Prepare), fills TapIdx from its taps and returns its rows of logits.
func (o *Outputs) check(r Request, vocab int) (int, error) {
	n, layers := len(r.Tokens), len(o.TapIdx)
	if n == 0 {
		return 0, errors.New("forward with no tokens")
	}
	for _, t := range r.Tokens {
		if t < 0 || t >= vocab {
			return 0, fmt.Errorf("token %d outside vocabulary of %d", t, vocab)
		}
	}
	for i := range o.TapIdx {
		o.TapIdx[i] = -1
	}
	for i, l := range r.Taps {
		if l < 0 || l >= layers {
			return 0, fmt.Errorf("tap of layer %d outside [0, %d)", l, layers)
		}
		if o.TapIdx[l] >= 0 {
			return 0, fmt.Errorf("layer %d tapped twice", l)
		}
		o.TapIdx[l] = i
	}
	switch r.Logits {
	case LogitsLast:
		return 1, nil
	case LogitsAll:
		return n, nil
	case LogitsNone:
		return 0, nil
	}
	return 0, fmt.Errorf("unknown logit rows %d", r.Logits)
}

// size grows the buffers to logitRows rows of logits and taps taps of rows x hidden, each sliced
// to exactly that length.
func (o *Outputs) size(logitRows, rows, taps, vocab, hidden int) {
	if need := logitRows * vocab; len(o.logits) < need {
		o.logits = make([]float32, need)
	}
	o.ntaps = taps
	for len(o.taps) < taps {
		o.taps = append(o.taps, nil)
	}
	for i := 0; i < taps; i++ {
		if cap(o.taps[i]) < rows*hidden {
			o.taps[i] = make([]float32, rows*hidden)
		}
		o.taps[i] = o.taps[i][:rows*hidden]
	}
}

// PrepareBatch is Prepare for a forward that stacks the rows of items, in order: it checks each
// item's request (every item must ask the same taps, since TapIdx is one per forward) and returns
// one Result per item, aliasing one buffer of logits and one per tap in the stacked order. It
// also sets LogitRow: for each stacked row, the row of the stacked logits it writes, or -1.
func (o *Outputs) PrepareBatch(items []BatchItem, vocab, hidden int) ([]Result, error) {
	if len(items) == 0 {
		return nil, errors.New("batched forward with no sequences")
	}
	rows, logitRows := 0, 0
	for i := range items {
		r := &items[i].Request
		if r.Hidden {
			// Embeddings run one input per forward on a cache of their own; nothing batches them.
			return nil, fmt.Errorf("sequence %d asks for hidden states, which a batched forward does not return", i)
		}
		if !slices.Equal(r.Taps, items[0].Taps) {
			return nil, fmt.Errorf("sequence %d taps layers %v, sequence 0 %v: a batch taps the same layers", i, r.Taps, items[0].Taps)
		}
		k, err := o.check(*r, vocab)
		if err != nil {
			return nil, fmt.Errorf("sequence %d: %w", i, err)
		}
		rows += len(r.Tokens)
		logitRows += k
	}
	taps := len(items[0].Taps)
	o.size(logitRows, rows, taps, vocab, hidden)
	if cap(o.LogitRow) < rows {
		o.LogitRow = make([]int, rows)
	}
	o.LogitRow = o.LogitRow[:rows]
	if cap(o.results) < len(items) {
		o.results = make([]Result, len(items))
		o.itemTaps = make([][]float32, len(items)*taps)
	}
	if len(o.itemTaps) < len(items)*taps {
		o.itemTaps = make([][]float32, len(items)*taps)
	}
	res := o.results[:len(items)]
	row, lrow := 0, 0
	for i := range items {
		r := &items[i].Request
		n := len(r.Tokens)
		first, k := 0, 0 // the item's rows with logits: [first, n)
		switch r.Logits {
		case LogitsLast:
			first, k = n-1, 1
		case LogitsAll:
			k = n
		}
		for j := 0; j < n; j++ {
			o.LogitRow[row+j] = -1
			if k > 0 && j >= first {
				o.LogitRow[row+j] = lrow + j - first
			}
		}
		res[i] = Result{Logits: o.logits[lrow*vocab : (lrow+k)*vocab]}
		if taps > 0 {
			t := o.itemTaps[i*taps : (i+1)*taps : (i+1)*taps]
			for ti := range t {
				t[ti] = o.taps[ti][row*hidden : (row+n)*hidden]
			}
			res[i].Taps = t
		}
		row += n
		lrow += k
	}
	return res, nil
}

// Stacked is the buffers the last Prepare or PrepareBatch sized, whole: the logits of every row
// that asks for them in stacked order (LogitRow says which), and per tap every row's output.
func (o *Outputs) Stacked() (logits []float32, taps [][]float32) {
	return o.logits, o.taps[:o.ntaps]
}
