package nn

import (
	"math"

	"github.com/dflash/dflash/kernel"
)

// Visibility decides which cached keys a query row sees. The keys a row sees always form one
// contiguous span of cache rows, so attention is a loop over a range, never a per-key test.
//
// The zero value is causal attention (targets). A DFlash draft block sets Bidirectional: every
// row of the forward sees every other row of it, plus all rows before it. Window > 0 limits how
// far back a row sees (sliding-window layers): only keys at positions > qpos-Window.
type Visibility struct {
	Bidirectional bool
	Window        int
}

// Causal is the visibility of a target's layers.
var Causal = Visibility{}

// Span returns the key rows [lo, hi) visible to a query at position qpos in a forward whose
// rows occupy positions [blockStart, blockEnd).
func (v Visibility) Span(qpos, blockStart, blockEnd int) (lo, hi int) {
	hi = qpos + 1
	if v.Bidirectional {
		hi = blockEnd
	}
	if v.Window > 0 && qpos-v.Window+1 > 0 {
		lo = qpos - v.Window + 1
	}
	return lo, hi
}

// Attention is multi-head scaled dot-product attention with grouped key/value heads: query head
// h reads key/value head h / (Heads/KVHeads).
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32 // usually 1/sqrt(HeadDim)
	// BF16Cache asks NewKV for a bf16 cache where the shape reads row-major keys and values
	// (CacheBF16): half the memory and half the bytes attention reads, each row rounded once
	// when it is written.
	BF16Cache bool
}

// NewAttention returns the attention shape with the usual 1/sqrt(headDim) scale.
func NewAttention(heads, kvHeads, headDim int) Attention {
	return Attention{Heads: heads, KVHeads: kvHeads, HeadDim: headDim, Scale: float32(1 / math.Sqrt(float64(headDim)))}
}

// smallHead is the head size below which inline loops beat a call into the kernel's dot.
const smallHead = 32

// Rows computes attention for n query rows at positions [pos, pos+n). q holds n rows of
// Heads*HeadDim; out receives n rows of the same width. k and v are one layer of a cache: row t
// (position t) at [t*W, (t+1)*W) with W = KVHeads*HeadDim, already holding the rows of this
// forward. scores is scratch of at least the longest visible span. Each output row depends only
// on its own query and the keys it sees, never on n, so decoding and verification agree bitwise.
func (a Attention) Rows(out, q []float32, n int, k, v []float32, pos int, vis Visibility, scores []float32) {
	a.RowsPart(out, q, 0, n, n, k, v, pos, vis, scores)
}

// RowsPart is Rows for rows [first, end) of an n-row forward at positions [pos, pos+n) (a part of
// the forward that runs on its own core): out and q start at row first. A row's bits are those
// Rows gives it, whatever part it falls in.
//
// The rows are batched per key/value head (rowsBatched) when scores holds their scores and
// queries: a verification of n rows then reads each cached key and value once, not once per
// row and query head. Batching changes no bit (rowEach is the reference it is tested against).
func (a Attention) RowsPart(out, q []float32, first, end, n int, k, v []float32, pos int, vis Visibility, scores []float32) {
	rowsHeads(a, out, q, first, end, n, k, v, rowMajor(a), pos, vis, scores, 0, a.Heads)
}

// layerLayout says where a cache layer keeps element e of key/value head g at position t:
// g*head + t*stride + e.
type layerLayout struct{ stride, head int }

// rowMajor is the layout of a row-major layer (a float32 cache's): rows of all heads.
func rowMajor(a Attention) layerLayout { return layerLayout{a.KVHeads * a.HeadDim, a.HeadDim} }

// cacheElem is what a row-major cache layer stores: float32, or bf16 bit patterns (a bf16
// cache, cache.KV.K16). Attention over a bf16 layer computes the bits of attention over the
// same layer widened to float32: the kernels widen each key and value exactly as they load it.
type cacheElem interface{ float32 | uint16 }

// dotsRows is kernel.DotsRows, or DotsRowsBF16 over a bf16 layer (the same bits over the
// widened keys).
func dotsRows[E cacheElem](y []float32, ldy int, q []float32, ldq, nq int, k []E, ldk, d, n int, scale float32) {
	switch k := any(k).(type) {
	case []float32:
		kernel.DotsRows(y, ldy, q, ldq, nq, k, ldk, d, n, scale)
	case []uint16:
		kernel.DotsRowsBF16(y, ldy, q, ldq, nq, k, ldk, d, n, scale)
	}
}

