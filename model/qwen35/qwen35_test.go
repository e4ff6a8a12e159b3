package qwen35

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
)

var _ model.Target = (*Model)(nil)

func load(t *testing.T, tn *tiny, seed uint64) *Model {
	t.Helper()
	dir := tn.write(t, seed, nil, nil)
	m, err := LoadHF(dir, transformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randTokens(r *rand.Rand, n, vocab int) []int {
	toks := make([]int, n)
	for i := range toks {
		toks[i] = r.IntN(vocab)
	}
	return toks
}

// TestReferenceLogits: a tiny random folder in each layout (and dtype) gives the logits and
// taps of the float64 reference, which is written from QWEN35.md's equations alone. Every
// mistake QWEN35.md section 8 lists moves the logits far beyond the tolerance on these shapes.
func TestReferenceLogits(t *testing.T) {
	bf16 := tinyCausal()
	bf16.dtype = safetensors.BF16
	f16 := tinyConditional()
	f16.dtype = safetensors.F16
	wide := tinyCausal()
	wide.headDim = 72 // past nn.FusedMaxHead: a row-major key/value cache, as the real 256-wide heads
	cases := []struct {
		name string
		tn   *tiny
	}{
		{"causal-lm f32", tinyCausal()},
		{"causal-lm f32 row-major cache", wide},
		{"conditional-generation f32 sharded", tinyConditional()},
		{"causal-lm bf16", bf16},
		{"conditional-generation f16", f16},
	}
	// Seeds 12..14: seed 11 happens to hold a head whose q and k are nearly orthogonal, where
	// float32 rounding reaches 9e-5 of the row's scale (see maxDiff), too close to the bound to
	// tell a fault from rounding.
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, tc := range cases {
			for seed := uint64(12); seed <= 14; seed++ {
				referenceCase(t, tc.name, tc.tn, seed)
			}
		}
	})
}

// referenceCase compares every row's logits and every layer's tap of a 12-token prompt against
// the reference, within 1e-4 of the row's scale.
func referenceCase(t *testing.T, name string, tn *tiny, seed uint64) {
	t.Helper()
	m := load(t, tn, seed)
	toks := randTokens(rand.New(rand.NewPCG(3, 4)), 12, tn.vocab)
	refTaps, refLogits := tn.reference(toks)
	taps := make([]int, tn.layers)
	for i := range taps {
		taps[i] = i
	}
	res, err := m.Forward(m.NewCache(64), model.Request{Tokens: toks, Logits: model.LogitsAll, Taps: taps})
	if err != nil {
		t.Fatal(err)
	}
	v, h := tn.vocab, tn.hidden
	for r := range toks {
		if d := maxDiff(res.Logits[r*v:(r+1)*v], refLogits[r]); d > 1e-4 {
			t.Errorf("%s seed %d: row %d: logits differ from the reference by %.3g", name, seed, r, d)
		}
		for l := range taps {
			if d := maxDiff(res.Taps[l][r*h:(r+1)*h], refTaps[l][r]); d > 1e-4 {
				t.Errorf("%s seed %d: row %d: tap of layer %d differs from the reference by %.3g", name, seed, r, l, d)
			}
		}
	}
}

// maxDiff is the largest |got-want| relative to the row's largest magnitude (as the Qwen3
// reference test measures). float32 against float64 loses more here than in a dense layer: a
// DeltaNet head whose output o is small against sqrt(eps) of the gated norm passes o's rounding
// (relative to |q||k|, not to |q·k|) on at up to 1/sqrt(eps) times, which on these random
// weights reaches a few 1e-5 of the row's scale.
func maxDiff(got []float32, want []float64) float64 {
	var d, scale float64
	for i, w := range want {
		d = max(d, math.Abs(float64(got[i])-w))
		scale = max(scale, math.Abs(w))
	}
	return d / max(scale, 1e-3)
}

// TestBatchWidthBitwise: a row's logits and taps do not depend on how many rows share its
// forward. The rows of one n-row forward, of n one-row forwards and of forwards of 3, 1 and the
// rest are equal bitwise, on every kernel path; 40 rows also cross a chunk (nn.ChunkRows), where
// the conv window and the state are carried between chunks inside one forward.
func TestBatchWidthBitwise(t *testing.T) {
	tn := tinyConditional()
	kerneltest.ForEachPath(t, func(t *testing.T) {
		m := load(t, tn, 5)
		for _, n := range []int{7, nn.ChunkRows + 8} {
			toks := randTokens(rand.New(rand.NewPCG(uint64(n), 1)), n, tn.vocab)
			whole := decode(t, m, toks, []int{n})
			ones := make([]int, n)
			for i := range ones {
				ones[i] = 1
			}
			for _, split := range [][]int{ones, {3, 1, n - 4}} {
				got := decode(t, m, toks, split)
				for r := range whole {
					if !slices.Equal(got[r], whole[r]) {
						t.Fatalf("%d rows split %v: row %d differs from the %d-row forward", n, split, r, n)
					}
				}
			}
		}
	})
}

