package runner

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner/internal/fake"
	"github.com/dflash/dflash/sample"
)

// scriptSelector is a model.BlockSelector whose cache bookkeeping is fake.Draft's (so context
// and block rows are recorded and checked) and whose Walk is a script: edges(slot, prev) gives
// the slot's candidates and scores.
type scriptSelector struct {
	*fake.Draft
	edges func(slot, prev int) ([]int32, []float32)
	rows  []int // block rows of every forward with a block
}

func (s *scriptSelector) Forward(c cache.Cache, ctx []float32, ctxRows int, block []int) (model.Walk, error) {
	if _, err := s.Draft.Forward(c, ctx, ctxRows, block); err != nil {
		return nil, err
	}
	if block == nil {
		return nil, nil
	}
	s.rows = append(s.rows, len(block))
	return scriptWalk{s.edges, len(block) - 1}, nil
}

type scriptWalk struct {
	edges func(slot, prev int) ([]int32, []float32)
	slots int
}

func (w scriptWalk) Candidates(slot, prev int, ids []int32, scores []float32) ([]int32, []float32) {
	if slot < 1 || slot > w.slots {
		return ids, scores
	}
	i, s := w.edges(slot, prev)
	return append(ids, i...), append(scores, s...)
}

// preferTwo: candidates are always [1, 2, 3] in unary order (unary logits 2, 1, 0), but the
// learned transition term lifts token 2 by 3 after anything but 2, and token 3 by 5 after 2.
// So the greedy walk from anchor 0 is 2, 3, 2, 3... while the unary winner is always 1.
func preferTwo(slot, prev int) ([]int32, []float32) {
	if prev == 2 {
		return []int32{1, 2, 3}, []float32{2, 1, 5}
	}
	return []int32{1, 2, 3}, []float32{2, 4, 0}
}

func newScriptSession(block int, edges func(slot, prev int) ([]int32, []float32)) (*SelectorSession, *scriptSelector) {
	sel := &scriptSelector{Draft: &fake.Draft{Block: block, Mask: 4, Layers: []int{0}, Vocab: 5}, edges: edges}
	return NewSelectorSession(sel, 64), sel
}

// commitRows reports rows rows of one tap (fake.Hidden wide) at position 0.
func commitRows(t *testing.T, s Session, rows int) {
	t.Helper()
	taps := make([]float32, rows*fake.Hidden)
	for r := range rows {
		taps[r*fake.Hidden] = float32(r)
	}
	if err := s.Committed(make([]int, rows), [][]float32{taps}, 0); err != nil {
		t.Fatal(err)
	}
}

