package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/model/transformer"
)

// TestConvGrad checks convBackward against finite differences of GroupedConv over several blocks
// (the causal shift must stop at each block start), for x, the base kernel and the coefficients.
func TestConvGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const rows, blockLen, hidden, taps, group = 12, 4, 8, 3, 2
	groups := hidden / group
	stride := 2 * taps * groups
	x := randVec(rng, rows*hidden, 1)
	base := randVec(rng, taps*hidden, 1)
	delta := randVec(rng, rows*stride, 1)
	r := randVec(rng, rows*hidden, 1)
	out := make([]float32, rows*hidden)
	// Side 1 (offset taps*groups inside each row's coefficients), as the finish convolution reads it.
	side := taps * groups
	f := func() float64 {
		dflash2.GroupedConv(out, x, delta[side:], base, rows, blockLen, hidden, taps, group, stride)
		return dot64(out, r)
	}
	dx := make([]float32, rows*hidden)
	dbase := make([]float32, taps*hidden)
	ddelta := make([]float32, rows*stride)
	convBackward(dx, dbase, ddelta[side:], r, x, base, delta[side:], rows, blockLen, hidden, taps, group, stride)
	checkGrad(t, "x", x, dx, f, pick(rng, len(x), 60))
	checkGrad(t, "base", base, dbase, f, pick(rng, len(base), len(base)))
	checkGrad(t, "delta", delta, ddelta, f, pick(rng, len(delta), 80))
	// Row 4 starts a block: nothing of row 3 may reach it, so d(x row 3) comes from row 3 alone.
	for c := 0; c < hidden; c++ {
		want := (base[c] + delta[3*stride+side+c/group]) * r[3*hidden+c]
		if d := dx[3*hidden+c]; math.Abs(float64(d-want)) > 1e-6 {
			t.Fatalf("x[3,%d] gradient %g, want %g from its own row only (block boundary crossed)", c, d, want)
		}
	}
}

// d2Case is draftCase with Arch dflash2 and every DFlash2 tensor moved away from its no-op init,
// so each term of the convolutions and the selector carries gradient.
func d2Case(t *testing.T, block int) (*trainer, *example) {
	tg := tinyTarget(t)
	rng := rand.New(rand.NewPCG(31, 32))
	toks := make([]int, 30)
	for i := range toks {
		toks[i] = rng.IntN(40)
	}
	cfg, err := DraftConfig{Layers: 2, BlockSize: block, Intermediate: 20, Seed: 3, Threads: 1, Arch: ArchDFlash2,
		ConvKernel: 2, ConvGroup: 4, SelectorRank: 6, SelectorTopK: 40, SelectorAlpha: 0.7}.WithDefaults(tg.Config())
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
	for _, s := range tr.specs {
		w := tr.params[s.off : s.off+s.n]
		switch {
		case !s.matrix && !strings.HasSuffix(s.name, "base_kernel"):
			for i := range w {
				w[i] = float32(0.5 + rng.Float64())
			}
		case strings.HasSuffix(s.name, "base_kernel"):
			for i := range w {
				w[i] += float32(0.3 * rng.NormFloat64())
			}
		case strings.Contains(s.name, "kernel_projection"):
			for i := range w {
				w[i] = float32(0.2 * rng.NormFloat64())
			}
		case strings.Contains(s.name, "codebook"):
			for i := range w {
				w[i] = float32(0.7 * rng.NormFloat64())
			}
		}
	}
	tr.p.refresh()
	return tr, &example{tokens: toks, taps: taps, anchors: []int{2, 9, 10, 30 - block}}
}

