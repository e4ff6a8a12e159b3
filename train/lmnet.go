package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/nn"
)

// The target LM reuses the draft's pieces: spec (flat layout), layer (a decoder layer's tensors),
// linear (a weight with its kernel copies), the RMSNorm/RoPE/SwiGLU ops. Names are Hugging Face
// Qwen3's, so the flat vector writes straight into model.safetensors.

// lmLayout lists the LM's tensors in the order of the flat parameter vector.
func lmLayout(c TargetConfig) ([]spec, int) {
	var specs []spec
	off := 0
	add := func(name string, matrix bool, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		specs = append(specs, spec{name: name, shape: shape, off: off, n: n, matrix: matrix})
		off += n
	}
	h, q, kv := c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	add("model.embed_tokens.weight", true, c.Vocab, h)
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", false, h)
		add(p+"self_attn.q_proj.weight", true, q, h)
		add(p+"self_attn.k_proj.weight", true, kv, h)
		add(p+"self_attn.v_proj.weight", true, kv, h)
		add(p+"self_attn.o_proj.weight", true, h, q)
		add(p+"self_attn.q_norm.weight", false, c.HeadDim)
		add(p+"self_attn.k_norm.weight", false, c.HeadDim)
		add(p+"post_attention_layernorm.weight", false, h)
		add(p+"mlp.gate_proj.weight", true, c.Intermediate, h)
		add(p+"mlp.up_proj.weight", true, c.Intermediate, h)
		add(p+"mlp.down_proj.weight", true, h, c.Intermediate)
	}
	add("model.norm.weight", false, h)
	return specs, off
}

// lmNet views a flat vector (parameters or gradients) as the LM's tensors.
type lmNet struct {
	embed  linear // [Vocab][Hidden]: the input embedding and the tied output head
	layers []layer
	norm   []float32
}

func lmBind(specs []spec, flat []float32, layers int) *lmNet {
	at := func(i int) []float32 { s := specs[i]; return flat[s.off : s.off+s.n] }
	lin := func(i int) linear { s := specs[i]; return linear{W: at(i), N: s.shape[0], K: s.shape[1]} }
	n := &lmNet{embed: lin(0), layers: make([]layer, layers)}
	for l := range n.layers {
		b := 1 + 11*l
		n.layers[l] = layer{
			inNorm: at(b), q: lin(b + 1), k: lin(b + 2), v: lin(b + 3), o: lin(b + 4),
			qNorm: at(b + 5), kNorm: at(b + 6), postNorm: at(b + 7),
			gate: lin(b + 8), up: lin(b + 9), down: lin(b + 10),
		}
	}
	n.norm = at(len(specs) - 1)
	return n
}

func (n *lmNet) refresh() {
	n.embed.refresh()
	for l := range n.layers {
		L := &n.layers[l]
		for _, m := range []*linear{&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down} {
			m.refresh()
		}
	}
}

// lmInit fills flat from seed: the embedding N(0, InitStd) (it is also the head, so its scale
// sets the first logits' spread), matrices N(0, 1/sqrt(fan_in)) with the residual writers (o,
// down) shrunk by 1/sqrt(2*layers), norms one.
func lmInit(specs []spec, flat []float32, c TargetConfig) {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6c6d696e6974))
	for i, s := range specs {
		w := flat[s.off : s.off+s.n]
		if !s.matrix {
			for j := range w {
				w[j] = 1
			}
			continue
		}
		std := 1 / math.Sqrt(float64(s.shape[1]))
		if i == 0 {
			std = c.InitStd
		}
		if strings.HasSuffix(s.name, "o_proj.weight") || strings.HasSuffix(s.name, "down_proj.weight") {
			std /= math.Sqrt(2 * float64(c.Layers))
		}
		for j := range w {
			w[j] = float32(rng.NormFloat64() * std)
		}
	}
}

