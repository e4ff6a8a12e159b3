package qwen35

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
)

func init() {
	l := func(path string) (model.Target, error) { return LoadHF(path, transformer.Options{}) }
	model.Register(ArchCausalLM, l)
	model.Register(ArchConditional, l)
	// The MoE variants are registered only to be refused by name, rather than reported as an
	// unknown architecture.
	for _, a := range []string{archMoEPrefix + "ForCausalLM", archMoEPrefix + "ForConditionalGeneration"} {
		model.Register(a, func(path string) (model.Target, error) {
			return nil, fmt.Errorf("load %s: architecture %s: Qwen3.5 mixture-of-experts models are not supported yet", path, a)
		})
	}
}

// LoadConfig reads dir/config.json as ParseConfig does.
func LoadConfig(dir string) (cfg Config, conditional bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return Config{}, false, fmt.Errorf("load %s: %w", dir, err)
	}
	cfg, conditional, err = ParseConfig(data)
	if err != nil {
		return Config{}, false, fmt.Errorf("load %s: %w", dir, err)
	}
	return cfg, conditional, nil
}

// LoadHF loads a Qwen3.5 dense folder (config.json and safetensors, sharded or not, bf16, f16
// or f32) in either layout: tensors under "model." (Qwen3_5ForCausalLM) or under
// "model.language_model." (Qwen3_5ForConditionalGeneration, whose vision tower and MTP head are
// not read: the model is served text-only). Every missing or misshaped tensor is reported in
// one error, each by name and expected shape. opt.DType chooses the matrices' element type as
// for transformer.LoadHF; norms and the small per-head vectors are always float32.
func LoadHF(dir string, opt transformer.Options) (*Model, error) {
	cfg, conditional, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	prefix := "model."
	if conditional {
		prefix = "model.language_model."
	}
	st, err := safetensors.OpenModel(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	tl := &tensorLoader{st: st, dtype: opt.DType, seen: kernel.F32}
	h, inter := cfg.Hidden, cfg.Intermediate
	emb := tl.matrix(prefix+"embed_tokens.weight", cfg.Vocab, h)
	layers := make([]Layer, cfg.Layers)
	for i := range layers {
		p := fmt.Sprintf("%slayers.%d.", prefix, i)
		l := &layers[i]
		l.Type = cfg.LayerTypes[i]
		l.AttnNorm = tl.centred(p+"input_layernorm.weight", h)
		l.MLPNorm = tl.centred(p+"post_attention_layernorm.weight", h)
		l.Gate = tl.matrix(p+"mlp.gate_proj.weight", inter, h)
		l.Up = tl.matrix(p+"mlp.up_proj.weight", inter, h)
		l.Down = tl.matrix(p+"mlp.down_proj.weight", h, inter)
		if l.Type == Full {
			q, kvw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
			l.Attn = &AttnWeights{
				Q: tl.matrix(p+"self_attn.q_proj.weight", 2*q, h),
				K: tl.matrix(p+"self_attn.k_proj.weight", kvw, h),
				V: tl.matrix(p+"self_attn.v_proj.weight", kvw, h),
				O: tl.matrix(p+"self_attn.o_proj.weight", h, q),
				// Zero-centred, like every norm of the decoder but the DeltaNet output norm.
				QNorm: tl.centred(p+"self_attn.q_norm.weight", cfg.HeadDim),
				KNorm: tl.centred(p+"self_attn.k_norm.weight", cfg.HeadDim),
			}
			continue
		}
		c, vw, hv := cfg.ConvChannels(), cfg.ValueHeads*cfg.ValueDim, cfg.ValueHeads
		d := &DeltaNetWeights{
			QKV:    tl.matrix(p+"linear_attn.in_proj_qkv.weight", c, h),
			Z:      tl.matrix(p+"linear_attn.in_proj_z.weight", vw, h),
			B:      tl.matrix(p+"linear_attn.in_proj_b.weight", hv, h),
			A:      tl.matrix(p+"linear_attn.in_proj_a.weight", hv, h),
			Out:    tl.matrix(p+"linear_attn.out_proj.weight", h, vw),
			Conv:   tl.vector(p+"linear_attn.conv1d.weight", c, 1, cfg.ConvKernel),
			DtBias: tl.vector(p+"linear_attn.dt_bias", hv),
			Norm:   tl.vector(p+"linear_attn.norm.weight", cfg.ValueDim),
		}
		if aLog := tl.vector(p+"linear_attn.A_log", hv); aLog != nil {
			d.NegA = make([]float32, hv)
			for j, v := range aLog {
				d.NegA[j] = float32(-math.Exp(float64(v)))
			}
		}
		l.DeltaNet = d
	}
	norm := tl.centred(prefix+"norm.weight", h)
	head := emb
	if !cfg.TiedEmbeddings {
		head = tl.matrix("lm_head.weight", cfg.Vocab, h)
	}
	if err := st.Close(); err != nil {
		tl.errs = append(tl.errs, err)
	}
	if len(tl.errs) > 0 {
		return nil, fmt.Errorf("load %s: %w", dir, errors.Join(tl.errs...))
	}
	cfg.DType = tl.seen
	m, err := newModel(cfg, emb, head, layers, norm)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return m, nil
}

// tensorLoader fetches tensors by name, checks shapes and converts them, collecting every
// problem so that one load reports all missing or misshaped tensors at once.
type tensorLoader struct {
	st    *safetensors.Model
	dtype transformer.Compute
	errs  []error
	seen  kernel.DType // BF16 once any matrix is kept in bf16
}

func (tl *tensorLoader) get(name string, shape ...int) *safetensors.Tensor {
	t, err := tl.st.Tensor(name)
	if err != nil {
		tl.errs = append(tl.errs, fmt.Errorf("tensor %s (expected shape %v): %w", name, shape, err))
		return nil
	}
	if err := t.Expect(shape...); err != nil {
		tl.errs = append(tl.errs, err)
		return nil
	}
	return t
}

// vector loads a small tensor of the given shape as a flat float32 copy (the file mapping closes
// once loading ends).
func (tl *tensorLoader) vector(name string, shape ...int) []float32 {
	t := tl.get(name, shape...)
	if t == nil {
		return nil
	}
	v, err := t.F32()
	if err != nil {
		tl.errs = append(tl.errs, err)
		return nil
	}
	return slices.Clone(v)
}

// centred loads a zero-centred norm weight w [n] as the 1+w that nn.RMSNorm applies. The sum is
// rounded to float32 once, as the float32 (1 + w) of the reference implementation is.
func (tl *tensorLoader) centred(name string, n int) []float32 {
	v := tl.vector(name, n)
	for i := range v {
		v[i] = 1 + v[i]
	}
	return v
}

// matrix loads a [n][k] weight in the compute dtype: bf16 stays bf16 and f32 stays f32 unless
// forced; f16 widens to f32 exactly (as transformer.KeepDType does).
func (tl *tensorLoader) matrix(name string, n, k int) *kernel.Matrix {
	t := tl.get(name, n, k)
	if t == nil {
		return nil
	}
	if t.DType != safetensors.BF16 && t.DType != safetensors.F32 && t.DType != safetensors.F16 {
		tl.errs = append(tl.errs, fmt.Errorf("%s: tensor %s: %w %s (want F32, BF16 or F16)", t.File, name, safetensors.ErrUnsupportedDType, t.DType))
		return nil
	}
	m, err := transformer.MatrixOf(t, n, k, tl.dtype == transformer.ForceBF16 || (tl.dtype == transformer.KeepDType && t.DType == safetensors.BF16))
	if err != nil {
		tl.errs = append(tl.errs, err)
		return nil
	}
	if m.DType == kernel.BF16 {
		tl.seen = kernel.BF16
	}
	return m
}
