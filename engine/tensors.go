package engine

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/transformer"
)

// TensorShape is one weight a loader reads and the shape its config implies ([out, in] for
// matrices).
type TensorShape struct {
	Name  string
	Shape []int
}

// TargetTensors lists, in the loader's order, every tensor transformer.LoadHFConfig reads for a
// Qwen3 or Llama target of shape c; a test checks the list against the loader, tensor by tensor.
func TargetTensors(c model.Config) []TensorShape {
	h, q, kv := c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	out := []TensorShape{{"model.embed_tokens.weight", []int{c.Vocab, h}}}
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out = append(out,
			TensorShape{p + "input_layernorm.weight", []int{h}},
			TensorShape{p + "post_attention_layernorm.weight", []int{h}},
			TensorShape{p + "self_attn.q_proj.weight", []int{q, h}},
			TensorShape{p + "self_attn.k_proj.weight", []int{kv, h}},
			TensorShape{p + "self_attn.v_proj.weight", []int{kv, h}},
			TensorShape{p + "self_attn.o_proj.weight", []int{h, q}})
		if c.Arch == transformer.ArchQwen3 {
			out = append(out,
				TensorShape{p + "self_attn.q_norm.weight", []int{c.HeadDim}},
				TensorShape{p + "self_attn.k_norm.weight", []int{c.HeadDim}})
		}
		out = append(out,
			TensorShape{p + "mlp.gate_proj.weight", []int{c.Intermediate, h}},
			TensorShape{p + "mlp.up_proj.weight", []int{c.Intermediate, h}},
			TensorShape{p + "mlp.down_proj.weight", []int{h, c.Intermediate}})
	}
	out = append(out, TensorShape{"model.norm.weight", []int{h}})
	if !c.TiedEmbeddings {
		out = append(out, TensorShape{"lm_head.weight", []int{c.Vocab, h}})
	}
	return out
}

// Validate checks that Load and OpenDraft will find every tensor they read, with its shape and a
// dtype they convert, from the safetensors headers alone (no weight is read or mapped): the
// target's tensors in the loader's order, then each draft's. A llama2.c checkpoint's header was
// checked against its length by Describe already. Describe itself does not look at weights, so
// a folder of configs and a tokenizer can still be described (dflash tokenize); whoever is about
// to serve or load a model calls Validate, which refuses a truncated, empty or misshaped file
// by the first tensor at fault.
func (d *Description) Validate() error {
	if d.Format == FormatGGUF {
		if err := d.validateGGUF(); err != nil {
			return err
		}
	}
	if d.hf != nil {
		if err := checkWeights(d.Path, d.targetTensors()); err != nil {
			return fmt.Errorf("load %s: %w", d.Path, err)
		}
	}
	for _, di := range d.Drafts {
		check := checkWeights
		if dflash.IsFile(di.Dir) {
			check = checkDraftGGUF
		}
		if err := check(di.Dir, di.tensors); err != nil {
			return fmt.Errorf("draft %s: %w", di.Dir, err)
		}
	}
	return nil
}

// checkDraftGGUF is checkWeights for a draft GGUF: its tensor infos against the folder shapes in
// want, reversed into ggml order.
func checkDraftGGUF(path string, want []TensorShape) error {
	f, err := gguf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var first string
	bad := 0
	for _, w := range want {
		shape := make([]uint64, len(w.Shape))
		for i, s := range w.Shape {
			shape[len(shape)-1-i] = uint64(s)
		}
		in, ok := f.Tensor(w.Name)
		var msg string
		switch {
		case !ok:
			msg = fmt.Sprintf("tensor %s is missing (want ggml shape %v)", w.Name, shape)
		case !slices.Equal(in.Shape, shape):
			msg = fmt.Sprintf("tensor %s has ggml shape %v, want %v", w.Name, in.Shape, shape)
		case in.Type.Check() != nil:
			msg = fmt.Sprintf("tensor %s: %v", w.Name, in.Type.Check())
		default:
			continue
		}
		if bad == 0 {
			first = msg
		}
		bad++
	}
	switch bad {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("draft %s: %s", path, first)
	}
	return fmt.Errorf("draft %s: %s (and %d more tensors wrong)", path, first, bad-1)
}

// checkWeights reads the safetensors headers of dir (not the weights) and checks every tensor of
// want, in want's order, for presence, shape and a dtype the loaders convert. The error names the
// first tensor at fault, so the same broken folder always gives the same message, and counts the
// others.
func checkWeights(dir string, want []TensorShape) error {
	mh, err := safetensors.ReadModelHeader(dir)
	if err != nil {
		return err
	}
	var first string
	bad := 0
	for _, w := range want {
		in, ok := mh.Info(w.Name)
		var msg string
		switch {
		case !ok:
			msg = fmt.Sprintf("tensor %s is missing (want shape %v)", w.Name, w.Shape)
		case !slices.Equal(in.Shape, w.Shape):
			msg = fmt.Sprintf("tensor %s in %s has shape %v, want %v", w.Name, filepath.Base(in.File), in.Shape, w.Shape)
		case in.DType != safetensors.F32 && in.DType != safetensors.BF16 && in.DType != safetensors.F16:
			msg = fmt.Sprintf("tensor %s in %s has dtype %s, want F32, BF16 or F16", w.Name, filepath.Base(in.File), in.DType)
		default:
			continue
		}
		if bad == 0 {
			first = msg
		}
		bad++
	}
	switch bad {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("model %s: %s", dir, first)
	}
	return fmt.Errorf("model %s: %s (and %d more tensors wrong)", dir, first, bad-1)
}