func softmax(xs []float32, temp float64) []float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, float64(x))
	}
	out := make([]float64, len(xs))
	var sum float64
	for i, x := range xs {
		out[i] = math.Exp((float64(x) - m) / temp)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// TestSelectorFollowsScores: at T = 0 the proposal follows the selector's scores, not the unary
// winner; at T = 1 each slot's q is softmax(scores) over the candidates given the token drawn
// before it; verification against a target that accepts one token emits that token.
func TestSelectorFollowsScores(t *testing.T) {
	s, sel := newScriptSession(4, preferTwo)
	if s.Limit() != 3 {
		t.Fatalf("block 4: Limit %d, want B-1 = 3", s.Limit())
	}
	if n, ok := NewSelectorDrafter(sel).Depth().IsFixed(); !ok || n != 3 {
		t.Fatalf("block 4: default policy %v, want fixed min(SelectorDepth, B-1) = 3", NewSelectorDrafter(sel).Depth())
	}
	commitRows(t, s, 2)
	greedy := NewSampler(sample.Options{}, 5)
	d, q, err := s.Propose(0, 3, []int{0}, greedy)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d, []int{2, 3, 2}) {
		t.Fatalf("greedy walk %v, want [2 3 2] (the selector's path; the unary winner is 1)", d)
	}
	for i := range d {
		if q[i].Len() != 1 || q[i].Prob(d[i]) != 1 {
			t.Fatalf("greedy q[%d] = %+v, want one-hot on %d", i, q[i], d[i])
		}
	}
	if !slices.Equal(sel.rows, []int{4}) {
		t.Fatalf("draft forwards had block rows %v, want one full block of 4", sel.rows)
	}

	// Propose asks the walk for fewer slots but still runs the full block.
	if d, _, err = s.Propose(1, 1, []int{1}, greedy); err != nil || !slices.Equal(d, []int{2}) {
		t.Fatalf("one draft: %v, %v; want [2]", d, err)
	}
	if !slices.Equal(sel.rows, []int{4, 4}) {
		t.Fatalf("draft forwards had block rows %v, want full blocks of 4", sel.rows)
	}

	hot := NewSampler(sample.Options{Temperature: 1, TopK: 1, Seed: 3}, 5) // top-k must not touch q
	for round := range 50 {
		d, q, err := s.Propose(0, 3, []int{0}, hot)
		if err != nil {
			t.Fatal(err)
		}
		prev := 0
		for i := range d {
			ids, scores := preferTwo(i+1, prev)
			want := softmax(scores, 1)
			if q[i].Len() != len(ids) {
				t.Fatalf("round %d slot %d: q has %d entries, want %d", round, i+1, q[i].Len(), len(ids))
			}
			for j, id := range ids {
				if got := float64(q[i].Prob(int(id))); math.Abs(got-want[j]) > 1e-6 {
					t.Fatalf("round %d slot %d: q(%d) = %v, want softmax %v", round, i+1, id, got, want[j])
				}
			}
			for j := 1; j < q[i].Len(); j++ {
				if q[i].P[j] > q[i].P[j-1] {
					t.Fatalf("q not sorted by descending probability: %+v", q[i])
				}
			}
			prev = d[i]
		}
	}

	// A target sure of one token: the round's first emitted token is always it, whether the
	// selector offered it (1), preferred it (2) or never had it as a candidate (4).
	for _, sure := range []int{1, 2, 4} {
		logits := make([]float32, 4*5)
		for i := range logits {
			if i%5 != sure {
				logits[i] = -1e4
			}
		}
		v := verifier{s: NewSampler(sample.Options{Temperature: 1, Seed: 9}, 5)}
		accepted := 0
		// Draws are keyed by position, so each round decides a later position (a longer history
		// of the current token; no penalty reads it) to draw afresh.
		hist := []int{0}
		for range 200 {
			d, q, err := s.Propose(0, 3, hist, hot)
			if err != nil {
				t.Fatal(err)
			}
			out, acc := v.decide(logits, 5, d, q, hist, nil, nil, 0)
			hist = append(hist, 0)
			if out[0] != sure {
				t.Fatalf("target sure of %d: round emitted %v from drafts %v", sure, out, d)
			}
			if acc > 0 {
				accepted++
			}
		}
		if sure == 4 && accepted != 0 {
			t.Fatalf("token 4 is never a candidate, yet %d rounds accepted a draft", accepted)
		}
		if sure != 4 && accepted == 0 {
			t.Fatalf("token %d is a candidate, yet no round accepted it", sure)
		}
	}
}

// depthRecorder records the n of every Propose and the number of tokens emitted before it.
type depthRecorder struct {
	Session
	prompt  int
	ns      []int
	emitted []int
}

func (r *depthRecorder) Propose(current, n int, history []int, s Sampler) ([]int, []sample.Distribution, error) {
	r.ns = append(r.ns, n)
	r.emitted = append(r.emitted, len(history)-r.prompt)
	return r.Session.Propose(current, n, history, s)
}

// hashEdges proposes pseudo-random candidates, so rounds accept varying numbers of drafts.
func hashEdges(vocab int) func(slot, prev int) ([]int32, []float32) {
	return func(slot, prev int) ([]int32, []float32) {
		ids := make([]int32, vocab)
		sc := make([]float32, vocab)
		for i := range ids {
			h := uint64(slot*131+prev*17+i*7919) * 0x9e3779b97f4a7c15
			ids[i], sc[i] = int32(i), float32(h>>40)/float32(1<<24)*3
		}
		return ids, sc
	}
}

