package nn

import (
	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
)

// headMajorMax is the largest head size whose caches always get head-major key copies: below it
// a key row per head is too short for vector instructions, so attention runs over positions
// instead. Heads the fused path takes (FusedHeadMajor, up to FusedMaxHead) get them too.
const headMajorMax = 16

// HeadMajorKeys reports whether a cache for this shape keeps head-major copies (NewKV).
func (a Attention) HeadMajorKeys() bool {
	return a.HeadDim <= headMajorMax || FusedHeadMajor(a.Heads, a.KVHeads, a.HeadDim)
}

// HeadMajorKV is the cache of an attention shape that reads head-major copies (HeadMajorKeys):
// the plain KV, which owns the offset and the row-major rows, plus head-major copies of every
// layer's keys and, unless attention takes the fused path (which reads values row-major; vt is
// nil then), values. Both are written together (KV.Publish after the row-major writes), and rows
// past the offset are dead in both, so rewinding the KV rewinds the copies too.
type HeadMajorKV struct {
	*cache.KV
	layout HeadMajor
	kt, vt [][]float32
}

// CacheBF16 reports whether NewKV makes a bf16 cache for this shape: when BF16Cache asks for
// one and the shape reads row-major keys and values (no head-major copies, which stay float32).
func (a Attention) CacheBF16() bool { return a.BF16Cache && !a.HeadMajorKeys() }

// NewKV allocates the cache attention of shape a reads for capacity positions of layers layers:
// a plain *cache.KV (bf16 when CacheBF16), or a *HeadMajorKV when the shape takes head-major
// copies (HeadMajorKeys). Read and write it through AsKV. KVBytes is its memory.
func (a Attention) NewKV(layers, capacity int) cache.Cache {
	if a.CacheBF16() {
		return cache.NewKVBF16(layers, capacity, a.KVHeads, a.HeadDim)
	}
	kv := cache.NewKV(layers, capacity, a.KVHeads*a.HeadDim)
	copies, layout := a.headMajorCopies(capacity)
	if copies == 0 {
		return kv
	}
	c := &HeadMajorKV{KV: kv, layout: layout, kt: make([][]float32, layers)}
	if copies == 2 {
		c.vt = make([][]float32, layers)
	}
	for l := range c.kt {
		c.kt[l] = make([]float32, c.layout.Len())
		if c.vt != nil {
			c.vt[l] = make([]float32, c.layout.Len())
		}
	}
	return c
}

// headMajorCopies is how many head-major copies per layer a cache of shape a for capacity
// positions keeps (0: none; 1: the keys, when attention takes the fused path, which reads values
// row-major; 2: keys and values) and their layout. NewKV allocates by it and KVBytes counts by
// it, so the two cannot drift.
func (a Attention) headMajorCopies(capacity int) (int, HeadMajor) {
	if !a.HeadMajorKeys() {
		return 0, HeadMajor{}
	}
	layout := HeadMajor{KVHeads: a.KVHeads, HeadDim: a.HeadDim, Capacity: HeadMajorStride(capacity)}
	if FusedHeadMajor(a.Heads, a.KVHeads, a.HeadDim) {
		return 1, layout
	}
	return 2, layout
}

// KVBytes is the memory NewKV(layers, capacity) allocates: the row-major keys and values
// (cache.KVBytes) and the head-major copies of every layer, float32.
func (a Attention) KVBytes(layers, capacity int) int64 {
	if a.CacheBF16() {
		return cache.KVBytesBF16(layers, capacity, a.KVHeads*a.HeadDim)
	}
	n := cache.KVBytes(layers, capacity, a.KVHeads*a.HeadDim)
	if copies, layout := a.headMajorCopies(capacity); copies > 0 {
		n += 4 * int64(layers) * int64(copies) * int64(layout.Len())
	}
	return n
}

// Bytes is the memory the cache holds: its rows and its head-major copies, measured from the
// buffers (their capacities), not from the shape.
func (c *HeadMajorKV) Bytes() int64 {
	n := c.KV.Bytes()
	for l := range c.kt {
		n += 4 * int64(cap(c.kt[l]))
		if c.vt != nil {
			n += 4 * int64(cap(c.vt[l]))
		}
	}
	return n
}

// KV is what a forward reads and writes of a cache from NewKV or a plain *cache.KV: the
// row-major rows, and the head-major copies when the cache has them. It is a value, so taking it
// per forward allocates nothing.
type KV struct {
	*cache.KV
	hm *HeadMajorKV // nil for a plain *cache.KV: attention then reads the rows (other bits)
}

// AsKV returns the view of a cache made by NewKV, or of a plain *cache.KV; ok is false for any
// other cache.
func AsKV(c cache.Cache) (kv KV, ok bool) {
	switch c := c.(type) {
	case *cache.KV:
		return KV{KV: c}, true
	case *HeadMajorKV:
		return KV{KV: c.KV, hm: c}, true
	}
	return KV{}, false
}

