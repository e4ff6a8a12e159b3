package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/model/transformer"
)

// TargetTensors is the loader's list exactly: a folder holding those tensors loads, and one
// missing any of them does not, for Qwen3 (q/k norms, tied head) and Llama (untied head).
func TestTargetTensorsAreWhatTheLoaderReads(t *testing.T) {
	for _, c := range []struct {
		arch string
		tied bool
	}{{transformer.ArchQwen3, true}, {transformer.ArchLlama, false}} {
		t.Run(c.arch, func(t *testing.T) {
			dir := t.TempDir()
			js, err := json.Marshal(map[string]any{
				"architectures": []string{c.arch}, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2,
				"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 10,
				"max_position_embeddings": 64, "tie_word_embeddings": c.tied,
			})
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644))
			hc, err := hf.LoadConfig(dir)
			must(t, err)
			cfg, err := transformer.HFConfig(hc)
			must(t, err)
			want := TargetTensors(cfg)
			write := func(skip string) {
				var ts []safetensors.WriteTensor
				for _, w := range want {
					if w.Name == skip {
						continue
					}
					n := 1
					for _, d := range w.Shape {
						n *= d
					}
					ts = append(ts, safetensors.WriteTensor{Name: w.Name, DType: safetensors.F32, Shape: w.Shape, Data: make([]byte, 4*n)})
				}
				must(t, safetensors.Write(filepath.Join(dir, safetensors.SingleFile), ts, nil))
			}
			write("")
			if err := checkWeights(dir, want); err != nil {
				t.Fatalf("checkWeights of the full list: %v", err)
			}
			if _, err := transformer.LoadHF(dir, transformer.Options{}); err != nil {
				t.Fatalf("the loader refuses a folder of exactly TargetTensors: %v", err)
			}
			for _, w := range want {
				write(w.Name)
				if _, err := transformer.LoadHF(dir, transformer.Options{}); err == nil {
					t.Errorf("the loader does not need %s, which TargetTensors lists", w.Name)
				}
				if err := checkWeights(dir, want); err == nil {
					t.Errorf("checkWeights passed without %s", w.Name)
				}
			}
		})
	}
}
