package dflash

import (
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
)

// The synthetic Qwen3.5 drafts fit the synthetic Qwen3.5 targets of their names: 5 layers of the
// target's full-attention shape (heads of 256), block 16, mask 248070, taps by the default rule,
// which gives QWEN35.md's [1 8 15 22 29] on the 4B's 32 layers.
func TestSyntheticQwen35DraftsFitTheirTargets(t *testing.T) {
	for name, want := range map[string][]int{
		"qwen3.5-4b":   {1, 8, 15, 22, 29},
		"qwen3.5-0.8b": {1, 6, 11, 16, 21},
	} {
		tc, err := qwen35.SyntheticConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := SyntheticConfig(name + "-dflash")
		if err != nil {
			t.Fatal(err)
		}
		if err := dc.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := dc.CheckTarget(tc.Config); err != nil {
			t.Errorf("%s: does not fit its target: %v", name, err)
		}
		if dc.Layers != 5 || dc.BlockSize != 16 || dc.MaskID != 248070 || !slices.Equal(dc.TargetLayers, want) {
			t.Errorf("%s: %d layers, block %d, mask %d, taps %v; want 5, 16, 248070, %v", name, dc.Layers, dc.BlockSize, dc.MaskID, dc.TargetLayers, want)
		}
		if dc.Heads != tc.Heads || dc.KVHeads != tc.KVHeads || dc.HeadDim != 256 || dc.Intermediate != tc.Intermediate || dc.RopeTheta != 1e7 {
			t.Errorf("%s: attention/MLP shape %+v differs from the target's %+v", name, dc, tc)
		}
	}
	if !slices.Contains(SyntheticNames(), "qwen3.5-4b-dflash") || !slices.Contains(SyntheticNames(), "qwen3-4b-dflash-b16") {
		t.Errorf("SyntheticNames %v lack a Qwen3.5 or a Qwen3 draft", SyntheticNames())
	}
	// The Qwen3.5-4B draft must not pass for a Qwen3 target (other vocabulary and depth).
	dc, _ := SyntheticConfig("qwen3.5-4b")
	q3, _ := transformer.SyntheticConfig("qwen3-4b")
	if err := dc.CheckTarget(q3); err == nil {
		t.Error("the Qwen3.5-4B draft was accepted for a Qwen3-4B target")
	}
}

// zlabQwen35Config is a Qwen3.5 DFlash draft's config.json in the form the published drafts and
// SpecForge's training configs use (written for this test): the target's attention shape, layer
// types spelled out, the decoder's multimodal RoPE keys carried along (mrope sections, a partial
// rotary factor), block_size at the top, the mask and taps under dflash_config.
const zlabQwen35Config = `{
  "architectures": ["DFlashDraftModel"],
  "model_type": "qwen3",
  "hidden_size": 2560, "intermediate_size": 9216, "num_hidden_layers": 5,
  "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
  "vocab_size": 248320, "rms_norm_eps": 1e-06, "rope_theta": 10000000,
  "max_position_embeddings": 262144, "tie_word_embeddings": true,
  "partial_rotary_factor": 0.25,
  "rope_scaling": {"rope_type": "default", "mrope_section": [11, 11, 10], "mrope_interleaved": true, "partial_rotary_factor": 0.25},
  "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention"],
  "sliding_window": null,
  "block_size": 16, "num_target_layers": 32,
  "dflash_config": {"mask_token_id": 248070, "target_layer_ids": [1, 8, 15, 22, 29]}
}`

// A Qwen3.5-4B draft config loads for the Qwen3.5-4B target with the target layer ids, block size
// and mask id it gives. Its RoPE keys describe the target's multimodal rotary, which the draft's
// own RoPE does not follow (z-lab's MLX draft builds plain RoPE over the whole head from
// rope_theta and a "default" rope_scaling), so they leave plain RoPE. A 27B-form config (64
// target layers, its own taps, 24 heads) loads for a 27B-shaped target; one that leaves the mask
// null, as SpecForge's training config does before training fills it in, is refused, naming it.
func TestZlabQwen35DraftConfigsLoad(t *testing.T) {
	tc, err := qwen35.SyntheticConfig("qwen3.5-4b")
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hf.ParseConfig([]byte(zlabQwen35Config))
	if err != nil {
		t.Fatal(err)
	}
	c, err := FitConfig(hc, tc.Config)
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockSize != 16 || c.MaskID != 248070 || !slices.Equal(c.TargetLayers, []int{1, 8, 15, 22, 29}) || c.TargetLayerCount != 32 {
		t.Errorf("block %d, mask %d, taps %v of %d layers; want 16, 248070, [1 8 15 22 29] of 32", c.BlockSize, c.MaskID, c.TargetLayers, c.TargetLayerCount)
	}
	if c.HeadDim != 256 || c.Heads != 16 || c.KVHeads != 4 || c.RopeTheta != 1e7 || c.RopeScaling != nil {
		t.Errorf("attention %d x %d / %d KV, rope theta %g, scaling %+v; want 16 x 256 / 4, 1e7, plain", c.Heads, c.HeadDim, c.KVHeads, c.RopeTheta, c.RopeScaling)
	}
	want, _ := SyntheticConfig("qwen3.5-4b-dflash")
	if c.Hidden != want.Hidden || c.Intermediate != want.Intermediate || c.Layers != want.Layers {
		t.Errorf("the config's shape %+v differs from the synthetic draft's %+v", c, want)
	}

	big := tc.Config
	big.Layers, big.Hidden, big.Intermediate, big.Heads = 64, 5120, 17408, 24
	form27 := strings.NewReplacer(`"hidden_size": 2560, "intermediate_size": 9216`, `"hidden_size": 5120, "intermediate_size": 17408`,
		`"num_attention_heads": 16`, `"num_attention_heads": 24`, `"num_target_layers": 32`, `"num_target_layers": 64`,
		`[1, 8, 15, 22, 29]`, `[3, 15, 31, 47, 59]`).Replace(zlabQwen35Config)
	hc, err = hf.ParseConfig([]byte(form27))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = FitConfig(hc, big); err != nil || !slices.Equal(c.TargetLayers, []int{3, 15, 31, 47, 59}) || c.Heads != 24 {
		t.Errorf("27B form: taps %v, heads %d, err %v", c.TargetLayers, c.Heads, err)
	}
	if _, err := FitConfig(hc, tc.Config); err == nil || !strings.Contains(err.Error(), "num_target_layers 64") {
		t.Errorf("the 27B draft on the 4B target: %v, want num_target_layers named", err)
	}
	hc, err = hf.ParseConfig([]byte(strings.Replace(zlabQwen35Config, `"mask_token_id": 248070`, `"mask_token_id": null`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FitConfig(hc, tc.Config); err == nil || !strings.Contains(err.Error(), "mask_token_id is missing") {
		t.Errorf("null mask: %v, want mask_token_id named", err)
	}
}
