package dflash

import (
	"math"

	"github.com/dflash/dflash/model"
)

// refDraft is a deliberately naive float64 transcription of DFLASH.md section 2, written from
// the spec rather than from draft.go: plain loops, no cache, keys and values of the context
// recomputed from the features at every layer.
type refDraft struct {
	cfg    Config
	w      map[string][]float32
	target model.Target
}

func (r *refDraft) get(name string) []float64 {
	v := r.w[name]
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// linear computes W x for row-major W [n][len(x)].
func linear(w []float64, x []float64) []float64 {
	k := len(x)
	n := len(w) / k
	y := make([]float64, n)
	for j := 0; j < n; j++ {
		var s float64
		for i := 0; i < k; i++ {
			s += w[j*k+i] * x[i]
		}
		y[j] = s
	}
	return y
}

func rmsnorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * inv * w[i]
	}
	return y
}

// headNorm applies rmsnorm to each head of x in place.
func headNorm(x, w []float64, d int, eps float64) {
	for h := 0; h*d < len(x); h++ {
		copy(x[h*d:(h+1)*d], rmsnorm(x[h*d:(h+1)*d], w, eps))
	}
}

// rope rotates each head of x (rotate-half pairing) for position pos in place.
func (r *refDraft) rope(x []float64, d, pos int) {
	half := d / 2
	for h := 0; h*d < len(x); h++ {
		v := x[h*d : (h+1)*d]
		for i := 0; i < half; i++ {
			f := 1 / math.Pow(r.cfg.RopeTheta, float64(2*i)/float64(d))
			c, s := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
			a, b := v[i], v[i+half]
			v[i] = a*c - b*s
			v[i+half] = b*c + a*s
		}
	}
}

// visible says whether a block query at position qp sees the key at position kp in layer l;
// blockStart is the anchor's position.
func (r *refDraft) visible(l, qp, kp, blockStart int) bool {
	c := &r.cfg
	sliding := c.LayerTypes != nil && c.LayerTypes[l] == SlidingAttention
	causal := sliding
	if c.Causal != nil {
		causal = *c.Causal
	}
	if kp >= blockStart && causal && kp > qp {
		return false
	}
	if sliding && qp-kp >= c.SlidingWindow {
		return false
	}
	return true
}

// forward returns the logits of the block rows; ctx[j] holds context row j's taps (position j),
// the block starts at position len(ctx).
func (r *refDraft) forward(ctx [][]float64, block []int) [][]float64 {
	c := &r.cfg
	eps := c.RMSEps
	h, d := c.Hidden, c.HeadDim
	P := len(ctx)
	feat := make([][]float64, P)
	for j := range ctx {
		feat[j] = rmsnorm(linear(r.get("fc.weight"), ctx[j]), r.get("hidden_norm.weight"), eps)
	}
	x := make([][]float64, len(block))
	row := make([]float32, h)
	for i, t := range block {
		r.target.Embed(row, t)
		x[i] = make([]float64, h)
		for k := range row {
			x[i][k] = float64(row[k])
		}
	}
	group := c.Heads / c.KVHeads
	for l := 0; l < c.Layers; l++ {
		p := "layers." + itoa(l) + "."
		wq, wk, wv, wo := r.get(p+"self_attn.q_proj.weight"), r.get(p+"self_attn.k_proj.weight"), r.get(p+"self_attn.v_proj.weight"), r.get(p+"self_attn.o_proj.weight")
		qn, kn := r.get(p+"self_attn.q_norm.weight"), r.get(p+"self_attn.k_norm.weight")
		xn := make([][]float64, len(block))
		for i := range x {
			xn[i] = rmsnorm(x[i], r.get(p+"input_layernorm.weight"), eps)
		}
		// keys and values at every position: context rows from the features, block rows from xn
		var keys, vals [][]float64
		src := append(append([][]float64{}, feat...), xn...)
		for j, s := range src {
			k := linear(wk, s)
			headNorm(k, kn, d, eps)
			r.rope(k, d, j)
			keys = append(keys, k)
			vals = append(vals, linear(wv, s))
		}
		for i := range x {
			qp := P + i
			q := linear(wq, xn[i])
			headNorm(q, qn, d, eps)
			r.rope(q, d, qp)
			att := make([]float64, c.Heads*d)
			for hd := 0; hd < c.Heads; hd++ {
				kh := (hd / group) * d
				var sc []float64
				var idx []int
				for j := range keys {
					if !r.visible(l, qp, j, P) {
						continue
					}
					var s float64
					for e := 0; e < d; e++ {
						s += q[hd*d+e] * keys[j][kh+e]
					}
					sc = append(sc, s/math.Sqrt(float64(d)))
					idx = append(idx, j)
				}
				m := math.Inf(-1)
				for _, s := range sc {
					m = math.Max(m, s)
				}
				var sum float64
				for t := range sc {
					sc[t] = math.Exp(sc[t] - m)
					sum += sc[t]
				}
				for t, j := range idx {
					for e := 0; e < d; e++ {
						att[hd*d+e] += sc[t] / sum * vals[j][kh+e]
					}
				}
			}
			o := linear(wo, att)
			for k := range x[i] {
				x[i][k] += o[k]
			}
			mn := rmsnorm(x[i], r.get(p+"post_attention_layernorm.weight"), eps)
			g, u := linear(r.get(p+"mlp.gate_proj.weight"), mn), linear(r.get(p+"mlp.up_proj.weight"), mn)
			for k := range g {
				g[k] = g[k] / (1 + math.Exp(-g[k])) * u[k]
			}
			dn := linear(r.get(p+"mlp.down_proj.weight"), g)
			for k := range x[i] {
				x[i][k] += dn[k]
			}
		}
	}
	head := r.target.Head()
	hrow := make([]float32, h)
	logits := make([][]float64, len(block))
	for i := range x {
		xn := rmsnorm(x[i], r.get("norm.weight"), eps)
		logits[i] = make([]float64, c.Vocab)
		for v := 0; v < c.Vocab; v++ {
			head.Row(hrow, v)
			var s float64
			for k := range xn {
				s += float64(hrow[k]) * xn[k]
			}
			logits[i][v] = s
		}
	}
	return logits
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
