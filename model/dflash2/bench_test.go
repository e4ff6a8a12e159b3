package dflash2

import (
	"testing"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// BenchmarkBlock8 is one context row plus a full block of 8 on a small DFlash2 draft (hidden 256,
// vocabulary 8192, rank 64, K 16) and the walk of 7 slots: the convolutions and selector add
// to the DFlash forward.
func BenchmarkBlock8(b *testing.B) {
	tc := model.Config{
		Arch: transformer.ArchQwen3, Layers: 8, Hidden: 256, Intermediate: 512, Heads: 8, KVHeads: 4,
		HeadDim: 32, Vocab: 8192, MaxSeq: 1024, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1,
	}
	target, err := transformer.Synthetic(tc, 1)
	if err != nil {
		b.Fatal(err)
	}
	cfg := ConfigFor(tc, 2, 8)
	cfg.SelectorRank = 64
	dir := b.TempDir()
	if err := WriteRandom(dir, tc, cfg, 1, kernel.BF16); err != nil {
		b.Fatal(err)
	}
	d, err := Load(dir, target, Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := d.NewCache(1024)
	width := len(cfg.TargetLayers) * cfg.Hidden
	ctx := randomFloats(256*width, 1)
	if _, err := d.Forward(c, ctx, 256, nil); err != nil {
		b.Fatal(err)
	}
	block := []int{5, cfg.MaskID, cfg.MaskID, cfg.MaskID, cfg.MaskID, cfg.MaskID, cfg.MaskID, cfg.MaskID}
	var ids []int32
	var scores []float32
	b.ResetTimer()
	for b.Loop() {
		wk, err := d.Forward(c, ctx[:width], 1, block)
		if err != nil {
			b.Fatal(err)
		}
		prev := block[0]
		for slot := 1; slot < len(block); slot++ {
			ids, scores = wk.Candidates(slot, prev, ids[:0], scores[:0])
			prev = int(ids[0])
		}
		if err := c.Rewind(256); err != nil {
			b.Fatal(err)
		}
	}
}
