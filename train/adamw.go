package train

import "math"

// adamw is the optimizer both trainers use: global-norm gradient clipping, then AdamW with bias
// correction and decoupled weight decay on matrices only (norm weights are not decayed).
type adamw struct {
	Beta1, Beta2, WeightDecay, ClipNorm float64
}

// step applies one update at 0-based step with learning rate lr. g is the summed gradient; it is
// read, not changed. The arithmetic is fixed (float64 norm, float32 updates) so that a resumed run
// is bitwise identical to an uninterrupted one.
func (o adamw) step(specs []spec, params, m, v, g []float32, step int, lr float64) {
	var ss float64
	for _, x := range g {
		ss += float64(x) * float64(x)
	}
	clip := float32(1)
	if norm := math.Sqrt(ss); norm > o.ClipNorm {
		clip = float32(o.ClipNorm / norm)
	}
	t := float64(step + 1)
	bc1 := 1 - math.Pow(o.Beta1, t)
	bc2 := 1 - math.Pow(o.Beta2, t)
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	stepSize := float32(lr / bc1)
	sq2 := float32(math.Sqrt(bc2))
	for _, s := range specs {
		decay := float32(1)
		if s.matrix {
			decay = float32(1 - lr*o.WeightDecay)
		}
		for i := s.off; i < s.off+s.n; i++ {
			gi := g[i] * clip
			m[i] = b1*m[i] + (1-b1)*gi
			v[i] = b2*v[i] + (1-b2)*gi*gi
			params[i] = params[i]*decay - stepSize*m[i]/(float32(math.Sqrt(float64(v[i])))/sq2+1e-8)
		}
	}
}