// checkGradFloor is checkGrad with its step and absolute floor as parameters: the DFlash2 chain
// is more curved (the convolutions multiply activations by activations), so the central
// difference needs a smaller step (3e-3), at which the float32 loss's rounding noise and the
// step's h^2 truncation term each reach a few 1e-4 in the quotient. The floor must keep errors
// of that size from failing gradients that small: with the 3% tolerance, a floor of 3e-2 allows
// about 1e-3 absolute. (A floor of 1e-2 allowed 3e-4: on the AVX2 path a norm weight whose
// gradient is 0.0039 read 0.0042 at h = 3e-3 and 0.003859 at h = 1e-3.)
func checkGradFloor(t *testing.T, name string, x, grad []float32, f func() float64, idx []int, eps float32, floor float64) {
	t.Helper()
	var worst float64
	for _, i := range idx {
		old := x[i]
		x[i] = old + eps
		lp := f()
		x[i] = old - eps
		lm := f()
		x[i] = old
		num := (lp - lm) / (2 * float64(eps))
		an := float64(grad[i])
		err := math.Abs(num-an) / math.Max(math.Abs(num)+math.Abs(an), floor)
		worst = max(worst, err)
		if err > 3e-2 {
			t.Errorf("%s[%d]: analytic %.6g, numeric %.6g (rel err %.3g)", name, i, an, num, err)
		}
	}
	t.Logf("%s: worst relative error %.3g over %d coordinates", name, worst, len(idx))
}

// TestSelectorGrad checks the selector loss alone against finite differences with K < vocab:
// unary logits spaced 0.5 apart so a perturbation of 1e-2 never changes the candidate set, and
// labels chosen so odd slots' targets are candidates (index 1) and even slots' are not (the
// lowest logit), which must get no selector gradient at all.
func TestSelectorGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	const B, V, H, r, K, a = 5, 30, 6, 4, 6, 3
	c := DraftConfig{BlockSize: B, SelectorTopK: K, SelectorRank: r, SelectorAlpha: 1.3, vocab: V}
	d := &d2net{wh: linear{W: randVec(rng, r*H, 0.5), N: r, K: H}, pred: randVec(rng, V*r, 1), succ: randVec(rng, V*r, 1), rank: r}
	gd := &d2net{wh: linear{W: make([]float32, r*H), N: r, K: H}, pred: make([]float32, V*r), succ: make([]float32, V*r), rank: r}
	rows := randVec(rng, (B-1)*H, 1)
	logits := make([]float32, (B-1)*V)
	tokens := make([]int, a+B)
	for i := range tokens {
		tokens[i] = rng.IntN(V)
	}
	for k := 1; k < B; k++ {
		perm := rng.Perm(V) // perm[j] gets the j-th largest logit
		for j, id := range perm {
			logits[(k-1)*V+id] = float32(V-j) * 0.5
		}
		if k%2 == 1 {
			tokens[a+k] = perm[1]
		} else {
			tokens[a+k] = perm[V-1]
		}
	}
	wk, _ := weights(B, 2)
	var w work
	f := func() float64 {
		d.wh.refresh()
		return w.d2selectForward(d, c, logits, rows, tokens, nil, a, 0, wk, 1, false)
	}
	f()
	w.d2selectForward(d, c, logits, rows, tokens, nil, a, 0, wk, 1, true)
	dlog := make([]float32, (B-1)*V)
	for k := 1; k < B; k++ {
		w.d2selectUnary(dlog[(k-1)*V:k*V], c, 0, k)
		if k%2 == 0 {
			for _, v := range w.d2.sel.ds[(k-1)*K : k*K] {
				if v != 0 {
					t.Fatalf("slot %d: target not a candidate but score gradient %g", k, v)
				}
			}
		}
	}
	dh := make([]float32, (B-1)*H)
	w.d2selectBack(d, gd, c, rows, dh, tokens, a, 0, H)
	checkGrad(t, "unary", logits, dlog, f, pick(rng, len(logits), 60))
	checkGrad(t, "h", rows, dh, f, pick(rng, len(rows), len(rows)))
	checkGrad(t, "W_h", d.wh.W, gd.wh.W, f, pick(rng, r*H, r*H))
	var idxA, idxB []int
	for i := range gd.pred {
		if gd.pred[i] != 0 {
			idxA = append(idxA, i)
		}
		if gd.succ[i] != 0 {
			idxB = append(idxB, i)
		}
	}
	if len(idxA) == 0 || len(idxB) == 0 {
		t.Fatal("no codebook gradient")
	}
	checkGrad(t, "A", d.pred, gd.pred, f, idxA)
	checkGrad(t, "B", d.succ, gd.succ, f, idxB)
	// Every other coordinate has zero gradient: spot-check a few rows of B no candidate uses.
	checkGrad(t, "B (all)", d.succ, gd.succ, f, pick(rng, len(d.succ), 40))
}

