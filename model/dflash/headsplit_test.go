package dflash

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/nn"
)

// TestHeadSplitBlockBitwise: a block run in one part whose attention spreads its key/value heads
// over the cores (nn.HeadSplit, forced from 0 rows, three buffers) gives the logits of attention
// on one core, on every kernel path and both cache layouts, bidirectional and causal, for heads
// of 16 (head-major) and 64 (fused) and a GQA shape of 8 heads over 2. A block of 2 rows runs in
// one part on every path, one of 6 where the path keeps it whole (amx).
func TestHeadSplitBlockBitwise(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	for _, c := range []struct {
		causal                  bool
		heads, kvHeads, headDim int
	}{{false, 4, 2, 16}, {true, 4, 2, 16}, {false, 8, 2, 64}, {true, 8, 2, 64}} {
		cfg := tinyConfig()
		cfg.Causal = boolp(c.causal)
		cfg.Heads, cfg.KVHeads, cfg.HeadDim = c.heads, c.kvHeads, c.headDim
		d := writeAndLoad(t, target, cfg, kernel.F32, Options{})
		ctx := randomCtx(cfg, 9, 3)
		saved := d.partScores
		d.partScores = make(nn.PartScratch, 3) // NewCache sizes the buffers
		run := func(t *testing.T, rowMajor bool, minRows int, block []int) []float32 {
			defer nn.SetHeadSplit(nn.SetHeadSplit(minRows, 0))
			c := d.NewCache(32)
			if rowMajor {
				c = cache.NewKV(cfg.Layers, 32, cfg.KVHeads*cfg.HeadDim)
			}
			l, err := d.Forward(c, ctx, 9, block)
			if err != nil {
				t.Fatal(err)
			}
			return slices.Clone(l)
		}
		kerneltest.ForEachPath(t, func(t *testing.T) {
			for _, rowMajor := range []bool{false, true} {
				for _, block := range [][]int{{4, 96}, {4, 96, 96, 17, 96, 96}} {
					if got, want := run(t, rowMajor, 0, block), run(t, rowMajor, 1<<30, block); !slices.Equal(got, want) {
						t.Errorf("%+v, row-major cache %v, %d rows: logits differ with attention split by heads", c, rowMajor, len(block))
					}
				}
			}
		})
		d.partScores = saved
	}
}
