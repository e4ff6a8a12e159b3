// Package hf owns reading Hugging Face model-folder configuration: config.json for
// Qwen3ForCausalLM and LlamaForCausalLM (and anything shaped like them, such as a DFlash draft's
// config, whose extra keys stay reachable through Config.Raw), generation_config.json,
// tokenizer_config.json's special tokens and chat template source, and the RoPE inverse
// frequencies a config implies. A config that nests the decoder under text_config (Qwen3.5's
// published Qwen3_5ForConditionalGeneration layout, next to a vision_config) is read from there,
// so no caller ever walks config.json itself.
//
// It never reads weights and never guesses silently: defaults are exactly those of the
// transformers library for these architectures, and a value the engine could not honour (an
// unsupported rope_scaling type, heads that do not divide the width) is an error naming the field.
package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// RopeScaling is the rope_scaling entry of config.json.
type RopeScaling struct {
	Type                          string // "llama3", "linear" or "default" ("rope_type", formerly "type")
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// Config is a parsed config.json with defaults applied and validated.
type Config struct {
	Architectures         []string
	ModelType             string
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int // defaults to NumAttentionHeads
	HeadDim               int // defaults to HiddenSize / NumAttentionHeads
	VocabSize             int
	MaxPositionEmbeddings int
	RMSNormEps            float64 // defaults to 1e-6 as in transformers
	RopeTheta             float64 // defaults to 10000
	RopeScaling           *RopeScaling
	TieWordEmbeddings     bool
	TorchDtype            string
	BOSTokenID            int   // -1 when absent
	EOSTokenIDs           []int // eos_token_id as a list (it may be an int or a list in the file)
	AttentionBias         bool
	// TextConfig says the decoder's fields were read from config.json's text_config object: a
	// multimodal config whose text half is the model served. VisionConfig says the config has a
	// vision_config (a vision tower the text decoder does not use).
	TextConfig, VisionConfig bool
	Raw                      map[string]any // the whole JSON object, for keys this struct does not name
}

// rawConfig mirrors the JSON; pointers tell absent from zero so defaults apply only when absent.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             *int            `json:"vocab_size"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"` // newer transformers spelling
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	TorchDtype            string          `json:"torch_dtype"`
	Dtype                 string          `json:"dtype"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	AttentionBias         *bool           `json:"attention_bias"`
}

type rawRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"`
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings"`
	RopeTheta                     *float64 `json:"rope_theta"`
}

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return c, nil
}

// nesting is what tells a multimodal config.json from a flat one.
type nesting struct {
	TextConfig   json.RawMessage `json:"text_config"`
	VisionConfig json.RawMessage `json:"vision_config"`
}