// axpyRows is kernel.AxpyRows, or AxpyRowsBF16 over a bf16 layer.
func axpyRows[E cacheElem](out []float32, ldo int, p []float32, ldp, nq int, v []E, ldv, d, n int) {
	switch v := any(v).(type) {
	case []float32:
		kernel.AxpyRows(out, ldo, p, ldp, nq, v, ldv, d, n)
	case []uint16:
		kernel.AxpyRowsBF16(out, ldo, p, ldp, nq, v, ldv, d, n)
	}
}

// rowsHeads is RowsPart for the query heads [h0, h1) only: the output of the other heads is left
// alone. Each head's arithmetic is that of RowsPart, so cores computing disjoint head ranges of
// the same rows (HeadSplit) together give RowsPart's bits. When the shape is batched (grouped
// heads, not 8 wide) h0 and h1 must be multiples of the group (whole key/value heads).
func rowsHeads[E cacheElem](a Attention, out, q []float32, first, end, n int, k, v []E, ly layerLayout, pos int, vis Visibility, scores []float32, h0, h1 int) {
	if a.HeadDim == 8 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 {
		for i := first; i < end; i++ {
			rowEach(a, out, q, i, first, n, k, v, ly, pos, vis, scores, h0, h1)
		}
		return
	}
	group := a.Heads / a.KVHeads
	rowsBatched(a, out, q, first, end, n, k, v, ly, pos, vis, scores, h0/group, h1/group)
}

// rowEach is attention for row i of RowsPart's rows, query heads [h0, h1) one at a time: each head's scores
// are Dot(q, k_t) * Scale over the row's span, its softmax runs over them, and its output takes
// Axpy(out, p_t, v_t) for t in order onto zeros. The batched path keeps exactly these operations
// per query, so this is the definition of a row's bits. Over a bf16 layer the same operations run
// through the rows kernels, which compute Dot and the Axpy sequence bitwise over widened rows.
func rowEach[E cacheElem](a Attention, out, q []float32, i, first, n int, k, v []E, ly layerLayout, pos int, vis Visibility, scores []float32, h0, h1 int) {
	d := a.HeadDim
	w := ly.stride
	group := a.Heads / a.KVHeads
	qw := a.Heads * d
	lo, hi := vis.Span(pos+i, pos, pos+n)
	sc := scores[:hi-lo]
	r := i - first
	for h := h0; h < h1; h++ {
		qh := q[r*qw+h*d : r*qw+h*d+d]
		oh := out[r*qw+h*d : r*qw+h*d+d]
		koff := (h / group) * ly.head
		kh := k[lo*w+koff:]
		vh := v[lo*w+koff:]
		kf, f32 := any(kh).([]float32)
		if !f32 {
			dotsRows(sc, len(sc), qh, d, 1, kh, w, d, len(sc), a.Scale)
			Softmax(sc)
			clear(oh)
			axpyRows(oh, d, sc, len(sc), 1, vh, w, d, len(sc))
			continue
		}
		vf := any(vh).([]float32)
		if d == 8 {
			attendHead8((*[8]float32)(qh), (*[8]float32)(oh), kf, vf, w, sc, a.Scale)
			continue
		}
		for t := range sc {
			sc[t] = kernel.Dot(qh, kf[t*w:t*w+d]) * a.Scale
		}
		Softmax(sc)
		clear(oh)
		for t, p := range sc {
			kernel.Axpy(oh, p, vf[t*w:t*w+d])
		}
	}
}

// batchQueries is the most queries (rows times the query heads of one key/value head) one pass
// of rowsBatched computes together, and batchMaxHead the largest head size for which ScratchLen
// holds that many queries' staging: a row split across two cores gives each part 8 rows of a
// 16-row verification, which for two query heads per key/value head is one pass per head.
const (
	batchQueries = fusedQueries
	batchMaxHead = 256
)

// valueTile is the floats of values (keys times head size) one weighted-sum call covers: small
// enough that a tile read from memory for the first pair of queries is still in L1 for the next.
const valueTile = 4096

