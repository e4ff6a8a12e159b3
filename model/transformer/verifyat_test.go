package transformer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
)

// BenchmarkVerifyAtSyntheticQwen3_06B is one target forward of rows rows (logits for all) after
// at committed rows, rewound after each: c(16)/c(1) at 256 and 1024 committed rows is the ratio
// of the rows=16 and rows=1 times at the same offset (issue 15's goal). The committed rows'
// keys and values are random rather than prefilled, so that a CPU profile of the benchmark holds
// only the verification forwards (and the model's construction), whose attention reads them at
// the same cost.
func BenchmarkVerifyAtSyntheticQwen3_06B(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 1.2 GB model")
	}
	m, err := syntheticQwen3()
	if err != nil {
		b.Fatal(err)
	}
	cfg := m.Config()
	for _, at := range []int{256, 1024} {
		c := m.NewCache(at + 16)
		kv, ok := c.(*cache.KV)
		if !ok {
			b.Fatalf("cache is %T, want the row-major *cache.KV of heads of %d", c, cfg.HeadDim)
		}
		r := rand.New(rand.NewPCG(uint64(at), 1))
		k, v := make([]float32, at*kv.Width), make([]float32, at*kv.Width)
		for l := range kv.Layers {
			for i := range k {
				k[i], v[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			kv.Store(l, 0, at, k, v) // rounded to bf16 where the model caches bf16
		}
		if err := kv.Advance(at); err != nil {
			b.Fatal(err)
		}
		for _, rows := range []int{1, 16} {
			req := model.Request{Tokens: testTokens(rows, cfg.Vocab), Logits: model.LogitsAll}
			b.Run(fmt.Sprintf("at=%d/rows=%d", at, rows), func(b *testing.B) {
				for b.Loop() {
					if _, err := m.Forward(c, req); err != nil {
						b.Fatal(err)
					}
					if err := c.Rewind(at); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
