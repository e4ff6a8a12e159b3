package qwen35

import (
	"fmt"
	"testing"

	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model/nn"
)

// TestHeadSplitBitwise: full-attention layers of a forward of one part, their key/value heads
// spread over the cores (nn.HeadSplit, forced from 0 rows, three buffers), give every sequence
// the logits, taps, states and cache rows of attention on one core, alone and batched, on every
// kernel path: heads of 16 (head-major keys), 32 (fused) and 72 (row-major). Forwards of 2 and 3
// rows run in one part on every path, wider ones where the path keeps them whole (amx).
func TestHeadSplitBitwise(t *testing.T) {
	fused := tinyCausal()
	fused.headDim = 32
	wide := tinyCausal()
	wide.headDim = 72
	wide.heads, wide.kvHeads = 8, 2
	tns := []*tiny{tinyCausal(), fused, wide}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for ti, tn := range tns {
			m := load(t, tn, uint64(60+ti))
			saved := m.partScores
			m.partScores = make(nn.PartScratch, 3) // NewCache sizes the buffers
			for _, batched := range []bool{false, true} {
				var want, got []batchOutputs
				func() {
					defer nn.SetHeadSplit(nn.SetHeadSplit(1<<30, 0))
					want = runBatch(t, m, batchShapes, batched)
				}()
				func() {
					defer nn.SetHeadSplit(nn.SetHeadSplit(0, 0))
					got = runBatch(t, m, batchShapes, batched)
				}()
				for i := range want {
					checkSame(t, fmt.Sprintf("model %d, batched %v, split by heads", ti, batched), i, want[i], got[i])
				}
			}
			m.partScores = saved
		}
	})
}
