package runner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
)

// tinyQwen3 is a real Qwen3 forward (q/k norms, GQA, rotate-half RoPE) small enough that a test can
// decode hundreds of tokens on every kernel path. A small vocabulary makes the target repeat
// itself, so stop tokens fall inside draft blocks and drafts are sometimes right.
func tinyQwen3(t *testing.T, vocab int, seed uint64) *transformer.Model {
	t.Helper()
	cfg := model.Config{Arch: transformer.ArchQwen3, Layers: 6, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
		HeadDim: 8, Vocab: vocab, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1}
	m, err := transformer.Synthetic(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func generate(t *testing.T, target model.Target, prompt []int, n int, stop []int, opts sample.Options, d runner.Session, depth runner.Depth) ([]int, runner.Stats) {
	t.Helper()
	var out []int
	seq := runner.NewSequence(target, 512)
	st, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: prompt, Options: opts, MaxTokens: n, Stop: stop, Session: d, Depth: depth},
		func(tok runner.Token) error { out = append(out, tok.ID); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if d != nil {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out, st
}

// Greedy speculative output must equal plain greedy output token for token, whatever the draft
// proposes: random DFlash drafts (rarely right), the target's own continuation with noise (often
// right), fixed and adaptive depths, with stop tokens that end the output inside a block.
func TestGreedySpeculationEqualsPlainOnRealModels(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, vocab := range []int{12, 97} {
			target := tinyQwen3(t, vocab, uint64(vocab))
			rng := rand.New(rand.NewPCG(uint64(vocab), 3))
			for trial := 0; trial < 6; trial++ {
				prompt := make([]int, 1+rng.IntN(20))
				for i := range prompt {
					prompt[i] = rng.IntN(vocab)
				}
				n := 20 + rng.IntN(100)
				// With a stop set, some trials end early: a stop token may be accepted as a draft.
				var stop []int
				if trial%2 == 1 {
					stop = []int{rng.IntN(vocab)}
				}
				want, _ := generate(t, target, prompt, n, stop, sample.Options{}, nil, runner.Depth{})
				for _, dt := range []kernel.DType{kernel.F32, kernel.BF16} {
					for _, block := range []int{4, 16} {
						cfg := dflash.ConfigFor(target.Config(), 2, block)
						draft, err := dflash.Random(target, cfg, uint64(trial), dt)
						if err != nil {
							t.Fatal(err)
						}
						for _, depth := range []runner.Depth{{}, runner.Fixed(block - 1)} {
							got, _ := generate(t, target, prompt, n, stop, sample.Options{}, runner.NewBlockSession(draft, 512), depth)
							if !slices.Equal(got, want) {
								t.Fatalf("vocab %d trial %d draft %v block %d depth %v:\n got %v\nwant %v", vocab, trial, dt, block, depth, got, want)
							}
						}
					}
				}
				full := append(slices.Clone(prompt), want...)
				for _, noise := range []float64{0, 0.3} {
					o := &runner.OracleDrafter{Tokens: full, Limit: 7, Noise: noise, Vocab: vocab, Seed: uint64(trial)}
					got, st := generate(t, target, prompt, n, stop, sample.Options{}, o.Open(512), o.Depth())
					if !slices.Equal(got, want) {
						t.Fatalf("oracle noise %.1f vocab %d trial %d:\n got %v\nwant %v", noise, vocab, trial, got, want)
					}
					if noise == 0 && len(want) > 16 && st.Tau() < 4 {
						t.Errorf("exact oracle accepted too little: tau %.2f", st.Tau())
					}
				}
			}
		}
	})
}

// With a sampled request the speculative run is not token-identical to the plain one (the random
// stream is consumed differently), but every token is still chosen from the target's distribution;
// here we check the loop runs to completion with real models and respects the token budget.
// The distributional equality itself is tested with a chi-square test in distribution_test.go.
func TestSampledSpeculationRunsOnRealModels(t *testing.T) {
	target := tinyQwen3(t, 40, 5)
	draft, err := dflash.Random(target, dflash.ConfigFor(target.Config(), 1, 8), 9, kernel.F32)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []sample.Options{{Temperature: 1, Seed: 1}, {Temperature: 0.7, TopK: 5, TopP: 0.9, Seed: 2}} {
		t.Run(fmt.Sprintf("T%.1f", o.Temperature), func(t *testing.T) {
			got, st := generate(t, target, []int{1, 2, 3}, 60, nil, o, runner.NewBlockSession(draft, 512), runner.Depth{})
			if len(got) != 60 || st.DecodeTokens != 60 {
				t.Fatalf("got %d tokens (stats %d), want 60", len(got), st.DecodeTokens)
			}
		})
	}
}

// With a bf16 key/value cache (heads of 72 elements read rows, so the target caches bf16 under
// nn.CacheBF16) greedy speculative output still equals plain greedy output token for token on
// every kernel path: each row is rounded once as it is stored, whether a decode step or a
// verification wrote it, and attention widens it exactly.
func TestGreedySpeculationEqualsPlainBF16Cache(t *testing.T) {
	defer nn.SetCacheKind(nn.SetCacheKind(nn.CacheBF16))
	kerneltest.ForEachPath(t, func(t *testing.T) {
		const vocab = 40
		cfg := model.Config{Arch: transformer.ArchQwen3, Layers: 3, Hidden: 32, Intermediate: 64, Heads: 2, KVHeads: 1,
			HeadDim: 72, Vocab: vocab, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1}
		target, err := transformer.Synthetic(cfg, 5)
		if err != nil {
			t.Fatal(err)
		}
		if got := nn.CacheElem(target.NewCache(8)); got != "bf16" {
			t.Fatalf("the target caches %s, want bf16", got)
		}
		rng := rand.New(rand.NewPCG(7, 3))
		for trial := 0; trial < 4; trial++ {
			prompt := make([]int, 1+rng.IntN(20))
			for i := range prompt {
				prompt[i] = rng.IntN(vocab)
			}
			n := 40 + rng.IntN(60)
			want, _ := generate(t, target, prompt, n, nil, sample.Options{}, nil, runner.Depth{})
			dcfg := dflash.ConfigFor(target.Config(), 2, 8)
			draft, err := dflash.Random(target, dcfg, uint64(trial), kernel.F32)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := generate(t, target, prompt, n, nil, sample.Options{}, runner.NewBlockSession(draft, 512), runner.Fixed(7))
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d random draft:\n got %v\nwant %v", trial, got, want)
			}
			full := append(slices.Clone(prompt), want...)
			o := &runner.OracleDrafter{Tokens: full, Limit: 7, Noise: 0.3, Vocab: vocab, Seed: uint64(trial)}
			if got, _ = generate(t, target, prompt, n, nil, sample.Options{}, o.Open(512), o.Depth()); !slices.Equal(got, want) {
				t.Fatalf("trial %d oracle:\n got %v\nwant %v", trial, got, want)
			}
		}
	})
}
