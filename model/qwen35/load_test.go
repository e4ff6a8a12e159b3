package qwen35

import (
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

// TestLoadDispatch: model.Load opens both layouts through the registry, and they read the
// same decoder: the conditional layout's text_config, prefix and top-level tie flag.
func TestLoadDispatch(t *testing.T) {
	for _, tn := range []*tiny{tinyCausal(), tinyConditional()} {
		dir := tn.write(t, 1, nil, nil)
		tg, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		m := tg.(*Model)
		cfg := m.HybridConfig()
		wantTypes := []LayerType{Linear, Full, Linear, Linear}
		if tn.conditional {
			wantTypes = []LayerType{Linear, Linear, Linear, Full} // full_attention_interval 4
		}
		if !slices.Equal(cfg.LayerTypes, wantTypes) || cfg.RotaryDim != 8 || cfg.TiedEmbeddings != tn.tied ||
			cfg.KeyHeads != 2 || cfg.ValueHeads != 4 || cfg.ConvKernel != 4 || !slices.Equal(cfg.EOS, []int{2}) {
			t.Errorf("conditional=%v: config %+v", tn.conditional, cfg)
		}
	}
}

// TestLoadRejectsConfig: every config value the engine cannot run is refused with the field
// named, and a MoE checkpoint says that it is one.
func TestLoadRejectsConfig(t *testing.T) {
	cases := []struct {
		name        string
		conditional bool
		mut         func(top, text map[string]any)
		want        string
	}{
		{"unknown layer type", false, func(_, x map[string]any) {
			x["layer_types"] = []string{"linear_attention", "sliding_attention", "linear_attention", "full_attention"}
		}, `layer_types[1] = "sliding_attention": want linear_attention or full_attention`},
		{"layer types too short", false, func(_, x map[string]any) { x["layer_types"] = []string{"full_attention"} }, "layer_types has 1 entries, want num_hidden_layers = 4"},
		{"kv heads do not divide", false, func(_, x map[string]any) { x["num_key_value_heads"] = 3 }, "num_key_value_heads 3 does not divide num_attention_heads 4"},
		{"key heads do not divide value heads", false, func(_, x map[string]any) { x["linear_num_value_heads"] = 3 }, "linear_num_key_heads 2 does not divide linear_num_value_heads 3"},
		{"conv kernel", false, func(_, x map[string]any) { x["linear_conv_kernel_dim"] = 0 }, "linear_conv_kernel_dim 0 must be positive"},
		{"odd rotary dim", false, func(_, x map[string]any) {
			x["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 0.1875
		}, "rotary dim 3"},
		{"rope type", false, func(_, x map[string]any) { x["rope_parameters"].(map[string]any)["rope_type"] = "yarn" }, `rope_parameters.rope_type "yarn": want default`},
		{"no rope theta", false, func(_, x map[string]any) { delete(x, "rope_parameters") }, "rope_theta"},
		{"missing width", false, func(_, x map[string]any) { delete(x, "hidden_size") }, "hidden_size is missing"},
		{"activation", false, func(_, x map[string]any) { x["hidden_act"] = "gelu" }, `hidden_act "gelu": want silu`},
		{"no text_config", true, func(top, _ map[string]any) { delete(top, "text_config") }, "needs a text_config"},
		{"moe architecture", false, func(_, x map[string]any) { x["architectures"] = []string{"Qwen3_5MoeForCausalLM"} }, "mixture-of-experts"},
		{"moe text config", true, func(_, x map[string]any) { x["num_experts"] = 8 }, "mixture-of-experts"},
	}
	for _, tc := range cases {
		tn := tinyCausal()
		if tc.conditional {
			tn = tinyConditional()
		}
		dir := tn.write(t, 1, nil, tc.mut)
		_, err := model.Load(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want mention of %q", tc.name, err, tc.want)
		}
	}
}

// TestLoadRejectsTensors: every missing or misshaped tensor class is named with the shape it
// should have, all of them in one error.
func TestLoadRejectsTensors(t *testing.T) {
	drop := func(names ...string) func(*[]safetensors.WriteTensor) {
		return func(ts *[]safetensors.WriteTensor) {
			*ts = slices.DeleteFunc(*ts, func(w safetensors.WriteTensor) bool { return slices.Contains(names, w.Name) })
		}
	}
	reshape := func(name string, shape ...int) func(*[]safetensors.WriteTensor) {
		return func(ts *[]safetensors.WriteTensor) {
			for i := range *ts {
				if w := &(*ts)[i]; w.Name == name {
					n := 1
					for _, d := range shape {
						n *= d
					}
					w.Shape, w.Data = shape, make([]byte, n*w.DType.Size())
				}
			}
		}
	}
	p, c := "model.layers.", 2*2*8+4*6
	cases := []struct {
		name        string
		conditional bool
		mut         func(*[]safetensors.WriteTensor)
		want        []string
	}{
		{"missing DeltaNet tensors", false, drop(p+"0.linear_attn.in_proj_z.weight", p+"2.linear_attn.A_log", p+"3.linear_attn.dt_bias"),
			[]string{"0.linear_attn.in_proj_z.weight (expected shape [24 32])", "2.linear_attn.A_log (expected shape [4])", "3.linear_attn.dt_bias"}},
		{"conv kernel width", false, reshape(p+"0.linear_attn.conv1d.weight", c, 1, 3), []string{"conv1d.weight", "[56 1 3], expected [56 1 4]"}},
		{"q_proj without gates", false, reshape(p+"1.self_attn.q_proj.weight", 64, 32), []string{"q_proj.weight", "expected [128 32]"}},
		{"q/k norm", false, drop(p + "1.self_attn.k_norm.weight"), []string{"1.self_attn.k_norm.weight (expected shape [16])"}},
		{"output norm of the DeltaNet", false, reshape(p+"2.linear_attn.norm.weight", 8), []string{"linear_attn.norm.weight", "expected [6]"}},
		{"untied head", false, drop("lm_head.weight"), []string{"lm_head.weight"}},
		{"text tensors under the text-only prefix", true, func(ts *[]safetensors.WriteTensor) {
			for i := range *ts {
				(*ts)[i].Name = strings.Replace((*ts)[i].Name, "model.language_model.", "model.", 1)
			}
		}, []string{"model.language_model.embed_tokens.weight", "model.language_model.layers.3.self_attn.o_proj.weight"}},
	}
	for _, tc := range cases {
		tn := tinyCausal()
		if tc.conditional {
			tn = tinyConditional()
		}
		dir := tn.write(t, 1, tc.mut, nil)
		_, err := LoadHF(dir, transformer.Options{})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want mention of %q", tc.name, err, w)
			}
		}
	}
}

// TestLoadComputeDType: bf16 files stay bf16 (and say so), f32 may be forced to bf16.
func TestLoadComputeDType(t *testing.T) {
	tn := tinyCausal()
	dir := tn.write(t, 1, nil, nil)
	m, err := LoadHF(dir, transformer.Options{DType: transformer.ForceBF16})
	if err != nil {
		t.Fatal(err)
	}
	if m.Config().DType.String() != "bf16" {
		t.Errorf("forced bf16: dtype %v", m.Config().DType)
	}
	m, err = LoadHF(dir, transformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Config().DType.String() != "f32" {
		t.Errorf("f32 file kept: dtype %v", m.Config().DType)
	}
}
