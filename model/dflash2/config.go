// Package dflash2 owns the DFlash2 draft (DFLASH.md section 5; /work/notes/dflash2-spec.md): the
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
	"errors"
	"fmt"
	"math"
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

// validate checks the fields on their own; CheckTarget checks them against a target.
func (c *Config) validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.Vocab},
		{"num_target_layers", c.TargetLayerCount},
		{"dflash_config.conv_kernel_size", c.ConvKernel}, {"dflash_config.conv_group_size", c.ConvGroup},
		{"dflash_config.selector_rank", c.SelectorRank}, {"dflash_config.selector_top_k", c.SelectorTopK},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s %d must be positive", p.name, p.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("num_key_value_heads %d must divide num_attention_heads %d", c.KVHeads, c.Heads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be even for rotary embeddings", c.HeadDim)
	}
	if !(c.RMSEps > 0) || c.RMSEps >= 1 {
		return fmt.Errorf("rms_norm_eps %g must be in (0, 1)", c.RMSEps)
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("rope_theta %g must be a finite number above 1", c.RopeTheta)
	}
	if c.BlockSize < 2 {
		return fmt.Errorf("block_size %d must be at least 2 (an anchor and one MASK row)", c.BlockSize)
	}
	if c.MaskID < 0 {
		return fmt.Errorf("dflash_config.mask_token_id %d must not be negative", c.MaskID)
	}
	if len(c.TargetLayers) == 0 {
		return errors.New("dflash_config.target_layer_ids is empty; want at least one target layer")
	}
	for i, id := range c.TargetLayers {
		if id < 0 || i > 0 && id <= c.TargetLayers[i-1] {
			return fmt.Errorf("dflash_config.target_layer_ids %v: entry %d (%d) must be non-negative and above the previous one", c.TargetLayers, i, id)
		}
	}
	if c.LayerTypes != nil {
		if len(c.LayerTypes) != c.Layers {
			return fmt.Errorf("layer_types has %d entries, want num_hidden_layers = %d", len(c.LayerTypes), c.Layers)
		}
		for i, t := range c.LayerTypes {
			switch t {
			case dflash.FullAttention:
			case dflash.SlidingAttention:
				if c.SlidingWindow <= 0 {
					return fmt.Errorf("layer_types[%d] is %s but sliding_window %d is not positive", i, t, c.SlidingWindow)
				}
				if v := c.Visibility(i); v.Bidirectional && c.SlidingWindow < c.BlockSize {
					return fmt.Errorf("layer %d: bidirectional sliding_window %d below block_size %d is not supported", i, c.SlidingWindow, c.BlockSize)
				}
			default:
				return fmt.Errorf("layer_types[%d] = %q, want %q or %q", i, t, dflash.FullAttention, dflash.SlidingAttention)
			}
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
	for _, m := range []struct {
		name string
		v    float64
	}{{"input_embedding_scale", c.EmbedScale}, {"output_multiplier", c.LogitScale}, {"final_logit_softcapping", c.LogitSoftcap}} {
		if m.v < 0 || math.IsNaN(m.v) || math.IsInf(m.v, 0) {
			return fmt.Errorf("dflash_config.%s %g must be a finite number, not negative", m.name, m.v)
		}
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

// IsDraft reads dir/config.json and reports Detect of it, for callers choosing a loader.
func IsDraft(dir string) (bool, error) {
	hc, err := hf.LoadConfig(dir)
	if err != nil {
		return false, fmt.Errorf("dflash2: %w", err)
	}
	return Detect(hc), nil
}

// fromHF reads a DFlash2 config from a parsed config.json. DFlash keys and the DFlash2 keys are
// looked up in dflash_config first and at the top level second; targetLayers fills
// num_target_layers when the file omits it.
func fromHF(hc *hf.Config, targetLayers int) (Config, error) {
	if !Detect(hc) {
		return Config{}, fmt.Errorf("architectures %v, want [%q] (or a DFlash draft carrying %v in dflash_config)", hc.Architectures, Arch, selectorKeys)
	}
	var c Config
	c.Hidden, c.Intermediate, c.Layers = hc.HiddenSize, hc.IntermediateSize, hc.NumHiddenLayers
	c.Heads, c.KVHeads, c.HeadDim, c.Vocab = hc.NumAttentionHeads, hc.NumKeyValueHeads, hc.HeadDim, hc.VocabSize
	c.RMSEps, c.RopeTheta, c.RopeScaling, c.MaxPositions = hc.RMSNormEps, hc.RopeTheta, hc.RopeScaling, hc.MaxPositionEmbeddings
	var dc map[string]any
	if v, ok := hc.Raw["dflash_config"]; ok && v != nil {
		if dc, ok = v.(map[string]any); !ok {
			return Config{}, fmt.Errorf("dflash_config is %T, want an object", v)
		}
	}
	lookup := func(name string) (any, string) {
		if v, ok := dc[name]; ok && v != nil {
			return v, "dflash_config." + name
		}
		if v, ok := hc.Raw[name]; ok && v != nil {
			return v, name
		}
		return nil, "dflash_config." + name
	}
	var err error
	intKey := func(dst *int, name string, def int, required bool) {
		if err != nil {
			return
		}
		v, field := lookup(name)
		if v == nil {
			if required {
				err = fmt.Errorf("%s is missing", field)
			}
			*dst = def
			return
		}
		*dst, err = asInt(field, v)
	}
	floatKey := func(dst *float64, name string) {
		if err != nil {
			return
		}
		if v, field := lookup(name); v != nil {
			f, ok := v.(float64)
			if !ok {
				err = fmt.Errorf("%s is %v, want a number", field, v)
			}
			*dst = f
		}
	}
	intKey(&c.BlockSize, "block_size", 16, false)
	intKey(&c.MaskID, "mask_token_id", 0, true)
	intKey(&c.TargetLayerCount, "num_target_layers", targetLayers, false)
	intKey(&c.SlidingWindow, "sliding_window", 0, false)
	intKey(&c.ConvKernel, "conv_kernel_size", 0, true)
	intKey(&c.ConvGroup, "conv_group_size", 0, true)
	intKey(&c.SelectorRank, "selector_rank", 0, true)
	intKey(&c.SelectorTopK, "selector_top_k", 0, true)
	floatKey(&c.EmbedScale, "input_embedding_scale")
	floatKey(&c.LogitScale, "output_multiplier")
	floatKey(&c.LogitSoftcap, "final_logit_softcapping")
	if err != nil {
		return Config{}, err
	}
	if v, field := lookup("target_layer_ids"); v != nil {
		list, ok := v.([]any)
		if !ok {
			return Config{}, fmt.Errorf("%s is %v, want a list of layer ids", field, v)
		}
		c.TargetLayers = make([]int, len(list))
		for i, e := range list {
			if c.TargetLayers[i], err = asInt(fmt.Sprintf("%s[%d]", field, i), e); err != nil {
				return Config{}, err
			}
		}
	} else {
		c.TargetLayers = dflash.DefaultTargetLayers(c.TargetLayerCount, c.Layers)
	}
	for _, name := range []string{"causal", "is_causal"} {
		v, field := lookup(name)
		if v == nil {
			continue
		}
		b, ok := v.(bool)
		if !ok {
			return Config{}, fmt.Errorf("%s is %v, want true or false", field, v)
		}
		if c.Causal != nil && *c.Causal != b {
			return Config{}, fmt.Errorf("%s is %v but another causal key says %v", field, b, *c.Causal)
		}
		c.Causal = &b
	}
	if v, _ := lookup("layer_types"); v != nil {
		list, ok := v.([]any)
		if !ok {
			return Config{}, fmt.Errorf("layer_types is %v, want a list", v)
		}
		c.LayerTypes = make([]string, len(list))
		for i, e := range list {
			if c.LayerTypes[i], ok = e.(string); !ok {
				return Config{}, fmt.Errorf("layer_types[%d] is %v, want a string", i, e)
			}
		}
	}
	return c, nil
}

func asInt(field string, v any) (int, error) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
		return 0, fmt.Errorf("%s is %v, want an integer", field, v)
	}
	return int(f), nil
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
// convolutions and the selector (shapes [out, in] for matrices; see dflash2-spec.md).
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
