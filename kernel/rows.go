package kernel

import (
	"math"
	"unsafe"
)

// AxpyRowsMax sets y[t] = sum_j a[j]*m[j*ld+t] for t < len(y), j < len(a) (y = Mᵀa over len(a)
// rows of M at stride ld) and returns the largest y[t], or -Inf for an empty y. m must hold
// (len(a)-1)*ld + len(y) elements. It is attention's scores over a head-major cache in one pass:
// each y[t] gets the bits that clearing y and calling Axpy(y, a[j], m[j*ld:]) for j = 0, 1, ...
// would give on the same path, so it depends only on a and column t of m.
func AxpyRowsMax(y, a, m []float32, ld int) float32 {
	if len(y) == 0 {
		return float32(math.Inf(-1))
	}
	if len(a) == 0 {
		clear(y)
		return 0
	}
	_ = m[(len(a)-1)*ld+len(y)-1]
	return active.axpyRowsMax(y, a, unsafe.SliceData(m), ld)
}

// DotRows sets out[j] = Dot(x, m[j*ld:j*ld+len(x)]) for j < len(out), bitwise as Dot computes
// each on the same path, in one call. m must hold (len(out)-1)*ld + len(x) elements.
func DotRows(out, x, m []float32, ld int) {
	if len(out) == 0 {
		return
	}
	if len(x) == 0 {
		clear(out)
		return
	}
	_ = m[(len(out)-1)*ld+len(x)-1]
	active.dotRows(out, x, unsafe.SliceData(m), ld)
}

func axpyRowsMaxGo(y, a []float32, m *float32, ld int) float32 {
	ms := unsafe.Slice(m, (len(a)-1)*ld+len(y))
	clear(y)
	for j, aj := range a {
		axpyGo(y, aj, ms[j*ld:j*ld+len(y)])
	}
	mx := float32(math.Inf(-1))
	for _, v := range y {
		mx = max(mx, v)
	}
	return mx
}

func dotRowsGo(out, x []float32, m *float32, ld int) {
	ms := unsafe.Slice(m, (len(out)-1)*ld+len(x))
	for j := range out {
		out[j] = dotGo(x, ms[j*ld:j*ld+len(x)])
	}
}

// Pad16 is n rounded up to a whole number of 16-float vectors: the positions ScoresRows
// computes, and so the length its key rows and score rows must have.
func Pad16(n int) int { return (n + 15) &^ 15 }

// ScoresRows sets y[i*ldy+t] = sum_j qt[j*nq+i]*kt[j*ldk+t] for i < nq, j < d and t < n: the
// attention scores of nq queries, stored transposed (element j of every query together), over
// one head-major key head of d rows at stride ldk. Each y[t] gets the bits AxpyRowsMax gives
// it on the same path, so a query's scores depend neither on nq nor on the other queries. The
// vector paths work in whole vectors: kt rows and y rows must hold Pad16(n) elements, and y
// past n receives scores of whatever kt holds there.
func ScoresRows(y []float32, ldy int, qt []float32, nq int, kt []float32, ldk, d, n int) {
	if nq <= 0 || n <= 0 {
		return
	}
	if d <= 0 {
		panic("kernel: ScoresRows with no query elements")
	}
	p := Pad16(n)
	if ldy < p || ldk < 1 {
		panic("kernel: ScoresRows strides shorter than the padded positions")
	}
	_ = qt[d*nq-1]
	_ = y[(nq-1)*ldy+p-1]
	_ = kt[(d-1)*ldk+p-1]
	active.scoresRows(unsafe.SliceData(y), ldy, unsafe.SliceData(qt), nq, unsafe.SliceData(kt), ldk, d, n)
}

// WeightedRows8 sets out[i*8+e] = sum_t p[i*ldp+t]*v[t*ldv+e] for i < nq, e < 8 and t < n:
// attention's weighted sum of values for heads of 8 elements over a row-major cache (v at the
// head's first element, ldv the cache row width). A query's sum depends only on its weights and
// the values, in an order fixed by t: weights of 0 past a query's own span change nothing.
func WeightedRows8(out, p []float32, ldp, nq int, v []float32, ldv, n int) {
	if nq <= 0 {
		return
	}
	if n <= 0 {
		clear(out[:nq*8])
		return
	}
	_ = out[nq*8-1]
	_ = p[(nq-1)*ldp+n-1]
	_ = v[(n-1)*ldv+7]
	active.weightedRows8(unsafe.SliceData(out), unsafe.SliceData(p), ldp, nq, unsafe.SliceData(v), ldv, n)
}

