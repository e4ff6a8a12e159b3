// Package dflash owns the DFlash block-diffusion draft (DFLASH.md section 2) in z-lab's Hugging
// Face layout: its config, loading and checking it against a target, its forward over context
// rows and one block, and writing draft folders (random ones for tests, trained ones for the
// trainer).
//
// The draft borrows the target's raw embedding and raw output head; it has no vocabulary of its
// own. It never decides which rows are context or block, never rewinds its cache and never
// samples: the runner's drafting session does all of that. The forward never allocates once the
// cache it runs on has been sized by NewCache.
package dflash

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// Arch is the architectures entry of a DFlash draft's config.json.
const Arch = "DFlashDraftModel"

// Layer types of layer_types.
const (
	FullAttention    = "full_attention"
	SlidingAttention = "sliding_attention"
)

// Config is the shape of a draft and how it attaches to its target. It is what config.json
// holds; the trainer fills one to write its output in the same layout (see Write).
type Config struct {
	Hidden       int // hidden_size; must equal the target's hidden width
	Intermediate int // intermediate_size
	Layers       int // num_hidden_layers (draft layers)
	Heads        int // num_attention_heads
	KVHeads      int // num_key_value_heads
	HeadDim      int // head_dim
	Vocab        int // vocab_size; must equal the target's
	RMSEps       float64
	RopeTheta    float64
	RopeScaling  *hf.RopeScaling // nil: plain RoPE
	MaxPositions int             // max_position_embeddings; 0 leaves it out of config.json

	BlockSize        int   // B: a block is [anchor, MASK x (B-1)]
	TargetLayerCount int   // num_target_layers
	MaskID           int   // dflash_config.mask_token_id
	TargetLayers     []int // dflash_config.target_layer_ids, ascending

	// Causal, when set, makes every layer causal (true) or bidirectional (false). When nil the
	// reference rule applies: full-attention layers are bidirectional, sliding ones causal.
	Causal *bool
	// LayerTypes is nil (all full attention) or one of FullAttention / SlidingAttention per layer.
	LayerTypes    []string
	SlidingWindow int // keys a sliding layer's query sees: positions > qpos - SlidingWindow

	// Optional multipliers of some published drafts; zero means absent (1, 1 and no capping).
	EmbedScale   float64 // input_embedding_scale: block embeddings are multiplied by it
	LogitScale   float64 // output_multiplier: logits are multiplied by it
	LogitSoftcap float64 // final_logit_softcapping: logits become c*tanh(logits/c)
}

// DefaultTargetLayers is the tap rule for a draft of draftLayers layers on a target of
// targetLayers layers when the config names none: one draft layer taps the middle layer,
// otherwise taps are spread from layer 1 to layer L-3, rounding half to even as Python's round
// does (the rule was written in Python). Qwen3 with 36 layers and 5 draft layers gives
// [1 9 17 25 33].
func DefaultTargetLayers(targetLayers, draftLayers int) []int {
	if draftLayers <= 1 {
		return []int{targetLayers / 2}
	}
	ids := make([]int, draftLayers)
	span := float64(targetLayers - 4)
	for i := range ids {
		ids[i] = int(math.RoundToEven(1 + float64(i)*span/float64(draftLayers-1)))
	}
	return ids
}

// SpreadTargetLayers is DefaultTargetLayers made usable for new drafts of shallow targets: the
// rule repeats ids when the target has fewer than n+3 layers (5 layers, 3 taps gives [1 2 2]), so
// ids are clamped into range and pushed up until strictly ascending, and dropped past the last
// layer. The loader keeps the plain rule for configs that omit their ids, as the reference does.
func SpreadTargetLayers(targetLayers, n int) []int {
	ids := DefaultTargetLayers(targetLayers, n)
	out := ids[:0]
	for _, v := range ids {
		v = max(0, min(v, targetLayers-1))
		if len(out) > 0 && v <= out[len(out)-1] {
			v = out[len(out)-1] + 1
		}
		if v < targetLayers {
			out = append(out, v)
		}
	}
	return out
}

