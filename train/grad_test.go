package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// tinyTarget is a random Qwen3-style target small enough for finite differences.
func tinyTarget(t testing.TB) model.Target {
	t.Helper()
	m, err := transformer.Synthetic(model.Config{
		Arch: transformer.ArchQwen3, Layers: 4, Hidden: 16, Intermediate: 24, Heads: 4, KVHeads: 2,
		HeadDim: 4, Vocab: 40, MaxSeq: 128, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1, EOS: []int{39},
	}, 7)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randVec(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

// checkGrad compares analytic gradients with central differences of f over the listed
// coordinates of x. f returns the loss in float64 from a float32 computation, so eps is large
// (1e-2) and the comparison relative with an absolute floor for near-zero gradients.
func checkGrad(t *testing.T, name string, x []float32, grad []float32, f func() float64, idx []int) {
	t.Helper()
	const eps = 1e-2
	var worst float64
	for _, i := range idx {
		old := x[i]
		x[i] = old + eps
		lp := f()
		x[i] = old - eps
		lm := f()
		x[i] = old
		num := (lp - lm) / (2 * eps)
		an := float64(grad[i])
		err := math.Abs(num-an) / math.Max(math.Abs(num)+math.Abs(an), 1e-3)
		worst = max(worst, err)
		if err > 3e-2 {
			t.Errorf("%s[%d]: analytic %.6g, numeric %.6g (rel err %.3g)", name, i, an, num, err)
		}
	}
	t.Logf("%s: worst relative error %.3g over %d coordinates", name, worst, len(idx))
}

func pick(rng *rand.Rand, n, k int) []int {
	if n <= k {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return rng.Perm(n)[:k]
}

// dot64 is the projection loss sum(y*r) used to test one layer: its gradient wrt y is r.
func dot64(y, r []float32) float64 {
	var s float64
	for i := range y {
		s += float64(y[i]) * float64(r[i])
	}
	return s
}

func TestLinearGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, n, k = 37, 19, 23 // rows > chunk, N not a multiple of 4 or the kernel panel
	l := linear{W: randVec(rng, n*k, 0.5), N: n, K: k}
	x := randVec(rng, rows*k, 1)
	r := randVec(rng, rows*n, 1)
	y := make([]float32, rows*n)
	f := func() float64 { l.refresh(); l.forward(y, x, rows); return dot64(y, r) }
	f()
	dW := make([]float32, n*k)
	dx := make([]float32, rows*k)
	l.backward(dx, dW, r, x, rows)
	checkGrad(t, "W", l.W, dW, f, pick(rng, n*k, 60))
	checkGrad(t, "x", x, dx, f, pick(rng, rows*k, 60))
}

func TestRMSNormGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, w = 5, 12
	x := randVec(rng, rows*w, 1)
	g := randVec(rng, w, 0.5)
	r := randVec(rng, rows*w, 1)
	y := make([]float32, rows*w)
	f := func() float64 { rmsForward(y, x, g, rows, w, 1e-5); return dot64(y, r) }
	dx := make([]float32, rows*w)
	dg := make([]float32, w)
	rmsBackward(dx, dg, r, x, g, rows, w, 1e-5)
	checkGrad(t, "x", x, dx, f, pick(rng, rows*w, 60))
	checkGrad(t, "w", g, dg, f, pick(rng, w, w))
}

func TestRoPEGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rp := newRope(8, 10000, 64)
	const heads = 3
	x := randVec(rng, heads*8, 1)
	r := randVec(rng, heads*8, 1)
	y := make([]float32, heads*8)
	f := func() float64 { copy(y, x); rp.apply(y, heads, 41, false); return dot64(y, r) }
	dx := append([]float32(nil), r...)
	rp.apply(dx, heads, 41, true)
	checkGrad(t, "x", x, dx, f, pick(rng, heads*8, heads*8))
}

func TestSwiGLUGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 40
	g, u, r := randVec(rng, n, 2), randVec(rng, n, 1), randVec(rng, n, 1)
	y := make([]float32, n)
	f := func() float64 { swigluForward(y, g, u); return dot64(y, r) }
	dg, du := make([]float32, n), make([]float32, n)
	swigluBackward(dg, du, r, g, u)
	checkGrad(t, "gate", g, dg, f, pick(rng, n, n))
	checkGrad(t, "up", u, du, f, pick(rng, n, n))
}

func TestWeightedCEGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const v = 30
	logits := randVec(rng, v, 2)
	buf := make([]float32, v)
	f := func() float64 { copy(buf, logits); return 0.37 * softmaxCE(buf, 11) }
	copy(buf, logits)
	softmaxCE(buf, 11)
	d := make([]float32, v)
	for i, p := range buf {
		d[i] = 0.37 * p
	}
	d[11] -= 0.37
	checkGrad(t, "logits", logits, d, f, pick(rng, v, v))
}

