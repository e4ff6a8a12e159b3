// Package fake holds small deterministic stand-ins for the runner's tests: a rewindable cache
// that records every operation, a target whose logits are a hash of what its cache holds, and a
// scripted block draft that records its calls. They make the runner's bookkeeping visible (which
// row sits at which slot) where a real model would hide it. Never used outside tests.
package fake

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
)

// Row is one cache slot.
type Row struct {
	Token int
	Hash  uint64    // target: hash of every token up to and including this row
	Ctx   []float32 // draft: the context row written here (nil for block rows)
	Block bool      // draft: a block row
}

// Cache is a rewindable cache that records its operations in Log.
type Cache struct {
	Capacity int
	Rows     []Row // Rows[:Offset()] are committed; rows beyond are stale leftovers
	Log      []string
	offset   int
}

func NewCache(capacity int) *Cache { return &Cache{Capacity: capacity} }

func (c *Cache) Offset() int { return c.offset }

func (c *Cache) Rewind(to int) error {
	if to < 0 || to > c.offset {
		return fmt.Errorf("fake cache: rewind to %d outside [0, %d]", to, c.offset)
	}
	c.Log = append(c.Log, fmt.Sprintf("rewind %d->%d", c.offset, to))
	c.offset = to
	return nil
}

// write appends rows at the offset, overwriting stale ones.
func (c *Cache) write(rows []Row, what string) error {
	if c.offset+len(rows) > c.Capacity {
		return fmt.Errorf("fake cache: %d rows at %d exceed capacity %d", len(rows), c.offset, c.Capacity)
	}
	c.Log = append(c.Log, fmt.Sprintf("%s %d@%d", what, len(rows), c.offset))
	c.Rows = append(c.Rows[:c.offset], rows...)
	c.offset += len(rows)
	return nil
}

// Committed returns the committed rows.
func (c *Cache) Committed() []Row { return c.Rows[:c.offset] }

func mix(h, x uint64) uint64 {
	h ^= x + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ (h >> 33)
}

// Target is a deterministic model.Target. The logits of a row are a hash of its position and
// of every token up to it (a rolling hash kept in the cache rows), so a row left over from a
// rejected draft would change every later logit: stale state cannot go unnoticed. Each tap row
// is [position, token, layer, hash byte].
type Target struct {
	Vocab  int
	Layers int
	Scale  float32 // logits lie in [-Scale, Scale] (default 2)
	Seed   uint64
	EOS    []int

	Forwards []model.Request // every request, for tests that check what was asked
	logits   []float32
	taps     [][]float32
}

// Hidden is the fake's hidden width (one tap row).
const Hidden = 4

func (t *Target) Config() model.Config {
	return model.Config{Arch: "fake", Layers: max(t.Layers, 1), Hidden: Hidden, Vocab: t.Vocab, MaxSeq: 1 << 20, BOS: -1, EOS: t.EOS, DType: kernel.F32}
}

func (t *Target) NewCache(capacity int) cache.Cache { return NewCache(capacity) }

func (t *Target) scale() float32 {
	if t.Scale > 0 {
		return t.Scale
	}
	return 2
}

// row fills dst with the logits of a row whose rolling hash is h.
func (t *Target) row(dst []float32, h uint64) {
	for v := range dst {
		x := mix(h, uint64(v)+t.Seed)
		dst[v] = t.scale() * (float32(x>>40)/float32(1<<24)*2 - 1)
	}
}

// Logits returns the logits after processing tokens from an empty cache: the row of the last.
func (t *Target) Logits(tokens []int) []float32 {
	h := uint64(0)
	for pos, tok := range tokens {
		h = mix(mix(h, uint64(pos)), uint64(tok))
	}
	out := make([]float32, t.Vocab)
	t.row(out, h)
	return out
}

// Greedy returns the n tokens plain greedy decoding appends to prompt (argmax, lowest id on ties).
func (t *Target) Greedy(prompt []int, n int) []int {
	seq := append([]int(nil), prompt...)
	for range n {
		l := t.Logits(seq)
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		seq = append(seq, best)
	}
	return seq[len(prompt):]
}

