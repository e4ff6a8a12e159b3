package transformer

import (
	"errors"
	"fmt"
	"log"
	"maps"
	"slices"
	"strings"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// GGUFConfig is the target shape LoadGGUF builds from a GGUF file's metadata and tensor infos,
// checked as LoadGGUF checks it, without reading a weight. Arch is ArchQwen3 or ArchLlama; DType
// is left unset (the tensors decide it). BOS and EOS are the tokenizer's ids when the file names
// them.
func GGUFConfig(f *gguf.File) (model.Config, error) {
	h, err := f.Hyperparams()
	if err != nil {
		return model.Config{}, err
	}
	arch := ArchQwen3
	if h.Arch == "llama" {
		arch = ArchLlama
	}
	if h.KeyLength != h.ValueLength {
		return model.Config{}, fmt.Errorf("gguf %s: key length %d differs from value length %d", f.Name, h.KeyLength, h.ValueLength)
	}
	if h.QKNorm != (arch == ArchQwen3) {
		return model.Config{}, fmt.Errorf("gguf %s: %s file with q/k norms %v (qwen3 has them, llama not)", f.Name, h.Arch, h.QKNorm)
	}
	for _, key := range []string{h.Arch + ".rope.scaling.type", h.Arch + ".rope.scaling.factor"} {
		if !f.Metadata.Has(key) {
			continue
		}
		if v, err := f.Metadata.String(key); err == nil && v == "none" {
			continue
		}
		// rope_freqs.weight (llama3-style scaling baked into per-frequency factors) is read; the
		// linear/yarn scalings these keys describe are not implemented.
		return model.Config{}, fmt.Errorf("gguf %s: %s is set: rope scaling is not supported", f.Name, key)
	}
	cfg := model.Config{
		Arch: arch, Layers: h.Layers, Hidden: h.Embedding, Intermediate: h.FeedForward,
		Heads: h.Heads, KVHeads: h.KVHeads, HeadDim: h.KeyLength, Vocab: h.Vocab,
		MaxSeq: h.Context, RMSEps: float32(h.RMSEps), RopeTheta: h.RopeBase, BOS: -1,
		TiedEmbeddings: h.TiedOutput,
	}
	if id, err := f.Metadata.Uint("tokenizer.ggml.bos_token_id"); err == nil && id < uint64(h.Vocab) {
		cfg.BOS = int(id)
	}
	if id, err := f.Metadata.Uint("tokenizer.ggml.eos_token_id"); err == nil && id < uint64(h.Vocab) {
		cfg.EOS = []int{int(id)}
	}
	if err := checkConfig(cfg); err != nil {
		return model.Config{}, fmt.Errorf("gguf %s: %w", f.Name, err)
	}
	return cfg, nil
}

// GGUFTensors lists the tensors LoadGGUF reads for cfg with their shapes in ggml order (the row
// length first), so a file can be validated from its tensor infos alone.
func GGUFTensors(cfg model.Config) []gguf.TensorInfo {
	h, q, kvw := uint64(cfg.Hidden), uint64(cfg.Heads*cfg.HeadDim), uint64(cfg.KVHeads*cfg.HeadDim)
	ff, v, hd := uint64(cfg.Intermediate), uint64(cfg.Vocab), uint64(cfg.HeadDim)
	ts := []gguf.TensorInfo{{Name: "token_embd.weight", Shape: []uint64{h, v}}}
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			gguf.TensorInfo{Name: p + "attn_norm.weight", Shape: []uint64{h}},
			gguf.TensorInfo{Name: p + "ffn_norm.weight", Shape: []uint64{h}},
			gguf.TensorInfo{Name: p + "attn_q.weight", Shape: []uint64{h, q}},
			gguf.TensorInfo{Name: p + "attn_k.weight", Shape: []uint64{h, kvw}},
			gguf.TensorInfo{Name: p + "attn_v.weight", Shape: []uint64{h, kvw}},
			gguf.TensorInfo{Name: p + "attn_output.weight", Shape: []uint64{q, h}})
		if cfg.Arch == ArchQwen3 {
			ts = append(ts,
				gguf.TensorInfo{Name: p + "attn_q_norm.weight", Shape: []uint64{hd}},
				gguf.TensorInfo{Name: p + "attn_k_norm.weight", Shape: []uint64{hd}})
		}
		ts = append(ts,
			gguf.TensorInfo{Name: p + "ffn_gate.weight", Shape: []uint64{h, ff}},
			gguf.TensorInfo{Name: p + "ffn_up.weight", Shape: []uint64{h, ff}},
			gguf.TensorInfo{Name: p + "ffn_down.weight", Shape: []uint64{ff, h}})
	}
	ts = append(ts, gguf.TensorInfo{Name: "output_norm.weight", Shape: []uint64{h}})
	if !cfg.TiedEmbeddings {
		ts = append(ts, gguf.TensorInfo{Name: "output.weight", Shape: []uint64{h, v}})
	}
	return ts
}

