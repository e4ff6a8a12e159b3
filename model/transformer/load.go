package transformer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/format/llama2c"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// Compute picks the element type the weight matrices are kept in.
type Compute int

const (
	// KeepDType keeps F32 and BF16 weights as stored. F16 weights become F32: the widening is
	// exact, whereas bf16 would drop three mantissa bits, and a caller who wants the halved
	// traffic asks for ForceBF16 knowingly.
	KeepDType Compute = iota
	ForceF32
	ForceBF16
)

func (c Compute) String() string {
	switch c {
	case ForceF32:
		return "f32"
	case ForceBF16:
		return "bf16"
	}
	return "keep"
}

// Options tune loading.
type Options struct {
	DType Compute
}

// Architectures this package loads from Hugging Face folders, and the llama2.c pseudo-architecture.
const (
	ArchQwen3   = "Qwen3ForCausalLM"
	ArchLlama   = "LlamaForCausalLM"
	ArchLlama2C = "llama2c"
)

func init() {
	hfLoader := func(path string) (model.Target, error) { return LoadHF(path, Options{}) }
	model.Register(ArchQwen3, hfLoader)
	model.Register(ArchLlama, hfLoader)
	model.Register(ArchLlama2C, func(path string) (model.Target, error) { return LoadLlama2C(path) })
}

