// Package dflash2 owns the DFlash2 draft (../shared/docs/DFLASH.md section 5): the
// DFlash block-diffusion backbone with a grouped dynamic depthwise convolution around every
// attention and MLP sublayer, and a low-rank candidate selector that scores the target head's
// top-K tokens per slot given the token chosen for the slot before. It loads and checks
// DFlash2DraftModel folders, runs the forward over context rows and one block, exposes the
// selector as a model.Walk, and writes folders of the same layout (random ones for tests).
//
// Like the DFlash draft it borrows the target's embedding and raw output head. It never decides
// which rows are context or block, never rewinds its cache and never samples: the runner's
// selector session walks the slots and turns the scores into proposals.
package dflash2

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
)

// Arch is the architectures entry of a DFlash2 draft's config.json (vLLM, SGLang and SpecForge
// all register this name).
const Arch = "DFlash2DraftModel"

// Config is a DFlash2 draft's shape: the DFlash backbone plus the convolution and selector.
type Config struct {
	dflash.Config
	ConvKernel   int // dflash_config.conv_kernel_size: taps k of each convolution
	ConvGroup    int // dflash_config.conv_group_size: channels sharing one dynamic kernel
	SelectorRank int // dflash_config.selector_rank: r, the codebooks' width
	SelectorTopK int // dflash_config.selector_top_k: K candidates per slot
}

// Groups is the number of dynamic kernels per tap: hidden / conv_group_size.
func (c *Config) Groups() int { return c.Hidden / c.ConvGroup }

// ConfigFor returns a DFlash2 config fitting target with the published defaults for the new
// fields (2 taps, groups of 16 channels or fewer when the hidden width is small, rank 256 capped
// by the vocabulary, 16 candidates capped by the vocabulary).
func ConfigFor(target model.Config, draftLayers, blockSize int) Config {
	group := 16
	for group > 1 && target.Hidden%group != 0 {
		group /= 2
	}
	return Config{
		Config:     dflash.ConfigFor(target, draftLayers, blockSize),
		ConvKernel: 2, ConvGroup: group,
		SelectorRank: min(256, target.Vocab), SelectorTopK: min(16, target.Vocab),
	}
}

// Validate checks the fields on their own (DFlash's checks, then the convolution's and the
// selector's); CheckTarget checks them against a target.
func (c *Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		v    int
	}{
		{"dflash_config.conv_kernel_size", c.ConvKernel}, {"dflash_config.conv_group_size", c.ConvGroup},
		{"dflash_config.selector_rank", c.SelectorRank}, {"dflash_config.selector_top_k", c.SelectorTopK},
	} {
		if p.v <= 0 {
			return fmt.Errorf("%s %d must be positive", p.name, p.v)
		}
	}
	if c.ConvKernel > c.BlockSize {
		return fmt.Errorf("dflash_config.conv_kernel_size %d exceeds block_size %d", c.ConvKernel, c.BlockSize)
	}
	if c.Hidden%c.ConvGroup != 0 {
		return fmt.Errorf("dflash_config.conv_group_size %d must divide hidden_size %d", c.ConvGroup, c.Hidden)
	}
	if c.SelectorTopK > c.Vocab {
		return fmt.Errorf("dflash_config.selector_top_k %d exceeds vocab_size %d", c.SelectorTopK, c.Vocab)
	}
	return nil
}

// CheckTarget reports the first way the draft does not fit target (DFlash's checks; the
// selector's codebooks are over the draft's vocab_size, which must be the target's).
func (c *Config) CheckTarget(t model.Config) error {
	if err := c.Config.CheckTarget(t); err != nil {
		return err
	}
	if c.SelectorTopK > t.Vocab {
		return fmt.Errorf("dflash_config.selector_top_k %d exceeds the target's vocabulary %d", c.SelectorTopK, t.Vocab)
	}
	return nil
}

// selectorKeys are the config keys only a DFlash2 draft has.
var selectorKeys = []string{"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"}

// Detect reports whether a parsed config.json describes a DFlash2 draft: its architectures name
// DFlash2DraftModel, or a DFlash draft (DFlashDraftModel) carries all four DFlash2 keys in
// dflash_config (or at the top level), as some exports do.
func Detect(hc *hf.Config) bool {
	if slices.Contains(hc.Architectures, Arch) {
		return true
	}
	if !slices.Contains(hc.Architectures, dflash.Arch) {
		return false
	}
	dc, _ := hc.Raw["dflash_config"].(map[string]any)
	for _, k := range selectorKeys {
		if dc[k] == nil && hc.Raw[k] == nil {
			return false
		}
	}
	return true
}

