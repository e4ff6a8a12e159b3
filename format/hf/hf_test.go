package hf

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// qwen3 is shaped like Qwen3-0.6B's config.json: head_dim is explicit and 16*128 != 1024.
const qwen3 = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`

// llama3 is shaped like Llama-3.2-1B-Instruct's config.json.
const llama3 = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
}`

func TestQwen3(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(qwen3), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.HiddenSize != 1024 || c.IntermediateSize != 3072 || c.NumHiddenLayers != 28 || c.NumAttentionHeads != 16 ||
		c.NumKeyValueHeads != 8 || c.HeadDim != 128 || c.VocabSize != 151936 || c.MaxPositionEmbeddings != 40960 {
		t.Errorf("sizes wrong: %+v", c)
	}
	if c.RMSNormEps != 1e-6 || c.RopeTheta != 1e6 || c.RopeScaling != nil || !c.TieWordEmbeddings || c.AttentionBias {
		t.Errorf("flags wrong: %+v", c)
	}
	if c.BOSTokenID != 151643 || !slices.Equal(c.EOSTokenIDs, []int{151645}) {
		t.Errorf("bos %d eos %v", c.BOSTokenID, c.EOSTokenIDs)
	}
	if c.ModelType != "qwen3" || c.TorchDtype != "bfloat16" || !slices.Equal(c.Architectures, []string{"Qwen3ForCausalLM"}) {
		t.Errorf("names wrong: %+v", c)
	}
	if c.Raw["max_window_layers"] != float64(28) {
		t.Errorf("Raw lost max_window_layers: %v", c.Raw["max_window_layers"])
	}
	// Unscaled: inv[i] = 1e6^(-2i/128); inv[32] = 1e6^(-0.5) = 1e-3 exactly in real arithmetic.
	inv := c.RopeInvFreq(c.HeadDim)
	if len(inv) != 64 || inv[0] != 1 || math.Abs(inv[32]-1e-3) > 1e-15 {
		t.Errorf("inv freq len %d, [0]=%g, [32]=%g; want 64, 1, 1e-3", len(inv), inv[0], inv[32])
	}
}

func TestLlama3RopeScaling(t *testing.T) {
	c, err := ParseConfig([]byte(llama3))
	if err != nil {
		t.Fatal(err)
	}
	want := RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	if c.RopeScaling == nil || *c.RopeScaling != want {
		t.Fatalf("rope scaling %+v, want %+v", c.RopeScaling, want)
	}
	if !slices.Equal(c.EOSTokenIDs, []int{128001, 128008, 128009}) || c.BOSTokenID != 128000 {
		t.Errorf("bos %d eos %v", c.BOSTokenID, c.EOSTokenIDs)
	}
	inv := c.RopeInvFreq(64)
	// Base: f_i = 500000^(-i/32), wavelength w_i = 2*pi/f_i. With L = 8192 the high-frequency
	// limit is L/4 = 2048 and the low-frequency limit L/1 = 8192.
	//   w_i = 2048 at 500000^(i/32) = 325.95, i = 32*ln(325.95)/ln(500000) = 14.11, so i <= 14 keep f_i;
	//   w_i = 8192 at 500000^(i/32) = 1303.8, i = 17.49, so i >= 18 use f_i/32 and 15..17 blend.
	// i = 16 by hand: f = 500000^-0.5 = 1/707.10678 = 0.00141421356, w = 2*pi*707.10678 = 4442.8829,
	//   s = (8192/4442.8829 - 1)/3 = 0.281289, f' = f*((1-s)/32 + s) = f*0.3037487 = 0.000429557.
	// i = 20: f = 500000^-0.625 = 2.742482e-4 (w = 22910 > 8192) so f' = f/32 = 8.570255e-6.
	// i = 14: f = 500000^-0.4375 = 3.211446e-3 (w = 1956.5 < 2048) so f' = f.
	cases := []struct {
		i    int
		want float64
	}{
		{0, 1},
		{14, 3.211445994752591e-3},
		{15, 1.290547928209264e-3},
		{16, 4.2955679655936815e-4},
		{17, 9.70828780262767e-5},
		{18, 1.9461638184831125e-5},
		{20, 8.570255489881478e-6},
		{31, 9.41830672543491e-8},
	}
	for _, tc := range cases {
		if rel := math.Abs(inv[tc.i]-tc.want) / tc.want; rel > 1e-12 {
			t.Errorf("inv[%d] = %.17g, want %.17g (rel err %g)", tc.i, inv[tc.i], tc.want, rel)
		}
	}
}

func TestLinearScalingAndDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
		"num_attention_heads":4,"vocab_size":100,"rope_scaling":{"type":"linear","factor":4.0}}`))
	if err != nil {
		t.Fatal(err)
	}
	// Defaults: kv heads = heads, head_dim = 64/4, theta 1e4, eps 1e-6, no bos, no eos.
	if c.NumKeyValueHeads != 4 || c.HeadDim != 16 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 ||
		c.BOSTokenID != -1 || c.EOSTokenIDs != nil {
		t.Errorf("defaults wrong: %+v", c)
	}
	inv := c.RopeInvFreq(16)
	// inv[1] = 10000^(-2/16)/4 = 0.31622777/4 = 0.079056942
	if math.Abs(inv[1]-0.0790569415042095) > 1e-15 || inv[0] != 0.25 {
		t.Errorf("linear inv = %v", inv[:2])
	}
}

func TestRopeParametersSpelling(t *testing.T) {
	c, err := ParseConfig([]byte(`{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
		"num_attention_heads":4,"vocab_size":100,"rope_parameters":{"rope_type":"default","rope_theta":1000000.0}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 1e6 || c.RopeScaling != nil {
		t.Errorf("rope_parameters: theta %g scaling %+v", c.RopeTheta, c.RopeScaling)
	}
}

