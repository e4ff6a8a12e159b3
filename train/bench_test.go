package train

import (
	"testing"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// BenchmarkStep is one optimizer step at stories260K's shape (hidden 64, 8 heads over 4 kv
// heads, vocab 512; 2-layer draft, B = 16) with 8 sequences of 200 tokens x 16 anchors, taps
// cached after the first step. Reported: predicted block tokens per second.
func BenchmarkStep(b *testing.B) {
	tg, err := transformer.Synthetic(model.Config{
		Arch: transformer.ArchLlama, Layers: 5, Hidden: 64, Intermediate: 172, Heads: 8, KVHeads: 4,
		HeadDim: 8, Vocab: 512, MaxSeq: 512, RMSEps: 1e-5, RopeTheta: 10000, BOS: 1, EOS: []int{2},
	}, 1)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := DraftConfig{Layers: 2, BlockSize: 16, Seed: 1}.WithDefaults(tg.Config())
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
