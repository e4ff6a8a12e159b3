package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash2"
)

// DFlash2 training (DFLASH.md section 5): the DFlash backbone with a grouped
// dynamic depthwise convolution on both sides of every attention and MLP sublayer, and the
// low-rank candidate selector over each slot's top-K unary candidates. The DFlash tensors keep
// their place at the front of the flat vectors, so with the same seed a fresh DFlash2 draft holds
// exactly the DFlash draft's backbone, and (identity base kernels, zero projections, zero
// successor codebook) computes exactly its logits.
//
// In a DFlash2 run's progress lines the loss is unary + alpha * selector (per anchor), and acc[k]
// is the fraction of slot-k targets that the selector's top edge picks given the true previous
// token (zero when the target is not among the K candidates): the teacher-forced T = 0 walk.

// ArchDFlash and ArchDFlash2 are the values of DraftConfig.Arch ("" is DFlash).
const (
	ArchDFlash  = "dflash"
	ArchDFlash2 = "dflash2"
)

// isD2 reports whether c trains a DFlash2 draft.
func (c DraftConfig) isD2() bool { return c.Arch == ArchDFlash2 }

// d2Defaults fills the DFlash2 fields (only called for Arch dflash2): 2 taps, groups of 16
// channels (or the largest power of two dividing hidden), rank 64 for hidden <= 256 else 256
// (capped by the vocabulary), 16 candidates (capped by the vocabulary), alpha 1.
func (c *DraftConfig) d2Defaults(t model.Config) {
	if c.ConvKernel <= 0 {
		c.ConvKernel = 2
	}
	if c.ConvGroup <= 0 {
		c.ConvGroup = 16
		for c.ConvGroup > 1 && t.Hidden%c.ConvGroup != 0 {
			c.ConvGroup /= 2
		}
	}
	if c.SelectorRank <= 0 {
		c.SelectorRank = 256
		if t.Hidden <= 256 {
			c.SelectorRank = 64
		}
		c.SelectorRank = min(c.SelectorRank, t.Vocab)
	}
	if c.SelectorTopK <= 0 {
		c.SelectorTopK = min(16, t.Vocab)
	}
	if c.SelectorAlpha <= 0 {
		c.SelectorAlpha = 1
	}
}

// d2Check checks the DFlash2 fields against the target (dflash2.Config.Validate's rules).
func (c DraftConfig) d2Check(t model.Config) error {
	switch {
	case c.ConvKernel > c.BlockSize:
		return fmt.Errorf("draft config: conv kernel %d exceeds block size %d", c.ConvKernel, c.BlockSize)
	case t.Hidden%c.ConvGroup != 0:
		return fmt.Errorf("draft config: conv group %d must divide hidden %d", c.ConvGroup, t.Hidden)
	case c.SelectorTopK > t.Vocab:
		return fmt.Errorf("draft config: selector top-k %d exceeds the vocabulary %d", c.SelectorTopK, t.Vocab)
	}
	return nil
}

// dflash2Config is the model/dflash2 description of a DFlash2 draft.
func (c DraftConfig) dflash2Config(t model.Config) dflash2.Config {
	return dflash2.Config{Config: c.dflashConfig(t), ConvKernel: c.ConvKernel, ConvGroup: c.ConvGroup,
		SelectorRank: c.SelectorRank, SelectorTopK: c.SelectorTopK}
}

// d2Layout appends the DFlash2 tensors (after every DFlash tensor) through add.
func d2Layout(c DraftConfig, hidden int, add func(name string, matrix bool, shape ...int)) {
	k, g := c.ConvKernel, hidden/c.ConvGroup
	for i := 0; i < c.Layers; i++ {
		for _, sub := range []string{"attention_conv", "mlp_conv"} {
			p := fmt.Sprintf("layers.%d.%s.", i, sub)
			// The base kernel is not decayed: its identity init is the no-op, not zero.
			add(p+"base_kernel", false, 2, k, hidden)
			add(p+"kernel_projection.weight", true, 2*k*g, hidden)
		}
	}
	add("candidate_selector.hidden_projection.weight", true, c.SelectorRank, hidden)
	add("candidate_selector.predecessor_codebook", true, c.vocab, c.SelectorRank)
	add("candidate_selector.successor_codebook", true, c.vocab, c.SelectorRank)
}

