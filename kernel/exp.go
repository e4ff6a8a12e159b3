package kernel

import "math"

// ExpShift sets dst[i] = exp((src[i]-shift)*scale) for i < len(dst) and returns the sum of those
// values: the exponentials of a softmax once its maximum (shift) is known. dst may alias src;
// src must be at least as long as dst.
//
// The argument is formed in float32 exactly as written, (src[i]-shift) rounded, times scale
// rounded; exp of that argument is then within about 2e-7 relative of the true value on every
// path for results above the smallest normal float32. Arguments below about -104 give 0 (results
// in between underflow gradually through the denormals) and above about 88.7 give +Inf.
//
// Each dst[i] depends only on src[i], shift and scale, never on the length of the call or the
// other elements, and the sum depends only on the values and their count: a softmax row gets
// the same bits however many rows a forward processes.
func ExpShift(dst, src []float32, shift, scale float32) float32 {
	return active.expShift(dst, src[:len(dst)], shift, scale)
}

// expShiftGo is the portable ExpShift: range reduction and polynomial in float64, then one
// rounding to float32 (which also rounds denormal results once). The sum is taken in input
// order in float32.
func expShiftGo(dst, src []float32, shift, scale float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2   = 0.693147180559945309
	)
	src = src[:len(dst)]
	var sum float32
	for i, v := range src {
		x := float64((v - shift) * scale)
		// The clamps match the assembly paths: below -105 the result is 0 anyway, above 89 it
		// is +Inf anyway, and infinities do not turn into NaN through n*ln2.
		x = min(max(x, -105), 89)
		n := math.RoundToEven(x * log2e)
		r := x - n*ln2
		// Taylor series of e^r to degree 10: |r| <= 0.35, so the remainder is below 1e-13.
		p := 1.0 / 3628800
		p = p*r + 1.0/362880
		p = p*r + 1.0/40320
		p = p*r + 1.0/5040
		p = p*r + 1.0/720
		p = p*r + 1.0/120
		p = p*r + 1.0/24
		p = p*r + 1.0/6
		p = p*r + 0.5
		p = p*r + 1
		p = p*r + 1
		e := float32(p * math.Float64frombits(uint64(int64(n)+1023)<<52))
		dst[i] = e
		sum += e
	}
	return sum
}

// SiluMul sets g[i] = u[i]*g[i] / (1 + exp(-g[i])) for i < len(g) (SwiGLU's silu(gate) times
// up), with exp as ExpShift(g, g, 0, -1) computes it on the same path: the bits of multiplying,
// calling ExpShift and dividing element by element. u must be at least as long as g; its
// contents are scratch afterwards.
func SiluMul(g, u []float32) {
	active.siluMul(g, u[:len(g)])
}

func siluMulGo(g, u []float32) {
	for i, v := range g {
		u[i] *= v
	}
	expShiftGo(g, g, 0, -1)
	for i, e := range g {
		g[i] = u[i] / (1 + e)
	}
}