// draftCase builds a tiny draft on a tiny target with one example of several anchors.
func draftCase(t *testing.T, block int) (*trainer, *example) {
	tg := tinyTarget(t)
	rng := rand.New(rand.NewPCG(11, 12))
	toks := make([]int, 30)
	for i := range toks {
		toks[i] = rng.IntN(40)
	}
	cfg, err := DraftConfig{Layers: 2, BlockSize: block, Intermediate: 20, Seed: 3, Threads: 1}.WithDefaults(tg.Config())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := newTrainer(tg, cfg, &Data{Sequences: []Sequence{{Tokens: toks, Start: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	taps, err := tr.tapsOf(0, toks)
	if err != nil {
		t.Fatal(err)
	}
	// Bigger norm weights than one exercise the norm gradients away from their init.
	for _, s := range tr.specs {
		if !s.matrix {
			for i := s.off; i < s.off+s.n; i++ {
				tr.params[i] = float32(0.5 + rng.Float64())
			}
		}
	}
	tr.p.refresh()
	return tr, &example{tokens: toks, taps: taps, anchors: []int{2, 9, 10, 30 - block}}
}

// TestDraftGrad checks the whole draft (fc + hidden_norm, every layer, context and block
// attention, final norm, frozen head, weighted CE) against finite differences, per tensor.
func TestDraftGrad(t *testing.T) {
	for _, block := range []int{4, 8} {
		tr, ex := draftCase(t, block)
		w := tr.workers[0]
		var st stats
		f := func() float64 {
			tr.p.refresh()
			st.reset(block)
			w.w.step(tr.p, nil, tr.fz, tr.cfg, tr.rp, ex, 1, &st, nil)
			return st.loss
		}
		clear(w.grad)
		st.reset(block)
		w.w.step(tr.p, w.g, tr.fz, tr.cfg, tr.rp, ex, 1, &st, nil)
		grad := append([]float32(nil), w.grad...)
		rng := rand.New(rand.NewPCG(13, uint64(block)))
		for _, s := range tr.specs {
			idx := pick(rng, s.n, 8)
			for j := range idx {
				idx[j] += s.off
			}
			checkGrad(t, s.name, tr.params, grad, f, idx)
		}
	}
}

// TestAttentionGrad checks the block attention alone: several blocks reading different
// prefixes of shared context keys/values, bidirectional inside each block, grouped kv heads.
func TestAttentionGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	c := DraftConfig{BlockSize: 4, Heads: 4, KVHeads: 2, HeadDim: 6}
	anchors := []int{1, 5, 6, 9}
	nc := 9
	R := len(anchors) * c.BlockSize
	qw, kw := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	s := &layerState{qr: randVec(rng, R*qw, 1), kbr: randVec(rng, R*kw, 1), vb: randVec(rng, R*kw, 1),
		kcr: randVec(rng, nc*kw, 1), vc: randVec(rng, nc*kw, 1), att: make([]float32, R*qw)}
	r := randVec(rng, R*qw, 1)
	var w work
	f := func() float64 { w.attnForward(s, c, anchors, nc); return dot64(s.att, r) }
	f()
	w.dq, w.dkb, w.dvb = make([]float32, R*qw), make([]float32, R*kw), make([]float32, R*kw)
	w.dkc, w.dvc = make([]float32, nc*kw), make([]float32, nc*kw)
	w.attnBackward(s, c, anchors, nc, r)
	for _, x := range []struct {
		name    string
		v, grad []float32
	}{{"q", s.qr, w.dq}, {"block k", s.kbr, w.dkb}, {"block v", s.vb, w.dvb}, {"ctx k", s.kcr, w.dkc}, {"ctx v", s.vc, w.dvc}} {
		checkGrad(t, x.name, x.v, append([]float32(nil), x.grad...), f, pick(rng, len(x.v), 40))
	}
	// Context row 8 is visible only to the block anchored at 9: its key gradient from the
	// other blocks must be exactly zero, so with that block's output weight removed it is zero.
	for i := range r[3*c.BlockSize*qw:] {
		r[3*c.BlockSize*qw+i] = 0
	}
	w.attnBackward(s, c, anchors, nc, r)
	for e := 0; e < kw; e++ {
		if w.dkc[8*kw+e] != 0 || w.dvc[8*kw+e] != 0 {
			t.Fatalf("context row 8 got a gradient from blocks anchored before it")
		}
	}
}

// TestContextGrad checks fc followed by hidden_norm, the context feature path.
func TestContextGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const rows, h, taps = 7, 8, 3
	fc := linear{W: randVec(rng, h*taps*h, 0.3), N: h, K: taps * h}
	norm := randVec(rng, h, 1)
	x := randVec(rng, rows*taps*h, 1)
	r := randVec(rng, rows*h, 1)
	c0, ctx := make([]float32, rows*h), make([]float32, rows*h)
	f := func() float64 {
		fc.refresh()
		fc.forward(c0, x, rows)
		rmsForward(ctx, c0, norm, rows, h, 1e-6)
		return dot64(ctx, r)
	}
	f()
	dc0 := make([]float32, rows*h)
	dnorm := make([]float32, h)
	dW := make([]float32, len(fc.W))
	rmsBackward(dc0, dnorm, r, c0, norm, rows, h, 1e-6)
	fc.backward(nil, dW, dc0, x, rows)
	checkGrad(t, "fc", fc.W, dW, f, pick(rng, len(fc.W), 60))
	checkGrad(t, "hidden_norm", norm, dnorm, f, pick(rng, h, h))
}