// Publish copies rows [pos, pos+rows) of layer li into the head-major copies (nothing for a
// plain cache). It is the second half of every key/value write, after the row-major rows of all
// parts are in: parts splitting a 16-position cache line of a head-major row would bounce it
// between cores (a 4-row verification took 41 us split against 30 us with the copies outside
// the parts), so the copies are made once, where the parts join.
func (c KV) Publish(li, pos, rows int) {
	if c.hm == nil {
		return
	}
	w := c.Width
	c.hm.layout.Scatter(c.hm.kt[li], c.K[li][pos*w:(pos+rows)*w], rows, pos)
	if c.hm.vt != nil {
		c.hm.layout.Scatter(c.hm.vt[li], c.V[li][pos*w:(pos+rows)*w], rows, pos)
	}
}

// AttnWeights is one layer's attention weights: the q/k/v/o projections and, for Qwen3-style
// layers, per-head RMSNorm weights [HeadDim] for queries and keys (nil for Llama).
type AttnWeights struct {
	Q, K, V, O   *kernel.Matrix
	QNorm, KNorm []float32
}

// Heads is the attention of a decoder stack: its shape, the epsilon of the per-head norms and
// the rotary tables, which must cover every position a call writes.
type Heads struct {
	Attention
	Eps  float32
	Rope *RoPE
}

// Project computes the queries, keys and values of rows rows of x (the normed input) at
// positions [pos, pos+rows): queries into q, keys and values straight into layer li of c at the
// slots of those positions, each after its per-head norm and RoPE. Rows past the committed
// offset are free to overwrite, and the owner's Advance commits them only on success. q nil
// computes keys and values only (a draft's context rows, never queries). The head-major copies
// are left to c.Publish, once every part's rows are written.
func (h *Heads) Project(q []float32, c KV, li int, w *AttnWeights, x []float32, rows, pos int) {
	kvw := c.Width
	kc := c.K[li][pos*kvw : (pos+rows)*kvw]
	vc := c.V[li][pos*kvw : (pos+rows)*kvw]
	// One hand-off to the kernel's pool for the products of x. The shapes were checked at
	// load, so the error path (separate products, which report the misfit) is never taken in
	// practice.
	if q == nil {
		if err := kernel.MatMulEach(x, rows, kernel.Product{M: w.K, Y: kc}, kernel.Product{M: w.V, Y: vc}); err != nil {
			w.K.MatMul(kc, x, rows)
			w.V.MatMul(vc, x, rows)
		}
	} else if err := kernel.MatMulEach(x, rows, kernel.Product{M: w.Q, Y: q}, kernel.Product{M: w.K, Y: kc}, kernel.Product{M: w.V, Y: vc}); err != nil {
		w.Q.MatMul(q, x, rows)
		w.K.MatMul(kc, x, rows)
		w.V.MatMul(vc, x, rows)
	}
	h.finish(w, q, kc, rows, pos)
}

// finish applies the per-head norms and RoPE to rows rows of keys kc (and queries q, unless nil)
// at positions [pos, pos+rows), in place. Each row is done alone, so a row's bits depend only on
// its own products and position.
func (h *Heads) finish(w *AttnWeights, q, kc []float32, rows, pos int) {
	kvw := h.KVHeads * h.HeadDim
	qw := h.Heads * h.HeadDim
	for i := 0; i < rows; i++ {
		ki := kc[i*kvw : (i+1)*kvw]
		if w.KNorm != nil {
			RMSNormRows(ki, ki, w.KNorm, h.KVHeads, h.HeadDim, h.Eps)
		}
		h.Rope.Apply(ki, h.KVHeads, pos+i)
		if q == nil {
			continue
		}
		qi := q[i*qw : (i+1)*qw]
		if w.QNorm != nil {
			RMSNormRows(qi, qi, w.QNorm, h.Heads, h.HeadDim, h.Eps)
		}
		h.Rope.Apply(qi, h.Heads, pos+i)
	}
}

// Attend is attention for rows [first, end) of an n-row forward at positions [pos, pos+n) over
// layer li of c (out and q start at row first), on the head-major copies when c has them. A row's
// bits are those of a one-part forward, whatever part it falls in; a cache gives the same bits
// whatever the batching of its writes, but the two layouts differ in rounding.
func (h *Heads) Attend(out, q []float32, first, end, n int, c KV, li, pos int, vis Visibility, scores []float32) {
	h.attendHeads(out, q, first, end, n, c, li, pos, vis, scores, 0, h.Heads)
}

// attendHeads is Attend for the query heads [h0, h1) only (whole key/value heads of a grouped
// shape): see rowsHeads.
func (h *Heads) attendHeads(out, q []float32, first, end, n int, c KV, li, pos int, vis Visibility, scores []float32, h0, h1 int) {
	if c.hm != nil {
		var vt []float32
		if c.hm.vt != nil {
			vt = c.hm.vt[li]
		}
		h.rowsHeadMajorHeads(out, q, first, end, n, c.hm.kt[li], vt, c.V[li], c.hm.layout, pos, vis, scores, h0, h1)
		return
	}
	if c.BF16() {
		// Head-blocked: a head's positions HeadDim apart, heads HeadBlock(1) apart.
		rowsHeads(h.Attention, out, q, first, end, n, c.K16[li], c.V16[li], layerLayout{h.HeadDim, c.HeadBlock(1)}, pos, vis, scores, h0, h1)
		return
	}
	rowsHeads(h.Attention, out, q, first, end, n, c.K[li], c.V[li], rowMajor(h.Attention), pos, vis, scores, h0, h1)
}