// MaxF32 returns the largest element of x (NaNs aside), or -Inf for an empty x.
func MaxF32(x []float32) float32 { return active.maxF32(x) }

func scoresRowsGo(y *float32, ldy int, qt *float32, nq int, kt *float32, ldk, d, n int) {
	ys := unsafe.Slice(y, (nq-1)*ldy+n)
	qs := unsafe.Slice(qt, d*nq)
	ks := unsafe.Slice(kt, (d-1)*ldk+n)
	for i := 0; i < nq; i++ {
		row := ys[i*ldy : i*ldy+n]
		clear(row)
		for j := 0; j < d; j++ {
			axpyGo(row, qs[j*nq+i], ks[j*ldk:j*ldk+n])
		}
	}
}

func weightedRows8Go(out, p *float32, ldp, nq int, v *float32, ldv, n int) {
	os := unsafe.Slice(out, nq*8)
	ps := unsafe.Slice(p, (nq-1)*ldp+n)
	vs := unsafe.Slice(v, (n-1)*ldv+8)
	for i := 0; i < nq; i++ {
		var even, odd [8]float32
		pi := ps[i*ldp : i*ldp+n]
		t := 0
		for ; t+1 < n; t += 2 {
			a, b := pi[t], pi[t+1]
			va, vb := (*[8]float32)(vs[t*ldv:]), (*[8]float32)(vs[(t+1)*ldv:])
			for e := range even {
				even[e] += a * va[e]
				odd[e] += b * vb[e]
			}
		}
		if t < n {
			a, va := pi[t], (*[8]float32)(vs[t*ldv:])
			for e := range even {
				even[e] += a * va[e]
			}
		}
		for e := range even {
			os[i*8+e] = even[e] + odd[e]
		}
	}
}

func maxGo(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// DotsRows sets y[i*ldy+t] = Dot(q[i*ldq:i*ldq+d], k[t*ldk:t*ldk+d]) * scale for i < nq and
// t < n, bitwise as Dot and one float32 multiply compute each on the same path: attention's
// scores of nq queries over n row-major keys (ldk the cache row width) in one call that loads
// each key once for all of them. A score depends only on its query and key, never on nq or n.
func DotsRows(y []float32, ldy int, q []float32, ldq, nq int, k []float32, ldk, d, n int, scale float32) {
	if nq <= 0 || n <= 0 {
		return
	}
	if d <= 0 {
		panic("kernel: DotsRows with no elements")
	}
	_ = y[(nq-1)*ldy+n-1]
	_ = q[(nq-1)*ldq+d-1]
	_ = k[(n-1)*ldk+d-1]
	active.dotsRows(unsafe.SliceData(y), ldy, unsafe.SliceData(q), ldq, nq, unsafe.SliceData(k), ldk, d, n, scale)
}

// AxpyRows does Axpy(out[i*ldo:i*ldo+d], p[i*ldp+t], v[t*ldv:t*ldv+d]) for t = 0, 1, ..., n-1
// and each i < nq, with the bits of those calls on the same path: attention's weighted sum of n
// row-major values for nq queries, each value vector loaded once for a pair of queries. A
// query's sum depends only on its weights, the values and out's initial contents.
func AxpyRows(out []float32, ldo int, p []float32, ldp, nq int, v []float32, ldv, d, n int) {
	if nq <= 0 || n <= 0 || d <= 0 {
		return
	}
	_ = out[(nq-1)*ldo+d-1]
	_ = p[(nq-1)*ldp+n-1]
	_ = v[(n-1)*ldv+d-1]
	active.axpyRows(unsafe.SliceData(out), ldo, unsafe.SliceData(p), ldp, nq, unsafe.SliceData(v), ldv, d, n)
}

// DotsRowsBF16 is DotsRows over keys stored as bf16 (a bf16 key/value cache): bitwise DotsRows
// on the same path over the keys widened to f32, which they are exactly.
func DotsRowsBF16(y []float32, ldy int, q []float32, ldq, nq int, k []uint16, ldk, d, n int, scale float32) {
	if nq <= 0 || n <= 0 {
		return
	}
	if d <= 0 {
		panic("kernel: DotsRowsBF16 with no elements")
	}
	_ = y[(nq-1)*ldy+n-1]
	_ = q[(nq-1)*ldq+d-1]
	_ = k[(n-1)*ldk+d-1]
	active.dotsRowsBF16(unsafe.SliceData(y), ldy, unsafe.SliceData(q), ldq, nq, unsafe.SliceData(k), ldk, d, n, scale)
}

// AxpyRowsBF16 is AxpyRows over values stored as bf16: bitwise AxpyRows on the same path over
// the values widened to f32.
func AxpyRowsBF16(out []float32, ldo int, p []float32, ldp, nq int, v []uint16, ldv, d, n int) {
	if nq <= 0 || n <= 0 || d <= 0 {
		return
	}
	_ = out[(nq-1)*ldo+d-1]
	_ = p[(nq-1)*ldp+n-1]
	_ = v[(n-1)*ldv+d-1]
	active.axpyRowsBF16(unsafe.SliceData(out), ldo, unsafe.SliceData(p), ldp, nq, unsafe.SliceData(v), ldv, d, n)
}

// widenBF16 writes the f32 values of src into dst[:len(src)], growing dst if it is short.
func widenBF16(dst []float32, src []uint16) []float32 {
	if cap(dst) < len(src) {
		dst = make([]float32, len(src))
	}
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = BF16ToF32(b)
	}
	return dst
}