// d2conv is one sublayer's convolution pair: base_kernel [2][taps][hidden] and
// kernel_projection [2*taps*groups][hidden].
type d2conv struct {
	base []float32
	proj linear
}

// d2net is the DFlash2 part of a net (parameters or gradients).
type d2net struct {
	attn, mlp  []d2conv
	wh         linear    // hidden_projection [rank][hidden]
	pred, succ []float32 // codebooks A, B: [vocab][rank]
	rank       int
}

// bindD2 views the DFlash2 tensors, which start at specs[first].
func bindD2(specs []spec, flat []float32, layers, first int) *d2net {
	at := func(i int) []float32 { s := specs[i]; return flat[s.off : s.off+s.n] }
	lin := func(i int) linear { s := specs[i]; return linear{W: at(i), N: s.shape[0], K: s.shape[1]} }
	d := &d2net{attn: make([]d2conv, layers), mlp: make([]d2conv, layers)}
	for l := 0; l < layers; l++ {
		b := first + 4*l
		d.attn[l] = d2conv{base: at(b), proj: lin(b + 1)}
		d.mlp[l] = d2conv{base: at(b + 2), proj: lin(b + 3)}
	}
	b := first + 4*layers
	d.wh = lin(b)
	d.pred, d.succ = at(b+1), at(b+2)
	d.rank = specs[b].shape[0]
	return d
}

func (d *d2net) refresh() {
	for l := range d.attn {
		d.attn[l].proj.refresh()
		d.mlp[l].proj.refresh()
	}
	d.wh.refresh()
}

// initD2 overwrites the DFlash2 tensors with the published init (SpecForge): identity base
// kernels (tap 0 one, later taps zero) and zero kernel projections, so every convolution is a
// no-op; hidden projection N(0, Init/sqrt(hidden)); predecessor codebook N(0, 0.02); successor
// codebook zero, so every edge score is its unary logit. A fresh DFlash2 draft therefore computes
// DFlash's logits and picks DFlash's greedy tokens.
func initD2(specs []spec, flat []float32, c DraftConfig) {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6466326e6574))
	for _, s := range specs {
		w := flat[s.off : s.off+s.n]
		switch {
		case strings.HasSuffix(s.name, "base_kernel"):
			h := s.shape[2]
			for i := range w {
				w[i] = 0
				if (i/h)%s.shape[1] == 0 {
					w[i] = 1
				}
			}
		case strings.HasSuffix(s.name, "kernel_projection.weight"), strings.HasSuffix(s.name, "successor_codebook"):
			clear(w)
		case strings.HasSuffix(s.name, "hidden_projection.weight"):
			std := c.Init / math.Sqrt(float64(s.shape[1]))
			for i := range w {
				w[i] = float32(rng.NormFloat64() * std)
			}
		case strings.HasSuffix(s.name, "predecessor_codebook"):
			for i := range w {
				w[i] = float32(rng.NormFloat64() * 0.02)
			}
		}
	}
}

// d2state is one layer's DFlash2 activations, kept for the backward pass.
type d2state struct {
	da, xa, ao []float32 // attention: kernel coefficients, convolved normed input, o_proj output
	dm, hc, mo []float32 // MLP: the same
}

// d2work is a worker's DFlash2 scratch.
type d2work struct {
	dy, dxr, dd, tmp []float32
	sel              d2sel
}

// d2sel holds the selector's view of the example in flight.
type d2sel struct {
	ids    []int32   // [anchors][B-1][K] candidate ids per slot (descending unary, lower id on ties)
	scores []float32 // [anchors][B-1][K] edge scores with the true previous token as predecessor
	vals   []float32 // [K] scratch
	wv     []float32 // [B-1][rank] W_h h of the current block's slots
	ds     []float32 // [B-1][K] d(loss*scale)/d(score)
	target []int     // [B] index of the label among the candidates, -1 when absent
	hit    []bool    // [B] the selector's top edge (true predecessor) is the label
	active []bool    // [B] the slot has a selector loss (see d2selectForward)
	soft   []float32 // [B-1][K] the soft targets' probability of each candidate (0: not among them)
	cands  []int32   // [K] 0..K-1: the candidates' own indices, distilCE's ids over the scores
	dw, dh []float32
	aw, ac []float32 // [rank] scratch
}

