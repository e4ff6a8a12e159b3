package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/model/qwen35"
)

// FamilyQwen35 is the family of Qwen3.5 hybrid targets, spelled as ollama lists them (the GGUF
// general.architecture "qwen35"), not as config.json's model_type ("qwen3_5").
const FamilyQwen35 = "qwen35"

// TextOnlyNotice is what `dflash run` prints and `dflash serve` logs once for a model whose folder
// has a vision tower (Description.TextOnly): its tensors are not loaded and images are not read.
const TextOnlyNotice = "model has a vision tower; serving text only"

// ErrHybridSpeculation refuses a draft on a hybrid target whose cache can neither rewind nor
// snapshot rows (cache.RowSnapshots), since the runner could not drop the rejected rows of a
// verify. cache.Hybrid, which Qwen3.5 targets make, snapshots rows, so today it is never returned.
var ErrHybridSpeculation = errors.New("speculative decoding on this hybrid target is not available: its recurrent cache can neither rewind nor snapshot rows; run without a draft")

// hybridSnapshots says the hybrid cache offers the snapshot verify path the runner uses where a
// cache cannot rewind.
var _, hybridSnapshots = any((*cache.Hybrid)(nil)).(cache.RowSnapshots)

// isHybrid tells a Qwen3.5 config (dense or MoE, either layout) by its architecture.
func isHybrid(hc *hf.Config) bool {
	for _, a := range hc.Architectures {
		if strings.HasPrefix(a, "Qwen3_5") {
			return true
		}
	}
	return false
}

// readHybrid describes a Qwen3.5 folder from its config.json, read by qwen35's own parser since
// model.Config cannot hold the layer types and DeltaNet shape. A mixture-of-experts config is
// refused here, before anything else of the folder is read.
func (d *Description) readHybrid(hc *hf.Config) error {
	if n := numExperts(hc); n > 0 {
		return fmt.Errorf("load %s: config.json: num_experts %d: Qwen3.5 mixture-of-experts models are not supported yet (only the dense %s and %s)", d.Path, n, qwen35.ArchCausalLM, qwen35.ArchConditional)
	}
	qc, conditional, err := qwen35.LoadConfig(d.Path)
	if err != nil {
		return err
	}
	d.Config, d.hybrid, d.conditional = qc.Config, &qc, conditional
	d.TextOnly = hc.VisionConfig
	return nil
}

// numExperts is config.json's num_experts, at the top level or under text_config (0 if absent).
func numExperts(hc *hf.Config) int {
	for _, m := range []map[string]any{hc.Raw, subMap(hc.Raw, "text_config")} {
		if v, ok := m["num_experts"].(float64); ok && v > 0 {
			return int(v)
		}
	}
	return 0
}

func subMap(m map[string]any, key string) map[string]any {
	sub, _ := m[key].(map[string]any)
	return sub
}