// dotsRowsBF16Go and axpyRowsBF16Go widen one key or value row at a time and run the f32
// arithmetic on it, which is what makes them bitwise the f32 kernels over widened rows.
func dotsRowsBF16Go(y *float32, ldy int, q *float32, ldq, nq int, k *uint16, ldk, d, n int, scale float32) {
	ys := unsafe.Slice(y, (nq-1)*ldy+n)
	qs := unsafe.Slice(q, (nq-1)*ldq+d)
	ks := unsafe.Slice(k, (n-1)*ldk+d)
	var buf [256]float32
	kt := buf[:0]
	for t := 0; t < n; t++ {
		kt = widenBF16(kt, ks[t*ldk:t*ldk+d])
		for i := 0; i < nq; i++ {
			ys[i*ldy+t] = dotGo(qs[i*ldq:i*ldq+d], kt) * scale
		}
	}
}

func axpyRowsBF16Go(out *float32, ldo int, p *float32, ldp, nq int, v *uint16, ldv, d, n int) {
	os := unsafe.Slice(out, (nq-1)*ldo+d)
	ps := unsafe.Slice(p, (nq-1)*ldp+n)
	vs := unsafe.Slice(v, (n-1)*ldv+d)
	var buf [256]float32
	vt := buf[:0]
	for t := 0; t < n; t++ {
		vt = widenBF16(vt, vs[t*ldv:t*ldv+d])
		for i := 0; i < nq; i++ {
			axpyGo(os[i*ldo:i*ldo+d], ps[i*ldp+t], vt)
		}
	}
}

func dotsRowsGo(y *float32, ldy int, q *float32, ldq, nq int, k *float32, ldk, d, n int, scale float32) {
	ys := unsafe.Slice(y, (nq-1)*ldy+n)
	qs := unsafe.Slice(q, (nq-1)*ldq+d)
	ks := unsafe.Slice(k, (n-1)*ldk+d)
	for t := 0; t < n; t++ {
		kt := ks[t*ldk : t*ldk+d]
		for i := 0; i < nq; i++ {
			ys[i*ldy+t] = dotGo(qs[i*ldq:i*ldq+d], kt) * scale
		}
	}
}

func axpyRowsGo(out *float32, ldo int, p *float32, ldp, nq int, v *float32, ldv, d, n int) {
	os := unsafe.Slice(out, (nq-1)*ldo+d)
	ps := unsafe.Slice(p, (nq-1)*ldp+n)
	vs := unsafe.Slice(v, (n-1)*ldv+d)
	for t := 0; t < n; t++ {
		vt := vs[t*ldv : t*ldv+d]
		for i := 0; i < nq; i++ {
			axpyGo(os[i*ldo:i*ldo+d], ps[i*ldp+t], vt)
		}
	}
}