// ParseConfig parses and validates the contents of a config.json. When it has a text_config
// object the decoder's fields are read from there, as transformers does for a multimodal model
// that serves its text half: architectures, model_type and the vision_config stay the top
// level's; torch_dtype, tie_word_embeddings and the bos/eos ids are the top level's when it gives
// them (where the published Qwen3.5 configs write them), else text_config's.
func ParseConfig(data []byte) (*Config, error) {
	var r, top rawConfig
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	var n nesting
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	r = top
	nested := !isNull(n.TextConfig)
	if nested {
		// A fresh r: decoding into a copy of top would write through top's pointers.
		r = rawConfig{}
		if err := json.Unmarshal(n.TextConfig, &r); err != nil {
			return nil, fmt.Errorf("config.json: text_config: %w", err)
		}
		r.Architectures, r.ModelType = top.Architectures, top.ModelType
		if top.TorchDtype != "" || top.Dtype != "" {
			r.TorchDtype, r.Dtype = top.TorchDtype, top.Dtype
		}
		if top.TieWordEmbeddings != nil {
			r.TieWordEmbeddings = top.TieWordEmbeddings
		}
		if !isNull(top.BOSTokenID) {
			r.BOSTokenID = top.BOSTokenID
		}
		if !isNull(top.EOSTokenID) {
			r.EOSTokenID = top.EOSTokenID
		}
	}
	c := &Config{
		Architectures: r.Architectures,
		ModelType:     r.ModelType,
		TorchDtype:    r.TorchDtype,
		BOSTokenID:    -1,
		RMSNormEps:    1e-6,
		RopeTheta:     10000,
		TextConfig:    nested,
		VisionConfig:  !isNull(n.VisionConfig),
	}
	if err := json.Unmarshal(data, &c.Raw); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if c.TorchDtype == "" {
		c.TorchDtype = r.Dtype
	}
	if err := c.fill(&r); err != nil {
		if nested {
			return nil, fmt.Errorf("config.json: text_config: %w", err)
		}
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// fill reads the decoder's fields of r into c, with transformers' defaults, validating each.
func (c *Config) fill(r *rawConfig) error {
	required := []struct {
		name string
		src  *int
		dst  *int
	}{
		{"hidden_size", r.HiddenSize, &c.HiddenSize},
		{"intermediate_size", r.IntermediateSize, &c.IntermediateSize},
		{"num_hidden_layers", r.NumHiddenLayers, &c.NumHiddenLayers},
		{"num_attention_heads", r.NumAttentionHeads, &c.NumAttentionHeads},
		{"vocab_size", r.VocabSize, &c.VocabSize},
	}
	for _, f := range required {
		if f.src == nil {
			return fmt.Errorf("%s is missing", f.name)
		}
		if *f.src <= 0 {
			return fmt.Errorf("%s %d must be positive", f.name, *f.src)
		}
		*f.dst = *f.src
	}
	c.NumKeyValueHeads = c.NumAttentionHeads
	if r.NumKeyValueHeads != nil {
		c.NumKeyValueHeads = *r.NumKeyValueHeads
	}
	if c.NumKeyValueHeads <= 0 {
		return fmt.Errorf("num_key_value_heads %d must be positive", c.NumKeyValueHeads)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_key_value_heads %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if r.HeadDim != nil {
		c.HeadDim = *r.HeadDim
		if c.HeadDim <= 0 {
			return fmt.Errorf("head_dim %d must be positive", c.HeadDim)
		}
	} else {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return fmt.Errorf("num_attention_heads %d does not divide hidden_size %d", c.NumAttentionHeads, c.HiddenSize)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	// RoPE rotates pairs of dimensions; an odd head_dim leaves one unrotated, which no supported
	// architecture does.
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be even for rotary embeddings", c.HeadDim)
	}
	if r.MaxPositionEmbeddings != nil {
		c.MaxPositionEmbeddings = *r.MaxPositionEmbeddings
		if c.MaxPositionEmbeddings <= 0 {
			return fmt.Errorf("max_position_embeddings %d must be positive", c.MaxPositionEmbeddings)
		}
	}
	if r.RMSNormEps != nil {
		c.RMSNormEps = *r.RMSNormEps
	}
	if !(c.RMSNormEps > 0) || c.RMSNormEps >= 1 {
		return fmt.Errorf("rms_norm_eps %g must be in (0, 1)", c.RMSNormEps)
	}
	if r.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *r.TieWordEmbeddings
	}
	if r.AttentionBias != nil {
		c.AttentionBias = *r.AttentionBias
	}

	// Newer transformers fold rope_theta and the scaling into rope_parameters; read either.
	ropeRaw := r.RopeScaling
	if isNull(ropeRaw) && !isNull(r.RopeParameters) {
		ropeRaw = r.RopeParameters
	}
	var rope *rawRope
	if !isNull(ropeRaw) {
		rope = new(rawRope)
		if err := json.Unmarshal(ropeRaw, rope); err != nil {
			return fmt.Errorf("rope_scaling: %w", err)
		}
	}
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	} else if rope != nil && rope.RopeTheta != nil {
		c.RopeTheta = *rope.RopeTheta
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("rope_theta %g must be a finite number above 1", c.RopeTheta)
	}
	if rope != nil {
		rs, err := parseRope(rope, c.MaxPositionEmbeddings)
		if err != nil {
			return fmt.Errorf("rope_scaling: %w", err)
		}
		c.RopeScaling = rs
	}

	var err error
	if c.BOSTokenID, err = optionalID(r.BOSTokenID); err != nil {
		return fmt.Errorf("bos_token_id: %w", err)
	}
	if c.EOSTokenIDs, err = idList(r.EOSTokenID); err != nil {
		return fmt.Errorf("eos_token_id: %w", err)
	}
	return nil
}

func parseRope(r *rawRope, maxPos int) (*RopeScaling, error) {
	typ := r.RopeType
	if typ == "" {
		typ = r.Type
	}
	if typ == "" {
		typ = "default"
	}
	rs := &RopeScaling{Type: typ, Factor: 1}
	if r.Factor != nil {
		rs.Factor = *r.Factor
	}
	switch typ {
	case "default":
		return nil, nil // a rope_parameters block of the default type changes nothing
	case "linear":
		if r.Factor == nil {
			return nil, errors.New("linear scaling needs factor")
		}
		if !(rs.Factor > 0) || math.IsInf(rs.Factor, 0) {
			return nil, fmt.Errorf("factor %g must be positive", rs.Factor)
		}
	case "llama3":
		if r.Factor == nil || r.LowFreqFactor == nil || r.HighFreqFactor == nil || r.OriginalMaxPositionEmbeddings == nil {
			return nil, errors.New("llama3 scaling needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings")
		}
		rs.LowFreqFactor, rs.HighFreqFactor = *r.LowFreqFactor, *r.HighFreqFactor
		rs.OriginalMaxPositionEmbeddings = *r.OriginalMaxPositionEmbeddings
		if !(rs.Factor >= 1) || math.IsInf(rs.Factor, 0) {
			return nil, fmt.Errorf("factor %g must be at least 1", rs.Factor)
		}
		if !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) || math.IsInf(rs.HighFreqFactor, 0) {
			return nil, fmt.Errorf("need 0 < low_freq_factor %g < high_freq_factor %g", rs.LowFreqFactor, rs.HighFreqFactor)
		}
		if rs.OriginalMaxPositionEmbeddings <= 0 {
			return nil, fmt.Errorf("original_max_position_embeddings %d must be positive", rs.OriginalMaxPositionEmbeddings)
		}
	default:
		return nil, fmt.Errorf("type %q is not supported (supported: default, linear, llama3)", typ)
	}
	return rs, nil
}