// decode feeds toks in forwards of the given sizes and returns each row's logits followed by its
// taps of layers 1 and 2 (a full and a linear layer), copied.
func decode(t *testing.T, m *Model, toks []int, sizes []int) [][]float32 {
	t.Helper()
	c := m.NewCache(128)
	v, h := m.cfg.Vocab, m.cfg.Hidden
	var rows [][]float32
	at := 0
	for _, s := range sizes {
		res, err := m.Forward(c, model.Request{Tokens: toks[at : at+s], Logits: model.LogitsAll, Taps: []int{1, 2}})
		if err != nil {
			t.Fatal(err)
		}
		for r := 0; r < s; r++ {
			row := slices.Clone(res.Logits[r*v : (r+1)*v])
			row = append(row, res.Taps[0][r*h:(r+1)*h]...)
			rows = append(rows, append(row, res.Taps[1][r*h:(r+1)*h]...))
		}
		at += s
	}
	return rows
}

// TestSnapshotRestore is a verify round on the hybrid cache: after a prompt, a forward of n+1
// rows (the current token and n drafts) with snapshots enabled, then RestoreRow(k), must leave
// exactly the cache that decoding the prompt and rows 0..k one by one leaves: the same offset,
// bitwise the same conv windows, states and key/value rows. Then the next token's logits on both
// are equal bitwise (the restored cache never went past k, as the plain one never did).
func TestSnapshotRestore(t *testing.T) {
	wide := tinyCausal()
	wide.headDim = 72
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for seed, tn := range []*tiny{tinyCausal(), tinyConditional(), wide} {
			m := load(t, tn, uint64(20+seed))
			snapshotRound(t, m, uint64(seed), 6, nil)
		}
		// A verify deeper than a chunk (nn.ChunkRows) records across the chunk boundary.
		m := load(t, tinyConditional(), 7)
		snapshotRound(t, m, 9, nn.ChunkRows+3, []int{0, nn.ChunkRows - 2, nn.ChunkRows - 1, nn.ChunkRows, nn.ChunkRows + 3})
	})
}

