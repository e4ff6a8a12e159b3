package nn

import "math"

// RoPEStyle says which pairs of a head vector rotate together.
type RoPEStyle int

const (
	// RotateHalf pairs element i with element i+headDim/2 (Hugging Face Llama, Qwen3).
	RotateHalf RoPEStyle = iota
	// AdjacentPair pairs elements 2i and 2i+1 (llama2.c, Meta's original Llama code).
	AdjacentPair
)

func (s RoPEStyle) String() string {
	if s == AdjacentPair {
		return "adjacent-pair"
	}
	return "rotate-half"
}

// InvFreq returns the standard rotary inverse frequencies theta^(-2i/headDim), i < headDim/2.
func InvFreq(headDim int, theta float64) []float64 {
	inv := make([]float64, headDim/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(theta, float64(2*i)/float64(headDim))
	}
	return inv
}

// Llama3InvFreq applies Llama 3.1's rope_scaling ("rope_type": "llama3") to inverse frequencies:
// wavelengths longer than origMax/low are divided by factor, shorter than origMax/high are kept,
// and the band between is interpolated smoothly. It returns a new slice.
func Llama3InvFreq(inv []float64, factor, low, high float64, origMax int) []float64 {
	out := make([]float64, len(inv))
	lowWave := float64(origMax) / low
	highWave := float64(origMax) / high
	for i, f := range inv {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
			out[i] = f
		case wave > lowWave:
			out[i] = f / factor
		default:
			s := (float64(origMax)/wave - low) / (high - low)
			out[i] = (1-s)*f/factor + s*f
		}
	}
	return out
}

// RoPE holds cos/sin tables [position][headDim/2] for one set of inverse frequencies, so applying
// it is a table lookup per pair. Tables are computed in float64 and rounded once.
type RoPE struct {
	Style   RoPEStyle
	HeadDim int
	inv     []float64
	cos     []float32
	sin     []float32
	maxPos  int
}

// NewRoPE builds tables for positions [0, maxPos). len(inv) must be headDim/2.
func NewRoPE(style RoPEStyle, headDim int, inv []float64, maxPos int) *RoPE {
	r := &RoPE{Style: style, HeadDim: headDim, inv: append([]float64(nil), inv...)}
	r.Grow(maxPos)
	return r
}

// MaxPos is the number of positions the tables cover.
func (r *RoPE) MaxPos() int { return r.maxPos }

// Grow extends the tables to cover positions [0, maxPos). It allocates, so callers grow when
// they size a cache, never per token. Not safe concurrently with Apply.
func (r *RoPE) Grow(maxPos int) {
	if maxPos <= r.maxPos {
		return
	}
	h := r.HeadDim / 2
	cos := make([]float32, maxPos*h)
	sin := make([]float32, maxPos*h)
	copy(cos, r.cos)
	copy(sin, r.sin)
	for p := r.maxPos; p < maxPos; p++ {
		for i, f := range r.inv {
			a := float64(p) * f
			cos[p*h+i] = float32(math.Cos(a))
			sin[p*h+i] = float32(math.Sin(a))
		}
	}
	r.cos, r.sin, r.maxPos = cos, sin, maxPos
}

// Apply rotates heads consecutive head vectors of x (one row, heads*HeadDim elements) in place
// for position pos, which must be below MaxPos.
func (r *RoPE) Apply(x []float32, heads, pos int) {
	d := r.HeadDim
	h := d / 2
	cos := r.cos[pos*h : pos*h+h]
	sin := r.sin[pos*h : pos*h+h]
	for hd := 0; hd < heads; hd++ {
		v := x[hd*d : hd*d+d]
		if r.Style == AdjacentPair {
			for i := 0; i < h; i++ {
				a, b := v[2*i], v[2*i+1]
				c, s := cos[i], sin[i]
				v[2*i] = a*c - b*s
				v[2*i+1] = a*s + b*c
			}
			continue
		}
		lo, hi := v[:h], v[h:d]
		for i := 0; i < h; i++ {
			a, b := lo[i], hi[i]
			c, s := cos[i], sin[i]
			lo[i] = a*c - b*s
			hi[i] = b*c + a*s
		}
	}
}