func (c DraftConfig) convGeom(hidden int) (taps, group, groups, stride int) {
	taps, group = c.ConvKernel, c.ConvGroup
	groups = hidden / group
	return taps, group, groups, 2 * taps * groups
}

// d2prepare computes the sublayer's kernel coefficients from its normed input xn and the
// prepare-side convolution of xn, which is what the sublayer reads instead of xn.
func (w *work) d2prepare(cv *d2conv, delta, out *[]float32, xn []float32, c DraftConfig, rows, hidden int) []float32 {
	taps, group, _, stride := c.convGeom(hidden)
	*delta = resize(*delta, rows*stride)
	*out = resize(*out, rows*hidden)
	cv.proj.forward(*delta, xn, rows)
	dflash2.GroupedConv(*out, xn, *delta, cv.base[:taps*hidden], rows, c.BlockSize, hidden, taps, group, stride)
	return *out
}

// d2finish writes the finish-side convolution of the sublayer output y into out.
func d2finish(cv *d2conv, out, y, delta []float32, c DraftConfig, rows, hidden int) {
	taps, group, groups, stride := c.convGeom(hidden)
	dflash2.GroupedConv(out, y, delta[taps*groups:], cv.base[taps*hidden:], rows, c.BlockSize, hidden, taps, group, stride)
}

// convBackward is the backward of dflash2.GroupedConv (same arguments): it overwrites dx with
// d(x) and adds to dbase ([taps][hidden]) and ddelta (rows at deltaStride, one side's
// taps*groups coefficients each).
func convBackward(dx, dbase, ddelta, dout, x, base, delta []float32, rows, blockLen, hidden, taps, group, deltaStride int) {
	groups := hidden / group
	clear(dx[:rows*hidden])
	for i := 0; i < rows; i++ {
		do := dout[i*hidden : (i+1)*hidden]
		d := delta[i*deltaStride : i*deltaStride+taps*groups]
		dd := ddelta[i*deltaStride : i*deltaStride+taps*groups]
		for t := 0; t < taps && t <= i%blockLen; t++ {
			bt, dbt := base[t*hidden:(t+1)*hidden], dbase[t*hidden:(t+1)*hidden]
			xs, dxs := x[(i-t)*hidden:(i-t+1)*hidden], dx[(i-t)*hidden:(i-t+1)*hidden]
			for g := 0; g < groups; g++ {
				coef := d[t*groups+g]
				var s float32
				for ch := g * group; ch < (g+1)*group; ch++ {
					p := do[ch] * xs[ch]
					s += p
					dbt[ch] += p
					dxs[ch] += (bt[ch] + coef) * do[ch]
				}
				dd[t*groups+g] += s
			}
		}
	}
}

// d2finishBack turns d(residual add) into d(sublayer output), returned in w.d2.dy; it resets
// w.d2.dd to this sublayer's coefficient gradient (finish side) and adds the base gradient.
func (w *work) d2finishBack(cv, gv *d2conv, dout, y, delta []float32, c DraftConfig, rows, hidden int) []float32 {
	taps, group, groups, stride := c.convGeom(hidden)
	w.d2.dy = resize(w.d2.dy, rows*hidden)
	w.d2.dd = resize(w.d2.dd, rows*stride)
	clear(w.d2.dd)
	convBackward(w.d2.dy, gv.base[taps*hidden:], w.d2.dd[taps*groups:], dout, y, cv.base[taps*hidden:], delta[taps*groups:],
		rows, c.BlockSize, hidden, taps, group, stride)
	return w.d2.dy
}

