package dflash2

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/nn"
)

// TestHeadSplitBlockBitwise: the block's attention spread over the cores by key/value head
// (nn.HeadSplit, forced from 0 rows, three buffers) gives every slot the candidates and scores
// of attention on one core, on every kernel path, bidirectional and causal, for heads of 16
// (head-major) and 64 (fused) with 8 heads over 2.
func TestHeadSplitBlockBitwise(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	for _, c := range []struct {
		causal                  bool
		heads, kvHeads, headDim int
	}{{false, 4, 2, 16}, {true, 4, 2, 16}, {false, 8, 2, 64}, {true, 8, 2, 64}} {
		cfg := tinyConfig()
		if c.causal {
			cfg.Causal = &c.causal
		}
		cfg.Heads, cfg.KVHeads, cfg.HeadDim = c.heads, c.kvHeads, c.headDim
		d := writeAndLoad(t, target, cfg, RandomWeights(cfg, 31))
		d.ws.scratch = make(nn.PartScratch, 3) // NewCache sizes the buffers
		width := len(cfg.TargetLayers) * cfg.Hidden
		ctx := randomFloats(9*width, 32)
		block := []int{7, 96, 96, 96, 96, 96}
		propose := func(t *testing.T, minRows int) (ids []int32, scores []float32) {
			defer nn.SetHeadSplit(nn.SetHeadSplit(minRows, 0))
			wk, err := d.Forward(d.NewCache(32), ctx, 9, block)
			if err != nil {
				t.Fatal(err)
			}
			for slot := 1; slot < len(block); slot++ {
				ids, scores = wk.Candidates(slot, slot, ids, scores)
			}
			return ids, scores
		}
		kerneltest.ForEachPath(t, func(t *testing.T) {
			wi, ws := propose(t, 1<<30)
			gi, gs := propose(t, 0)
			if !slices.Equal(gi, wi) || !slices.Equal(gs, ws) {
				t.Errorf("%+v: candidates differ with attention split by heads", c)
			}
		})
	}
}
