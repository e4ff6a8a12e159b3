// Package testmodel writes small random models in Hugging Face layout for tests: real file
// formats and real tokenizers with tiny bodies, so loaders, templates and the decode loop are
// exercised end to end in milliseconds. It is for tests only and never downloads anything.
package testmodel

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
)

// TinyQwen3 is a random Qwen3-shaped target held in memory: 6 layers of width 32, 4 heads of 8
// over 2 KV heads, an untied head (so a draft that used the embedding as head would be caught),
// vocabulary 97, seed 7. Draft tests build their drafts against it; the same seed gives the same
// weights, so expected values computed from it stay valid.
func TinyQwen3(tb testing.TB) *transformer.Model {
	tb.Helper()
	m, err := transformer.Synthetic(model.Config{
		Arch: transformer.ArchQwen3, Layers: 6, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
		HeadDim: 8, Vocab: 97, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 10000, BOS: -1,
	}, 7)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// TinyQwen35 is a random Qwen3.5 hybrid target held in memory, for tests of the snapshot verify
// path: 4 layers of width 32 (Gated DeltaNet, full attention, DeltaNet, DeltaNet), 4 attention
// heads of 16 over 2 KV heads with rotary over 8 dims, 2 key heads and 4 value heads of 8 in the
// DeltaNet, conv kernel 4, vocabulary 97, an untied head, seed 7. Its caches cannot rewind
// (cache.CanRewind is false); see model.Target.
func TinyQwen35(tb testing.TB) *qwen35.Model {
	tb.Helper()
	m, err := qwen35.Synthetic(qwen35.Config{
		Config: model.Config{
			Arch: qwen35.ArchCausalLM, Layers: 4, Hidden: 32, Intermediate: 64, Heads: 4, KVHeads: 2,
			HeadDim: 16, Vocab: 97, MaxSeq: 512, RMSEps: 1e-6, RopeTheta: 1e7, BOS: -1,
		},
		LayerTypes: []qwen35.LayerType{qwen35.Linear, qwen35.Full, qwen35.Linear, qwen35.Linear},
		KeyHeads:   2, ValueHeads: 4, KeyDim: 8, ValueDim: 8, ConvKernel: 4, RotaryDim: 8,
	}, 7)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Qwen3 writes a random two-layer Qwen3 folder (hidden 16, f32) with the real Qwen3 tokenizer and
// chat template from the shared test data, skipping the test when that data is absent.
// genConfig, when not empty, is written as generation_config.json.
func Qwen3(tb testing.TB, genConfig string) string {
	tb.Helper()
	tokDir := shareddata.Path(tb, "tokenizers/qwen3")
	dir := tb.TempDir()
	if err := writeQwen3(dir, tokDir, genConfig); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func writeQwen3(dir, tokDir, genConfig string) error {
	const vocab, hidden, inter, layers, heads, kv, hd = 151936, 16, 32, 2, 2, 1, 8
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3",
		"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab,
		"max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
		"tie_word_embeddings": true, "torch_dtype": "float32", "eos_token_id": 151645,
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return err
	}
	if genConfig != "" {
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(genConfig), 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tokDir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ts []safetensors.WriteTensor
	add := func(name string, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.05)
			if strings.HasSuffix(name, "norm.weight") {
				v[i] = 1
			}
		}
		ts = append(ts, safetensors.WriteTensor{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(v)})
	}
	add("model.embed_tokens.weight", vocab, hidden)
	add("model.norm.weight", hidden)
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
		add(p+"self_attn.q_proj.weight", heads*hd, hidden)
		add(p+"self_attn.k_proj.weight", kv*hd, hidden)
		add(p+"self_attn.v_proj.weight", kv*hd, hidden)
		add(p+"self_attn.o_proj.weight", hidden, heads*hd)
		add(p+"self_attn.q_norm.weight", hd)
		add(p+"self_attn.k_norm.weight", hd)
		add(p+"mlp.gate_proj.weight", inter, hidden)
		add(p+"mlp.up_proj.weight", inter, hidden)
		add(p+"mlp.down_proj.weight", hidden, inter)
	}
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"})
}

