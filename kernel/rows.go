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