// tensorLoader fetches tensors by name, checks their shapes and converts them, collecting every
// problem so one load reports all missing or misshaped tensors at once.
type tensorLoader struct {
	st    *safetensors.Model
	dtype Compute
	errs  []error
	// dtypes seen among matrices, to report the compute dtype in the config
	seen kernel.DType
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

// vector loads a norm weight as f32 (norms are tiny and always kept in f32).
func (tl *tensorLoader) vector(name string, n int) []float32 {
	t := tl.get(name, n)
	if t == nil {
		return nil
	}
	v, err := t.F32()
	if err != nil {
		tl.errs = append(tl.errs, err)
		return nil
	}
	// F32 may be a view of the file mapping, which is closed once loading ends.
	return slices.Clone(v)
}

// matrix loads a [n][k] weight in the compute dtype.
func (tl *tensorLoader) matrix(name string, n, k int) *kernel.Matrix {
	t := tl.get(name, n, k)
	if t == nil {
		return nil
	}
	wantBF16 := tl.dtype == ForceBF16 || (tl.dtype == KeepDType && t.DType == safetensors.BF16)
	if tl.dtype == KeepDType && t.DType != safetensors.BF16 && t.DType != safetensors.F32 && t.DType != safetensors.F16 {
		tl.errs = append(tl.errs, fmt.Errorf("%s: tensor %s: %w %s (want F32, BF16 or F16)", t.File, name, safetensors.ErrUnsupportedDType, t.DType))
		return nil
	}
	m, err := MatrixOf(t, n, k, wantBF16)
	if err != nil {
		tl.errs = append(tl.errs, err)
		return nil
	}
	if m.DType == kernel.BF16 {
		tl.seen = kernel.BF16
	}
	return m
}

// MatrixOf converts a shape-checked [n][k] tensor into kernel panels: bf16 when asked (bf16
// stored, or any dtype forced to bf16), f32 otherwise (f16 widens exactly). Every Hugging Face
// loader of a target family converts its matrices through it.
func MatrixOf(t *safetensors.Tensor, n, k int, bf16 bool) (*kernel.Matrix, error) {
	if bf16 {
		w, err := t.BF16()
		if err != nil {
			return nil, err
		}
		return kernel.NewBF16(w, n, k), nil
	}
	w, err := t.F32()
	if err != nil {
		return nil, err
	}
	return kernel.NewF32(w, n, k), nil
}

// LoadHF loads a Qwen3ForCausalLM or LlamaForCausalLM folder (config.json and safetensors). Every
// missing or misshaped tensor is reported in one error, each by name and expected shape.
func LoadHF(dir string, opt Options) (*Model, error) {
	hc, err := hf.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return LoadHFConfig(dir, hc, opt)
}

// HFConfig is the target shape LoadHF builds from a parsed config.json, checked as LoadHF checks
// it, without touching weights: what a model folder is can be told before loading it. DType is
// left unset; the tensors decide it.
func HFConfig(hc *hf.Config) (model.Config, error) {
	arch := ""
	for _, a := range hc.Architectures {
		if a == ArchQwen3 || a == ArchLlama {
			arch = a
			break
		}
	}
	if arch == "" {
		return model.Config{}, fmt.Errorf("architectures %v: none of %s, %s", hc.Architectures, ArchQwen3, ArchLlama)
	}
	if hc.AttentionBias {
		return model.Config{}, errors.New("attention_bias is not supported")
	}
	headDim := hc.HeadDim
	if headDim == 0 && hc.NumAttentionHeads > 0 {
		headDim = hc.HiddenSize / hc.NumAttentionHeads
	}
	kvHeads := hc.NumKeyValueHeads
	if kvHeads == 0 {
		kvHeads = hc.NumAttentionHeads
	}
	maxSeq := hc.MaxPositionEmbeddings
	if maxSeq == 0 {
		maxSeq = 2048
	}
	eps := hc.RMSNormEps
	if eps == 0 {
		eps = 1e-6
	}
	cfg := model.Config{
		Arch: arch, Layers: hc.NumHiddenLayers, Hidden: hc.HiddenSize, Intermediate: hc.IntermediateSize,
		Heads: hc.NumAttentionHeads, KVHeads: kvHeads, HeadDim: headDim, Vocab: hc.VocabSize,
		MaxSeq: maxSeq, RMSEps: float32(eps), RopeTheta: hc.RopeTheta, BOS: hc.BOSTokenID,
		EOS: slices.Clone(hc.EOSTokenIDs), TiedEmbeddings: hc.TieWordEmbeddings,
	}
	if cfg.RopeTheta == 0 {
		cfg.RopeTheta = 10000
	}
	if err := checkConfig(cfg); err != nil {
		return model.Config{}, err
	}
	return cfg, nil
}

// LoadHFConfig is LoadHF for a config.json its caller has parsed already (engine.Describe), so
// the file is read once per model.
func LoadHFConfig(dir string, hc *hf.Config, opt Options) (*Model, error) {
	cfg, err := HFConfig(hc)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	arch := cfg.Arch
	st, err := safetensors.OpenModel(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	tl := &tensorLoader{st: st, dtype: opt.DType, seen: kernel.F32}
	h, q, kvw := cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	emb := tl.matrix("model.embed_tokens.weight", cfg.Vocab, h)
	layers := make([]Layer, cfg.Layers)
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := &layers[i]
		l.AttnNorm = tl.vector(p+"input_layernorm.weight", h)
		l.MLPNorm = tl.vector(p+"post_attention_layernorm.weight", h)
		l.Q = tl.matrix(p+"self_attn.q_proj.weight", q, h)
		l.K = tl.matrix(p+"self_attn.k_proj.weight", kvw, h)
		l.V = tl.matrix(p+"self_attn.v_proj.weight", kvw, h)
		l.O = tl.matrix(p+"self_attn.o_proj.weight", h, q)
		if arch == ArchQwen3 {
			l.QNorm = tl.vector(p+"self_attn.q_norm.weight", cfg.HeadDim)
			l.KNorm = tl.vector(p+"self_attn.k_norm.weight", cfg.HeadDim)
		}
		l.Gate = tl.matrix(p+"mlp.gate_proj.weight", cfg.Intermediate, h)
		l.Up = tl.matrix(p+"mlp.up_proj.weight", cfg.Intermediate, h)
		l.Down = tl.matrix(p+"mlp.down_proj.weight", h, cfg.Intermediate)
	}
	norm := tl.vector("model.norm.weight", h)
	head := emb
	if !cfg.TiedEmbeddings {
		head = tl.matrix("lm_head.weight", cfg.Vocab, h)
	}
	// Every matrix is repacked by the kernel and every norm copied, so nothing aliases the file
	// mapping any more.
	if err := st.Close(); err != nil {
		tl.errs = append(tl.errs, err)
	}
	if len(tl.errs) > 0 {
		return nil, fmt.Errorf("load %s: %w", dir, errors.Join(tl.errs...))
	}
	cfg.DType = tl.seen
	sp := spec{style: nn.RotateHalf, inv: hc.RopeInvFreq(cfg.HeadDim)}
	m, err := newModel(cfg, sp, emb, head, layers, norm)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return m, nil
}

// Llama2CConfig is the target shape LoadLlama2C builds from a checkpoint's header: adjacent-pair
// RoPE with theta 10000, RMSNorm eps 1e-5, f32 weights, BOS 1 and EOS 2 as in llama2.c's tokenizer.
func Llama2CConfig(c llama2c.Config) (model.Config, error) {
	if c.Heads <= 0 || c.Dim%c.Heads != 0 {
		return model.Config{}, fmt.Errorf("dim %d is not a multiple of %d heads", c.Dim, c.Heads)
	}
	cfg := model.Config{
		Arch: ArchLlama2C, Layers: c.Layers, Hidden: c.Dim, Intermediate: c.HiddenDim,
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.Dim / c.Heads, Vocab: c.Vocab,
		MaxSeq: c.SeqLen, RMSEps: 1e-5, RopeTheta: 10000, BOS: 1, EOS: []int{2},
		DType: kernel.F32, TiedEmbeddings: c.SharedClassifier,
	}
	if err := checkConfig(cfg); err != nil {
		return model.Config{}, err
	}
	return cfg, nil
}

// LoadLlama2C loads a llama2.c checkpoint of the shape Llama2CConfig gives.
func LoadLlama2C(path string) (*Model, error) {
	ck, err := llama2c.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	cfg, err := Llama2CConfig(ck.Config)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	h, kvw := cfg.Hidden, cfg.KVHeads*cfg.HeadDim
	var errs []error
	mat := func(name string, w []float32, n, k int) *kernel.Matrix {
		if len(w) != n*k {
			errs = append(errs, fmt.Errorf("%s: %d values, expected [%d %d]", name, len(w), n, k))
			return nil
		}
		return kernel.NewF32(w, n, k)
	}
	vec := func(name string, w []float32, n int) []float32 {
		if len(w) != n {
			errs = append(errs, fmt.Errorf("%s: %d values, expected [%d]", name, len(w), n))
		}
		// A copy, so the checkpoint's one big buffer is not kept alive by a few norms once the
		// kernel has repacked the matrices.
		return slices.Clone(w)
	}
	perLayer := func(name string, w [][]float32, i int) []float32 {
		if i >= len(w) {
			errs = append(errs, fmt.Errorf("%s: %d layers, expected %d", name, len(w), cfg.Layers))
			return nil
		}
		return w[i]
	}
	emb := mat("token_embedding", ck.TokenEmbedding, cfg.Vocab, h)
	layers := make([]Layer, cfg.Layers)
	for i := range layers {
		l := &layers[i]
		l.AttnNorm = vec(fmt.Sprintf("rms_att[%d]", i), perLayer("rms_att", ck.RMSAtt, i), h)
		l.MLPNorm = vec(fmt.Sprintf("rms_ffn[%d]", i), perLayer("rms_ffn", ck.RMSFFN, i), h)
		l.Q = mat(fmt.Sprintf("wq[%d]", i), perLayer("wq", ck.WQ, i), h, h)
		l.K = mat(fmt.Sprintf("wk[%d]", i), perLayer("wk", ck.WK, i), kvw, h)
		l.V = mat(fmt.Sprintf("wv[%d]", i), perLayer("wv", ck.WV, i), kvw, h)
		l.O = mat(fmt.Sprintf("wo[%d]", i), perLayer("wo", ck.WO, i), h, h)
		l.Gate = mat(fmt.Sprintf("w1[%d]", i), perLayer("w1", ck.W1, i), cfg.Intermediate, h)
		l.Down = mat(fmt.Sprintf("w2[%d]", i), perLayer("w2", ck.W2, i), h, cfg.Intermediate)
		l.Up = mat(fmt.Sprintf("w3[%d]", i), perLayer("w3", ck.W3, i), cfg.Intermediate, h)
	}
	norm := vec("rms_final", ck.RMSFinal, h)
	head := emb
	if !cfg.TiedEmbeddings {
		head = mat("wcls", ck.WCls, cfg.Vocab, h)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("load %s: %w", path, errors.Join(errs...))
	}
	sp := spec{style: nn.AdjacentPair, inv: nn.InvFreq(cfg.HeadDim, 10000)}
	m, err := newModel(cfg, sp, emb, head, layers, norm)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return m, nil
}
