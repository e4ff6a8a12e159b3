package dflash

import (
	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/nn"
)

// Attn is one draft layer's attention weights in the Qwen3 layout DFlash and DFlash2 share:
// projections with per-head q_norm and k_norm. DFlash2 wraps the same sublayer in convolutions,
// so it keeps these and runs them through Heads as DFlash does.
type Attn struct {
	Q, K, V, O   *kernel.Matrix
	QNorm, KNorm []float32 // [HeadDim], applied per head
}

// Heads is the attention shape the per-layer pieces need: head counts, the RMS epsilon and the
// rotary tables (which must cover every position a call writes).
type Heads struct {
	Heads, KVHeads, HeadDim int
	Eps                     float32
	Rope                    *nn.RoPE
}

// KeysValues writes the keys (k_norm per head, then RoPE) and values of rows rows of src into
// layer li of kv at slots [pos, pos+rows); slot = position, as context and block rows sit at
// their true positions. Context rows get only this: they are never queries.
func (h *Heads) KeysValues(kv *cache.KV, li int, a *Attn, src []float32, rows, pos int) {
	w := kv.Width
	kc := kv.K[li][pos*w : (pos+rows)*w]
	MatMul(a.K, kc, src, rows)
	MatMul(a.V, kv.V[li][pos*w:(pos+rows)*w], src, rows)
	for i := 0; i < rows; i++ {
		ki := kc[i*w : (i+1)*w]
		nn.RMSNormRows(ki, ki, a.KNorm, h.KVHeads, h.HeadDim, h.Eps)
		h.Rope.Apply(ki, h.KVHeads, pos+i)
	}
}

// Queries writes the queries (q_norm per head, then RoPE) of rows rows of src at positions
// [pos, pos+rows) into q.
func (h *Heads) Queries(q []float32, a *Attn, src []float32, rows, pos int) {
	qw := h.Heads * h.HeadDim
	MatMul(a.Q, q[:rows*qw], src, rows)
	for i := 0; i < rows; i++ {
		qi := q[i*qw : (i+1)*qw]
		nn.RMSNormRows(qi, qi, a.QNorm, h.Heads, h.HeadDim, h.Eps)
		h.Rope.Apply(qi, h.Heads, pos+i)
	}
}

// headMajorMax is the largest head size whose draft caches get head-major copies, as the
// target's do (model/transformer): below it a key row per head is too short for vector
// instructions, so attention runs over positions instead (nn.RowsHeadMajor).
const headMajorMax = 16

// headMajorKV is the cache of a draft with small heads: the plain KV, which owns the offset and
// the row-major rows, plus head-major copies of every layer's keys and values that attention
// reads. Both are written together (Heads.Write), and rows past the offset are dead in both, so
// rewinding the KV rewinds the copies too.
type headMajorKV struct {
	*cache.KV
	layout nn.HeadMajor
	kt, vt [][]float32
}

// NewKV returns the cache a draft with these attention shapes should use: a *cache.KV, which
// also carries head-major copies of its rows when headDim <= 16 or the fused attention path
// may take the heads (a multiple of 8 up to nn.FusedMaxHead; see Attend). Read its rows with
// AsKV.
func NewKV(layers, capacity, kvHeads, headDim int) cache.Cache {
	kv := cache.NewKV(layers, capacity, kvHeads*headDim)
	if headDim > headMajorMax && (headDim%8 != 0 || headDim > nn.FusedMaxHead) {
		return kv
	}
	c := &headMajorKV{KV: kv, layout: nn.HeadMajor{KVHeads: kvHeads, HeadDim: headDim, Capacity: nn.HeadMajorStride(capacity)},
		kt: make([][]float32, layers), vt: make([][]float32, layers)}
	for l := range c.kt {
		c.kt[l] = make([]float32, c.layout.Len())
		c.vt[l] = make([]float32, c.layout.Len())
	}
	return c
}

// AsKV returns the row-major rows of a cache made by NewKV, or c itself when it is a *cache.KV;
// ok is false for any other cache.
func AsKV(c cache.Cache) (kv *cache.KV, ok bool) {
	switch c := c.(type) {
	case *cache.KV:
		return c, true
	case *headMajorKV:
		return c.KV, true
	}
	return nil, false
}

// Write is KeysValues on a cache from NewKV (or a plain *cache.KV): it also fills the head-major
// copies that Attend reads.
func (h *Heads) Write(c cache.Cache, li int, a *Attn, src []float32, rows, pos int) {
	kv, _ := AsKV(c)
	h.KeysValues(kv, li, a, src, rows, pos)
	h.CopyHeadMajor(c, li, rows, pos)
}

// CopyHeadMajor copies rows [pos, pos+rows) of layer li of a cache from NewKV into its head-major
// copies (nothing for a plain *cache.KV): the second half of Write, for callers that write the
// row-major keys and values of one forward in parts.
func (h *Heads) CopyHeadMajor(c cache.Cache, li, rows, pos int) {
	if hm, ok := c.(*headMajorKV); ok {
		kv := hm.KV
		w := kv.Width
		hm.layout.Scatter(hm.kt[li], kv.K[li][pos*w:(pos+rows)*w], rows, pos)
		// The fused attention path reads values row-major (see Attend): their head-major copy
		// is then neither written nor read.
		if !nn.FusedHeadMajor(h.Heads, h.KVHeads, h.HeadDim) {
			hm.layout.Scatter(hm.vt[li], kv.V[li][pos*w:(pos+rows)*w], rows, pos)
		}
	}
}

// Attend is at.Rows over layer li of c, on the head-major copies when c has them. A cache gives
// the same bits whatever the batching of its writes, but the two layouts differ in rounding.
func Attend(at nn.Attention, out, q []float32, n int, c cache.Cache, li, pos int, vis nn.Visibility, scores []float32) {
	AttendPart(at, out, q, 0, n, n, c, li, pos, vis, scores)
}

// AttendPart is Attend for rows [first, end) of an n-row block (out and q start at row first),
// with the bits Attend gives those rows.
func AttendPart(at nn.Attention, out, q []float32, first, end, n int, c cache.Cache, li, pos int, vis nn.Visibility, scores []float32) {
	if hm, ok := c.(*headMajorKV); ok {
		vt := hm.vt[li]
		if nn.FusedHeadMajor(at.Heads, at.KVHeads, at.HeadDim) {
			vt = nil // not kept up to date (Heads.Write); the fused path does not read it
		}
		at.RowsHeadMajorPart(out, q, first, end, n, hm.kt[li], vt, hm.KV.V[li], hm.layout, pos, vis, scores)
		return
	}
	kv, _ := AsKV(c)
	at.RowsPart(out, q, first, end, n, kv.K[li], kv.V[li], pos, vis, scores)
}

// MatMul is m.MatMul over any number of rows, in batches of chunkRows (kernel.MatMul is
// specified for 1..32 rows). A row's result does not depend on its batch, so chunking changes no
// bit.
func MatMul(m *kernel.Matrix, y, x []float32, rows int) {
	for s := 0; s < rows; s += chunkRows {
		r := min(chunkRows, rows-s)
		m.MatMul(y[s*m.N:(s+r)*m.N], x[s*m.K:(s+r)*m.K], r)
	}
}
