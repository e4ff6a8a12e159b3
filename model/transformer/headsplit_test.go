package transformer

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// TestHeadSplitForwardBitwise: a forward of one part whose attention spreads its key/value heads
// over the cores (nn.HeadSplit, forced from 0 rows) gives the logits, taps and cache rows of the
// same forward with attention on one core, on every kernel path, for grouped shapes with heads
// of 16 (head-major keys), 64 (the fused path), 72 and 128 (row-major). Three buffers make uneven
// shares. Forwards of 2 and 3 rows run in one part on every path, wider ones where the path keeps
// them whole (amx, up to its kernel.RowSplitFrom); a batch of sequences too.
func TestHeadSplitForwardBitwise(t *testing.T) {
	type shape struct{ heads, kvHeads, d int }
	for _, sh := range []shape{{8, 2, 16}, {16, 8, 64}, {8, 2, 64}, {8, 2, 72}, {16, 8, 128}} {
		cfg := model.Config{Arch: ArchQwen3, Layers: 2, Hidden: 32, Intermediate: 48, Heads: sh.heads, KVHeads: sh.kvHeads,
			HeadDim: sh.d, Vocab: 61, MaxSeq: 128, RMSEps: 1e-6, RopeTheta: 1e6, BOS: -1}
		m, err := Synthetic(cfg, uint64(sh.d+sh.heads))
		if err != nil {
			t.Fatal(err)
		}
		saved := m.partScores
		m.partScores = make(nn.PartScratch, 3) // NewCache sizes the buffers
		run := func(t *testing.T, minRows, rows int) (logits, taps, kv []float32) {
			defer nn.SetHeadSplit(nn.SetHeadSplit(minRows, 0))
			c := m.NewCache(96)
			toks := testTokens(40+rows, cfg.Vocab)
			if _, err := m.Forward(c, model.Request{Tokens: toks[:40]}); err != nil {
				t.Fatal(err)
			}
			res, err := m.Forward(c, model.Request{Tokens: toks[40:], Logits: model.LogitsAll, Taps: []int{0, 1}})
			if err != nil {
				t.Fatal(err)
			}
			k, _ := nn.AsKV(c)
			logits = slices.Clone(res.Logits)
			taps = append(slices.Clone(res.Taps[0]), res.Taps[1]...)
			for l := 0; l < k.Layers; l++ {
				kl, vl := k.RowsF32(l, 0, k.Offset())
				kv = append(append(kv, kl...), vl...)
			}
			return logits, taps, kv
		}
		forEachPath(t, func(t *testing.T) {
			for _, rows := range []int{1, 2, 3, 16, 32} {
				wl, wt, wk := run(t, 1<<30, rows)
				gl, gt, gk := run(t, 0, rows)
				if !slices.Equal(gl, wl) || !slices.Equal(gt, wt) || !slices.Equal(gk, wk) {
					t.Errorf("%+v, %d rows: logits, taps or cache differ with attention split by heads", sh, rows)
				}
			}
			var want, got []batchOutputs
			func() {
				defer nn.SetHeadSplit(nn.SetHeadSplit(1<<30, 0))
				want = runBatch(t, m, batchShapes, true)
			}()
			func() {
				defer nn.SetHeadSplit(nn.SetHeadSplit(0, 0))
				got = runBatch(t, m, batchShapes, true)
			}()
			for i := range want {
				w, g := want[i], got[i]
				if !slices.Equal(w.logits, g.logits) || !slices.Equal(w.taps, g.taps) || !slices.Equal(w.keys, g.keys) || !slices.Equal(w.values, g.values) {
					t.Errorf("%+v: batched sequence %d differs with attention split by heads", sh, i)
				}
			}
		})
		m.partScores = saved
	}
}