// TestSelectorFixedDepth: a selector drafter's default policy asks for depth 7 every round
// (unless the request's remaining length caps it) whatever the rounds accept, and leaves an
// adaptive controller's statistics untouched; the same selector wrapped in that adaptive policy
// then follows and trains it. Depth is the policy's, not the drafter's.
func TestSelectorFixedDepth(t *testing.T) {
	target := &fake.Target{Vocab: 5, Layers: 2, Seed: 4}
	prompt := []int{1, 2, 3, 4, 0}
	const maxTokens = 60
	ctl := &Controller{}
	sel := &scriptSelector{Draft: &fake.Draft{Block: 10, Mask: 4, Layers: []int{0, 1}, Vocab: 5}, edges: hashEdges(5)}
	dr := NewSelectorDrafter(sel)
	rec := &depthRecorder{Session: dr.Open(256), prompt: len(prompt)}
	seq := NewSequence(target, 256)
	st, err := Generate(context.Background(), seq, Request{Prompt: prompt, MaxTokens: maxTokens, Session: rec, Depth: dr.Depth(), Clock: fakeClock()}, func(Token) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.ns) < 3 || st.Accepted == 0 || st.Accepted == st.Drafted {
		t.Fatalf("%d rounds, %d/%d accepted: the test needs several rounds with mixed acceptance", len(rec.ns), st.Accepted, st.Drafted)
	}
	for i, n := range rec.ns {
		if want := min(7, maxTokens-rec.emitted[i]-1); n != want {
			t.Fatalf("round %d (after %d tokens) asked for %d drafts, want %d", i, rec.emitted[i], n, want)
		}
	}
	for n := 0; n <= 9; n++ {
		if _, ok := ctl.Cost(n); ok {
			t.Fatalf("the fixed policy's rounds trained the controller (cost of depth %d measured)", n)
		}
	}
	if r := ctl.Rate(1); r != 0.5 {
		t.Fatalf("acceptance rate at 1 is %v after fixed rounds, want the untouched prior 0.5", r)
	}

	adaptive := WithDepth(dr, Adaptive(ctl))
	rec = &depthRecorder{Session: adaptive.Open(256), prompt: len(prompt)}
	seq = NewSequence(target, 256)
	st, err = Generate(context.Background(), seq, Request{Prompt: prompt, MaxTokens: maxTokens, Session: rec, Depth: adaptive.Depth(), Clock: fakeClock()}, func(Token) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	// The controller measures plain decoding first: a round that proposes nothing, which the
	// fixed policy never chooses while it has context.
	if st.Rounds == len(rec.ns) {
		t.Fatalf("every one of %d adaptive rounds proposed (%v): the controller was not followed", st.Rounds, rec.ns)
	}
	measured := false
	for n := 0; n <= 9; n++ {
		if _, ok := ctl.Cost(n); ok {
			measured = true
		}
	}
	if !measured {
		t.Fatal("the selector under an adaptive policy did not train its controller")
	}
}

// TestSelectorGreedyMatchesPlain: with a random DFlash2 draft on a tiny random target, greedy
// speculative output equals plain greedy output token for token.
func TestSelectorGreedyMatchesPlain(t *testing.T) {
	tc := model.Config{
		Arch: transformer.ArchQwen3, Layers: 6, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
		HeadDim: 8, Vocab: 61, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1,
	}
	target, err := transformer.Synthetic(tc, 3)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dflash2.ConfigFor(tc, 2, 8)
	cfg.SelectorRank, cfg.SelectorTopK = 8, 6
	dir := t.TempDir()
	if err := dflash2.WriteRandom(dir, tc, cfg, 5, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	draft, err := dflash2.Load(dir, target, dflash2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{3, 14, 15, 9, 26, 5, 35}
	gen := func(d Session) ([]int, Stats) {
		var out []int
		st, err := Generate(context.Background(), NewSequence(target, 256), Request{Prompt: prompt, MaxTokens: 40, Session: d, Depth: NewSelectorDrafter(draft).Depth(), Clock: fakeClock()},
			func(tok Token) error { out = append(out, tok.ID); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out, st
	}
	want, _ := gen(nil)
	got, st := gen(NewSelectorSession(draft, 256))
	if !slices.Equal(got, want) {
		t.Fatalf("selector speculation emitted\n%v\nplain greedy\n%v", got, want)
	}
	if st.Drafted == 0 || st.Depths[7] == 0 {
		t.Fatalf("drafted %d, depth-7 rounds %v: the comparison did not exercise the selector", st.Drafted, st.Depths)
	}
}

// TestSelectorSampledMatchesPlainDistribution is the chi-square test of distribution_test.go
// with a selector drafter whose candidates (3 of the 5 tokens) and scores depend on the slot and
// the predecessor, so q is sparse and varies along the walk.
func TestSelectorSampledMatchesPlainDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("distribution test runs many generations")
	}
	target := &fake.Target{Vocab: distVocab, Layers: 2, Scale: 1.5, Seed: 11}
	prompt := []int{1, 3, 2}
	edges := func(slot, prev int) ([]int32, []float32) {
		first := (slot + prev) % distVocab
		ids := []int32{int32(first), int32((first + 2) % distVocab), int32((first + 3) % distVocab)}
		return ids, []float32{1.5, float32(prev%3) * 0.7, -0.5}
	}
	for _, o := range []sample.Options{{Temperature: 1}, {Temperature: 0.7, TopP: 0.8}} {
		exact := exactSequences(target, prompt, o, nil)
		sel := &scriptSelector{Draft: &fake.Draft{Block: 4, Mask: 4, Layers: []int{0, 1}, Vocab: distVocab}, edges: edges}
		dr := NewSelectorDrafter(sel)
		d := dr.Open(64)
		seq := NewSequence(target, 64)
		counts := map[string]int{}
		var all Stats
		for r := range distRuns {
			oo := o
			oo.Seed = 1<<33 + uint64(r)
			var out []int
			st, err := Generate(context.Background(), seq, Request{Prompt: prompt, Options: oo, MaxTokens: distSteps, Session: d, Depth: dr.Depth(), Clock: fakeClock()},
				func(tok Token) error { out = append(out, tok.ID); return nil })
			if err != nil {
				t.Fatal(err)
			}
			all.Add(st)
			counts[seqKey(out, false)]++
		}
		stat, df := chiSquare(t, counts, exact, distRuns)
		t.Logf("T %.1f top-p %.1f: chi-square %.1f, df %d, accepted %d/%d", o.Temperature, o.TopP, stat, df, all.Accepted, all.Drafted)
		if crit := chiCritical(df, 3.7); stat > crit {
			t.Fatalf("selector speculation: chi-square %.1f > %.1f (df %d)\n%s", stat, crit, df, worst(counts, exact, distRuns))
		}
		if all.Drafted == 0 || all.Accepted == 0 {
			t.Fatalf("drafted %d, accepted %d: the test did not exercise verification", all.Drafted, all.Accepted)
		}
	}
}

// blockRows records the block length of every forward of a selector draft; causal says whether it
// passes on the draft's CausalBlock (a wrapper without the method hides it from the session).
type blockRows struct {
	model.BlockSelector
	rows []int
}

func (b *blockRows) Forward(c cache.Cache, ctx []float32, ctxRows int, block []int) (model.Walk, error) {
	if len(block) > 0 {
		b.rows = append(b.rows, len(block))
	}
	return b.BlockSelector.Forward(c, ctx, ctxRows, block)
}

type causalBlockRows struct{ *blockRows }

func (c causalBlockRows) CausalBlock() bool { return c.BlockSelector.(model.CausalBlock).CausalBlock() }

// TestSelectorCausalBlockForwardsDraftedRows: a DFlash2 draft whose block is causal is forwarded
// with the anchor and the n rows it drafts (4 rows at depth 3, not B = 8), and emits exactly what
// the full-block forwards of the same draft emit, which is plain greedy decoding.
func TestSelectorCausalBlockForwardsDraftedRows(t *testing.T) {
	tc := model.Config{
		Arch: transformer.ArchQwen3, Layers: 6, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
		HeadDim: 8, Vocab: 61, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1,
	}
	target, err := transformer.Synthetic(tc, 3)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dflash2.ConfigFor(tc, 2, 8)
	cfg.SelectorRank, cfg.SelectorTopK = 8, 6
	causal := true
	cfg.Causal = &causal
	dir := t.TempDir()
	if err := dflash2.WriteRandom(dir, tc, cfg, 5, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	draft, err := dflash2.Load(dir, target, dflash2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !draft.CausalBlock() {
		t.Fatal("a draft written with dflash_config.causal does not report a causal block")
	}
	prompt := []int{3, 14, 15, 9, 26, 5, 35}
	gen := func(d model.BlockSelector) []int {
		var out []int
		var s Session
		if d != nil {
			s = NewSelectorSession(d, 256)
		}
		_, err := Generate(context.Background(), NewSequence(target, 256), Request{Prompt: prompt, MaxTokens: 40, Session: s, Depth: Fixed(3), Clock: fakeClock()},
			func(tok Token) error { out = append(out, tok.ID); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	full := &blockRows{BlockSelector: draft}
	short := &blockRows{BlockSelector: draft}
	want, gotFull, gotShort := gen(nil), gen(full), gen(causalBlockRows{short})
	if !slices.Equal(gotFull, want) || !slices.Equal(gotShort, want) {
		t.Fatalf("plain %v\nfull blocks %v\ncausal blocks %v", want, gotFull, gotShort)
	}
	if len(short.rows) == 0 || len(full.rows) != len(short.rows) {
		t.Fatalf("%d full-block and %d causal-block proposals", len(full.rows), len(short.rows))
	}
	for i := range short.rows {
		if short.rows[i] > 4 || full.rows[i] != 8 {
			t.Fatalf("round %d: causal block of %d rows (want <= 4), full block of %d (want 8)", i, short.rows[i], full.rows[i])
		}
	}
}