// snapshotRound checks RestoreRow(k) after a prompt and a verify of n+1 rows, for each k in ks
// (every k in 0..n when ks is nil).
func snapshotRound(t *testing.T, m *Model, seed uint64, n int, ks []int) {
	t.Helper()
	vocab := m.cfg.Vocab
	r := rand.New(rand.NewPCG(seed, 9))
	prompt := randTokens(r, 5, vocab)
	verify := randTokens(r, n+1, vocab)
	next := r.IntN(vocab)
	if ks == nil {
		for k := 0; k <= n; k++ {
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		spec := m.NewCache(64).(*cache.Hybrid)
		spec.EnableSnapshots(n + 1)
		step(t, m, spec, prompt)
		step(t, m, spec, verify)
		if err := spec.RestoreRow(k); err != nil {
			t.Fatal(err)
		}
		plain := m.NewCache(64).(*cache.Hybrid)
		for _, tok := range append(slices.Clone(prompt), verify[:k+1]...) {
			step(t, m, plain, []int{tok})
		}
		sameState(t, k, spec, plain)
		a, b := step(t, m, spec, []int{next}), step(t, m, plain, []int{next})
		if !slices.Equal(a, b) {
			t.Fatalf("k=%d: logits after the restored cache differ from plain decoding", k)
		}
	}
}

func step(t *testing.T, m *Model, c cache.Cache, toks []int) []float32 {
	t.Helper()
	res, err := m.Forward(c, model.Request{Tokens: toks, Logits: model.LogitsLast})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(res.Logits)
}

func sameState(t *testing.T, k int, a, b *cache.Hybrid) {
	t.Helper()
	if a.Offset() != b.Offset() {
		t.Fatalf("k=%d: offset %d after restore, want %d", k, a.Offset(), b.Offset())
	}
	for l := range a.Conv {
		if !slices.Equal(a.Conv[l], b.Conv[l]) {
			t.Fatalf("k=%d: conv window of recurrent layer %d differs", k, l)
		}
		if !slices.Equal(a.State[l], b.State[l]) {
			t.Fatalf("k=%d: state of recurrent layer %d differs", k, l)
		}
	}
	ka, _ := nn.AsKV(a.KV)
	kb, _ := nn.AsKV(b.KV)
	for l := 0; l < ka.Layers; l++ {
		k1, v1 := ka.RowsF32(l, 0, a.Offset())
		k2, v2 := kb.RowsF32(l, 0, b.Offset())
		if !slices.Equal(k1, k2) || !slices.Equal(v1, v2) {
			t.Fatalf("k=%d: keys or values of attention layer %d differ", k, l)
		}
	}
}

// TestSnapshotLimits: a forward deeper than the snapshots records none, so only its last row
// can be restored; a cache without snapshots likewise; and a hybrid cache refuses to rewind.
func TestSnapshotLimits(t *testing.T) {
	tn := tinyCausal()
	m := load(t, tn, 3)
	c := m.NewCache(64).(*cache.Hybrid)
	if cache.CanRewind(c) {
		t.Fatal("hybrid cache says it can rewind")
	}
	step(t, m, c, []int{1, 2, 3, 4})
	if err := c.RestoreRow(1); err == nil {
		t.Error("RestoreRow(1) without snapshots succeeded")
	}
	if err := c.RestoreRow(3); err != nil || c.Offset() != 4 {
		t.Errorf("RestoreRow of the last row: offset %d, err %v", c.Offset(), err)
	}
	c.EnableSnapshots(3)
	step(t, m, c, []int{5, 6, 7, 8}) // 4 rows > 3
	if err := c.RestoreRow(0); err == nil {
		t.Error("RestoreRow(0) after a forward deeper than the snapshots succeeded")
	}
	if err := c.Rewind(2); err == nil {
		t.Error("hybrid cache rewound to 2")
	}
	if err := c.Rewind(0); err != nil || c.Offset() != 0 {
		t.Errorf("Rewind(0): offset %d, err %v", c.Offset(), err)
	}
	// A fresh sequence after Rewind(0) decodes as a new cache does.
	a := step(t, m, c, []int{9, 10})
	b := step(t, m, m.NewCache(64), []int{9, 10})
	if !slices.Equal(a, b) {
		t.Error("logits after Rewind(0) differ from a fresh cache")
	}
}

// TestForwardRejects: a bad request leaves the cache untouched.
func TestForwardRejects(t *testing.T) {
	m := load(t, tinyCausal(), 3)
	c := m.NewCache(8)
	for name, r := range map[string]model.Request{
		"no tokens":        {},
		"token past vocab": {Tokens: []int{50}},
		"tap out of range": {Tokens: []int{1}, Taps: []int{4}},
		"past capacity":    {Tokens: make([]int, 9)},
	} {
		if _, err := m.Forward(c, r); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if c.Offset() != 0 {
			t.Fatalf("%s: offset moved to %d", name, c.Offset())
		}
	}
	if _, err := m.Forward(cache.NewKV(1, 8, 32), model.Request{Tokens: []int{1}}); err == nil {
		t.Error("forward on a plain KV cache accepted")
	}
}

// TestBF16CacheBitwise: with a bf16 key/value cache (heads of 72 read rows, nn.CacheBF16) a verify
// round restored at any row leaves bitwise the cache plain decoding leaves, and a row's logits
// and taps do not depend on the forward it is in, on every kernel path.
func TestBF16CacheBitwise(t *testing.T) {
	defer nn.SetCacheKind(nn.SetCacheKind(nn.CacheBF16))
	wide := tinyCausal()
	wide.headDim = 72
	kerneltest.ForEachPath(t, func(t *testing.T) {
		m := load(t, wide, 31)
		if got := nn.CacheElem(m.NewCache(8)); got != "bf16" {
			t.Fatalf("the model caches %s, want bf16", got)
		}
		snapshotRound(t, m, 4, 6, nil)
		toks := randTokens(rand.New(rand.NewPCG(5, 1)), 12, wide.vocab)
		whole := decode(t, m, toks, []int{12})
		got := decode(t, m, toks, []int{3, 1, 8})
		for r := range whole {
			if !slices.Equal(got[r], whole[r]) {
				t.Fatalf("row %d differs between a 12-row forward and forwards of 3, 1 and 8", r)
			}
		}
	})
}
