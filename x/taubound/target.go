package main

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/sample"
)

// maxBatchRows bounds the stacked rows of one batched forward (the workspace grows with them).
const maxBatchRows = 2048

// engineBranches runs Branches on an engine target: the context is prefilled once into base,
// each branch starts as a copy of base's rows (cloneKV) and branches are extended together in
// batched forwards (model.BatchTarget, whose rows are bitwise those of a forward alone).
type engineBranches struct {
	t        model.Target
	bt       model.BatchTarget // nil: one forward per branch
	s        *sample.Sampler   // builds p from logits exactly as the engine's sampler does
	vocab    int
	capacity int
	base     cache.Cache
	first    sample.Distribution
	pool     []cache.Cache
	n        int
	dists    [][]sample.Distribution
	items    []model.BatchItem
	keepRaw  bool
	firstRaw []float32
	raw      [][]float32 // per branch, its rows' logits (keepRaw)
}

func (e *engineBranches) KeepRaw(on bool)           { e.keepRaw = on }
func (e *engineBranches) FirstLogits() []float32    { return e.firstRaw }
func (e *engineBranches) Logits(i, r int) []float32 { return e.raw[i][r*e.vocab : (r+1)*e.vocab] }

func newEngineBranches(t model.Target, o sample.Options, capacity int) *engineBranches {
	e := &engineBranches{t: t, vocab: t.Config().Vocab, capacity: capacity}
	e.bt, _ = t.(model.BatchTarget)
	e.s = sample.New(o, e.vocab)
	e.base = t.NewCache(capacity)
	return e
}

// SetContext prefills ctx and computes First.
func (e *engineBranches) SetContext(ctx []int) error {
	if err := e.base.Rewind(0); err != nil {
		return err
	}
	var last []float32
	for off := 0; off < len(ctx); off += 512 {
		end := min(off+512, len(ctx))
		rows := model.LogitsNone
		if end == len(ctx) {
			rows = model.LogitsLast
		}
		res, err := e.t.Forward(e.base, model.Request{Tokens: ctx[off:end], Logits: rows})
		if err != nil {
			return err
		}
		last = res.Logits
	}
	e.firstRaw = append(e.firstRaw[:0], last[:e.vocab]...)
	e.s.Distribution(&e.first, e.firstRaw, nil)
	return nil
}

func (e *engineBranches) First() *sample.Distribution { return &e.first }

func (e *engineBranches) Fork(n int) error {
	for len(e.pool) < n {
		e.pool = append(e.pool, e.t.NewCache(e.capacity))
	}
	for i := 0; i < n; i++ {
		if err := cloneKV(e.pool[i], e.base); err != nil {
			return err
		}
	}
	e.n = n
	return nil
}

// cloneKV makes dst hold src's committed rows, head-major copies included (nn.KV.Publish
// rebuilds them from the row-major rows, as every forward's write does).
func cloneKV(dst, src cache.Cache) error {
	s, ok1 := nn.AsKV(src)
	d, ok2 := nn.AsKV(dst)
	if !ok1 || !ok2 {
		return fmt.Errorf("taubound: the target's cache is not a key/value cache (%T)", src)
	}
	off := s.Offset()
	if err := d.CopyRows(s.KV, off); err != nil {
		return fmt.Errorf("taubound: %w", err)
	}
	if err := d.KV.Rewind(0); err != nil {
		return err
	}
	if err := d.KV.Advance(off); err != nil {
		return err
	}
	for l := range s.Layers {
		d.Publish(l, 0, off)
	}
	return nil
}

func (e *engineBranches) Append(rows [][]int) ([][]sample.Distribution, error) {
	if len(rows) != e.n {
		return nil, fmt.Errorf("taubound: %d rows for %d branches", len(rows), e.n)
	}
	for len(e.dists) < e.n {
		e.dists = append(e.dists, nil)
	}
	out := e.dists[:e.n]
	for len(e.raw) < e.n {
		e.raw = append(e.raw, nil)
	}
	for lo := 0; lo < e.n; {
		e.items = e.items[:0]
		stacked := 0
		hi := lo
		for hi < e.n && (hi == lo || stacked+len(rows[hi]) <= maxBatchRows) {
			e.items = append(e.items, model.BatchItem{Cache: e.pool[hi], Request: model.Request{Tokens: rows[hi], Logits: model.LogitsAll}})
			stacked += len(rows[hi])
			hi++
		}
		var res []model.Result
		if e.bt != nil {
			var err error
			if res, err = e.bt.ForwardBatch(e.items); err != nil {
				return nil, err
			}
		} else {
			for _, it := range e.items {
				r, err := e.t.Forward(it.Cache, it.Request)
				if err != nil {
					return nil, err
				}
				// A lone forward's logits alias the workspace: copy before the next one.
				res = append(res, model.Result{Logits: append([]float32(nil), r.Logits...)})
			}
		}
		for i, r := range res {
			b := lo + i
			k := len(rows[b])
			for len(out[b]) < k {
				out[b] = append(out[b], sample.Distribution{})
			}
			out[b] = out[b][:k]
			if e.keepRaw {
				e.raw[b] = append(e.raw[b][:0], r.Logits[:k*e.vocab]...)
			}
			for j := 0; j < k; j++ {
				e.s.Distribution(&out[b][j], r.Logits[j*e.vocab:(j+1)*e.vocab], nil)
			}
		}
		lo = hi
	}
	return out, nil
}
