package dflash

import (
	"testing"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// shapedTarget reports a config with more layers than the model it wraps holds. The draft only
// uses a target's Config, Embed and Head, so a one-layer synthetic Qwen3-0.6B stands in for the
// 28-layer one at a fraction of the memory and set-up time.
type shapedTarget struct {
	model.Target
	cfg model.Config
}

func (s shapedTarget) Config() model.Config { return s.cfg }

// qwen06Draft is a 5-layer bf16 draft (block 16) on a Qwen3-0.6B-shaped target.
func qwen06Draft(b *testing.B) *Draft {
	b.Helper()
	cfg, err := transformer.SyntheticConfig("qwen3-0.6b")
	if err != nil {
		b.Fatal(err)
	}
	one := cfg
	one.Layers = 1
	m, err := transformer.Synthetic(one, 1)
	if err != nil {
		b.Fatal(err)
	}
	dc := ConfigFor(cfg, 5, 16)
	dc.MaskID = 151669
	d, err := Random(shapedTarget{m, cfg}, dc, 2, kernel.BF16)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkBlock16 is one proposal: a 16-row block after 512 context rows (the block is rewound
// after each forward, as the session does). Weight traffic is the 5 layers plus the 151936-row
// head, which dominates.
func BenchmarkBlock16(b *testing.B) {
	d := qwen06Draft(b)
	c := d.NewCache(1024)
	ctx := make([]float32, 512*len(d.TargetLayers())*d.cfg.Hidden)
	for i := range ctx {
		ctx[i] = float32(i%7) - 3
	}
	if _, err := d.Forward(c, ctx, 512, nil); err != nil {
		b.Fatal(err)
	}
	block := make([]int, 16)
	for i := range block {
		block[i] = d.MaskID()
	}
	block[0] = 42
	b.SetBytes(d.WeightBytes())
	b.ResetTimer()
	for b.Loop() {
		if _, err := d.Forward(c, nil, 0, block); err != nil {
			b.Fatal(err)
		}
		if err := c.Rewind(512); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContext32 writes 32 context rows (fc over 5 taps plus every layer's k/v projections),
// the work behind one round's accepted rows at most.
func BenchmarkContext32(b *testing.B) {
	d := qwen06Draft(b)
	c := d.NewCache(64)
	ctx := make([]float32, 32*len(d.TargetLayers())*d.cfg.Hidden)
	for i := range ctx {
		ctx[i] = float32(i%5) - 2
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := d.Forward(c, ctx, 32, nil); err != nil {
			b.Fatal(err)
		}
		if err := c.Rewind(0); err != nil {
			b.Fatal(err)
		}
	}
}