// ConfigFor returns a draft config fitting target: the target's attention shape and MLP width,
// draftLayers layers, block size blockSize, default taps and the last vocabulary id as MASK
// (a real draft uses its tokenizer's mask token, e.g. 151669 for Qwen3).
func ConfigFor(target model.Config, draftLayers, blockSize int) Config {
	return Config{
		Hidden: target.Hidden, Intermediate: target.Intermediate, Layers: draftLayers,
		Heads: target.Heads, KVHeads: target.KVHeads, HeadDim: target.HeadDim, Vocab: target.Vocab,
		RMSEps: float64(target.RMSEps), RopeTheta: target.RopeTheta, MaxPositions: target.MaxSeq,
		BlockSize: blockSize, TargetLayerCount: target.Layers, MaskID: target.Vocab - 1,
		TargetLayers: SpreadTargetLayers(target.Layers, draftLayers),
	}
}

// Visibility is the attention rule of draft layer l for block rows.
func (c *Config) Visibility(l int) nn.Visibility {
	sliding := c.LayerTypes != nil && c.LayerTypes[l] == SlidingAttention
	causal := sliding
	if c.Causal != nil {
		causal = *c.Causal
	}
	v := nn.Visibility{Bidirectional: !causal}
	if sliding {
		v.Window = c.SlidingWindow
	}
	return v
}

// Validate checks the config on its own (the target checks are in CheckTarget). DFlash2 runs it
// on its embedded Config before checking its own fields.
func (c *Config) Validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.Vocab},
		{"num_target_layers", c.TargetLayerCount},
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
		if id < 0 {
			return fmt.Errorf("dflash_config.target_layer_ids[%d] = %d must not be negative", i, id)
		}
		if i > 0 && id <= c.TargetLayers[i-1] {
			return fmt.Errorf("dflash_config.target_layer_ids %v: entry %d (%d) must be above the previous %d (ids must be ascending and unique)", c.TargetLayers, i, id, c.TargetLayers[i-1])
		}
	}
	if c.LayerTypes != nil {
		if len(c.LayerTypes) != c.Layers {
			return fmt.Errorf("layer_types has %d entries, want num_hidden_layers = %d", len(c.LayerTypes), c.Layers)
		}
		for i, t := range c.LayerTypes {
			switch t {
			case FullAttention:
			case SlidingAttention:
				if c.SlidingWindow <= 0 {
					return fmt.Errorf("layer_types[%d] is %s but sliding_window %d is not positive", i, t, c.SlidingWindow)
				}
				// nn.Visibility limits only how far back a key lies; the reference also hides
				// keys more than a window ahead, which only matters inside a block wider than
				// the window.
				if v := c.Visibility(i); v.Bidirectional && c.SlidingWindow < c.BlockSize {
					return fmt.Errorf("layer %d: bidirectional sliding_window %d below block_size %d is not supported", i, c.SlidingWindow, c.BlockSize)
				}
			default:
				return fmt.Errorf("layer_types[%d] = %q, want %q or %q", i, t, FullAttention, SlidingAttention)
			}
		}
	}
	for _, m := range []struct {
		name string
		v    float64
	}{{"input_embedding_scale", c.EmbedScale}, {"output_multiplier", c.LogitScale}, {"final_logit_softcapping", c.LogitSoftcap}} {
		if m.v < 0 || math.IsNaN(m.v) || math.IsInf(m.v, 0) {
			return fmt.Errorf("%s %g must be a finite number, not negative", m.name, m.v)
		}
	}
	return nil
}

