package engine

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/testdata"
	"github.com/dflash/dflash/tokenizer/chat"
)

// writeTinyQwen3 writes a random Qwen3 folder with the real Qwen3 tokenizer files beside it: a
// model folder as a user would download it, only with a tiny body.
func writeTinyQwen3(t *testing.T, genConfig string) string {
	t.Helper()
	tokDir := testdata.Path(t, "tokenizers/qwen3")
	dir := t.TempDir()
	const vocab, hidden, inter, layers, heads, kv, hd = 151936, 16, 32, 2, 2, 1, 8
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3",
		"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab,
		"max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
		"tie_word_embeddings": true, "torch_dtype": "float32", "eos_token_id": 151645,
	}
	b, _ := json.Marshal(cfg)
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
	if genConfig != "" {
		must(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(genConfig), 0o644))
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tokDir, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, f), data, 0o644))
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
		p := "model.layers." + string(rune('0'+l)) + "."
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
	must(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenQwen3Folder(t *testing.T) {
	// generation_config.json lists an extra end id (151643, <|endoftext|>) besides config.json's.
	dir := writeTinyQwen3(t, `{"eos_token_id": [151645, 151643], "temperature": 0.6}`)
	e, err := Open(Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	// <|im_end|> ends a chat turn, <|endoftext|> a document: both stop generation, once each.
	if want := []int{151643, 151645}; !slices.Equal(e.Stop, want) {
		t.Errorf("stop ids %v, want %v", e.Stop, want)
	}
	if e.Tok == nil || e.Chat == nil {
		t.Fatalf("tokenizer %v, chat template %v: both should load from the folder", e.Tok, e.Chat)
	}
	// Qwen3 prompts start without BOS.
	ids, err := e.EncodePrompt("<|im_start|>user\nhi<|im_end|>")
	must(t, err)
	if want := []int{151644, 872, 198, 6023, 151645}; !slices.Equal(ids, want) {
		t.Errorf("prompt ids %v, want %v", ids, want)
	}
	text, err := e.Chat.Render([]chat.Message{{Role: "user", Content: "hi"}}, chat.Options{AddGenerationPrompt: true})
	must(t, err)
	if !strings.HasSuffix(text, "<|im_start|>assistant\n") {
		t.Errorf("rendered prompt %q does not end in the generation prompt", text)
	}
}

func TestOpenErrorsNameTheCause(t *testing.T) {
	dir := writeTinyQwen3(t, "")
	// A config.json whose vocabulary disagrees with the weights beside it (a mismatched download).
	small := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(small, "config.json"), []byte(strings.Replace(string(cfg), `"vocab_size":151936`, `"vocab_size":1000`, 1)), 0o644))
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(small, f), data, 0o644))
	}
	cases := []struct {
		o    Options
		want string
	}{
		{Options{}, "no model given"},
		{Options{Model: filepath.Join(dir, "nope")}, "nope"},
		{Options{Synthetic: "qwen9-100b"}, "qwen9-100b"},
		{Options{Model: small}, "embed_tokens"},
	}
	for _, c := range cases {
		_, err := Open(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v): %v; want an error naming %q", c.o, err, c.want)
		}
	}
}