// ggufLoader reads tensors of an open GGUF, collecting every problem so one load reports all
// missing, misshaped or unrunnable tensors at once.
type ggufLoader struct {
	f        *gguf.File
	compute  Compute
	errs     []error
	elements map[kernel.DType]int64 // matrix elements per dtype they are kept in
	expanded []string               // quantized tensors the kernels could not keep quantized
}

func (gl *ggufLoader) info(name string, shape ...uint64) (gguf.TensorInfo, bool) {
	t, ok := gl.f.Tensor(name)
	if !ok {
		gl.errs = append(gl.errs, fmt.Errorf("tensor %s (expected shape %v): %w", name, shape, gguf.ErrNoTensor))
		return t, false
	}
	if len(t.Shape) != len(shape) {
		gl.errs = append(gl.errs, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Shape, shape))
		return t, false
	}
	for i := range shape {
		if t.Shape[i] != shape[i] {
			gl.errs = append(gl.errs, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Shape, shape))
			return t, false
		}
	}
	if err := t.Type.Check(); err != nil {
		gl.errs = append(gl.errs, fmt.Errorf("tensor %s: %w", name, err))
		return t, false
	}
	return t, true
}

// vector reads a norm weight as f32 (F32 returns a copy, never a view of the mapping).
func (gl *ggufLoader) vector(name string, n int) []float32 {
	if _, ok := gl.info(name, uint64(n)); !ok {
		return nil
	}
	v, err := gl.f.F32(name)
	if err != nil {
		gl.errs = append(gl.errs, err)
		return nil
	}
	return v
}

// matrix reads a weight of n rows of k (ggml shape [k, n]) in the compute dtype (GGUFMatrix),
// counting its elements under the dtype it is kept in.
func (gl *ggufLoader) matrix(name string, n, k int) *kernel.Matrix {
	t, ok := gl.info(name, uint64(k), uint64(n))
	if !ok {
		return nil
	}
	m, expanded, err := GGUFMatrix(gl.f, t, n, k, gl.compute)
	if err != nil {
		gl.errs = append(gl.errs, err)
		return nil
	}
	if expanded != nil {
		gl.expanded = append(gl.expanded, fmt.Sprintf("%s (%s)", name, t.Type))
	}
	gl.elements[m.DType] += int64(n) * int64(k)
	return m
}

// dtype is the kernel dtype that holds most of the matrices' elements: what the model computes
// in, for Config.DType (F32 when there are no matrices).
func (gl *ggufLoader) dtype() kernel.DType {
	best, most := kernel.F32, int64(0)
	for _, dt := range slices.Sorted(maps.Keys(gl.elements)) {
		if gl.elements[dt] > most {
			best, most = dt, gl.elements[dt]
		}
	}
	return best
}