// CheckTarget reports the first way the draft does not fit target, naming the config field, its
// value and what it should be.
func (c *Config) CheckTarget(t model.Config) error {
	if c.TargetLayerCount != t.Layers {
		return fmt.Errorf("num_target_layers %d does not match the target: want %d (the target's layer count)", c.TargetLayerCount, t.Layers)
	}
	for i, id := range c.TargetLayers {
		if id >= t.Layers {
			return fmt.Errorf("dflash_config.target_layer_ids[%d] = %d is outside the target: want below %d (the target's layer count)", i, id, t.Layers)
		}
	}
	if c.Hidden != t.Hidden {
		return fmt.Errorf("hidden_size %d does not match the target: want %d (the target's hidden width)", c.Hidden, t.Hidden)
	}
	if c.Vocab != t.Vocab {
		return fmt.Errorf("vocab_size %d does not match the target: want %d (the target's vocabulary)", c.Vocab, t.Vocab)
	}
	if c.MaskID >= t.Vocab {
		return fmt.Errorf("dflash_config.mask_token_id %d is outside the vocabulary: want below %d", c.MaskID, t.Vocab)
	}
	return nil
}

// fromHF reads a DFlash draft config from a parsed config.json whose architectures name Arch.
func fromHF(hc *hf.Config, targetLayers int) (Config, error) {
	if !slices.Contains(hc.Architectures, Arch) {
		return Config{}, fmt.Errorf("architectures %v, want [%q]", hc.Architectures, Arch)
	}
	return ParseConfig(hc, targetLayers)
}