func (t *Target) Forward(cc cache.Cache, r model.Request) (model.Result, error) {
	c, ok := cc.(*Cache)
	if !ok {
		return model.Result{}, fmt.Errorf("fake target: cache is %T", cc)
	}
	t.Forwards = append(t.Forwards, model.Request{Tokens: append([]int(nil), r.Tokens...), Logits: r.Logits, Taps: r.Taps})
	n := len(r.Tokens)
	if n == 0 {
		return model.Result{}, fmt.Errorf("fake target: no tokens")
	}
	h := uint64(0)
	if c.offset > 0 {
		h = c.Rows[c.offset-1].Hash
	}
	rows := make([]Row, n)
	for i, tok := range r.Tokens {
		if tok < 0 || tok >= t.Vocab {
			return model.Result{}, fmt.Errorf("fake target: token %d outside vocabulary %d", tok, t.Vocab)
		}
		h = mix(mix(h, uint64(c.offset+i)), uint64(tok))
		rows[i] = Row{Token: tok, Hash: h}
	}
	for _, l := range r.Taps {
		if l < 0 || l >= max(t.Layers, 1) {
			return model.Result{}, fmt.Errorf("fake target: tap layer %d outside %d layers", l, t.Layers)
		}
	}
	base := c.offset
	if err := c.write(rows, "forward"); err != nil {
		return model.Result{}, err
	}
	var res model.Result
	switch r.Logits {
	case model.LogitsLast:
		t.logits = grow(t.logits, t.Vocab)
		t.row(t.logits, rows[n-1].Hash)
		res.Logits = t.logits
	case model.LogitsAll:
		t.logits = grow(t.logits, n*t.Vocab)
		for i := range rows {
			t.row(t.logits[i*t.Vocab:(i+1)*t.Vocab], rows[i].Hash)
		}
		res.Logits = t.logits
	}
	for len(t.taps) < len(r.Taps) {
		t.taps = append(t.taps, nil)
	}
	for k, l := range r.Taps {
		t.taps[k] = grow(t.taps[k], n*Hidden)
		for i, row := range rows {
			copy(t.taps[k][i*Hidden:], []float32{float32(base + i), float32(row.Token), float32(l), float32(row.Hash & 0xff)})
		}
		res.Taps = append(res.Taps, t.taps[k])
	}
	return res, nil
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (t *Target) Embed(dst []float32, token int) {
	for i := range Hidden {
		dst[i] = float32(token)
	}
}

func (t *Target) Head() *kernel.Matrix { return nil }
func (t *Target) WeightBytes() int64   { return 0 }

// DraftCall records one BlockDraft.Forward.
type DraftCall struct {
	Offset       int   // draft cache offset before the call
	CtxPositions []int // the target positions of the context rows written (from tap feature 0)
	Block        []int
}

// Draft is a scripted model.BlockDraft. Context rows must be fake Target tap rows; the cache
// records them so tests can check every slot. Block row logits come from Logits, given the
// context tokens in the cache (every committed token before the anchor), the anchor and the
// block row i >= 1; the default is a hash (a draft that is mostly wrong).
type Draft struct {
	Block  int
	Mask   int
	Layers []int
	Vocab  int
	Logits func(dst []float32, ctx []int, anchor, i int)
	Fail   bool // make the next Forward fail

	Calls  []DraftCall
	logits []float32
}

func (d *Draft) BlockSize() int                    { return d.Block }
func (d *Draft) MaskID() int                       { return d.Mask }
func (d *Draft) TargetLayers() []int               { return d.Layers }
func (d *Draft) NewCache(capacity int) cache.Cache { return NewCache(capacity) }

func (d *Draft) Forward(cc cache.Cache, ctx []float32, ctxRows int, block []int) ([]float32, error) {
	c, ok := cc.(*Cache)
	if !ok {
		return nil, fmt.Errorf("fake draft: cache is %T", cc)
	}
	if d.Fail {
		d.Fail = false
		return nil, fmt.Errorf("fake draft: scripted failure")
	}
	width := len(d.Layers) * Hidden
	if len(ctx) < ctxRows*width {
		return nil, fmt.Errorf("fake draft: %d context floats for %d rows of %d", len(ctx), ctxRows, width)
	}
	if len(block) > d.Block {
		return nil, fmt.Errorf("fake draft: block of %d rows exceeds %d", len(block), d.Block)
	}
	for _, m := range block[min(1, len(block)):] {
		if m != d.Mask {
			return nil, fmt.Errorf("fake draft: block %v is not [anchor, MASK...]", block)
		}
	}
	call := DraftCall{Offset: c.offset, Block: append([]int(nil), block...)}
	rows := make([]Row, 0, ctxRows+len(block))
	for r := range ctxRows {
		row := append([]float32(nil), ctx[r*width:(r+1)*width]...)
		call.CtxPositions = append(call.CtxPositions, int(row[0]))
		rows = append(rows, Row{Token: int(row[1]), Ctx: row})
	}
	for _, tok := range block {
		rows = append(rows, Row{Token: tok, Block: true})
	}
	if err := c.write(rows, "draft"); err != nil {
		return nil, err
	}
	d.Calls = append(d.Calls, call)
	if block == nil {
		return nil, nil
	}
	var context []int
	for _, r := range c.Committed() {
		if r.Block {
			break
		}
		context = append(context, r.Token)
	}
	d.logits = grow(d.logits, len(block)*d.Vocab)
	for i := 1; i < len(block); i++ {
		dst := d.logits[i*d.Vocab : (i+1)*d.Vocab]
		if d.Logits != nil {
			d.Logits(dst, context, block[0], i)
			continue
		}
		h := mix(mix(uint64(len(context)), uint64(block[0])), uint64(i)^0xd1f1a5)
		for v := range dst {
			dst[v] = 2 * (float32(mix(h, uint64(v))>>40)/float32(1<<24)*2 - 1)
		}
	}
	return d.logits, nil
}

// OneHot fills dst with a strong preference for tok (logit 20 against 0), a draft that is sure.
func OneHot(dst []float32, tok int) {
	for i := range dst {
		dst[i] = 0
	}
	dst[tok] = 20
}