// GGUFMatrix converts a GGUF tensor of n rows of k (its info t, shape-checked by the caller)
// into a kernel matrix: the one GGUF tensor-to-matrix conversion, for targets and drafts alike.
//
// With KeepDType, quantized tensors (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) stay quantized in the
// kernel's block panels (kernel.NewQuant): the file's bytes in memory and per decode step, and
// every weight exactly the value the block defines. F32 and BF16 stay as stored and F16 widens to
// F32 exactly, as for safetensors. A quantized type the kernels lack is dequantized and rounded
// to bf16 instead, and expanded says why (the caller logs it); that costs the bf16 bytes and
// one extra rounding of each weight. ForceF32 and ForceBF16 expand every tensor to that dtype.
func GGUFMatrix(f *gguf.File, t gguf.TensorInfo, n, k int, dtype Compute) (m *kernel.Matrix, expanded error, err error) {
	plain := t.Type == quant.F32 || t.Type == quant.F16 || t.Type == quant.BF16
	if !plain && dtype == KeepDType {
		b, err := f.Data(t.Name)
		if err != nil {
			return nil, nil, err
		}
		m, qerr := kernel.NewQuant(t.Type, b, n, k)
		if qerr == nil {
			return m, nil, nil
		}
		expanded = qerr
	}
	wantBF16 := dtype == ForceBF16 || (dtype == KeepDType && t.Type != quant.F32 && t.Type != quant.F16)
	if t.Type == quant.BF16 && wantBF16 {
		b, err := f.Data(t.Name)
		if err != nil {
			return nil, nil, err
		}
		w := make([]uint16, n*k)
		for i := range w {
			w[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
		}
		return kernel.NewBF16(w, n, k), nil, nil
	}
	v, err := f.F32(t.Name)
	if err != nil {
		return nil, nil, err
	}
	if !wantBF16 {
		return kernel.NewF32(v, n, k), nil, nil
	}
	w := make([]uint16, len(v))
	for i, x := range v {
		w[i] = quant.F32ToBF16(x)
	}
	return kernel.NewBF16(w, n, k), expanded, nil
}

// LoadGGUF loads a Qwen3 or Llama GGUF file: llama.cpp's tensor names (gguf.LayerTensorNames),
// F32/F16/BF16 tensors converted as for a Hugging Face folder, quantized ones (Q8_0, Q4_0, Q4_K,
// Q5_K, Q6_K) kept quantized for the kernels (see GGUFMatrix), any other type refused by name.
//
// RoPE: qwen3 files are stored as Hugging Face stores them and rotate halves. llama files have
// attn_q/attn_k rows permuted for interleaved pairs (llama.cpp's converter does it; llama2.c
// checkpoints come that way), so they rotate adjacent pairs and need no un-permuting: pair
// (2i, 2i+1) of a permuted head is pair (i, i+headDim/2) of the Hugging Face head, at the same
// frequency, and attention scores are sums over a head's elements in any order.
func LoadGGUF(path string, opt Options) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	defer f.Close() // every matrix is repacked and every vector copied before this
	cfg, err := GGUFConfig(f)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	gl := &ggufLoader{f: f, compute: opt.DType, elements: map[kernel.DType]int64{}}
	h, q, kvw := cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	emb := gl.matrix("token_embd.weight", cfg.Vocab, h)
	layers := make([]Layer, cfg.Layers)
	for i := range layers {
		p := fmt.Sprintf("blk.%d.", i)
		l := &layers[i]
		l.AttnNorm = gl.vector(p+"attn_norm.weight", h)
		l.MLPNorm = gl.vector(p+"ffn_norm.weight", h)
		l.Q = gl.matrix(p+"attn_q.weight", q, h)
		l.K = gl.matrix(p+"attn_k.weight", kvw, h)
		l.V = gl.matrix(p+"attn_v.weight", kvw, h)
		l.O = gl.matrix(p+"attn_output.weight", h, q)
		if cfg.Arch == ArchQwen3 {
			l.QNorm = gl.vector(p+"attn_q_norm.weight", cfg.HeadDim)
			l.KNorm = gl.vector(p+"attn_k_norm.weight", cfg.HeadDim)
		}
		l.Gate = gl.matrix(p+"ffn_gate.weight", cfg.Intermediate, h)
		l.Up = gl.matrix(p+"ffn_up.weight", cfg.Intermediate, h)
		l.Down = gl.matrix(p+"ffn_down.weight", h, cfg.Intermediate)
	}
	norm := gl.vector("output_norm.weight", h)
	head := emb
	if !cfg.TiedEmbeddings {
		head = gl.matrix("output.weight", cfg.Vocab, h)
	}
	sp := spec{style: nn.RotateHalf, inv: nn.InvFreq(cfg.HeadDim, cfg.RopeTheta)}
	if cfg.Arch == ArchLlama {
		sp.style = nn.AdjacentPair
	}
	if f.Has("rope_freqs.weight") {
		// llama.cpp bakes llama3 rope scaling into per-frequency divisors.
		if factors := gl.vector("rope_freqs.weight", cfg.HeadDim/2); factors != nil {
			for i, fa := range factors {
				sp.inv[i] /= float64(fa)
			}
		}
	}
	if len(gl.errs) > 0 {
		return nil, fmt.Errorf("load %s: %w", path, errors.Join(gl.errs...))
	}
	if len(gl.expanded) > 0 {
		log.Printf("load %s: %d quantized tensors have no quantized kernel and were expanded to bf16: %s", path, len(gl.expanded), strings.Join(gl.expanded, ", "))
	}
	cfg.DType = gl.dtype()
	m, err := newModel(cfg, sp, emb, head, layers, norm)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return m, nil
}
