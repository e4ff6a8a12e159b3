package gguf

import (
	"strconv"
	"strings"
)

// TensorName pairs a Hugging Face (transformers) tensor name with llama.cpp's GGUF name.
type TensorName struct{ HF, GGUF string }

// GlobalTensorNames are the tensors outside the layers of Qwen3 and Llama checkpoints.
var GlobalTensorNames = []TensorName{
	{"model.embed_tokens.weight", "token_embd.weight"},
	{"model.norm.weight", "output_norm.weight"},
	{"lm_head.weight", "output.weight"}, // absent when the head is tied to token_embd
}

// LayerTensorNames are the per-layer tensors, named after the layer prefix: HF
// "model.layers.N." + HF, GGUF "blk.N." + GGUF.
//
// What a converter must know beyond the names (llama.cpp's convert_hf_to_gguf does both):
//   - GGUF shapes are in ggml order, innermost first: HF [out, in] is GGUF [in, out], with the
//     same bytes (row-major [out][in] is ggml's rows of length in).
//   - For "llama" (not "qwen3") the rows of attn_q and attn_k are permuted from HF's
//     rotate-half RoPE layout to the interleaved-pair layout llama.cpp's llama RoPE uses:
//     within each head, GGUF row 2i+k is HF row k*headDim/2+i (k = 0, 1; HF reshaped
//     [heads, 2, headDim/2, in] is stored as [heads, headDim/2, 2, in]). A reader that
//     computes RoPE the HF way must undo it; qwen3 files are stored unpermuted.
var LayerTensorNames = []TensorName{
	{"input_layernorm.weight", "attn_norm.weight"},
	{"self_attn.q_proj.weight", "attn_q.weight"},
	{"self_attn.k_proj.weight", "attn_k.weight"},
	{"self_attn.v_proj.weight", "attn_v.weight"},
	{"self_attn.o_proj.weight", "attn_output.weight"},
	{"self_attn.q_norm.weight", "attn_q_norm.weight"}, // qwen3 only
	{"self_attn.k_norm.weight", "attn_k_norm.weight"}, // qwen3 only
	{"post_attention_layernorm.weight", "ffn_norm.weight"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"},
	{"mlp.up_proj.weight", "ffn_up.weight"},
	{"mlp.down_proj.weight", "ffn_down.weight"},
}

const (
	hfLayer   = "model.layers."
	ggufLayer = "blk."
)

// GGUFName is llama.cpp's name for a Hugging Face tensor name of Qwen3 or Llama.
func GGUFName(hf string) (string, bool) {
	return mapName(hf, hfLayer, ggufLayer, func(n TensorName) (string, string) { return n.HF, n.GGUF })
}

// HFName is the Hugging Face name for a llama.cpp GGUF tensor name of Qwen3 or Llama.
func HFName(gguf string) (string, bool) {
	return mapName(gguf, ggufLayer, hfLayer, func(n TensorName) (string, string) { return n.GGUF, n.HF })
}

func mapName(name, fromLayer, toLayer string, dir func(TensorName) (string, string)) (string, bool) {
	for _, n := range GlobalTensorNames {
		if from, to := dir(n); name == from {
			return to, true
		}
	}
	rest, ok := strings.CutPrefix(name, fromLayer)
	if !ok {
		return "", false
	}
	num, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	// The layer number must be canonical decimal so the mapping is one-to-one ("01" is not 1).
	if i, err := strconv.Atoi(num); err != nil || i < 0 || strconv.Itoa(i) != num {
		return "", false
	}
	for _, n := range LayerTensorNames {
		if from, to := dir(n); suffix == from {
			return toLayer + num + "." + to, true
		}
	}
	return "", false
}