// d2prepareBack turns d(convolved input) into d(normed input), returned in w.d2.dxr: through the
// prepare convolution and through the kernel projection, which gets both sides' coefficient
// gradients (w.d2.dd, finish side filled by d2finishBack).
func (w *work) d2prepareBack(cv, gv *d2conv, dxa, xn, delta []float32, c DraftConfig, rows, hidden int) []float32 {
	taps, group, _, stride := c.convGeom(hidden)
	w.d2.dxr = resize(w.d2.dxr, rows*hidden)
	w.d2.tmp = resize(w.d2.tmp, rows*hidden)
	convBackward(w.d2.dxr, gv.base[:taps*hidden], w.d2.dd, dxa, xn, cv.base[:taps*hidden], delta,
		rows, c.BlockSize, hidden, taps, group, stride)
	cv.proj.backward(w.d2.tmp, gv.proj.W, w.d2.dd, xn, rows)
	for i, v := range w.d2.tmp {
		w.d2.dxr[i] += v
	}
	return w.d2.dxr
}

// d2selectForward scores block i's slots: the top-K unary candidates of each slot's raw logits
// (logits [B-1][V], before the unary loss turns them into probabilities), their edge scores with
// the true previous token as predecessor (the anchor for slot 1), and the selector loss
// alpha * sum_k w_k CE_k / sum_k w_k over the active slots (the others get no selector gradient).
// With the hard loss a slot is active when its label is a candidate and CE_k is the
// cross-entropy of softmax(scores) against it. With a soft term (mix = c.lossMix() > 0, soft
// giving the soft targets of a position) CE_k is (1-mix) times that, when the label is a
// candidate, plus mix times the cross-entropy against the soft targets restricted to the
// candidates and renormalised, when any candidate is among them; a slot with either is active.
// The restriction is what the selector can express: at T > 0 it proposes from
// softmax(scores / T) over its candidates, and since it scores after the true previous token,
// the soft targets are the target's distribution for exactly that edge. With grad it leaves
// d(loss*scale)/d(score) in sel.ds. It returns the block's weighted selector loss (already times
// alpha).
func (w *work) d2selectForward(d *d2net, c DraftConfig, logits, rows []float32, tokens []int, soft func(j int) ([]int32, []float32), a, block int, wk []float32, scale float32, grad bool) float64 {
	B, K, r, V := c.BlockSize, c.SelectorTopK, d.rank, c.vocab
	s := &w.d2.sel
	n := (block + 1) * (B - 1) * K
	if len(s.ids) < n {
		s.ids = append(s.ids, make([]int32, n-len(s.ids))...)
		s.scores = append(s.scores, make([]float32, n-len(s.scores))...)
	}
	s.vals = resize(s.vals, K)
	s.wv = resize(s.wv, (B-1)*r)
	s.ds = resize(s.ds, (B-1)*K)
	s.target = resize(s.target, B)
	s.hit = resize(s.hit, B)
	s.active = resize(s.active, B)
	s.soft = resize(s.soft, (B-1)*K)
	s.aw = resize(s.aw, r)
	mix := c.lossMix()
	if soft == nil {
		mix = 0
	}
	if len(s.cands) != K {
		s.cands = make([]int32, K)
		for j := range s.cands {
			s.cands[j] = int32(j)
		}
	}
	d.wh.forward(s.wv, rows, B-1)
	var wsel float64
	for k := 1; k < B; k++ {
		o := (block*(B-1) + k - 1) * K
		ids, sc := s.ids[o:o+K], s.scores[o:o+K]
		dflash2.TopK(ids, s.vals, logits[(k-1)*V:k*V])
		prev := tokens[a+k-1]
		wv := s.wv[(k-1)*r : k*r]
		ap := d.pred[prev*r : (prev+1)*r]
		for e := range s.aw {
			s.aw[e] = ap[e] * wv[e]
		}
		label := tokens[a+k]
		s.target[k] = -1
		best := 0
		for j, id := range ids {
			bc := d.succ[int(id)*r : (int(id)+1)*r]
			var dot float32
			for e, v := range s.aw {
				dot += v * bc[e]
			}
			sc[j] = s.vals[j] + dot
			if int(id) == label {
				s.target[k] = j
			}
			if sc[j] > sc[best] {
				best = j
			}
		}
		s.hit[k] = s.target[k] >= 0 && best == s.target[k]
		cs := s.soft[(k-1)*K : k*K]
		clear(cs)
		var mass float32
		if mix > 0 {
			sids, sp := soft(a + k)
			for j, id := range ids {
				if e := slices.Index(sids, id); e >= 0 {
					cs[j] = sp[e]
					mass += sp[e]
				}
			}
		}
		s.active[k] = (mix < 1 && s.target[k] >= 0) || (mix > 0 && mass > 0)
		if s.active[k] {
			wsel += float64(wk[k])
		}
	}
	if wsel == 0 {
		clear(s.ds)
		return 0
	}
	var loss float64
	for k := 1; k < B; k++ {
		ds := s.ds[(k-1)*K : k*K]
		t := s.target[k]
		if !s.active[k] {
			clear(ds)
			continue
		}
		sc := s.scores[(block*(B-1)+k-1)*K : (block*(B-1)+k)*K]
		copy(ds, sc)
		f := scale * float32(c.SelectorAlpha) * wk[k] / float32(wsel)
		if mix == 0 {
			loss += float64(wk[k]) * softmaxCE(ds, t)
			for j := range ds {
				ds[j] *= f
			}
			ds[t] -= f
			continue
		}
		// The slot's two weights, each dropped when its target is absent, as distilCE's total
		// and mix over the candidates.
		hw, sw := 1-mix, mix
		if t < 0 {
			hw, t = 0, 0
		}
		cs := s.soft[(k-1)*K : k*K]
		if slices.Max(cs) == 0 {
			sw = 0
		}
		loss += float64(wk[k]) * (hw + sw) * distilCE(ds, t, s.cands, cs, sw/(hw+sw))
		distilGrad(ds, t, s.cands, cs, sw/(hw+sw), f*float32(hw+sw))
	}
	if !grad {
		clear(s.ds)
	}
	return c.SelectorAlpha * loss / wsel
}