// lmLayerState keeps one layer's activations of a window for the backward pass.
type lmLayerState struct {
	x, xn        []float32 // [T][H] input, after input_layernorm
	qRaw, kRaw   []float32 // projections before q_norm / k_norm
	q, k, v      []float32 // normed and roped q, k; v
	p            []float32 // [heads][T][T] causal attention probabilities (upper part zero)
	att          []float32 // [T][qw] attention output
	x1, hn       []float32 // after the attention residual; after post_attention_layernorm
	g, u, act    []float32 // gate, up, silu(gate)*up
	dq, dk, dv   []float32
	dqRaw, dkRaw []float32
}

// lmWork is one goroutine's scratch for one window at a time.
type lmWork struct {
	ls                 []lmLayerState
	xOut, f, df, dx    []float32
	logits             []float32 // [T][V], probabilities after the loss
	t1, t2, t3, t4, dn []float32
	dg, du             []float32
	gT, gX, gY         []float32 // gradAdd scratch
}

// gradAdd adds dy^T x to dW ([n][k]) over rows rows as one kernel product: with X^T as an
// [k][rows] matrix, row j of dW gains X^T (column j of dy). Faster than per-row axpys by the
// kernel's register blocking; the order of the sums is fixed, so results are deterministic.
func (w *lmWork) gradAdd(dW, dy, x []float32, rows, n, k int) {
	w.gX = resize(w.gX, k*rows)
	for r := 0; r < rows; r++ {
		for i, v := range x[r*k : (r+1)*k] {
			w.gX[i*rows+r] = v
		}
	}
	w.gT = resize(w.gT, n*rows)
	for r := 0; r < rows; r++ {
		for j, v := range dy[r*n : (r+1)*n] {
			w.gT[j*rows+r] = v
		}
	}
	w.gY = resize(w.gY, n*k)
	matmul(kernel.NewF32(w.gX, k, rows), w.gY, w.gT, n)
	for i, v := range w.gY {
		dW[i] += v
	}
}

// backward writes dx = dy W (when dx is non-nil) and adds dy^T x to dW.
func (w *lmWork) backward(l *linear, dx, dW, dy, x []float32, rows int) {
	if dx != nil {
		matmul(l.mt, dx, dy, rows)
	}
	w.gradAdd(dW, dy, x, rows, l.N, l.K)
}

