// Package nn owns the one row-forward engine every decoder in dflash runs on. Building blocks of a
// layer that targets, drafts and the draft trainer share: RMSNorm, rotary position embeddings,
// attention over a key/value cache with a visibility rule, softmax and the SwiGLU MLP. The one
// key/value cache layout every forward reads (KV: row-major rows plus head-major copies for small
// heads) with the per-layer attention steps on it (Heads: Project the rows' queries, keys and
// values, Attend). And the row split (Phases runs a Stack: each part does its rows of a layer,
// the parts join, next layer). Weight products go through kernel.Matrix, softmax exponentials and
// head-major attention through the kernel's vector primitives (ExpShift, AxpyRowsMax, DotRows);
// the rest is plain loops over caller-owned buffers.
//
// Nothing here allocates on the hot path or knows a model family: every function writes into
// buffers its caller sized once (a Workspace, built at model construction), and the only
// concurrency is the kernel's pool, which Phases hands parts to.
package nn

import (
	"math"

	"github.com/dflash/dflash/kernel"
)

// RMSNorm writes dst[i] = x[i] / rms(x) * w[i] over len(x) elements; dst may alias x. The sum of
// squares is taken in float64 so that rows of a few thousand elements lose nothing to rounding.
func RMSNorm(dst, x, w []float32, eps float32) {
	// Four partial sums break the chain of dependent float64 adds that made this loop
	// latency-bound on the short rows of per-head norms (8..128 elements). A float32 square is
	// exact in float64, so the order changes at most the last bit of the float64 sum.
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0]) * float64(v[0])
		s1 += float64(v[1]) * float64(v[1])
		s2 += float64(v[2]) * float64(v[2])
		s3 += float64(v[3]) * float64(v[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	ss := (s0 + s1) + (s2 + s3)
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

// Silu is x * sigmoid(x), one value at a time. SwiGLU computes the same function through
// kernel.ExpShift, whose bits may differ from this one's in the last place.
func Silu(x float32) float32 { return x / (1 + Exp32(-x)) }

// SwiGLU computes y = Down(silu(Gate x) * Up x) for rows rows. gate and up are scratch of at least
// rows*Gate.N elements; gate is overwritten with the activation, up with gate times up. y needs rows*Down.N elements.
func SwiGLU(y, x []float32, rows int, gateW, upW, downW *kernel.Matrix, gate, up []float32) {
	// One hand-off to the kernel's pool for both products of x; MatMulEach refuses only shapes
	// MatMul would panic on, and then MatMul reports them.
	if err := kernel.MatMulEach(x, rows, kernel.Product{M: gateW, Y: gate}, kernel.Product{M: upW, Y: up}); err != nil {
		gateW.MatMul(gate, x, rows)
		upW.MatMul(up, x, rows)
	}
	n := rows * gateW.N
	g, u := gate[:n], up[:n]
	// silu(g)*u = g*u / (1 + exp(-g)) in one vector pass (kernel.SiluMul; both are scratch).
	// exp(-g) overflows to +Inf for g below about -89, which gives the 0 silu tends to. Every
	// element is computed alone, so a row's bits do not depend on rows.
	kernel.SiluMul(g, u)
	downW.MatMul(y, g, rows)
}

// Softmax replaces x by exp(x - max) / sum in place. The exponentials are kernel.ExpShift's, so
// a row's result depends only on its values and length.
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
	inv := 1 / kernel.ExpShift(x, x, m, 1)
	for i := range x {
		x[i] *= inv
	}
}

// Exp32 is exp(x) in float32 to within a few ulp, several times faster than math.Exp, for one
// value at a time (Silu); softmax rows go through the vectorized kernel.ExpShift instead. x = n*ln2 + r with |r| <= ln2/2, then a degree-7 polynomial for e^r. It has
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