// rowsBatched is RowsPart over passes: for each key/value head of [g0, g1), the queries of consecutive rows
// that share their first key go together, up to batchQueries and what scores holds. A pass
// stages its queries, computes their scores with kernel.DotsRows (each key loaded once for all),
// runs each query's softmax over its own span, and sums values with kernel.AxpyRows in tiles.
// Later rows see more keys (causal rows of one forward), so keys are taken in segments: the keys
// every query of the pass sees, then those that all but the first row's see, and so on. A query
// is thus given exactly the keys of its span, in increasing order, with the operations rowEach
// gives it: its bits depend neither on n nor on the rows in its pass.
func rowsBatched[E cacheElem](a Attention, out, q []float32, first, end, n int, k, v []E, ly layerLayout, pos int, vis Visibility, scores []float32, g0, g1 int) {
	d := a.HeadDim
	w := ly.stride
	group := a.Heads / a.KVHeads
	qw := a.Heads * d
	tile := max(1, valueTile/d)
	for g := g0; g < g1; g++ {
		for r0 := first; r0 < end; {
			lo, hi := vis.Span(pos+r0, pos, pos+n)
			if group*(hi-lo+2*d) > len(scores) {
				rowEach(a, out, q, r0, first, n, k, v, ly, pos, vis, scores, g*group, (g+1)*group) // too little scratch to batch
				r0++
				continue
			}
			r1 := r0 + 1
			for r1 < end && (r1-r0+1)*group <= batchQueries {
				l2, h2 := vis.Span(pos+r1, pos, pos+n)
				if l2 != lo || (r1-r0+1)*group*(h2-lo+2*d) > len(scores) {
					break // a pass shares its first key (sliding windows move it) and fits scores
				}
				r1++
			}
			_, last := vis.Span(pos+r1-1, pos, pos+n) // spans end no earlier for later rows
			ldy := last - lo
			nq := (r1 - r0) * group
			sc := scores[:nq*ldy]
			qs := scores[nq*ldy : nq*ldy+nq*d]
			ob := scores[nq*ldy+nq*d : nq*ldy+2*nq*d]
			for r := r0; r < r1; r++ {
				src := (r-first)*qw + g*group*d
				copy(qs[(r-r0)*group*d:(r-r0+1)*group*d], q[src:src+group*d])
			}
			kh, vh := k[lo*w+g*ly.head:], v[lo*w+g*ly.head:]
			// Scores by segments of keys, each for the queries of the rows that see all of it.
			a0 := 0
			for r := r0; r < r1; r++ {
				_, rhi := vis.Span(pos+r, pos, pos+n)
				if own := rhi - lo; own > a0 {
					qi := (r - r0) * group
					dotsRows(sc[qi*ldy+a0:], ldy, qs[qi*d:], d, nq-qi, kh[a0*w:], w, d, own-a0, a.Scale)
					a0 = own
				}
			}
			for r := r0; r < r1; r++ {
				_, rhi := vis.Span(pos+r, pos, pos+n)
				for qi := (r - r0) * group; qi < (r-r0+1)*group; qi++ {
					Softmax(sc[qi*ldy : qi*ldy+rhi-lo])
				}
			}
			clear(ob)
			a0 = 0
			for r := r0; r < r1; r++ {
				_, rhi := vis.Span(pos+r, pos, pos+n)
				qi := (r - r0) * group
				for own := rhi - lo; a0 < own; {
					b := min(own, a0+tile)
					axpyRows(ob[qi*d:], d, sc[qi*ldy+a0:], ldy, nq-qi, vh[a0*w:], w, d, b-a0)
					a0 = b
				}
			}
			for r := r0; r < r1; r++ {
				dst := (r-first)*qw + g*group*d
				copy(out[dst:dst+group*d], ob[(r-r0)*group*d:(r-r0+1)*group*d])
			}
			r0 = r1
		}
	}
}

// attendHead8 is one head of size 8 (llama2.c's small models): scores, softmax and the weighted
// sum of values in registers-sized fixed arrays, so the compiler drops every bounds check. Row t's
// key and value start at kh[t*stride] and vh[t*stride].
func attendHead8(q, out *[8]float32, kh, vh []float32, stride int, sc []float32, scale float32) {
	m := float32(math.Inf(-1))
	for t := range sc {
		kt := (*[8]float32)(kh[t*stride:])
		s := ((q[0]*kt[0] + q[1]*kt[1]) + (q[2]*kt[2] + q[3]*kt[3])) + ((q[4]*kt[4] + q[5]*kt[5]) + (q[6]*kt[6] + q[7]*kt[7]))
		s *= scale
		sc[t] = s
		if s > m {
			m = s
		}
	}
	sum := kernel.ExpShift(sc, sc, m, 1)
	var o [8]float32
	for t, p := range sc {
		vt := (*[8]float32)(vh[t*stride:])
		o[0] += p * vt[0]
		o[1] += p * vt[1]
		o[2] += p * vt[2]
		o[3] += p * vt[3]
		o[4] += p * vt[4]
		o[5] += p * vt[5]
		o[6] += p * vt[6]
		o[7] += p * vt[7]
	}
	inv := 1 / sum
	for j := range o {
		out[j] = o[j] * inv
	}
}

