// Package nn owns the small building blocks of a decoder layer that targets, drafts and the draft
// trainer share: RMSNorm, rotary position embeddings, attention over a key/value cache with a
// visibility rule, softmax and the SwiGLU MLP. Weight products go through kernel.Matrix; the rest is
// plain loops over caller-owned buffers.
//
// Nothing here allocates on the hot path, starts goroutines or knows a model family: every function
// writes into buffers its caller sized once (a Workspace, built at model construction).
package nn

import (
	"math"

	"github.com/dflash/dflash/kernel"
)

// RMSNorm writes dst[i] = x[i] / rms(x) * w[i] over len(x) elements; dst may alias x. The sum of
// squares is taken in float64 so that rows of a few thousand elements lose nothing to rounding.
func RMSNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

// RMSNormRows normalizes rows consecutive rows of width elements each; dst may alias x.
func RMSNormRows(dst, x, w []float32, rows, width int, eps float32) {
	for r := 0; r < rows; r++ {
		o := r * width
		RMSNorm(dst[o:o+width], x[o:o+width], w, eps)
	}
}

// Silu is x * sigmoid(x).
func Silu(x float32) float32 { return x / (1 + Exp32(-x)) }

// SwiGLU computes y = Down(silu(Gate x) * Up x) for rows rows. gate and up are scratch of at least
// rows*Gate.N elements; gate is overwritten with the activation. y needs rows*Down.N elements.
func SwiGLU(y, x []float32, rows int, gateW, upW, downW *kernel.Matrix, gate, up []float32) {
	gateW.MatMul(gate, x, rows)
	upW.MatMul(up, x, rows)
	n := rows * gateW.N
	g, u := gate[:n], up[:n]
	for i, v := range g {
		g[i] = Silu(v) * u[i]
	}
	downW.MatMul(y, g, rows)
}

// Softmax replaces x by exp(x - max) / sum in place.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	inv := 1 / expShift(x, m)
	for i := range x {
		x[i] *= inv
	}
}

// Exp32 is exp(x) in float32 to within a few ulp, several times faster than math.Exp: the
// attention softmax calls it once per visible key and head, which on a tiny model costs as much as
// the weight products. x = n*ln2 + r with |r| <= ln2/2, then a degree-7 polynomial for e^r. It has
// no data-dependent branch in the normal range, since softmax inputs are random to a predictor.
func Exp32(x float32) float32 {
	if x > 88.72 {
		return float32(math.Inf(1))
	}
	if x < -87.3 {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
		// Adding 1.5*2^23 rounds a float32 of magnitude below 2^22 to an integer (nearest even)
		// and leaves that integer in the low mantissa bits.
		magic = 12582912.0
	)
	t := x*log2e + magic
	n := t - magic
	ni := int32(math.Float32bits(t)) - 0x4B400000
	r := x - n*ln2hi
	r -= n * ln2lo
	// Taylor coefficients 1/k! to k = 7: the remainder at |r| = 0.347 is below 2e-9 relative.
	p := float32(1.0 / 5040)
	p = p*r + 1.0/720
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	if ni > 127 {
		// exp(x) for x in (88.38, 88.72] is finite but 2^n itself is not.
		return p * 2 * math.Float32frombits(uint32(ni+126)<<23)
	}
	return p * math.Float32frombits(uint32(ni+127)<<23)
}

// expShift replaces x[i] by exp(x[i] - m) and returns their sum, for x[i] <= m (a softmax after
// its max is known).
func expShift(x []float32, m float32) float32 { return expShiftScaled(x, m, 1) }

// expShiftScaled replaces x[i] by exp((x[i] - m) * scale) and returns their sum, for x[i] <= m and
// scale > 0. It is Exp32 with the loop around it, so the polynomials of consecutive elements
// overlap in the pipeline instead of waiting on a call per element. Multiplying by a scale of 1
// is exact, so expShift computes the same bits as Exp32 on x[i] - m.
func expShiftScaled(x []float32, m, scale float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
		magic = 12582912.0
	)
	var sum float32
	for i, v := range x {
		v = (v - m) * scale
		if v < -87.3 {
			v = -87.3 // exp(-87.3) is 1e-38: as good as the zero it stands for beside exp(0) = 1
		}
		t := v*log2e + magic
		n := t - magic
		ni := int32(math.Float32bits(t)) - 0x4B400000
		r := v - n*ln2hi
		r -= n * ln2lo
		p := float32(1.0 / 5040)
		p = p*r + 1.0/720
		p = p*r + 1.0/120
		p = p*r + 1.0/24
		p = p*r + 1.0/6
		p = p*r + 0.5
		p = p*r + 1
		p = p*r + 1
		e := p * math.Float32frombits(uint32(ni+127)<<23)
		x[i] = e
		sum += e
	}
	return sum
}
