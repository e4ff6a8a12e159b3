package train

import (
	"math"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
)

// frozen is what the draft borrows from the target: the raw embedding and the raw output head
// (and its transpose, for the head's input gradient). Nothing here is trained.
type frozen struct {
	hidden, vocab int
	embed         func(dst []float32, token int)
	head, headT   *kernel.Matrix
}

func newFrozen(t model.Target) *frozen {
	cfg := t.Config()
	h, v := cfg.Hidden, cfg.Vocab
	head := t.Head()
	tr := make([]float32, h*v)
	row := make([]float32, h)
	for j := 0; j < v; j++ {
		head.Row(row, j)
		for i, x := range row {
			tr[i*v+j] = x
		}
	}
	return &frozen{hidden: h, vocab: v, embed: t.Embed, head: head, headT: kernel.NewF32(tr, h, v)}
}

// example is one sequence with the anchors drawn for it. taps holds at least max(anchors) rows
// of the concatenated tap features (len(Taps)*hidden per row).
type example struct {
	seq     int // index into the trainer's sequences (for the tap cache)
	tokens  []int
	taps    []float32
	anchors []int // ascending; each a >= 1 and a+B <= len(tokens)
	// Soft targets (Sequence.SoftIDs/SoftP, softK per position from softStart); set when the
	// loss has a soft term.
	softIDs   []int32
	softP     []float32
	softStart int
	softK     int
}

// softAt returns the soft targets of the token at position j.
func (e *example) softAt(j int) ([]int32, []float32) {
	o := (j - e.softStart) * e.softK
	return e.softIDs[o : o+e.softK], e.softP[o : o+e.softK]
}

// stats accumulates what a step reports.
type stats struct {
	loss    float64 // sum over anchors of the weight-normalised block loss
	anchors int
	correct []int // per block position k (index k, 1..B-1): argmax == label
	seen    []int
}

func (s *stats) reset(b int) {
	s.loss, s.anchors = 0, 0
	s.correct = resize(s.correct, b)
	s.seen = resize(s.seen, b)
	clear(s.correct)
	clear(s.seen)
}

func (s *stats) add(o *stats) {
	s.loss += o.loss
	s.anchors += o.anchors
	for i := range o.correct {
		s.correct[i] += o.correct[i]
		s.seen[i] += o.seen[i]
	}
}