// IsDraft reads the config.json of a draft folder or draft GGUF and reports Detect of it, for
// callers choosing a loader.
func IsDraft(dir string) (bool, error) {
	hc, err := dflash.LoadConfig(dir)
	if err != nil {
		return false, fmt.Errorf("dflash2: %w", err)
	}
	return Detect(hc), nil
}

// fromHF reads a DFlash2 config from a parsed config.json and validates it: DFlash's fields
// through dflash.ParseConfig, then the four DFlash2 keys, looked up the same way (dflash_config
// first, the top level second); targetLayers fills num_target_layers when the file omits it.
func fromHF(hc *hf.Config, targetLayers int) (Config, error) {
	if !Detect(hc) {
		return Config{}, fmt.Errorf("architectures %v, want [%q] (or a DFlash draft carrying %v in dflash_config)", hc.Architectures, Arch, selectorKeys)
	}
	base, err := dflash.ParseConfig(hc, targetLayers)
	if err != nil {
		return Config{}, err
	}
	keys, err := dflash.NewKeys(hc)
	if err != nil {
		return Config{}, err
	}
	c := Config{Config: base}
	for _, k := range []struct {
		dst  *int
		name string
	}{
		{&c.ConvKernel, "conv_kernel_size"}, {&c.ConvGroup, "conv_group_size"},
		{&c.SelectorRank, "selector_rank"}, {&c.SelectorTopK, "selector_top_k"},
	} {
		if *k.dst, err = keys.Int(k.name, 0, true); err != nil {
			return Config{}, err
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// JSON renders the config.json of a DFlash2 draft: DFlash's, with architectures
// [DFlash2DraftModel] and the four DFlash2 keys in dflash_config.
func (c *Config) JSON(dtype string) ([]byte, error) {
	base, err := c.Config.JSON(dtype)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(base, &m); err != nil {
		return nil, fmt.Errorf("dflash2 config: re-read DFlash config: %w", err)
	}
	m["architectures"] = []string{Arch}
	dc, _ := m["dflash_config"].(map[string]any)
	if dc == nil {
		dc = map[string]any{}
	}
	dc["conv_kernel_size"] = c.ConvKernel
	dc["conv_group_size"] = c.ConvGroup
	dc["selector_rank"] = c.SelectorRank
	dc["selector_top_k"] = c.SelectorTopK
	m["dflash_config"] = dc
	return json.MarshalIndent(m, "", "  ")
}

// Tensors lists every weight of a DFlash2 draft of this config: DFlash's, each layer's two
// convolutions and the selector. Matrices are [out, in]. A base kernel is [side, tap, channel]
// (side 0 acts before the sublayer, side 1 after it); a kernel projection maps the normed
// sublayer input to [side][tap][group] deltas; the codebooks are [vocab, rank].
func (c *Config) Tensors() []dflash.TensorShape {
	out := c.Config.Tensors()
	h, k, g := c.Hidden, c.ConvKernel, c.Groups()
	for i := 0; i < c.Layers; i++ {
		for _, conv := range []string{"attention_conv", "mlp_conv"} {
			p := fmt.Sprintf("layers.%d.%s.", i, conv)
			out = append(out,
				dflash.TensorShape{Name: p + "base_kernel", Shape: []int{2, k, h}},
				dflash.TensorShape{Name: p + "kernel_projection.weight", Shape: []int{2 * k * g, h}})
		}
	}
	return append(out,
		dflash.TensorShape{Name: "candidate_selector.hidden_projection.weight", Shape: []int{c.SelectorRank, h}},
		dflash.TensorShape{Name: "candidate_selector.predecessor_codebook", Shape: []int{c.Vocab, c.SelectorRank}},
		dflash.TensorShape{Name: "candidate_selector.successor_codebook", Shape: []int{c.Vocab, c.SelectorRank}})
}

// FitConfig is the draft config a parsed config.json gives, validated and checked against the
// target's shape as Load checks it, without reading weights. The output head Load also needs
// is the target's to give, so only loading can check it.
func FitConfig(hc *hf.Config, target model.Config) (Config, error) {
	c, err := fromHF(hc, target.Layers)
	if err != nil {
		return Config{}, err
	}
	if err := c.CheckTarget(target); err != nil {
		return Config{}, fmt.Errorf("draft does not fit its target: %w", err)
	}
	return c, nil
}
