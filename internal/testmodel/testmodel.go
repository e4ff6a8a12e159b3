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