// window runs the LM over tokens[:T] predicting tokens[1:T+1]; it returns the summed
// cross-entropy (nats). When g is non-nil it adds d(scale * loss)/dparams into g. When logitsOut
// is non-nil the logits of every row (before softmax) are copied into it ([T][V]). The forward is
// model/transformer's Qwen3 forward (TestLMMatchesInference holds them together).
func (w *lmWork) window(p, g *lmNet, c TargetConfig, rp *rope, tokens []int, scale float32, logitsOut []float32) float64 {
	T := len(tokens) - 1
	H, V, I := c.Hidden, c.Vocab, c.Intermediate
	hd, nh, nkv := c.HeadDim, c.Heads, c.KVHeads
	qw, kw := nh*hd, nkv*hd
	group := nh / nkv
	eps := c.RMSEps
	sc := float32(1 / math.Sqrt(float64(hd)))
	if len(w.ls) < c.Layers {
		w.ls = make([]lmLayerState, c.Layers)
	}
	x := resize(w.ls[0].x, T*H)
	w.ls[0].x = x
	for t := 0; t < T; t++ {
		copy(x[t*H:(t+1)*H], p.embed.W[tokens[t]*H:(tokens[t]+1)*H])
	}
	for l := range p.layers {
		L := &p.layers[l]
		s := &w.ls[l]
		s.xn = resize(s.xn, T*H)
		rmsForward(s.xn, s.x, L.inNorm, T, H, eps)
		s.qRaw, s.kRaw, s.v = resize(s.qRaw, T*qw), resize(s.kRaw, T*kw), resize(s.v, T*kw)
		s.q, s.k = resize(s.q, T*qw), resize(s.k, T*kw)
		L.q.forward(s.qRaw, s.xn, T)
		L.k.forward(s.kRaw, s.xn, T)
		L.v.forward(s.v, s.xn, T)
		rmsForward(s.q, s.qRaw, L.qNorm, T*nh, hd, eps)
		rmsForward(s.k, s.kRaw, L.kNorm, T*nkv, hd, eps)
		for t := 0; t < T; t++ {
			rp.apply(s.q[t*qw:(t+1)*qw], nh, t, false)
			rp.apply(s.k[t*kw:(t+1)*kw], nkv, t, false)
		}
		s.p = resize(s.p, nh*T*T)
		s.att = resize(s.att, T*qw)
		clear(s.att)
		for h := 0; h < nh; h++ {
			kh := h / group
			for t := 0; t < T; t++ {
				q := s.q[t*qw+h*hd : t*qw+(h+1)*hd]
				pr := s.p[(h*T+t)*T : (h*T+t+1)*T]
				mx := float32(math.Inf(-1))
				for j := 0; j <= t; j++ {
					pr[j] = kernel.Dot(q, s.k[j*kw+kh*hd:j*kw+(kh+1)*hd]) * sc
					mx = max(mx, pr[j])
				}
				var sum float32
				for j := 0; j <= t; j++ {
					pr[j] = nn.Exp32(pr[j] - mx)
					sum += pr[j]
				}
				inv := 1 / sum
				out := s.att[t*qw+h*hd : t*qw+(h+1)*hd]
				for j := 0; j <= t; j++ {
					pr[j] *= inv
					kernel.Axpy(out, pr[j], s.v[j*kw+kh*hd:j*kw+(kh+1)*hd])
				}
				clear(pr[t+1:])
			}
		}
		s.x1 = resize(s.x1, T*H)
		L.o.forward(s.x1, s.att, T)
		for i, v := range s.x {
			s.x1[i] += v
		}
		s.hn = resize(s.hn, T*H)
		rmsForward(s.hn, s.x1, L.postNorm, T, H, eps)
		s.g, s.u, s.act = resize(s.g, T*I), resize(s.u, T*I), resize(s.act, T*I)
		L.gate.forward(s.g, s.hn, T)
		L.up.forward(s.u, s.hn, T)
		swigluForward(s.act, s.g, s.u)
		var next []float32
		if l+1 < len(p.layers) {
			next = resize(w.ls[l+1].x, T*H)
			w.ls[l+1].x = next
		} else {
			next = resize(w.xOut, T*H)
			w.xOut = next
		}
		L.down.forward(next, s.act, T)
		for i, v := range s.x1 {
			next[i] += v
		}
	}
	w.f = resize(w.f, T*H)
	rmsForward(w.f, w.xOut, p.norm, T, H, eps)
	w.logits = resize(w.logits, T*V)
	p.embed.forward(w.logits, w.f, T)
	if logitsOut != nil {
		copy(logitsOut, w.logits)
	}
	var loss float64
	for t := 0; t < T; t++ {
		lg := w.logits[t*V : (t+1)*V]
		label := tokens[t+1]
		loss += softmaxCE(lg, label)
		if g == nil {
			continue
		}
		for j := range lg {
			lg[j] *= scale
		}
		lg[label] -= scale
	}
	if g == nil {
		return loss
	}

	// Backward. The head is the embedding: its gradient gets dlogits^T f here and the input rows
	// at the end.
	w.df = resize(w.df, T*H)
	w.backward(&p.embed, w.df, g.embed.W, w.logits, w.f, T)
	w.dx = resize(w.dx, T*H)
	clear(w.dx)
	rmsBackward(w.dx, g.norm, w.df, w.xOut, p.norm, T, H, eps)
	for l := len(p.layers) - 1; l >= 0; l-- {
		L, G, s := &p.layers[l], &g.layers[l], &w.ls[l]
		w.t1 = resize(w.t1, T*I)
		w.backward(&L.down, w.t1, G.down.W, w.dx, s.act, T)
		w.dg, w.du = resize(w.dg, T*I), resize(w.du, T*I)
		swigluBackward(w.dg, w.du, w.t1, s.g, s.u)
		w.t2, w.t3 = resize(w.t2, T*H), resize(w.t3, T*H)
		w.backward(&L.gate, w.t2, G.gate.W, w.dg, s.hn, T)
		w.backward(&L.up, w.t3, G.up.W, w.du, s.hn, T)
		for i, v := range w.t3 {
			w.t2[i] += v
		}
		rmsBackward(w.dx, G.postNorm, w.t2, s.x1, L.postNorm, T, H, eps)
		// dx is now d(x1): through the residual and into o_proj.
		w.t4 = resize(w.t4, T*qw)
		w.backward(&L.o, w.t4, G.o.W, w.dx, s.att, T)
		s.dq, s.dk, s.dv = resize(s.dq, T*qw), resize(s.dk, T*kw), resize(s.dv, T*kw)
		clear(s.dq)
		clear(s.dk)
		clear(s.dv)
		w.dn = resize(w.dn, T)
		for h := 0; h < nh; h++ {
			kh := h / group
			for t := 0; t < T; t++ {
				do := w.t4[t*qw+h*hd : t*qw+(h+1)*hd]
				q := s.q[t*qw+h*hd : t*qw+(h+1)*hd]
				dq := s.dq[t*qw+h*hd : t*qw+(h+1)*hd]
				pr := s.p[(h*T+t)*T : (h*T+t+1)*T]
				dp := w.dn[:t+1]
				var dot float32
				for j := 0; j <= t; j++ {
					dp[j] = kernel.Dot(do, s.v[j*kw+kh*hd:j*kw+(kh+1)*hd])
					dot += pr[j] * dp[j]
					kernel.Axpy(s.dv[j*kw+kh*hd:j*kw+(kh+1)*hd], pr[j], do)
				}
				for j := 0; j <= t; j++ {
					ds := pr[j] * (dp[j] - dot) * sc
					if ds == 0 {
						continue
					}
					kernel.Axpy(dq, ds, s.k[j*kw+kh*hd:j*kw+(kh+1)*hd])
					kernel.Axpy(s.dk[j*kw+kh*hd:j*kw+(kh+1)*hd], ds, q)
				}
			}
		}
		for t := 0; t < T; t++ {
			rp.apply(s.dq[t*qw:(t+1)*qw], nh, t, true)
			rp.apply(s.dk[t*kw:(t+1)*kw], nkv, t, true)
		}
		s.dqRaw, s.dkRaw = resize(s.dqRaw, T*qw), resize(s.dkRaw, T*kw)
		clear(s.dqRaw)
		clear(s.dkRaw)
		rmsBackward(s.dqRaw, G.qNorm, s.dq, s.qRaw, L.qNorm, T*nh, hd, eps)
		rmsBackward(s.dkRaw, G.kNorm, s.dk, s.kRaw, L.kNorm, T*nkv, hd, eps)
		dxn := w.t2
		w.backward(&L.q, dxn, G.q.W, s.dqRaw, s.xn, T)
		w.backward(&L.k, w.t3, G.k.W, s.dkRaw, s.xn, T)
		for i, v := range w.t3 {
			dxn[i] += v
		}
		w.backward(&L.v, w.t3, G.v.W, s.dv, s.xn, T)
		for i, v := range w.t3 {
			dxn[i] += v
		}
		rmsBackward(w.dx, G.inNorm, dxn, s.x, L.inNorm, T, H, eps)
	}
	for t := 0; t < T; t++ {
		row := g.embed.W[tokens[t]*H : (tokens[t]+1)*H]
		for i, v := range w.dx[t*H : (t+1)*H] {
			row[i] += v
		}
	}
	return loss
}
