package qwen35

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// Architectures this package loads, and the MoE family it refuses by name.
const (
	ArchCausalLM    = "Qwen3_5ForCausalLM"
	ArchConditional = "Qwen3_5ForConditionalGeneration"
	archMoEPrefix   = "Qwen3_5Moe"
)

// LayerType is a decoder layer's mixer.
type LayerType int

const (
	Linear LayerType = iota // Gated DeltaNet ("linear_attention")
	Full                    // gated softmax attention ("full_attention")
)

func (t LayerType) String() string {
	if t == Full {
		return "full_attention"
	}
	return "linear_attention"
}

// Config is the shape of a Qwen3.5 text decoder. The embedded model.Config describes what every
// target has; its Heads, KVHeads and HeadDim are those of the full-attention layers.
type Config struct {
	model.Config
	LayerTypes []LayerType
	// Gated DeltaNet shape: KeyHeads (Hk) of KeyDim (dk) for q and k, ValueHeads (Hv) of ValueDim
	// (dv) for v, z and the state; value head j reads key head j / (Hv/Hk).
	KeyHeads, ValueHeads, KeyDim, ValueDim int
	ConvKernel                             int // K: the conv carries the last K-1 inputs
	RotaryDim                              int // rd: the leading dims of a head that RoPE rotates
}

// ConvChannels is C = 2*Hk*dk + Hv*dv, the width of the conv (rows [q ; k ; v]).
func (c *Config) ConvChannels() int { return 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim }

// RecurrentShapes are the recurrent states of a cache for this shape, one per linear layer: a
// conv window of K-1 rows of ConvChannels and a state [Hv][dk][dv], float32 (what NewCache
// allocates, so cache.StateBytes of them is one sequence's state).
func (c *Config) RecurrentShapes() []cache.RecurrentShape {
	shape := cache.RecurrentShape{ConvLen: (c.ConvKernel - 1) * c.ConvChannels(), StateLen: c.ValueHeads * c.KeyDim * c.ValueDim}
	var shapes []cache.RecurrentShape
	for _, t := range c.LayerTypes {
		if t == Linear {
			shapes = append(shapes, shape)
		}
	}
	return shapes
}

// SequenceMemory is what one sequence of a hybrid target holds beyond its key/value cache, in
// bytes: the live recurrent state, the snapshot slots of a depth-Depth verify (Depth states:
// every row of the Depth+1 but the last, whose state is the live one; cache.Hybrid) and
// Checkpoints prompt checkpoints (one state each; runner.CheckpointPolicy).
type SequenceMemory struct {
	Depth, Checkpoints                    int
	State, SnapshotBytes, CheckpointBytes int64
}

// Total is every byte of m.
func (m SequenceMemory) Total() int64 { return m.State + m.SnapshotBytes + m.CheckpointBytes }

// Memory is SequenceMemory for this shape at a verify depth and a checkpoint count.
func (c *Config) Memory(depth, checkpoints int) SequenceMemory {
	st := cache.StateBytes(c.RecurrentShapes())
	return SequenceMemory{Depth: depth, Checkpoints: checkpoints, State: st,
		SnapshotBytes: int64(max(depth, 0)) * st, CheckpointBytes: int64(max(checkpoints, 0)) * st}
}

// Attention is the full-attention layers' shape, the one NewCache's key/value cache is laid out
// for (nn.Attention.NewKV).
func (c *Config) Attention() nn.Attention {
	a := nn.NewAttention(c.Heads, c.KVHeads, c.HeadDim)
	a.BF16Cache = nn.CacheBF16For(c.DType)
	return a
}

// CacheCapacity is the positions NewCache(capacity) holds: capacity clamped to [1, MaxSeq].
func (c *Config) CacheCapacity(capacity int) int { return min(max(capacity, 1), c.MaxSeq) }