// HeadMajor is the key/value layout RowsHeadMajor reads: per layer [KVHeads][HeadDim][Capacity],
// so that one element of a head over consecutive positions is contiguous. Attention with small
// heads (llama2.c's 8-wide ones) then runs as the kernel's vector products over positions,
// instead of scalar loops of 8 per key.
type HeadMajor struct {
	KVHeads, HeadDim, Capacity int
}

// Scatter copies rows rows of width KVHeads*HeadDim (row-major, as a projection writes them)
// into the head-major layer dst at positions [pos, pos+rows).
func (l HeadMajor) Scatter(dst, rows []float32, n, pos int) {
	w := l.KVHeads * l.HeadDim
	for i := 0; i < n; i++ {
		row := rows[i*w : (i+1)*w]
		for e, v := range row {
			dst[e*l.Capacity+pos+i] = v
		}
	}
}

// HeadMajorStride is the row stride (HeadMajor.Capacity) of a head-major layer for capacity
// positions: a whole number of cache lines plus one, never a multiple of 256 floats (1 KiB).
// Attention reads a head's HeadDim rows together, and at a power-of-two stride such as 512 floats
// those rows map to the same few L1 sets and evict each other; Scatter's column writes suffer the
// same way (8% of a 6-row verification of the default target at a stride of 512).
func HeadMajorStride(capacity int) int {
	s := (capacity+15)/16*16 + 16
	if s%256 == 0 {
		s += 16
	}
	return s
}

// HeadMajorPad is the slack past a head-major layer's last row: the vector kernels read key
// rows in whole vectors of 16 positions (kernel.ScoresRows).
const HeadMajorPad = 16

// Len is the floats one head-major layer needs: KVHeads*HeadDim rows of Capacity plus the pad.
func (l HeadMajor) Len() int { return l.KVHeads*l.HeadDim*l.Capacity + HeadMajorPad }

// fusedQueries is the most queries (rows times the heads of one key/value head) one fused
// attention call handles: their scores rows are scratch (ScratchLen).
const fusedQueries = 16

// FusedMaxHead is the largest head size the fused path takes. Caches keep head-major key
// copies for it, which for long contexts of large models would cost more memory than the path
// saves time; there attention is a small share of a step anyway.
const FusedMaxHead = 64

// ScratchLen is the scratch RowsHeadMajor and Rows need for spans of up to maxSpan keys.
func ScratchLen(maxSpan int) int {
	fused := fusedQueries*(kernel.Pad16(maxSpan)+16) + fusedQueries*FusedMaxHead + fusedQueries*8 + fusedQueries
	return max(fused, batchQueries*(maxSpan+2*batchMaxHead))
}

// FusedHeadMajor reports whether RowsHeadMajor takes its fused path for this shape (given a
// row-major v and padded layers): heads of a multiple of 8 up to FusedMaxHead elements. The
// path reads keys head-major and values row-major, so a cache need not keep head-major values.
func FusedHeadMajor(heads, kvHeads, headDim int) bool {
	return headDim%8 == 0 && headDim > 0 && headDim <= FusedMaxHead && kvHeads > 0 && heads/kvHeads <= fusedQueries
}

// RowsHeadMajor is Rows over a head-major layer (see HeadMajor). Scores accumulate one head
// element at a time over all visible positions; the result of a row again depends only on its
// query and its span. It does not compute the same bits as Rows: a model uses one layout.
// v is the same layer row-major (nil if the caller has none); scores needs ScratchLen of the
// longest span.
func (a Attention) RowsHeadMajor(out, q []float32, n int, kt, vt, v []float32, l HeadMajor, pos int, vis Visibility, scores []float32) {
	a.RowsHeadMajorPart(out, q, 0, n, n, kt, vt, v, l, pos, vis, scores)
}

// RowsHeadMajorPart is RowsHeadMajor for rows [first, end) of an n-row forward, as RowsPart is
// for Rows.
//
// Heads of a multiple of 8 (FusedHeadMajor) with a row-major v and a padded layer (Len) take the
// fused path: the queries of several rows that read one key/value head, over the span they
// share, go through one kernel.ScoresRows call and one kernel.WeightedRows8 call per 8 elements
// of the head, which load each key and value once for all of them. A query's bits do not depend on the queries fused with it: scores are computed
// per query, its softmax runs over its own span, and weights past that span are zero, which
// WeightedRows8 adds without changing a bit. So decoding (one row) and verification (many)
// agree bitwise on this path too.
func (a Attention) RowsHeadMajorPart(out, q []float32, first, end, n int, kt, vt, v []float32, l HeadMajor, pos int, vis Visibility, scores []float32) {
	a.rowsHeadMajorHeads(out, q, first, end, n, kt, vt, v, l, pos, vis, scores, 0, a.Heads)
}