// d2selectUnary adds the selector's gradient of slot k (block rows of the last
// d2selectForward) to that slot's unary logit gradient dlg: ds/du[c] = 1.
func (w *work) d2selectUnary(dlg []float32, c DraftConfig, block, k int) {
	s := &w.d2.sel
	K := c.SelectorTopK
	if !s.active[k] {
		return
	}
	n := c.BlockSize - 1
	ids := s.ids[(block*n+k-1)*K : (block*n+k)*K]
	for j, id := range ids {
		dlg[id] += s.ds[(k-1)*K+j]
	}
}

// d2selectBack adds the selector's gradients of block (last d2selectForward) to the codebooks
// and the hidden projection, and d(h) to df (the block's slot rows [B-1][hidden]):
// ds/dB[c] = A[p] * w, ds/dA[p] = w * B[c], ds/dw = A[p] * B[c], w = W_h h.
func (w *work) d2selectBack(d, gd *d2net, c DraftConfig, rows, df []float32, tokens []int, a, block, hidden int) {
	B, K, r := c.BlockSize, c.SelectorTopK, d.rank
	s := &w.d2.sel
	s.dw = resize(s.dw, (B-1)*r)
	s.dh = resize(s.dh, (B-1)*hidden)
	s.aw, s.ac = resize(s.aw, r), resize(s.ac, r)
	clear(s.dw)
	some := false
	for k := 1; k < B; k++ {
		if !s.active[k] {
			continue
		}
		some = true
		prev := tokens[a+k-1]
		wv := s.wv[(k-1)*r : k*r]
		ap := d.pred[prev*r : (prev+1)*r]
		for e := range s.aw {
			s.aw[e] = ap[e] * wv[e]
		}
		clear(s.ac)
		ids := s.ids[(block*(B-1)+k-1)*K : (block*(B-1)+k)*K]
		for j, id := range ids {
			g := s.ds[(k-1)*K+j]
			if g == 0 {
				continue
			}
			kernel.Axpy(s.ac, g, d.succ[int(id)*r:(int(id)+1)*r])
			kernel.Axpy(gd.succ[int(id)*r:(int(id)+1)*r], g, s.aw)
		}
		dap := gd.pred[prev*r : (prev+1)*r]
		dw := s.dw[(k-1)*r : k*r]
		for e, v := range s.ac {
			dap[e] += wv[e] * v
			dw[e] = ap[e] * v
		}
	}
	if !some {
		return
	}
	d.wh.backward(s.dh, gd.wh.W, s.dw, rows, B-1)
	for i, v := range s.dh {
		df[i] += v
	}
}