// CacheBytes is the memory NewCache(capacity) allocates: keys and values (with their head-major
// copies) for the full-attention layers only, and one live recurrent state. Snapshot slots and
// checkpoints come on top (Memory, SequenceBytes).
func (c *Config) CacheBytes(capacity int) int64 {
	return c.Attention().KVBytes(c.count(Full), c.CacheCapacity(capacity)) + cache.StateBytes(c.RecurrentShapes())
}

// SequenceBytes is the memory one sequence of capacity positions holds at most: its cache
// (CacheBytes), the snapshot slots of a depth-depth verify (0 without a draft) and checkpoints
// prompt checkpoints. Each part is counted by the function its allocation follows.
func (c *Config) SequenceBytes(capacity, depth, checkpoints int) int64 {
	m := c.Memory(depth, checkpoints)
	return c.CacheBytes(capacity) + m.SnapshotBytes + m.CheckpointBytes
}

// count returns how many layers are of type t.
func (c *Config) count(t LayerType) int {
	n := 0
	for _, lt := range c.LayerTypes {
		if lt == t {
			n++
		}
	}
	return n
}

// Check reports the first value of c the engine cannot run, naming the config.json field.
func (c *Config) Check() error {
	positive := []struct {
		name string
		v    int
	}{
		{"num_hidden_layers", c.Layers}, {"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate},
		{"vocab_size", c.Vocab}, {"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads},
		{"head_dim", c.HeadDim}, {"linear_num_key_heads", c.KeyHeads}, {"linear_num_value_heads", c.ValueHeads},
		{"linear_key_head_dim", c.KeyDim}, {"linear_value_head_dim", c.ValueDim},
		{"linear_conv_kernel_dim", c.ConvKernel}, {"max_position_embeddings", c.MaxSeq},
	}
	for _, f := range positive {
		if f.v <= 0 {
			return fmt.Errorf("%s %d must be positive", f.name, f.v)
		}
	}
	switch {
	case len(c.LayerTypes) != c.Layers:
		return fmt.Errorf("layer_types has %d entries, want num_hidden_layers = %d", len(c.LayerTypes), c.Layers)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("num_key_value_heads %d does not divide num_attention_heads %d", c.KVHeads, c.Heads)
	case c.ValueHeads%c.KeyHeads != 0:
		return fmt.Errorf("linear_num_key_heads %d does not divide linear_num_value_heads %d (value head j reads key head j/(Hv/Hk))", c.KeyHeads, c.ValueHeads)
	case c.RotaryDim <= 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0:
		return fmt.Errorf("rotary dim %d (head_dim %d x rope_parameters.partial_rotary_factor) must be even and in (0, head_dim]", c.RotaryDim, c.HeadDim)
	case c.RopeTheta <= 0:
		return fmt.Errorf("rope_parameters.rope_theta %g must be positive", c.RopeTheta)
	case c.RMSEps <= 0:
		return fmt.Errorf("rms_norm_eps %g must be positive", c.RMSEps)
	}
	return nil
}

// rawText mirrors the text fields of config.json (top level, or text_config); pointers tell
// absent from zero.
type rawText struct {
	ModelType             string          `json:"model_type"`
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	LayerTypes            []string        `json:"layer_types"`
	FullAttentionInterval *int            `json:"full_attention_interval"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	LinearKeyHeads        *int            `json:"linear_num_key_heads"`
	LinearValueHeads      *int            `json:"linear_num_value_heads"`
	LinearKeyDim          *int            `json:"linear_key_head_dim"`
	LinearValueDim        *int            `json:"linear_value_head_dim"`
	ConvKernel            *int            `json:"linear_conv_kernel_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	HiddenAct             string          `json:"hidden_act"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RopeParameters        *rawRope        `json:"rope_parameters"`
	RopeTheta             *float64        `json:"rope_theta"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	NumExperts            *int            `json:"num_experts"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
}

type rawRope struct {
	RopeType            string   `json:"rope_type"`
	RopeTheta           *float64 `json:"rope_theta"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
}

type rawTop struct {
	rawText
	Architectures []string `json:"architectures"`
	TextConfig    *rawText `json:"text_config"`
}

// ParseConfig reads a Qwen3.5 config.json in either layout: Qwen3_5ForCausalLM with the text
// fields at the top level, or Qwen3_5ForConditionalGeneration with them under text_config (the
// vision half is ignored: the model is served text-only). It reports which layout it was, so the
// loader knows the tensor prefix. A Qwen3.5-MoE config is refused, saying so.
//
// Defaults, where a field is absent, are those of transformers' Qwen3_5TextConfig for fields
// every released config writes out anyway (head_dim 256, the Gated DeltaNet sizes 16/32 heads of
// 128, conv kernel 4, full_attention_interval 4, partial_rotary_factor 0.25, rms_norm_eps 1e-6);
// the widths, layer and head counts, vocabulary and rope_theta have no default and must be given.
func ParseConfig(data []byte) (cfg Config, conditional bool, err error) {
	var top rawTop
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, false, fmt.Errorf("config.json: %w", err)
	}
	arch := ""
	for _, a := range top.Architectures {
		if strings.HasPrefix(a, archMoEPrefix) {
			return Config{}, false, fmt.Errorf("config.json: architecture %s: Qwen3.5 mixture-of-experts models are not supported yet (only the dense %s and %s)", a, ArchCausalLM, ArchConditional)
		}
		if a == ArchCausalLM || a == ArchConditional {
			arch = a
			break
		}
	}
	if arch == "" {
		return Config{}, false, fmt.Errorf("config.json: architectures %v: none of %s, %s", top.Architectures, ArchCausalLM, ArchConditional)
	}
	t := &top.rawText
	if arch == ArchConditional {
		if top.TextConfig == nil {
			return Config{}, true, fmt.Errorf("config.json: %s needs a text_config object holding the decoder's fields", arch)
		}
		t = top.TextConfig
	}
	if strings.Contains(t.ModelType, "moe") || t.NumExperts != nil {
		return Config{}, false, fmt.Errorf("config.json: model_type %q / num_experts: Qwen3.5 mixture-of-experts models are not supported yet", t.ModelType)
	}
	cfg, err = textConfig(t)
	if err != nil {
		return Config{}, false, fmt.Errorf("config.json: %w", err)
	}
	cfg.Arch = arch
	// The published layout writes tie_word_embeddings at the top level, next to text_config.
	if arch == ArchConditional && top.TieWordEmbeddings != nil {
		cfg.TiedEmbeddings = *top.TieWordEmbeddings
	}
	if cfg.BOS == -1 && arch == ArchConditional {
		if cfg.BOS, err = tokenID(top.BOSTokenID, "bos_token_id"); err != nil {
			return Config{}, false, fmt.Errorf("config.json: %w", err)
		}
	}
	if len(cfg.EOS) == 0 && arch == ArchConditional {
		if cfg.EOS, err = tokenIDs(top.EOSTokenID); err != nil {
			return Config{}, false, fmt.Errorf("config.json: %w", err)
		}
	}
	if err := cfg.Check(); err != nil {
		return Config{}, false, fmt.Errorf("config.json: %w", err)
	}
	return cfg, arch == ArchConditional, nil
}

func textConfig(t *rawText) (Config, error) {
	var c Config
	required := []struct {
		name string
		src  *int
		dst  *int
	}{
		{"vocab_size", t.VocabSize, &c.Vocab}, {"hidden_size", t.HiddenSize, &c.Hidden},
		{"intermediate_size", t.IntermediateSize, &c.Intermediate}, {"num_hidden_layers", t.NumHiddenLayers, &c.Layers},
		{"num_attention_heads", t.NumAttentionHeads, &c.Heads}, {"num_key_value_heads", t.NumKeyValueHeads, &c.KVHeads},
	}
	for _, f := range required {
		if f.src == nil {
			return Config{}, fmt.Errorf("%s is missing", f.name)
		}
		*f.dst = *f.src
	}
	def := func(p *int, v int) int {
		if p != nil {
			return *p
		}
		return v
	}
	c.HeadDim = def(t.HeadDim, 256)
	c.KeyHeads = def(t.LinearKeyHeads, 16)
	c.ValueHeads = def(t.LinearValueHeads, 32)
	c.KeyDim = def(t.LinearKeyDim, 128)
	c.ValueDim = def(t.LinearValueDim, 128)
	c.ConvKernel = def(t.ConvKernel, 4)
	c.MaxSeq = def(t.MaxPositionEmbeddings, 262144)
	if t.HiddenAct != "" && t.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("hidden_act %q: want silu (the MLP and conv activation)", t.HiddenAct)
	}
	c.RMSEps = 1e-6
	if t.RMSNormEps != nil {
		c.RMSEps = float32(*t.RMSNormEps)
	}
	if t.TieWordEmbeddings != nil {
		c.TiedEmbeddings = *t.TieWordEmbeddings
	}
	// Newer configs nest RoPE under rope_parameters; older ones write the keys at the top level.
	factor := 0.25
	switch {
	case t.RopeParameters != nil && t.RopeParameters.RopeTheta != nil:
		c.RopeTheta = *t.RopeParameters.RopeTheta
	case t.RopeTheta != nil:
		c.RopeTheta = *t.RopeTheta
	default:
		return Config{}, errors.New("rope_parameters.rope_theta (or rope_theta) is missing")
	}
	if rp := t.RopeParameters; rp != nil {
		if rp.RopeType != "" && rp.RopeType != "default" {
			return Config{}, fmt.Errorf("rope_parameters.rope_type %q: want default", rp.RopeType)
		}
		if rp.PartialRotaryFactor != nil {
			factor = *rp.PartialRotaryFactor
		}
	} else if t.PartialRotaryFactor != nil {
		factor = *t.PartialRotaryFactor
	}
	if factor <= 0 || factor > 1 {
		return Config{}, fmt.Errorf("partial_rotary_factor %g must be in (0, 1]", factor)
	}
	c.RotaryDim = int(float64(c.HeadDim) * factor)
	if c.Layers <= 0 {
		return Config{}, fmt.Errorf("num_hidden_layers %d must be positive", c.Layers)
	}
	if t.LayerTypes != nil {
		for i, s := range t.LayerTypes {
			switch s {
			case "linear_attention":
				c.LayerTypes = append(c.LayerTypes, Linear)
			case "full_attention":
				c.LayerTypes = append(c.LayerTypes, Full)
			default:
				return Config{}, fmt.Errorf("layer_types[%d] = %q: want linear_attention or full_attention", i, s)
			}
		}
	} else {
		n := def(t.FullAttentionInterval, 4)
		if n <= 0 {
			return Config{}, fmt.Errorf("full_attention_interval %d must be positive", n)
		}
		for i := 0; i < c.Layers; i++ {
			lt := Linear
			if (i+1)%n == 0 {
				lt = Full
			}
			c.LayerTypes = append(c.LayerTypes, lt)
		}
	}
	var err error
	if c.BOS, err = tokenID(t.BOSTokenID, "bos_token_id"); err != nil {
		return Config{}, err
	}
	if c.EOS, err = tokenIDs(t.EOSTokenID); err != nil {
		return Config{}, err
	}
	return c, nil
}

// tokenID reads an optional integer id (-1 when absent or null).
func tokenID(raw json.RawMessage, name string) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return -1, nil
	}
	var v int
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// tokenIDs reads eos_token_id, an integer or a list of them.
func tokenIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("eos_token_id: want an integer or a list of integers: %w", err)
	}
	return slices.Clone(many), nil
}