// RopeInvFreq returns the headDim/2 inverse frequencies theta^(-2i/headDim) for i in
// [0, headDim/2), adjusted by rope_scaling, computed in float64.
//
// transformers computes the same formula in float32; callers wanting its exact table can round
// each value to float32, and agree with it to within float32 rounding of the power.
//
// llama3 scaling (Llama 3.1+): with wavelength w = 2*pi/f, L = original_max_position_embeddings,
// frequencies with w < L/high_freq_factor are kept, those with w > L/low_freq_factor are divided
// by factor, and those in between are blended: s = (L/w - low)/(high - low),
// f' = (1-s)*f/factor + s*f. Linear scaling divides every frequency by factor.
func (c *Config) RopeInvFreq(headDim int) []float64 {
	if headDim <= 0 {
		return nil
	}
	half := headDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(headDim))
	}
	rs := c.RopeScaling
	if rs == nil {
		return inv
	}
	switch rs.Type {
	case "linear":
		for i := range inv {
			inv[i] /= rs.Factor
		}
	case "llama3":
		L := float64(rs.OriginalMaxPositionEmbeddings)
		lowWavelen := L / rs.LowFreqFactor
		highWavelen := L / rs.HighFreqFactor
		for i, f := range inv {
			w := 2 * math.Pi / f
			switch {
			case w < highWavelen:
				// high frequency: kept
			case w > lowWavelen:
				inv[i] = f / rs.Factor
			default:
				s := (L/w - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-s)*f/rs.Factor + s*f
			}
		}
	}
	return inv
}

// GenerationConfig is generation_config.json: special tokens and default sampling settings.
// Pointer fields are nil when the file does not set them.
type GenerationConfig struct {
	Present     bool // false when the folder has no generation_config.json
	BOSTokenID  int  // -1 when absent
	EOSTokenIDs []int
	Temperature *float64
	TopK        *int
	TopP        *float64
	DoSample    *bool
	Raw         map[string]any
}

// LoadGenerationConfig reads dir/generation_config.json. An absent file is not an error: it
// returns a GenerationConfig with Present false and BOSTokenID -1.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &GenerationConfig{BOSTokenID: -1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load generation config: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return g, nil
}