func TestConfigErrors(t *testing.T) {
	base := `"intermediate_size":128,"num_hidden_layers":2,"vocab_size":100`
	cases := []struct {
		name, json, want string
	}{
		{"heads do not divide", `{"hidden_size":64,"num_attention_heads":7,` + base + `}`, "config.json: num_attention_heads 7 does not divide hidden_size 64"},
		{"kv heads", `{"hidden_size":64,"num_attention_heads":8,"num_key_value_heads":3,` + base + `}`, "num_key_value_heads 3 does not divide num_attention_heads 8"},
		{"missing hidden", `{"num_attention_heads":8,` + base + `}`, "hidden_size is missing"},
		{"zero layers", `{"hidden_size":64,"num_attention_heads":8,"intermediate_size":128,"num_hidden_layers":0,"vocab_size":100}`, "num_hidden_layers 0 must be positive"},
		{"odd head dim", `{"hidden_size":64,"num_attention_heads":8,"head_dim":7,` + base + `}`, "head_dim 7 must be even"},
		{"bad eps", `{"hidden_size":64,"num_attention_heads":8,"rms_norm_eps":0,` + base + `}`, "rms_norm_eps 0"},
		{"bad theta", `{"hidden_size":64,"num_attention_heads":8,"rope_theta":-1,` + base + `}`, "rope_theta -1"},
		{"yarn", `{"hidden_size":64,"num_attention_heads":8,"rope_scaling":{"rope_type":"yarn","factor":4.0},` + base + `}`, `type "yarn" is not supported`},
		{"llama3 incomplete", `{"hidden_size":64,"num_attention_heads":8,"rope_scaling":{"rope_type":"llama3","factor":8.0},` + base + `}`, "llama3 scaling needs"},
		{"llama3 low>=high", `{"hidden_size":64,"num_attention_heads":8,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":8192},` + base + `}`, "low_freq_factor 4 < high_freq_factor 1"},
		{"eos string", `{"hidden_size":64,"num_attention_heads":8,"eos_token_id":"x",` + base + `}`, "eos_token_id: want an integer or a list"},
		{"malformed", `{"hidden_size":`, "config.json"},
		{"wrong type", `{"hidden_size":"64"}`, "config.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.json))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	if _, err := LoadConfig(t.TempDir()); err == nil {
		t.Error("LoadConfig of an empty folder succeeded")
	}
}

func TestGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	g, err := LoadGenerationConfig(dir)
	if err != nil || g.Present || g.BOSTokenID != -1 {
		t.Fatalf("absent file: %+v, %v; want not present, no error", g, err)
	}
	js := `{"bos_token_id":151643,"do_sample":true,"eos_token_id":[151645,151643],"pad_token_id":151643,
		"temperature":0.6,"top_k":20,"top_p":0.95,"transformers_version":"4.51.0"}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err = LoadGenerationConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Present || g.BOSTokenID != 151643 || !slices.Equal(g.EOSTokenIDs, []int{151645, 151643}) ||
		g.Temperature == nil || *g.Temperature != 0.6 || g.TopK == nil || *g.TopK != 20 ||
		g.TopP == nil || *g.TopP != 0.95 || g.DoSample == nil || !*g.DoSample {
		t.Errorf("generation config %+v", g)
	}
	if g.Raw["pad_token_id"] != float64(151643) {
		t.Errorf("Raw lost pad_token_id")
	}
	if _, err := ParseGenerationConfig([]byte(`{"top_p":1.5}`)); err == nil || !strings.Contains(err.Error(), "top_p 1.5") {
		t.Errorf("top_p error %v", err)
	}
	g, err = ParseGenerationConfig([]byte(`{"eos_token_id":2}`))
	if err != nil || !slices.Equal(g.EOSTokenIDs, []int{2}) || g.Temperature != nil {
		t.Errorf("single eos: %+v, %v", g, err)
	}
}

// qwen35Nested is shaped like the published Qwen3.5 config.json (Qwen3_5ForConditionalGeneration):
// the decoder's fields under text_config, the vision tower's beside them, and the dtype and
// tie_word_embeddings at the top level.
const qwen35Nested = `{
  "architectures": ["Qwen3_5ForConditionalGeneration"],
  "model_type": "qwen3_5",
  "image_token_id": 248056,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "text_config": {
    "model_type": "qwen3_5_text",
    "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320,
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-06, "eos_token_id": 248044,
    "tie_word_embeddings": false, "dtype": "float32",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
      "mrope_section": [11, 11, 10], "mrope_interleaved": true}
  },
  "vision_config": {"depth": 12, "hidden_size": 768}
}`

// A multimodal config is read from its text_config: the decoder's widths, context and end id,
// with the top level's dtype and head tying winning over text_config's, and the vision tower
// noted.
func TestParseConfigTextConfig(t *testing.T) {
	c, err := ParseConfig([]byte(qwen35Nested))
	if err != nil {
		t.Fatal(err)
	}
	if !c.TextConfig || !c.VisionConfig {
		t.Errorf("TextConfig %v, VisionConfig %v: want both", c.TextConfig, c.VisionConfig)
	}
	if c.Architectures[0] != "Qwen3_5ForConditionalGeneration" || c.ModelType != "qwen3_5" {
		t.Errorf("architectures %v, model_type %q: want the top level's", c.Architectures, c.ModelType)
	}
	if c.HiddenSize != 1024 || c.NumHiddenLayers != 24 || c.HeadDim != 256 || c.VocabSize != 248320 || c.MaxPositionEmbeddings != 262144 {
		t.Errorf("shape %+v: want text_config's", c)
	}
	if c.RopeTheta != 1e7 || c.RopeScaling != nil {
		t.Errorf("rope_theta %g, scaling %+v: want 1e7 from rope_parameters, no scaling", c.RopeTheta, c.RopeScaling)
	}
	if c.TorchDtype != "bfloat16" || !c.TieWordEmbeddings {
		t.Errorf("dtype %q, tied %v: want the top level's bfloat16 and true", c.TorchDtype, c.TieWordEmbeddings)
	}
	if !slices.Equal(c.EOSTokenIDs, []int{248044}) {
		t.Errorf("eos ids %v, want text_config's [248044]", c.EOSTokenIDs)
	}
	flat, err := ParseConfig([]byte(qwen3))
	if err != nil {
		t.Fatal(err)
	}
	if flat.TextConfig || flat.VisionConfig {
		t.Errorf("a flat config reads as nested (%v) or with a vision tower (%v)", flat.TextConfig, flat.VisionConfig)
	}
	// A field missing from text_config is named there, not at the top level (where it never was).
	_, err = ParseConfig([]byte(strings.Replace(qwen35Nested, `"hidden_size": 1024, `, "", 1)))
	if err == nil || !strings.Contains(err.Error(), "text_config: hidden_size is missing") {
		t.Errorf("text_config without hidden_size: %v; want it named under text_config", err)
	}
}