// HybridTensors lists, in qwen35.LoadHF's order, every tensor it reads for a Qwen3.5 target of
// shape c: under "model.", or "model.language_model." in the conditional (published) layout,
// whose vision tower (model.visual.*) and MTP head (mtp.*) are not read. A test checks the list
// against the loader, tensor by tensor.
func HybridTensors(c qwen35.Config, conditional bool) []TensorShape {
	p := "model."
	if conditional {
		p = "model.language_model."
	}
	h, inter := c.Hidden, c.Intermediate
	out := []TensorShape{{p + "embed_tokens.weight", []int{c.Vocab, h}}}
	for i, lt := range c.LayerTypes {
		l := fmt.Sprintf("%slayers.%d.", p, i)
		out = append(out,
			TensorShape{l + "input_layernorm.weight", []int{h}},
			TensorShape{l + "post_attention_layernorm.weight", []int{h}},
			TensorShape{l + "mlp.gate_proj.weight", []int{inter, h}},
			TensorShape{l + "mlp.up_proj.weight", []int{inter, h}},
			TensorShape{l + "mlp.down_proj.weight", []int{h, inter}})
		if lt == qwen35.Full {
			q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			out = append(out,
				// Per head h: rows [query_h ; gate_h], the sigmoid output gate.
				TensorShape{l + "self_attn.q_proj.weight", []int{2 * q, h}},
				TensorShape{l + "self_attn.k_proj.weight", []int{kv, h}},
				TensorShape{l + "self_attn.v_proj.weight", []int{kv, h}},
				TensorShape{l + "self_attn.o_proj.weight", []int{h, q}},
				TensorShape{l + "self_attn.q_norm.weight", []int{c.HeadDim}},
				TensorShape{l + "self_attn.k_norm.weight", []int{c.HeadDim}})
			continue
		}
		cc, vw, hv := c.ConvChannels(), c.ValueHeads*c.ValueDim, c.ValueHeads
		out = append(out,
			TensorShape{l + "linear_attn.in_proj_qkv.weight", []int{cc, h}},
			TensorShape{l + "linear_attn.in_proj_z.weight", []int{vw, h}},
			TensorShape{l + "linear_attn.in_proj_b.weight", []int{hv, h}},
			TensorShape{l + "linear_attn.in_proj_a.weight", []int{hv, h}},
			TensorShape{l + "linear_attn.out_proj.weight", []int{h, vw}},
			TensorShape{l + "linear_attn.conv1d.weight", []int{cc, 1, c.ConvKernel}},
			TensorShape{l + "linear_attn.dt_bias", []int{hv}},
			TensorShape{l + "linear_attn.norm.weight", []int{c.ValueDim}},
			TensorShape{l + "linear_attn.A_log", []int{hv}})
	}
	out = append(out, TensorShape{p + "norm.weight", []int{h}})
	if !c.TiedEmbeddings {
		out = append(out, TensorShape{"lm_head.weight", []int{c.Vocab, h}})
	}
	return out
}

// HybridParamCount counts a Qwen3.5 text decoder's weights exactly: every tensor of
// HybridTensors (the gated q_proj at twice the query width, the DeltaNet projections, conv,
// A_log, dt_bias and norms, the q/k norms), the vision tower and MTP head left out as they are
// not served. ParamCount's dense formula would count DeltaNet layers as attention ones.
func HybridParamCount(c qwen35.Config) int64 {
	var n int64
	for _, t := range HybridTensors(c, false) {
		e := int64(1)
		for _, s := range t.Shape {
			e *= int64(s)
		}
		n += e
	}
	return n
}

// CheckSpeculation reports whether drafts can speculate for this model: nil for a dense target,
// and for a Qwen3.5 target whose cache snapshots rows (the runner's snapshot verify path);
// ErrHybridSpeculation otherwise. Describing and fit-checking a draft works either way.
func (d *Description) CheckSpeculation() error {
	if d.hybrid != nil && !hybridSnapshots {
		return fmt.Errorf("model %s: %w", d.Name, ErrHybridSpeculation)
	}
	return nil
}

// Hybrid is the whole Qwen3.5 shape (layer types, Gated DeltaNet sizes) of a hybrid target, a
// copy, or nil for any other target: what its cache holds (qwen35.Config.SequenceBytes) depends
// on it, not only on Config.
func (d *Description) Hybrid() *qwen35.Config {
	if d.hybrid == nil {
		return nil
	}
	c := *d.hybrid
	c.LayerTypes = slices.Clone(c.LayerTypes)
	return &c
}

// paramCount is the target's parameter count: exact for a Qwen3.5 shape, ParamCount's otherwise.
func (d *Description) paramCount() int64 {
	if d.hybrid != nil {
		return HybridParamCount(*d.hybrid)
	}
	return ParamCount(d.Config)
}

// targetTensors is what the target's loader reads, for Validate.
func (d *Description) targetTensors() []TensorShape {
	if d.hybrid != nil {
		return HybridTensors(*d.hybrid, d.conditional)
	}
	return TargetTensors(d.Config)
}

// hybridConfigError replaces format/hf's error on a config.json it cannot read by qwen35's
// refusal of a Qwen3.5 mixture-of-experts config, whose fields (expert widths instead of
// intermediate_size) the dense reader may trip on before the MoE could be named.
func hybridConfigError(dir string, err error) error {
	if _, _, qerr := qwen35.LoadConfig(dir); qerr != nil && strings.Contains(qerr.Error(), "mixture-of-experts") {
		return qerr
	}
	return err
}
