package dflash

import (
	"testing"

	"github.com/dflash/dflash/cache"
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

// BenchmarkBlock16SmallHeads is one proposal of a 3-layer f32 draft on a stories260K-shaped
// target (dim 64, 8 heads of 8 over 4 kv heads, vocab 512) after 200 context rows, on the
// cache NewCache makes (head-major copies) and on a plain *cache.KV (attention over rows). At
// this size attention over the context, not weight traffic, is most of a block's time.
func BenchmarkBlock16SmallHeads(b *testing.B) {
	tc := model.Config{Arch: transformer.ArchQwen3, Layers: 5, Hidden: 64, Intermediate: 172, Heads: 8, KVHeads: 4,
		HeadDim: 8, Vocab: 512, MaxSeq: 512, RMSEps: 1e-5, RopeTheta: 10000, BOS: -1}
	m, err := transformer.Synthetic(tc, 1)
	if err != nil {
		b.Fatal(err)
	}
	dc := ConfigFor(tc, 3, 16)
	dc.TargetLayers = []int{1, 2, 3} // as the trained stories260K draft; the default repeats layer 2 on 5 layers
	dc.MaskID = 0
	d, err := Random(m, dc, 2, kernel.F32)
	if err != nil {
		b.Fatal(err)
	}
	const nctx = 200
	ctx := make([]float32, nctx*len(d.TargetLayers())*tc.Hidden)
	for i := range ctx {
		ctx[i] = float32(i%7)*0.3 - 1
	}
	block := make([]int, 16)
	block[0] = 42
	for _, layout := range []struct {
		name string
		c    cache.Cache
	}{{"headmajor", d.NewCache(512)}, {"rows", cache.NewKV(dc.Layers, 512, dc.KVHeads*dc.HeadDim)}} {
		if _, err := d.Forward(layout.c, ctx, nctx, nil); err != nil {
			b.Fatal(err)
		}
		b.Run(layout.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := d.Forward(layout.c, nil, 0, block); err != nil {
					b.Fatal(err)
				}
				if err := layout.c.Rewind(nctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