// rowsHeadMajorHeads is RowsHeadMajorPart for the query heads [h0, h1) only, as rowsHeads is
// for RowsPart; on the fused path h0 and h1 must be multiples of the group.
func (a Attention) rowsHeadMajorHeads(out, q []float32, first, end, n int, kt, vt, v []float32, l HeadMajor, pos int, vis Visibility, scores []float32, h0, h1 int) {
	if FusedHeadMajor(a.Heads, a.KVHeads, a.HeadDim) && v != nil && len(kt) >= l.Len() {
		group := a.Heads / a.KVHeads
		a.fused(out, q, first, end, n, kt, v, l, pos, vis, scores, h0/group, h1/group)
		return
	}
	d := a.HeadDim
	group := a.Heads / a.KVHeads
	qw := a.Heads * d
	for i := first; i < end; i++ {
		lo, hi := vis.Span(pos+i, pos, pos+n)
		sc := scores[:hi-lo]
		r := i - first
		for h := h0; h < h1; h++ {
			qh := q[r*qw+h*d : r*qw+h*d+d]
			oh := out[r*qw+h*d : r*qw+h*d+d]
			base := (h/group)*d*l.Capacity + lo
			m := kernel.AxpyRowsMax(sc, qh, kt[base:], l.Capacity)
			inv := 1 / kernel.ExpShift(sc, sc, m, a.Scale)
			kernel.DotRows(oh, sc, vt[base:], l.Capacity)
			for j := range oh {
				oh[j] *= inv
			}
		}
	}
}

// fused is RowsHeadMajorPart's fused path (see there) for the key/value heads [g0, g1).
func (a Attention) fused(out, q []float32, first, end, n int, kt, v []float32, l HeadMajor, pos int, vis Visibility, scratch []float32, g0, g1 int) {
	d := a.HeadDim
	group := a.Heads / a.KVHeads
	qw := a.Heads * d
	w := a.KVHeads * d
	rowsPer := max(1, fusedQueries/group)
	_, maxHi := vis.Span(pos+end-1, pos, pos+n)
	minLo, _ := vis.Span(pos+first, pos, pos+n)
	ldy := kernel.Pad16(maxHi-minLo) + 16
	sc := scratch[:fusedQueries*ldy]
	rest := scratch[fusedQueries*ldy:]
	qt, rest := rest[:fusedQueries*d], rest[fusedQueries*FusedMaxHead:]
	ob, rest := rest[:fusedQueries*8], rest[fusedQueries*8:]
	inv := rest[:fusedQueries]
	for g := g0; g < g1; g++ {
		for r0 := first; r0 < end; {
			lo, _ := vis.Span(pos+r0, pos, pos+n)
			r1 := r0 + 1
			for r1 < min(end, r0+rowsPer) {
				if l2, _ := vis.Span(pos+r1, pos, pos+n); l2 != lo {
					break // rows fused together share the first key (sliding windows move it)
				}
				r1++
			}
			_, hi := vis.Span(pos+r1-1, pos, pos+n) // spans end no earlier for later rows
			span := hi - lo
			nq := (r1 - r0) * group
			for r := r0; r < r1; r++ {
				for k := 0; k < group; k++ {
					qi := (r-r0)*group + k
					src := q[(r-first)*qw+(g*group+k)*d:]
					for j := 0; j < d; j++ {
						qt[j*nq+qi] = src[j]
					}
				}
			}
			kernel.ScoresRows(sc, ldy, qt, nq, kt[g*d*l.Capacity+lo:], l.Capacity, d, span)
			for r := r0; r < r1; r++ {
				rlo, rhi := vis.Span(pos+r, pos, pos+n)
				own := rhi - rlo
				for k := 0; k < group; k++ {
					qi := (r-r0)*group + k
					row := sc[qi*ldy : qi*ldy+span]
					m := kernel.MaxF32(row[:own])
					inv[qi] = 1 / kernel.ExpShift(row[:own], row[:own], m, a.Scale)
					clear(row[own:])
				}
			}
			for e0 := 0; e0 < d; e0 += 8 {
				kernel.WeightedRows8(ob, sc, ldy, nq, v[lo*w+g*d+e0:], w, span)
				for r := r0; r < r1; r++ {
					for k := 0; k < group; k++ {
						qi := (r-r0)*group + k
						o := (r-first)*qw + (g*group+k)*d + e0
						dst := out[o : o+8]
						s := inv[qi]
						for e := range dst {
							dst[e] = ob[qi*8+e] * s
						}
					}
				}
			}
			r0 = r1
		}
	}
}