func resize[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// layerState keeps one layer's forward activations for the backward pass.
type layerState struct {
	x, xn          []float32 // block rows entering the layer, and after input_layernorm
	qRaw, qr       []float32 // q_proj output; after q_norm and RoPE
	kbRaw, kbr, vb []float32 // block keys/values (raw, normed+roped)
	kcRaw, kcr, vc []float32 // context keys/values
	pc, pb         []float32 // attention probabilities: context and block parts (attention.go)
	att            []float32 // attention output (input of o_proj)
	x1, hn         []float32 // after the attention residual; after post_attention_layernorm
	g, u, act      []float32 // gate, up, silu(gate)*up
	d2             d2state   // DFlash2 only
}

// work is one goroutine's scratch: activations of the example in flight and gradients of the
// intermediate tensors. Buffers grow to the largest example and are then reused.
type work struct {
	c0, ctx, dctx, dc0 []float32
	pos                []int
	ls                 []layerState
	xOut, f, df, dx    []float32
	logits             []float32
	t1, t2, t3, t4     []float32
	dq, dkb, dvb       []float32
	dkc, dvc           []float32
	dg, du             []float32
	attn               attnScratch
	d2                 d2work
}

// weights returns the block-position loss weights w_k = exp(-(k-1)/gamma) for k = 1..B-1 (index
// k; index 0 unused) and their sum.
func weights(b int, gamma float64) ([]float32, float64) {
	w := make([]float32, b)
	var sum float64
	for k := 1; k < b; k++ {
		v := math.Exp(-float64(k-1) / gamma)
		w[k] = float32(v)
		sum += float64(float32(v))
	}
	return w, sum
}

// step runs the draft over one example: forward, the weighted cross-entropy at block positions
// 1..B-1, and, when g is non-nil, the backward pass adding d(loss*scale)/dparams into g. preds,
// when non-nil, receives the argmax of every block row (len(anchors)*B, row 0 of a block unused).
func (w *work) step(p, g *net, fz *frozen, c DraftConfig, rp *rope, ex *example, scale float32, st *stats, preds []int) {
	B := c.BlockSize
	H := fz.hidden
	V := fz.vocab
	nA := len(ex.anchors)
	R := nA * B
	nc := ex.anchors[nA-1] // context rows 0..nc-1 serve every block
	qw := c.Heads * c.HeadDim
	kw := c.KVHeads * c.HeadDim
	I := c.Intermediate
	eps := c.RMSEps
	hd := c.HeadDim
	wk, wsum := weights(B, c.Gamma)
	mix := c.lossMix()

	// Context features, shared by every layer and block.
	w.c0 = resize(w.c0, nc*H)
	w.ctx = resize(w.ctx, nc*H)
	p.fc.forward(w.c0, ex.taps, nc)
	rmsForward(w.ctx, w.c0, p.hiddenNorm, nc, H, eps)

	// Block rows: [token at anchor, MASK x (B-1)] at positions anchor..anchor+B-1.
	w.pos = resize(w.pos, R)
	if len(w.ls) < len(p.layers) {
		w.ls = append(w.ls, make([]layerState, len(p.layers)-len(w.ls))...)
	}
	x := resize(w.ls[0].x, R*H)
	w.ls[0].x = x
	for i, a := range ex.anchors {
		for k := 0; k < B; k++ {
			r := i*B + k
			w.pos[r] = a + k
			tok := c.MaskID
			if k == 0 {
				tok = ex.tokens[a]
			}
			fz.embed(x[r*H:(r+1)*H], tok)
		}
	}

	for l := range p.layers {
		L := &p.layers[l]
		s := &w.ls[l]
		s.xn = resize(s.xn, R*H)
		rmsForward(s.xn, s.x, L.inNorm, R, H, eps)
		s.qRaw, s.qr = resize(s.qRaw, R*qw), resize(s.qr, R*qw)
		s.kbRaw, s.kbr, s.vb = resize(s.kbRaw, R*kw), resize(s.kbr, R*kw), resize(s.vb, R*kw)
		s.kcRaw, s.kcr, s.vc = resize(s.kcRaw, nc*kw), resize(s.kcr, nc*kw), resize(s.vc, nc*kw)
		ain := s.xn // what q/k/v of the block rows read: DFlash2 convolves it first
		if p.d2 != nil {
			ain = w.d2prepare(&p.d2.attn[l], &s.d2.da, &s.d2.xa, s.xn, c, R, H)
		}
		L.q.forward(s.qRaw, ain, R)
		L.k.forward(s.kbRaw, ain, R)
		L.v.forward(s.vb, ain, R)
		L.k.forward(s.kcRaw, w.ctx, nc)
		L.v.forward(s.vc, w.ctx, nc)
		rmsForward(s.qr, s.qRaw, L.qNorm, R*c.Heads, hd, eps)
		rmsForward(s.kbr, s.kbRaw, L.kNorm, R*c.KVHeads, hd, eps)
		rmsForward(s.kcr, s.kcRaw, L.kNorm, nc*c.KVHeads, hd, eps)
		for r := 0; r < R; r++ {
			rp.apply(s.qr[r*qw:(r+1)*qw], c.Heads, w.pos[r], false)
			rp.apply(s.kbr[r*kw:(r+1)*kw], c.KVHeads, w.pos[r], false)
		}
		for j := 0; j < nc; j++ {
			rp.apply(s.kcr[j*kw:(j+1)*kw], c.KVHeads, j, false)
		}
		s.att = resize(s.att, R*qw)
		w.attnForward(s, c, ex.anchors, nc)
		s.x1 = resize(s.x1, R*H)
		if p.d2 != nil {
			s.d2.ao = resize(s.d2.ao, R*H)
			L.o.forward(s.d2.ao, s.att, R)
			d2finish(&p.d2.attn[l], s.x1, s.d2.ao, s.d2.da, c, R, H)
		} else {
			L.o.forward(s.x1, s.att, R)
		}
		for i, v := range s.x {
			s.x1[i] += v
		}
		s.hn = resize(s.hn, R*H)
		rmsForward(s.hn, s.x1, L.postNorm, R, H, eps)
		s.g, s.u, s.act = resize(s.g, R*I), resize(s.u, R*I), resize(s.act, R*I)
		hin := s.hn
		if p.d2 != nil {
			hin = w.d2prepare(&p.d2.mlp[l], &s.d2.dm, &s.d2.hc, s.hn, c, R, H)
		}
		L.gate.forward(s.g, hin, R)
		L.up.forward(s.u, hin, R)
		swigluForward(s.act, s.g, s.u)
		var next []float32
		if l+1 < len(p.layers) {
			next = resize(w.ls[l+1].x, R*H)
			w.ls[l+1].x = next
		} else {
			next = resize(w.xOut, R*H)
			w.xOut = next
		}
		if p.d2 != nil {
			s.d2.mo = resize(s.d2.mo, R*H)
			L.down.forward(s.d2.mo, s.act, R)
			d2finish(&p.d2.mlp[l], next, s.d2.mo, s.d2.dm, c, R, H)
		} else {
			L.down.forward(next, s.act, R)
		}
		for i, v := range s.x1 {
			next[i] += v
		}
	}

	// Final norm, head and loss, one block at a time so only B x vocab logits are live.
	w.f = resize(w.f, R*H)
	rmsForward(w.f, w.xOut, p.norm, R, H, eps)
	w.df = resize(w.df, R*H)
	clear(w.df)
	w.logits = resize(w.logits, (B-1)*V)
	for i, a := range ex.anchors {
		rows := w.f[(i*B+1)*H : (i+1)*B*H]
		matmul(fz.head, w.logits, rows, B-1)
		if p.d2 != nil {
			// The selector reads the raw logits, which the unary loss below overwrites.
			var soft func(int) ([]int32, []float32)
			if mix > 0 {
				soft = ex.softAt
			}
			st.loss += w.d2selectForward(p.d2, c, w.logits, rows, ex.tokens, soft, a, i, wk, scale, g != nil)
		}
		var bl float64
		for k := 1; k < B; k++ {
			lg := w.logits[(k-1)*V : k*V]
			label := ex.tokens[a+k]
			best := argmax(lg)
			if preds != nil {
				preds[i*B+k] = best
			}
			st.seen[k]++
			hit := best == label
			if p.d2 != nil {
				hit = w.d2.sel.hit[k] // what the selector picks after the true previous token
			}
			if hit {
				st.correct[k]++
			}
			var ids []int32
			var soft []float32
			var ce float64
			if mix > 0 {
				ids, soft = ex.softAt(a + k)
				ce = distilCE(lg, label, ids, soft, mix)
			} else {
				ce = softmaxCE(lg, label)
			}
			bl += float64(wk[k]) * ce
			if g == nil {
				continue // keep the probabilities (tests compare them with model/dflash)
			}
			// d(loss)/d(logits) = scale * w_k / sum(w) * (p - target), the target being the
			// label's one-hot, the renormalised soft targets, or their mix.
			f := scale * wk[k] / float32(wsum)
			if mix > 0 {
				distilGrad(lg, label, ids, soft, mix, f)
			} else {
				for j := range lg {
					lg[j] *= f
				}
				lg[label] -= f
			}
			if p.d2 != nil {
				w.d2selectUnary(lg, c, i, k)
			}
		}
		st.loss += bl / wsum
		st.anchors++
		if g != nil {
			matmul(fz.headT, w.df[(i*B+1)*H:(i+1)*B*H], w.logits, B-1)
			if p.d2 != nil {
				w.d2selectBack(p.d2, g.d2, c, rows, w.df[(i*B+1)*H:(i+1)*B*H], ex.tokens, a, i, H)
			}
		}
	}
	if g == nil {
		return
	}

	// Backward.
	w.dx = resize(w.dx, R*H)
	clear(w.dx)
	rmsBackward(w.dx, g.norm, w.df, w.xOut, p.norm, R, H, eps)
	w.dctx = resize(w.dctx, nc*H)
	clear(w.dctx)
	for l := len(p.layers) - 1; l >= 0; l-- {
		L, G, s := &p.layers[l], &g.layers[l], &w.ls[l]
		// MLP: dx holds d(out) = d(x1) through the residual.
		w.t1 = resize(w.t1, R*I)
		dmo, hin := w.dx, s.hn
		if p.d2 != nil {
			dmo = w.d2finishBack(&p.d2.mlp[l], &g.d2.mlp[l], w.dx, s.d2.mo, s.d2.dm, c, R, H)
			hin = s.d2.hc
		}
		L.down.backward(w.t1, G.down.W, dmo, s.act, R)
		w.dg, w.du = resize(w.dg, R*I), resize(w.du, R*I)
		swigluBackward(w.dg, w.du, w.t1, s.g, s.u)
		w.t2, w.t3 = resize(w.t2, R*H), resize(w.t3, R*H)
		L.gate.backward(w.t2, G.gate.W, w.dg, hin, R)
		L.up.backward(w.t3, G.up.W, w.du, hin, R)
		for i, v := range w.t3 {
			w.t2[i] += v
		}
		dhn := w.t2
		if p.d2 != nil {
			dhn = w.d2prepareBack(&p.d2.mlp[l], &g.d2.mlp[l], w.t2, s.hn, s.d2.dm, c, R, H)
		}
		rmsBackward(w.dx, G.postNorm, dhn, s.x1, L.postNorm, R, H, eps)
		// Attention: dx now holds d(x1) = d(x) through the residual + d(o_proj output).
		w.t4 = resize(w.t4, R*qw)
		dao, ain := w.dx, s.xn
		if p.d2 != nil {
			dao = w.d2finishBack(&p.d2.attn[l], &g.d2.attn[l], w.dx, s.d2.ao, s.d2.da, c, R, H)
			ain = s.d2.xa
		}
		L.o.backward(w.t4, G.o.W, dao, s.att, R)
		w.dq = resize(w.dq, R*qw)
		w.dkb, w.dvb = resize(w.dkb, R*kw), resize(w.dvb, R*kw)
		w.dkc, w.dvc = resize(w.dkc, nc*kw), resize(w.dvc, nc*kw)
		w.attnBackward(s, c, ex.anchors, nc, w.t4)
		// RoPE and the per-head norms.
		for r := 0; r < R; r++ {
			rp.apply(w.dq[r*qw:(r+1)*qw], c.Heads, w.pos[r], true)
			rp.apply(w.dkb[r*kw:(r+1)*kw], c.KVHeads, w.pos[r], true)
		}
		for j := 0; j < nc; j++ {
			rp.apply(w.dkc[j*kw:(j+1)*kw], c.KVHeads, j, true)
		}
		dqRaw := resize(w.t4, R*qw) // t4 (d att) is consumed: reuse it
		clear(dqRaw)
		rmsBackward(dqRaw, G.qNorm, w.dq, s.qRaw, L.qNorm, R*c.Heads, hd, eps)
		dkbRaw := resize(w.t1, R*kw)
		clear(dkbRaw)
		rmsBackward(dkbRaw, G.kNorm, w.dkb, s.kbRaw, L.kNorm, R*c.KVHeads, hd, eps)
		dkcRaw := resize(w.dg, nc*kw)
		clear(dkcRaw)
		rmsBackward(dkcRaw, G.kNorm, w.dkc, s.kcRaw, L.kNorm, nc*c.KVHeads, hd, eps)
		// Projections: block rows into d(xn), context rows into d(ctx).
		dxn := resize(w.t2, R*H)
		L.q.backward(dxn, G.q.W, dqRaw, ain, R)
		L.k.backward(w.t3, G.k.W, dkbRaw, ain, R)
		for i, v := range w.t3 {
			dxn[i] += v
		}
		L.v.backward(w.t3, G.v.W, w.dvb, ain, R)
		for i, v := range w.t3 {
			dxn[i] += v
		}
		w.dc0 = resize(w.dc0, nc*H)
		L.k.backward(w.dc0, G.k.W, dkcRaw, w.ctx, nc)
		for i, v := range w.dc0 {
			w.dctx[i] += v
		}
		L.v.backward(w.dc0, G.v.W, w.dvc, w.ctx, nc)
		for i, v := range w.dc0 {
			w.dctx[i] += v
		}
		if p.d2 != nil {
			dxn = w.d2prepareBack(&p.d2.attn[l], &g.d2.attn[l], dxn, s.xn, s.d2.da, c, R, H)
		}
		rmsBackward(w.dx, G.inNorm, dxn, s.x, L.inNorm, R, H, eps)
	}
	// Context: hidden_norm and fc (the taps are frozen: no input gradient).
	clear(w.dc0)
	rmsBackward(w.dc0, g.hiddenNorm, w.dctx, w.c0, p.hiddenNorm, nc, H, eps)
	outerAdd(g.fc.W, w.dc0, ex.taps, nc, g.fc.N, g.fc.K)
}
