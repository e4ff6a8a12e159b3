// Command synthfolder writes the random-weight model that `dflash bench --synthetic NAME` builds
// in memory as a Hugging Face folder (config.json, bf16 model.safetensors, and a tokenizer copied
// from a folder given), so the same weights can be converted to GGUF (`dflash convert --type
// q8_0|q4_k_m`) and run side by side with a peer engine that needs a file. It measures nothing
// itself: BENCHMARKS.md ("Quantized decode against the probe and against ollama") gives the
// commands that use it.
//
//	go run ./x/synthfolder --name qwen3-0.6b --tokenizer ../shared/data/tokenizers/qwen3 --out /tmp/q06
//
// The weights are bitwise those of `--synthetic NAME --weights-seed SEED`: they are read back out
// of the model transformer.Synthetic builds, row by row.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/transformer"
)

func main() {
	name := flag.String("name", "qwen3-0.6b", "synthetic shape (qwen3-0.6b, qwen3-1.7b, qwen3-4b)")
	seed := flag.Uint64("weights-seed", 1, "seed of the weights, as bench's --weights-seed")
	tokDir := flag.String("tokenizer", "", "folder holding tokenizer.json and tokenizer_config.json to copy (the Qwen3 tokenizer)")
	out := flag.String("out", "", "folder to write (must not exist)")
	flag.Parse()
	if err := write(*name, *seed, *tokDir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "synthfolder:", err)
		os.Exit(1)
	}
}

func write(name string, seed uint64, tokDir, out string) error {
	if out == "" || tokDir == "" {
		return fmt.Errorf("--out and --tokenizer are required")
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists; choose a new folder", out)
	}
	cfg, err := transformer.SyntheticConfig(name)
	if err != nil {
		return err
	}
	if !cfg.TiedEmbeddings {
		return fmt.Errorf("%s: an untied head is not written", name)
	}
	m, err := transformer.Synthetic(cfg, seed)
	if err != nil {
		return err
	}
	tmp := out + ".partial"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tokDir, f))
		if err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil {
			return err
		}
	}
	hf := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3",
		"hidden_size": cfg.Hidden, "intermediate_size": cfg.Intermediate, "num_hidden_layers": cfg.Layers,
		"num_attention_heads": cfg.Heads, "num_key_value_heads": cfg.KVHeads, "head_dim": cfg.HeadDim,
		"vocab_size": cfg.Vocab, "max_position_embeddings": cfg.MaxSeq, "rms_norm_eps": cfg.RMSEps,
		"rope_theta": cfg.RopeTheta, "tie_word_embeddings": cfg.TiedEmbeddings, "torch_dtype": "bfloat16",
		"eos_token_id": cfg.EOS[0], "bos_token_id": cfg.EOS[len(cfg.EOS)-1],
	}
	b, err := json.MarshalIndent(hf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), b, 0o644); err != nil {
		return err
	}
	var ts []safetensors.WriteTensor
	mat := func(tensor string, w *kernel.Matrix) {
		v := make([]uint16, w.N*w.K)
		row := make([]float32, w.K)
		for j := 0; j < w.N; j++ {
			w.Row(row, j)
			for i, f := range row {
				v[j*w.K+i] = kernel.F32ToBF16(f) // exact: the weights are bf16 already
			}
		}
		ts = append(ts, safetensors.WriteTensor{Name: tensor, DType: safetensors.BF16, Shape: []int{w.N, w.K}, Data: safetensors.BF16Bytes(v)})
	}
	vec := func(tensor string, v []float32) {
		h := make([]uint16, len(v))
		for i, f := range v {
			h[i] = kernel.F32ToBF16(f)
		}
		ts = append(ts, safetensors.WriteTensor{Name: tensor, DType: safetensors.BF16, Shape: []int{len(v)}, Data: safetensors.BF16Bytes(h)})
	}
	mat("model.embed_tokens.weight", m.Head()) // tied: the head is the embedding
	vec("model.norm.weight", m.FinalNorm())
	for l, ly := range m.Layers() {
		p := fmt.Sprintf("model.layers.%d.", l)
		vec(p+"input_layernorm.weight", ly.AttnNorm)
		vec(p+"post_attention_layernorm.weight", ly.MLPNorm)
		mat(p+"self_attn.q_proj.weight", ly.Q)
		mat(p+"self_attn.k_proj.weight", ly.K)
		mat(p+"self_attn.v_proj.weight", ly.V)
		mat(p+"self_attn.o_proj.weight", ly.O)
		vec(p+"self_attn.q_norm.weight", ly.QNorm)
		vec(p+"self_attn.k_norm.weight", ly.KNorm)
		mat(p+"mlp.gate_proj.weight", ly.Gate)
		mat(p+"mlp.up_proj.weight", ly.Up)
		mat(p+"mlp.down_proj.weight", ly.Down)
	}
	if err := safetensors.Write(filepath.Join(tmp, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
