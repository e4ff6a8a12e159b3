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

// MatMul is m.MatMul over any number of rows, in batches of chunkRows (kernel.MatMul is
// specified for 1..32 rows). A row's result does not depend on its batch, so chunking changes no
// bit.
func MatMul(m *kernel.Matrix, y, x []float32, rows int) {
	for s := 0; s < rows; s += chunkRows {
		r := min(chunkRows, rows-s)
		m.MatMul(y[s*m.N:(s+r)*m.N], x[s*m.K:(s+r)*m.K], r)
	}
}
