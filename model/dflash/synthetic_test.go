package dflash

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/model/transformer"
)

// Every synthetic draft fits the synthetic target of its name (the loader's own checks), has the
// published drafts' 5 layers and block of 16, and taps by the default rule: [1 9 17 25 33] on
// Qwen3-4B's 36 layers (DFLASH.md's example), [1 7 13 19 25] on the 28-layer sizes.
func TestSyntheticDraftsFitTheirTargets(t *testing.T) {
	taps := map[string][]int{
		"qwen3-0.6b": {1, 7, 13, 19, 25},
		"qwen3-1.7b": {1, 7, 13, 19, 25},
		"qwen3-4b":   {1, 9, 17, 25, 33},
	}
	for name, want := range taps {
		tc, err := transformer.SyntheticConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := SyntheticConfig(name + "-dflash-b16")
		if err != nil {
			t.Fatal(err)
		}
		if err := dc.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := dc.CheckTarget(tc); err != nil {
			t.Errorf("%s: does not fit its target: %v", name, err)
		}
		if dc.Layers != 5 || dc.BlockSize != 16 || !slices.Equal(dc.TargetLayers, want) {
			t.Errorf("%s: %d layers, block %d, taps %v; want 5, 16, %v", name, dc.Layers, dc.BlockSize, dc.TargetLayers, want)
		}
		if dc.Heads != tc.Heads || dc.KVHeads != tc.KVHeads || dc.HeadDim != tc.HeadDim || dc.Intermediate != tc.Intermediate {
			t.Errorf("%s: attention/MLP shape %+v differs from the target's %+v", name, dc, tc)
		}
	}
	// Qwen3-8B's draft is 4096 wide: it must not pass as Qwen3-4B's.
	dc, err := SyntheticConfig("qwen3-8b-dflash-b16")
	if err != nil {
		t.Fatal(err)
	}
	tc, _ := transformer.SyntheticConfig("qwen3-4b")
	if err := dc.CheckTarget(tc); err == nil {
		t.Error("the Qwen3-8B draft was accepted for a Qwen3-4B target")
	}
	if _, err := SyntheticConfig("qwen3-14b"); err == nil {
		t.Error("an unknown name was accepted")
	}
}

// The Qwen3-0.6B synthetic draft builds and drafts a block (on a one-layer stand-in target of
// the full shape: the draft uses only the target's config, embedding and head).
func TestSyntheticDraftBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 170 MB of random weights")
	}
	cfg, err := transformer.SyntheticConfig("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	one := cfg
	one.Layers = 1
	m, err := transformer.Synthetic(one, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Synthetic("qwen3-0.6b", shapedTarget{m, cfg}, 3)
	if err != nil {
		t.Fatal(err)
	}
	c := d.NewCache(64)
	ctx := make([]float32, 4*len(d.TargetLayers())*cfg.Hidden)
	block := make([]int, 16)
	for i := range block {
		block[i] = d.MaskID()
	}
	block[0] = 7
	logits, err := d.Forward(c, ctx, 4, block)
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != 16*cfg.Vocab {
		t.Errorf("%d logits, want %d", len(logits), 16*cfg.Vocab)
	}
}