// ParseGenerationConfig parses the contents of a generation_config.json.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	var r struct {
		BOS         json.RawMessage `json:"bos_token_id"`
		EOS         json.RawMessage `json:"eos_token_id"`
		Temperature *float64        `json:"temperature"`
		TopK        *int            `json:"top_k"`
		TopP        *float64        `json:"top_p"`
		DoSample    *bool           `json:"do_sample"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("generation_config.json: %w", err)
	}
	g := &GenerationConfig{Present: true, Temperature: r.Temperature, TopK: r.TopK, TopP: r.TopP, DoSample: r.DoSample}
	if err := json.Unmarshal(data, &g.Raw); err != nil {
		return nil, fmt.Errorf("generation_config.json: %w", err)
	}
	var err error
	if g.BOSTokenID, err = optionalID(r.BOS); err != nil {
		return nil, fmt.Errorf("generation_config.json: bos_token_id: %w", err)
	}
	if g.EOSTokenIDs, err = idList(r.EOS); err != nil {
		return nil, fmt.Errorf("generation_config.json: eos_token_id: %w", err)
	}
	if g.Temperature != nil && (*g.Temperature < 0 || math.IsNaN(*g.Temperature)) {
		return nil, fmt.Errorf("generation_config.json: temperature %g must not be negative", *g.Temperature)
	}
	if g.TopP != nil && !(*g.TopP >= 0 && *g.TopP <= 1) {
		return nil, fmt.Errorf("generation_config.json: top_p %g must be in [0, 1]", *g.TopP)
	}
	if g.TopK != nil && *g.TopK < 0 {
		return nil, fmt.Errorf("generation_config.json: top_k %d must not be negative", *g.TopK)
	}
	return g, nil
}

func isNull(m json.RawMessage) bool {
	return len(m) == 0 || string(m) == "null"
}

// optionalID reads a token id that may be absent or null (-1).
func optionalID(m json.RawMessage) (int, error) {
	if isNull(m) {
		return -1, nil
	}
	var id int
	if err := json.Unmarshal(m, &id); err != nil {
		return 0, fmt.Errorf("want an integer, got %s", m)
	}
	if id < 0 {
		return 0, fmt.Errorf("token id %d is negative", id)
	}
	return id, nil
}

// idList reads a token id given as an integer or a list of integers.
func idList(m json.RawMessage) ([]int, error) {
	if isNull(m) {
		return nil, nil
	}
	var ids []int
	if err := json.Unmarshal(m, &ids); err != nil {
		var one int
		if err := json.Unmarshal(m, &one); err != nil {
			return nil, fmt.Errorf("want an integer or a list of integers, got %s", m)
		}
		ids = []int{one}
	}
	for _, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("token id %d is negative", id)
		}
	}
	return ids, nil
}

// TokenizerConfig is what tokenizer_config.json says about special tokens and chat formatting.
// The tokenizer reads its special tokens from it and tokenizer/chat parses its template; this is
// the one reader of the file, so the two can never disagree about what it says.
type TokenizerConfig struct {
	Present bool // false when the folder has no tokenizer_config.json
	// ChatTemplate is the "default" template's source ("" when the file has none). Named holds
	// every template when chat_template is a list of {name, template} ("default", "tool_use",
	// "rag", ...); it is nil when chat_template is a single string.
	ChatTemplate string
	Named        map[string]string
	BOSToken     string // "" when null or absent
	EOSToken     string
	AddBOSToken  *bool // nil when the file does not say
}

// LoadTokenizerConfig reads dir/tokenizer_config.json. An absent file is not an error: it returns
// a TokenizerConfig with Present false.
func LoadTokenizerConfig(dir string) (*TokenizerConfig, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &TokenizerConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load tokenizer config: %w", err)
	}
	tc, err := ParseTokenizerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return tc, nil
}

// ParseTokenizerConfig parses the contents of a tokenizer_config.json. bos_token and eos_token may
// be strings, {"content": ...} objects or null; chat_template a string or a list of
// {name, template} with a "default" entry.
func ParseTokenizerConfig(data []byte) (*TokenizerConfig, error) {
	var raw struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		AddBOS       *bool           `json:"add_bos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	tc := &TokenizerConfig{Present: true, AddBOSToken: raw.AddBOS}
	var err error
	if tc.BOSToken, err = tokenString(raw.BOS); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: bos_token: %w", err)
	}
	if tc.EOSToken, err = tokenString(raw.EOS); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: eos_token: %w", err)
	}
	if isNull(raw.ChatTemplate) {
		return tc, nil
	}
	if err := json.Unmarshal(raw.ChatTemplate, &tc.ChatTemplate); err == nil {
		return tc, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw.ChatTemplate, &list); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: chat_template is neither a string nor a list of {name, template}: %w", err)
	}
	tc.Named = map[string]string{}
	for _, e := range list {
		tc.Named[e.Name] = e.Template
	}
	var ok bool
	if tc.ChatTemplate, ok = tc.Named["default"]; !ok {
		return nil, errors.New("tokenizer_config.json: chat_template list has no \"default\" entry")
	}
	return tc, nil
}

// tokenString reads a special token given as a string, as {"content": "..."} or as null ("").
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("neither a string nor an object with content")
	}
	return *obj.Content, nil
}