// TestDFlash2DraftGrad checks the whole DFlash2 draft (backbone, both convolutions of every
// sublayer, unary CE and selector CE) against finite differences, per tensor.
func TestDFlash2DraftGrad(t *testing.T) {
	for _, block := range []int{4, 8} {
		tr, ex := d2Case(t, block)
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
		rng := rand.New(rand.NewPCG(33, uint64(block)))
		for _, s := range tr.specs {
			idx := pick(rng, s.n, 8)
			if strings.HasSuffix(s.name, "_codebook") {
				// Only rows of tokens that were predecessors / candidates get gradient: test those.
				idx = idx[:0]
				for _, e := range pick(rng, s.n, s.n) {
					if grad[s.off+e] != 0 && len(idx) < 10 {
						idx = append(idx, e)
					}
				}
				if len(idx) == 0 {
					t.Fatalf("%s: no gradient at all", s.name)
				}
			}
			for j := range idx {
				idx[j] += s.off
			}
			checkGradFloor(t, s.name, tr.params, grad, f, idx, 3e-3, 3e-2)
		}
	}
}

// TestDFlash2FreshIsDFlash: with the published init a DFlash2 draft holds the DFlash draft's
// backbone (same seed) and gives the same loss on the unary part: the selector's scores equal
// the unary logits, so the total is unary + alpha * CE over the top-K of the same logits.
func TestDFlash2FreshIsDFlash(t *testing.T) {
	tg := tinyTarget(t)
	data := randomData(4, 40, 40, 5)
	base := DraftConfig{Layers: 2, BlockSize: 4, Seed: 9, Threads: 1}
	c1, err := base.WithDefaults(tg.Config())
	if err != nil {
		t.Fatal(err)
	}
	d2 := base
	d2.Arch = ArchDFlash2
	c2, err := d2.WithDefaults(tg.Config())
	if err != nil {
		t.Fatal(err)
	}
	t1, err := newTrainer(tg, c1, data)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := newTrainer(tg, c2, data)
	if err != nil {
		t.Fatal(err)
	}
	if !equalF32(t1.params, t2.params[:len(t1.params)]) {
		t.Fatal("DFlash2's backbone is not DFlash's with the same seed")
	}
	ex := t1.batch(0)[0]
	taps, err := t1.tapsOf(ex.seq, ex.tokens)
	if err != nil {
		t.Fatal(err)
	}
	ex.taps = taps
	var s1, s2 stats
	s1.reset(4)
	s2.reset(4)
	t1.workers[0].w.step(t1.p, nil, t1.fz, c1, t1.rp, &ex, 1, &s1, nil)
	t2.workers[0].w.step(t2.p, nil, t2.fz, c2, t2.rp, &ex, 1, &s2, nil)
	l1 := append([]float32(nil), t1.workers[0].w.logits...)
	if !equalF32(l1, t2.workers[0].w.logits) {
		t.Fatal("a fresh DFlash2 draft's unary probabilities differ from DFlash's")
	}
	// With a zero successor codebook every edge score is its unary logit, so each slot's scores
	// come out in the candidates' (descending) order.
	sel := &t2.workers[0].w.d2.sel
	K := c2.SelectorTopK
	for j := 1; j < 3*K; j++ {
		if j%K != 0 && sel.scores[j] > sel.scores[j-1] {
			t.Fatalf("fresh selector scores not the descending unary logits: %v", sel.scores[:3*K])
		}
	}
	if s2.loss < s1.loss {
		t.Errorf("DFlash2 total loss %g below the unary-only loss %g (the selector term is non-negative)", s2.loss, s1.loss)
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestDFlash2MatchesInference writes a DFlash2 draft with non-trivial convolutions and selector
// and checks that the training forward's candidates and edge scores (with the true previous
// token as predecessor) are model/dflash2's Walk on the loaded folder.
func TestDFlash2MatchesInference(t *testing.T) {
	tg, err := transformer.LoadLlama2C(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	toks := make([]int, 60)
	toks[0] = 1
	for i := 1; i < len(toks); i++ {
		toks[i] = 3 + rng.IntN(500)
	}
	cfg, err := DraftConfig{Layers: 2, BlockSize: 8, Seed: 5, Init: 3, Arch: ArchDFlash2}.WithDefaults(tg.Config())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := newTrainer(tg, cfg, &Data{Sequences: []Sequence{{Tokens: toks, Start: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range tr.specs {
		w := tr.params[s.off : s.off+s.n]
		switch {
		case strings.HasSuffix(s.name, "base_kernel"):
			for i := range w {
				w[i] += float32(0.2 * rng.NormFloat64())
			}
		case strings.Contains(s.name, "kernel_projection"), strings.Contains(s.name, "codebook"):
			for i := range w {
				w[i] = float32(0.3 * rng.NormFloat64())
			}
		case !s.matrix:
			for i := range w {
				w[i] = float32(0.7 + 0.6*rng.Float64())
			}
		}
	}
	tr.p.refresh()
	dir := t.TempDir()
	if err := writeDraft(dir, cfg, tg.Config(), tr.specs, tr.params); err != nil {
		t.Fatal(err)
	}
	d, err := dflash2.Load(dir, tg, dflash2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	taps, err := tr.tapsOf(0, toks)
	if err != nil {
		t.Fatal(err)
	}
	const a = 37
	B, K := cfg.BlockSize, cfg.SelectorTopK
	w := tr.workers[0]
	var st stats
	st.reset(B)
	w.w.step(tr.p, nil, tr.fz, cfg, tr.rp, &example{tokens: toks, taps: taps, anchors: []int{a}}, 1, &st, nil)
	block := []int{toks[a]}
	for range B - 1 {
		block = append(block, cfg.MaskID)
	}
	c := d.NewCache(a + B)
	walk, err := d.Forward(c, taps[:a*len(cfg.Taps)*64], a, block)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for k := 1; k < B; k++ {
		ids, scores := walk.Candidates(k, toks[a+k-1], nil, nil)
		mine := w.w.d2.sel.ids[(k-1)*K : k*K]
		ms := w.w.d2.sel.scores[(k-1)*K : k*K]
		if len(ids) != K {
			t.Fatalf("slot %d: %d candidates from the walk, want %d", k, len(ids), K)
		}
		for j := range ids {
			if ids[j] != mine[j] {
				// A near-tie can legitimately reorder under different summation orders.
				if math.Abs(float64(ms[j]-scores[j])) > 1e-4 {
					t.Fatalf("slot %d candidate %d: training %d, inference %d", k, j, mine[j], ids[j])
				}
				continue
			}
			worst = max(worst, math.Abs(float64(ms[j]-scores[j])))
		}
	}
	t.Logf("max |score difference| %.3g", worst)
	if worst > 1e-4 {
		t.Errorf("training and inference edge scores differ by up to %.3g", worst)
	}
}

// TestDFlash2Resume: an interrupted and resumed DFlash2 run ends with bitwise the weights of an
// uninterrupted one, and the written folder loads through model/dflash2.
func TestDFlash2Resume(t *testing.T) {
	tg := tinyTarget(t)
	data := randomData(12, 40, 40, 5)
	cfg := DraftConfig{Layers: 2, BlockSize: 4, Steps: 10, BatchSeqs: 3, AnchorsPerSeq: 5, Seed: 9,
		Threads: 2, ProgressEvery: 1, CheckpointEvery: 4, Arch: ArchDFlash2, SelectorTopK: 8, SelectorRank: 8}
	full := t.TempDir()
	if _, err := TrainDraft(context.Background(), tg, data, cfg, full, nil); err != nil {
		t.Fatal(err)
	}
	part := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := TrainDraft(ctx, tg, data, cfg, part, &cancelAt{n: "6", cancel: cancel}); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: err %v, want context.Canceled", err)
	}
	res, err := TrainDraft(context.Background(), tg, data, cfg, part, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 6 {
		t.Errorf("resumed at %d, want 6", res.Resumed)
	}
	a, _ := os.ReadFile(filepath.Join(full, "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(part, "model.safetensors"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("resumed DFlash2 run's weights differ from the uninterrupted run's")
	}
	if ok, err := dflash2.IsDraft(full); err != nil || !ok {
		t.Errorf("written folder is not a DFlash2 draft: %v %v", ok, err)
	}
	if _, err := dflash2.Load(full, tg, dflash2.Options{}); err != nil {
		t.Errorf("load the written DFlash2 draft: %v", err)
	}
	// The DFlash reader must refuse it rather than drop the convolutions and the selector.
	if _, err := LoadDraft(full, tg); err == nil || !strings.Contains(err.Error(), "DFlash2") {
		t.Errorf("LoadDraft of a DFlash2 folder: err %v, want a refusal naming DFlash2", err)
	}
}

// TestDFlash2Defaults: the DFlash2 fields default from the target (tiny target: hidden 16, vocab
// 40) and are checked against it; DFlash configs carry none of them.
func TestDFlash2Defaults(t *testing.T) {
	tc := tinyTarget(t).Config()
	for _, tt := range []struct {
		name                   string
		in                     DraftConfig
		kernel, group, rank, k int
		alpha                  float64
		err                    string
	}{
		// 16 divides hidden 16; rank 64 capped by vocab 40; 16 candidates <= 40.
		{name: "defaults", in: DraftConfig{Arch: ArchDFlash2}, kernel: 2, group: 16, rank: 40, k: 16, alpha: 1},
		{name: "explicit", in: DraftConfig{Arch: ArchDFlash2, ConvKernel: 3, ConvGroup: 4, SelectorRank: 8, SelectorTopK: 5, SelectorAlpha: 0.5},
			kernel: 3, group: 4, rank: 8, k: 5, alpha: 0.5},
		{name: "dflash", in: DraftConfig{Arch: ArchDFlash}},
		{name: "group not dividing hidden", in: DraftConfig{Arch: ArchDFlash2, ConvGroup: 5}, err: "conv group"},
		{name: "too many candidates", in: DraftConfig{Arch: ArchDFlash2, SelectorTopK: 41}, err: "top-k"},
		{name: "kernel longer than the block", in: DraftConfig{Arch: ArchDFlash2, BlockSize: 4, ConvKernel: 5}, err: "conv kernel"},
		{name: "unknown arch", in: DraftConfig{Arch: "eagle"}, err: "arch"},
	} {
		c, err := tt.in.WithDefaults(tc)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want one mentioning %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.ConvKernel != tt.kernel || c.ConvGroup != tt.group || c.SelectorRank != tt.rank || c.SelectorTopK != tt.k || c.SelectorAlpha != tt.alpha {
			t.Errorf("%s: kernel %d group %d rank %d top-k %d alpha %g; want %d %d %d %d %g", tt.name,
				c.ConvKernel, c.ConvGroup, c.SelectorRank, c.SelectorTopK, c.SelectorAlpha, tt.kernel, tt.group, tt.rank, tt.k, tt.alpha)
		}
		if tt.in.Arch == ArchDFlash && c.Arch != "" {
			t.Errorf("%s: arch %q, want the empty spelling so DFlash checkpoints keep their identity", tt.name, c.Arch)
		}
	}
}

// BenchmarkStepDFlash2 is BenchmarkStep's step (stories260K's shape, 2 layers, B = 16, 8 x 16
// anchors) for a DFlash2 draft, for the cost of the convolutions and the selector next to it.
func BenchmarkStepDFlash2(b *testing.B) {
	tg, err := transformer.Synthetic(model.Config{
		Arch: transformer.ArchLlama, Layers: 5, Hidden: 64, Intermediate: 172, Heads: 8, KVHeads: 4,
		HeadDim: 8, Vocab: 512, MaxSeq: 512, RMSEps: 1e-5, RopeTheta: 10000, BOS: 1, EOS: []int{2},
	}, 1)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := DraftConfig{Layers: 2, BlockSize: 16, Seed: 1, Arch: ArchDFlash2}.WithDefaults(tg.Config())
	if err != nil {
		b.Fatal(err)
	}
	tr, err := newTrainer(tg, cfg, randomData(64, 200, 512, 1))
	if err != nil {
		b.Fatal(err)
	}
	var st stats
	st.reset(cfg.BlockSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := tr.step(i%8, &st); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*cfg.BatchSeqs*cfg.AnchorsPerSeq*(cfg.BlockSize-1))/b.Elapsed().Seconds(), "tok/s")
}
