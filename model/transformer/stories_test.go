package transformer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
)

var forEachPath = kerneltest.ForEachPath

func cacheOfOtherShape() cache.Cache { return cache.NewKV(1, 4, 3) }

// golden is numpy_ref_greedy64.json: an independent numpy forward of stories260K.
type golden struct {
	GreedyIDs   []int `json:"greedy_ids"` // BOS then 64 greedy tokens
	FirstLogits []struct {
		Pos    int          `json:"pos"`
		Input  int          `json:"input"`
		Top5   [][2]float64 `json:"top5"` // [id, logit]
		First8 []float64    `json:"logits_first8"`
	} `json:"first_logits"`
}

func loadStories(tb testing.TB) *Model {
	tb.Helper()
	m, err := LoadLlama2C(shareddata.Path(tb, "stories260K/stories260K.bin"))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestStories260KGolden(t *testing.T) {
	m := loadStories(t)
	data, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/numpy_ref_greedy64.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if cfg := m.Config(); cfg.Hidden != 64 || cfg.Layers != 5 || cfg.Vocab != 512 || !cfg.TiedEmbeddings {
		t.Fatalf("config %+v, want dim 64, 5 layers, vocab 512, tied", cfg)
	}
	forEachPath(t, func(t *testing.T) {
		c := m.NewCache(128)
		tok := g.GreedyIDs[0]
		for step := 1; step < len(g.GreedyIDs); step++ {
			res, err := m.Forward(c, model.Request{Tokens: []int{tok}, Logits: model.LogitsLast})
			if err != nil {
				t.Fatal(err)
			}
			pos := step - 1
			if pos < len(g.FirstLogits) {
				fl := g.FirstLogits[pos]
				if fl.Pos != pos || fl.Input != tok {
					t.Fatalf("golden row %d is for pos %d input %d, decoding pos %d input %d", pos, fl.Pos, fl.Input, pos, tok)
				}
				for i, want := range fl.First8 {
					if math.Abs(float64(res.Logits[i])-want) > 1e-4 {
						t.Errorf("pos %d logit %d = %g, want %g", pos, i, res.Logits[i], want)
					}
				}
				for _, p := range fl.Top5 {
					if got := res.Logits[int(p[0])]; math.Abs(float64(got)-p[1]) > 1e-4 {
						t.Errorf("pos %d top logit of %d = %g, want %g", pos, int(p[0]), got, p[1])
					}
				}
			}
			tok = argmax(res.Logits)
			if tok != g.GreedyIDs[step] {
				t.Fatalf("step %d: greedy id %d, want %d", step, tok, g.GreedyIDs[step])
			}
		}
	})
}

func TestRegistryLoadsLlama2C(t *testing.T) {
	tg, err := model.Load(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if tg.Config().Arch != ArchLlama2C {
		t.Fatalf("arch %q", tg.Config().Arch)
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func TestSyntheticConfigs(t *testing.T) {
	tests := []struct {
		name                  string
		hidden, layers, inter int
		heads                 int
		paramsMin, paramsMax  float64 // published sizes, counting the tied embedding once
	}{
		{"qwen3-0.6b", 1024, 28, 3072, 16, 0.55e9, 0.65e9},
		{"qwen3-1.7b", 2048, 28, 6144, 16, 1.6e9, 2.1e9},
		{"qwen3-4b", 2560, 36, 9728, 32, 3.9e9, 4.2e9},
	}
	for _, tc := range tests {
		cfg, err := SyntheticConfig(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Hidden != tc.hidden || cfg.Layers != tc.layers || cfg.Intermediate != tc.inter || cfg.Heads != tc.heads || cfg.KVHeads != 8 || cfg.HeadDim != 128 || cfg.Vocab != 151936 {
			t.Errorf("%s: %+v", tc.name, cfg)
		}
		h, q, kv := float64(cfg.Hidden), float64(cfg.Heads*cfg.HeadDim), float64(cfg.KVHeads*cfg.HeadDim)
		params := float64(cfg.Vocab)*h + float64(cfg.Layers)*(2*h*q+2*h*kv+3*h*float64(cfg.Intermediate))
		if params < tc.paramsMin || params > tc.paramsMax {
			t.Errorf("%s: %.3g parameters, want [%.3g, %.3g]", tc.name, params, tc.paramsMin, tc.paramsMax)
		}
	}
	if _, err := SyntheticConfig("qwen3-999b"); err == nil {
		t.Error("unknown name accepted")
	}
}

func TestSyntheticDeterministic(t *testing.T) {
	cfg := model.Config{Arch: ArchQwen3, Layers: 2, Hidden: 64, Intermediate: 96, Heads: 4, KVHeads: 2,
		HeadDim: 32, Vocab: 300, MaxSeq: 64, RMSEps: 1e-6, RopeTheta: 1e6, TiedEmbeddings: true}
	run := func(seed uint64) []float32 {
		m, err := Synthetic(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward(m.NewCache(8), model.Request{Tokens: []int{1, 2, 3}, Logits: model.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Logits {
			if math.IsNaN(float64(v)) || math.Abs(float64(v)) > 100 {
				t.Fatalf("insane logit %g", v)
			}
		}
		return append([]float32(nil), res.Logits...)
	}
	a, b, c := run(1), run(1), run(2)
	same := func(x, y []float32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("same seed gave different models")
	}
	if same(a, c) {
		t.Error("different seeds gave the same model")
	}
}

// BenchmarkDecodeStories260K decodes 256 greedy tokens from BOS per iteration.
func BenchmarkDecodeStories260K(b *testing.B) {
	m := loadStories(b)
	c := m.NewCache(256)
	req := model.Request{Tokens: []int{1}, Logits: model.LogitsLast}
	n := 0
	for b.Loop() {
		if err := c.Rewind(0); err != nil {
			b.Fatal(err)
		}
		req.Tokens[0] = 1
		for i := 0; i < 256; i++ {
			res, err := m.Forward(c, req)
			if err != nil {
				b.Fatal(err)
			}
			req.Tokens[0] = argmax(res.Logits)
		}
		n += 256
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
}

// syntheticQwen3 is built once per benchmark binary: building it takes seconds.
var syntheticQwen3 = sync.OnceValues(func() (*Model, error) {
	cfg, err := SyntheticConfig("qwen3-0.6b")
	if err != nil {
		return nil, err
	}
	return Synthetic(cfg, 1)
})

// BenchmarkDecodeSyntheticQwen3_06B decodes with random bf16 weights of Qwen3-0.6B's shape;
// compare GB/s with the machine's read bandwidth (PERFORMANCE.md).
func BenchmarkDecodeSyntheticQwen3_06B(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 1.2 GB model")
	}
	m, err := syntheticQwen3()
	if err != nil {
		b.Fatal(err)
	}
	cfg := m.Config()
	c := m.NewCache(512)
	if _, err := m.Forward(c, model.Request{Tokens: testTokens(32, cfg.Vocab)}); err != nil {
		b.Fatal(err)
	}
	req := model.Request{Tokens: []int{42}, Logits: model.LogitsLast}
	n := 0
	for b.Loop() {
		if c.Offset() >= 500 {
			c.Rewind(32)
		}
		res, err := m.Forward(c, req)
		if err != nil {
			b.Fatal(err)
		}
		req.Tokens[0] = argmax(res.Logits)
		n++
	}
	tps := float64(n) / b.Elapsed().Seconds()
	b.ReportMetric(tps, "tokens/s")
	b.ReportMetric(tps*float64(m.WeightBytes())/1e9, "GB/s")
}

// BenchmarkVerify16SyntheticQwen3_06B is one verification forward of 16 rows with logits for
// all, rewound after each: its time over the decode benchmark's is the verify-cost ratio c(16)/c(1).
func BenchmarkVerify16SyntheticQwen3_06B(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 1.2 GB model")
	}
	m, err := syntheticQwen3()
	if err != nil {
		b.Fatal(err)
	}
	cfg := m.Config()
	c := m.NewCache(512)
	if _, err := m.Forward(c, model.Request{Tokens: testTokens(64, cfg.Vocab)}); err != nil {
		b.Fatal(err)
	}
	req := model.Request{Tokens: testTokens(16, cfg.Vocab), Logits: model.LogitsAll}
	for b.Loop() {
		if _, err := m.Forward(c, req); err != nil {
			b.Fatal(err)
		}
		c.Rewind(64)
	}
}

// BenchmarkVerifyStories260K is one forward of N rows with logits for all at 128 committed rows,
// rewound after each; its time over BenchmarkDecodeStories260K's per-token time is c(N)/c(1).
func BenchmarkVerifyStories260K(b *testing.B) {
	m := loadStories(b)
	c := m.NewCache(256)
	if _, err := m.Forward(c, model.Request{Tokens: testTokens(128, m.Config().Vocab)}); err != nil {
		b.Fatal(err)
	}
	for _, rows := range []int{1, 4, 8, 16} {
		b.Run(fmt.Sprint(rows), func(b *testing.B) {
			req := model.Request{Tokens: testTokens(rows, m.Config().Vocab), Logits: model.LogitsAll}
			for b.Loop() {
				if _, err := m.Forward(c, req); err != nil {
					b.Fatal(err)
				}
				c.Rewind(128)
			}
		})
	}
}
