package dflash

import "fmt"

// TensorShape names one weight of a draft folder and its shape ([out, in] for matrices).
type TensorShape struct {
	Name  string
	Shape []int
}

// Tensors lists every weight of a draft of this config in z-lab's layout (no "model." prefix),
// in the order Write stores them. fc maps the concatenated taps (len(TargetLayers) * Hidden,
// since the draft's width is the target's) to Hidden.
func (c *Config) Tensors() []TensorShape {
	h, q, kv := c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	out := []TensorShape{
		{"fc.weight", []int{h, len(c.TargetLayers) * h}},
		{"hidden_norm.weight", []int{h}},
	}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		out = append(out,
			TensorShape{p + "input_layernorm.weight", []int{h}},
			TensorShape{p + "self_attn.q_proj.weight", []int{q, h}},
			TensorShape{p + "self_attn.k_proj.weight", []int{kv, h}},
			TensorShape{p + "self_attn.v_proj.weight", []int{kv, h}},
			TensorShape{p + "self_attn.o_proj.weight", []int{h, q}},
			TensorShape{p + "self_attn.q_norm.weight", []int{c.HeadDim}},
			TensorShape{p + "self_attn.k_norm.weight", []int{c.HeadDim}},
			TensorShape{p + "post_attention_layernorm.weight", []int{h}},
			TensorShape{p + "mlp.gate_proj.weight", []int{c.Intermediate, h}},
			TensorShape{p + "mlp.up_proj.weight", []int{c.Intermediate, h}},
			TensorShape{p + "mlp.down_proj.weight", []int{h, c.Intermediate}},
		)
	}
	return append(out, TensorShape{"norm.weight", []int{h}})
}