// ParseConfig reads the DFlash fields of a draft config from a parsed config.json (see Keys for
// where DFlash's own keys are looked up). targetLayers fills num_target_layers when the file
// omits it. It does not look at architectures: a caller loading a variant (DFlash2) decides
// which names it accepts, and reads the variant's extra keys through NewKeys.
func ParseConfig(hc *hf.Config, targetLayers int) (Config, error) {
	c := Config{
		Hidden: hc.HiddenSize, Intermediate: hc.IntermediateSize, Layers: hc.NumHiddenLayers,
		Heads: hc.NumAttentionHeads, KVHeads: hc.NumKeyValueHeads, HeadDim: hc.HeadDim,
		Vocab: hc.VocabSize, RMSEps: hc.RMSNormEps, RopeTheta: hc.RopeTheta,
		RopeScaling: hc.RopeScaling, MaxPositions: hc.MaxPositionEmbeddings,
	}
	keys, err := NewKeys(hc)
	if err != nil {
		return Config{}, err
	}
	if c.BlockSize, err = keys.Int("block_size", 16, false); err != nil {
		return Config{}, err
	}
	if c.MaskID, err = keys.Int("mask_token_id", 0, true); err != nil {
		return Config{}, err
	}
	if c.TargetLayerCount, err = keys.Int("num_target_layers", targetLayers, false); err != nil {
		return Config{}, err
	}
	if c.SlidingWindow, err = keys.Int("sliding_window", 0, false); err != nil {
		return Config{}, err
	}
	if v, field := keys.Lookup("target_layer_ids"); v != nil {
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
		c.TargetLayers = DefaultTargetLayers(c.TargetLayerCount, c.Layers)
	}
	// The causal switch has three spellings: DFLASH.md's dflash_config.causal, a top-level
	// causal, and the reference's top-level is_causal. They must agree when several are given.
	for _, name := range []string{"causal", "is_causal"} {
		v, field := keys.Lookup(name)
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
	if v, _ := keys.Lookup("layer_types"); v != nil {
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
	if c.EmbedScale, err = keys.Float("input_embedding_scale"); err != nil {
		return Config{}, err
	}
	if c.LogitScale, err = keys.Float("output_multiplier"); err != nil {
		return Config{}, err
	}
	if c.LogitSoftcap, err = keys.Float("final_logit_softcapping"); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Keys reads the keys DFlash and its variants add to config.json: each is looked up in
// dflash_config first and at the top level second, as the reference does. A null value counts
// as absent.
type Keys struct {
	dc, top map[string]any
}

// NewKeys returns the key reader of hc; dflash_config, when present, must be an object.
func NewKeys(hc *hf.Config) (Keys, error) {
	k := Keys{top: hc.Raw}
	if v, ok := hc.Raw["dflash_config"]; ok && v != nil {
		if k.dc, ok = v.(map[string]any); !ok {
			return Keys{}, fmt.Errorf("dflash_config is %T, want an object", v)
		}
	}
	return k, nil
}

// Lookup returns the value of name (nil when absent) and the field it came from, for errors:
// dflash_config.name, or name when only the top level has it.
func (k Keys) Lookup(name string) (v any, field string) {
	if v, ok := k.dc[name]; ok && v != nil {
		return v, "dflash_config." + name
	}
	if v, ok := k.top[name]; ok && v != nil {
		return v, name
	}
	return nil, "dflash_config." + name
}

// Int returns the integer name, def when it is absent, or an error when it is absent and
// required or present and not an integer.
func (k Keys) Int(name string, def int, required bool) (int, error) {
	v, field := k.Lookup(name)
	if v == nil {
		if required {
			return 0, fmt.Errorf("%s is missing", field)
		}
		return def, nil
	}
	return asInt(field, v)
}

// Float returns the number name, 0 when it is absent (the optional multipliers' "absent").
func (k Keys) Float(name string) (float64, error) {
	v, field := k.Lookup(name)
	if v == nil {
		return 0, nil
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("%s is %v, want a number", field, v)
	}
	return f, nil
}

func asInt(field string, v any) (int, error) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
		return 0, fmt.Errorf("%s is %v, want an integer", field, v)
	}
	return int(f), nil
}

// JSON renders the config as a config.json z-lab's reference loads (model_type qwen3,
// architectures [DFlashDraftModel]). dtype is recorded as torch_dtype ("bfloat16" or "float32").
func (c *Config) JSON(dtype string) ([]byte, error) {
	m := map[string]any{
		"architectures":       []string{Arch},
		"model_type":          "qwen3",
		"hidden_size":         c.Hidden,
		"intermediate_size":   c.Intermediate,
		"num_hidden_layers":   c.Layers,
		"num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads,
		"head_dim":            c.HeadDim,
		"vocab_size":          c.Vocab,
		"rms_norm_eps":        c.RMSEps,
		"rope_theta":          c.RopeTheta,
		"hidden_act":          "silu",
		"attention_bias":      false,
		"tie_word_embeddings": false,
		"torch_dtype":         dtype,
		"block_size":          c.BlockSize,
		"num_target_layers":   c.TargetLayerCount,
	}
	dc := map[string]any{"mask_token_id": c.MaskID, "target_layer_ids": c.TargetLayers}
	if c.MaxPositions > 0 {
		m["max_position_embeddings"] = c.MaxPositions
	}
	if rs := c.RopeScaling; rs != nil {
		r := map[string]any{"rope_type": rs.Type, "factor": rs.Factor}
		if rs.Type == "llama3" {
			r["low_freq_factor"] = rs.LowFreqFactor
			r["high_freq_factor"] = rs.HighFreqFactor
			r["original_max_position_embeddings"] = rs.OriginalMaxPositionEmbeddings
		}
		m["rope_scaling"] = r
	}
	if c.Causal != nil {
		// is_causal is what the reference reads; dflash_config.causal what DFLASH.md names.
		m["is_causal"] = *c.Causal
		dc["causal"] = *c.Causal
	}
	if c.LayerTypes != nil {
		m["layer_types"] = c.LayerTypes
		m["sliding_window"] = c.SlidingWindow
	}
	for k, v := range map[string]float64{"input_embedding_scale": c.EmbedScale, "output_multiplier": c.LogitScale, "final_logit_softcapping": c.LogitSoftcap} {
		if v != 0 {
			dc[k] = v
		}
	}
	m["dflash_config"] = dc
	return json.MarshalIndent(m, "", "  ")
}

// writeConfig writes dir/config.json.
func (c *Config) writeConfig(dir, dtype string) error {
	js, err := c.JSON(dtype)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644)
}

// FitConfig is the draft config a parsed config.json gives, validated and checked against the
// target's shape as Load checks it, without reading weights: a server can tell at startup
// whether a draft fits its target.
func FitConfig(hc *hf.Config, target model.Config) (Config, error) {
	c, err := fromHF(hc, target.Layers)
	if err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	if err := c.CheckTarget(target); err != nil {
		return Config{}, err
	}
	return c, nil
}