// Qwen35Folder says what Qwen35 writes.
type Qwen35Folder struct {
	// Conditional writes the published layout: Qwen3_5ForConditionalGeneration with the decoder
	// under text_config, a vision_config, tensors under model.language_model. in two bf16 shards
	// beside a vision tower's (model.visual.*) and an MTP head's (mtp.*), and a tied head.
	// Otherwise Qwen3_5ForCausalLM, one f32 file under model., an untied head.
	Conditional bool
	// Tokenizer adds the real Qwen3 tokenizer and tokenizer_config.json from the shared test data
	// (skipping the test without it) and makes the vocabulary Qwen3.5's 248320, so that the
	// tokenizer and a DFlash draft's mask id 248070 fit; otherwise the vocabulary is 97.
	Tokenizer bool
	// Vocab, when set, is the vocabulary size without a tokenizer (default 97).
	Vocab int
	// ChatTemplate, when set, replaces tokenizer_config.json's chat_template.
	ChatTemplate string
	// Config, when set, edits config.json before it is written: top is the whole object, text
	// the decoder's fields (the same map unless Conditional).
	Config func(top, text map[string]any)
}

// Qwen35 writes a random Qwen3.5 folder of f's layout: 4 layers of width 32 (DeltaNet, full
// attention, DeltaNet, DeltaNet), 4 attention heads of 16 over 2 KV heads with rotary over 8
// dims, 2 key heads of 8 and 4 value heads of 6 in the DeltaNet (dk != dv), conv kernel 4.
// Weights are N(0, 0.25) but for the norms and decay parameters, which are near trained values.
func Qwen35(tb testing.TB, f Qwen35Folder) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := writeQwen35(tb, dir, f); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func writeQwen35(tb testing.TB, dir string, f Qwen35Folder) error {
	const hidden, inter, heads, kv, hd, hk, hv, dk, dv, conv = 32, 48, 4, 2, 16, 2, 4, 8, 6, 4
	layerTypes := []string{"linear_attention", "full_attention", "linear_attention", "linear_attention"}
	vocab := 97
	if f.Vocab > 0 {
		vocab = f.Vocab
	}
	if f.Tokenizer {
		vocab = 248320
		tokDir := shareddata.Path(tb, "tokenizers/qwen3")
		tc, err := os.ReadFile(filepath.Join(tokDir, "tokenizer_config.json"))
		if err != nil {
			return err
		}
		if f.ChatTemplate != "" {
			var m map[string]any
			if err := json.Unmarshal(tc, &m); err != nil {
				return err
			}
			m["chat_template"] = f.ChatTemplate
			if tc, err = json.Marshal(m); err != nil {
				return err
			}
		}
		tok, err := os.ReadFile(filepath.Join(tokDir, "tokenizer.json"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tc, 0o644); err != nil {
			return err
		}
	}
	tied, dtype, P := false, safetensors.F32, "model."
	if f.Conditional {
		tied, dtype, P = true, safetensors.BF16, "model.language_model."
	}
	rng := rand.New(rand.NewPCG(35, 3))
	var ts []safetensors.WriteTensor
	add := func(name string, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			r := rng.NormFloat64()
			switch {
			case strings.HasSuffix(name, "linear_attn.norm.weight"):
				v[i] = float32(1 + 0.3*r)
			case strings.HasSuffix(name, "norm.weight"), strings.HasSuffix(name, "layernorm.weight"):
				v[i] = float32(0.3 * r) // zero-centred: the norm applies 1+w
			case strings.HasSuffix(name, "A_log"):
				v[i] = float32(-1 + 0.5*r)
			default:
				v[i] = float32(0.25 * r)
			}
		}
		wt := safetensors.WriteTensor{Name: name, DType: dtype, Shape: shape, Data: safetensors.F32Bytes(v)}
		if dtype == safetensors.BF16 {
			bits := make([]uint16, n)
			for i, x := range v {
				bits[i] = kernel.F32ToBF16(x)
			}
			wt.Data = safetensors.BF16Bytes(bits)
		}
		ts = append(ts, wt)
	}
	c := 2*hk*dk + hv*dv
	add(P+"embed_tokens.weight", vocab, hidden)
	for i, lt := range layerTypes {
		p := fmt.Sprintf("%slayers.%d.", P, i)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
		if lt == "full_attention" {
			add(p+"self_attn.q_proj.weight", 2*heads*hd, hidden)
			add(p+"self_attn.k_proj.weight", kv*hd, hidden)
			add(p+"self_attn.v_proj.weight", kv*hd, hidden)
			add(p+"self_attn.o_proj.weight", hidden, heads*hd)
			add(p+"self_attn.q_norm.weight", hd)
			add(p+"self_attn.k_norm.weight", hd)
		} else {
			add(p+"linear_attn.in_proj_qkv.weight", c, hidden)
			add(p+"linear_attn.in_proj_z.weight", hv*dv, hidden)
			add(p+"linear_attn.in_proj_b.weight", hv, hidden)
			add(p+"linear_attn.in_proj_a.weight", hv, hidden)
			add(p+"linear_attn.conv1d.weight", c, 1, conv)
			add(p+"linear_attn.dt_bias", hv)
			add(p+"linear_attn.A_log", hv)
			add(p+"linear_attn.norm.weight", dv)
			add(p+"linear_attn.out_proj.weight", hidden, hv*dv)
		}
		add(p+"mlp.gate_proj.weight", inter, hidden)
		add(p+"mlp.up_proj.weight", inter, hidden)
		add(p+"mlp.down_proj.weight", hidden, inter)
	}
	add(P+"norm.weight", hidden)
	if !tied {
		add("lm_head.weight", vocab, hidden)
	}
	text := map[string]any{
		"model_type": "qwen3_5_text", "vocab_size": vocab, "hidden_size": hidden,
		"intermediate_size": inter, "num_hidden_layers": len(layerTypes), "layer_types": layerTypes,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
		"linear_num_key_heads": hk, "linear_num_value_heads": hv, "linear_key_head_dim": dk,
		"linear_value_head_dim": dv, "linear_conv_kernel_dim": conv, "rms_norm_eps": 1e-6,
		"hidden_act": "silu", "max_position_embeddings": 1024, "attn_output_gate": true,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5},
	}
	top := text
	if f.Conditional {
		// The vision tower and the MTP head are stored but never read by a text-only load.
		add("model.visual.patch_embed.proj.weight", 8, 3)
		add("mtp.fc.weight", hidden, 2*hidden)
		top = map[string]any{
			"architectures": []string{qwen35.ArchConditional}, "model_type": "qwen3_5",
			"text_config": text, "vision_config": map[string]any{"depth": 1}, "image_token_id": 248056,
			"tie_word_embeddings": true, "torch_dtype": "bfloat16",
		}
		text["eos_token_id"] = 248044
	} else {
		text["architectures"] = []string{qwen35.ArchCausalLM}
		text["tie_word_embeddings"] = false
		text["torch_dtype"] = "float32"
		text["eos_token_id"] = 2
	}
	if f.Config != nil {
		f.Config(top, text)
	}
	js, err := json.Marshal(top)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		return err
	}
	if !f.Conditional {
		return safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"})
	}
	weightMap := map[string]string{}
	for s := range 2 {
		file := fmt.Sprintf("model-%05d-of-00002.safetensors", s+1)
		var part []safetensors.WriteTensor
		for i := s; i < len(ts); i += 2 {
			part = append(part, ts[i])
			weightMap[ts[i].Name] = file
		}
		if err := safetensors.Write(filepath.Join(dir, file), part, map[string]string{"format": "pt"}); err != nil {
			return err
		}
	}
	idx, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644)
}
