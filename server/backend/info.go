package backend

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/server"
)

// describe builds a model's listing from its files alone (config.json or the checkpoint's size),
// without loading weights: listings must stay cheap however large the model.
func describe(s Spec, ctxCap int) (info server.ModelInfo, err error) {
	st, err := os.Stat(s.Path)
	if err != nil {
		return info, fmt.Errorf("model path: %w", err)
	}
	info.Name = s.Name
	info.ModifiedAt = st.ModTime().UTC()
	if s.Draft != "" {
		info.Draft = filepath.Base(strings.TrimSuffix(s.Draft, "/"))
	}
	if !st.IsDir() {
		// A llama2.c checkpoint: float32 weights, Llama architecture.
		info.Family, info.Format, info.Quantization = "llama", "llama2.c", "F32"
		info.Size = st.Size()
		info.ParameterSize = formatParams(llama2cParams(s.Path, st.Size()))
		return info, nil
	}
	info.Format = "safetensors"
	info.Size = folderBytes(s.Path)
	cfg, err := hf.LoadConfig(s.Path)
	if err != nil {
		return info, err
	}
	info.Family = cfg.ModelType
	info.Quantization = quantization(cfg.TorchDtype)
	info.ParameterSize = formatParams(paramCount(model.Config{
		Layers: cfg.NumHiddenLayers, Hidden: cfg.HiddenSize, Intermediate: cfg.IntermediateSize,
		Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads, HeadDim: cfg.HeadDim,
		Vocab: cfg.VocabSize, TiedEmbeddings: cfg.TieWordEmbeddings,
	}))
	if cfg.MaxPositionEmbeddings > 0 {
		info.ContextLength = min(cfg.MaxPositionEmbeddings, ctxCap)
	}
	return info, nil
}

// llama2cParams counts a llama2.c checkpoint's parameters from its legacy header (7 int32: dim,
// hidden_dim, layers, heads, kv_heads, vocab (negative: untied head), seq_len). For other exports
// it falls back to the file's float32 count, which also counts the header and RoPE tables.
func llama2cParams(path string, size int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return size / 4
	}
	defer f.Close()
	var h [7]int32
	if err := binary.Read(f, binary.LittleEndian, &h); err != nil || string(binary.LittleEndian.AppendUint32(nil, uint32(h[0]))) == "ak42" {
		return size / 4
	}
	for _, v := range []int32{h[0], h[1], h[2], h[3], h[4]} {
		if v <= 0 {
			return size / 4
		}
	}
	vocab := int(h[5])
	return paramCount(model.Config{Hidden: int(h[0]), Intermediate: int(h[1]), Layers: int(h[2]), Heads: int(h[3]),
		KVHeads: int(h[4]), Vocab: max(vocab, -vocab), TiedEmbeddings: vocab > 0})
}

// refine completes a listing from the loaded target, whose config is authoritative.
func refine(info server.ModelInfo, c model.Config, ctxLen int) server.ModelInfo {
	info.ParameterSize = formatParams(paramCount(c))
	info.ContextLength = ctxLen
	switch {
	case c.Arch == transformer.ArchLlama2C || strings.HasPrefix(c.Arch, "Llama"):
		info.Family = "llama"
	case strings.HasPrefix(c.Arch, "Qwen3"):
		info.Family = "qwen3"
	}
	switch c.DType {
	case kernel.BF16:
		info.Quantization = "BF16"
	case kernel.F32:
		info.Quantization = "F32"
	}
	return info
}

func quantization(torchDtype string) string {
	switch torchDtype {
	case "bfloat16":
		return "BF16"
	case "float16":
		return "F16"
	case "float32", "":
		return "F32"
	}
	return strings.ToUpper(torchDtype)
}

// folderBytes sums the safetensors files of a model folder: the weights on disk.
func folderBytes(dir string) int64 {
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var n int64
	for _, p := range m {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// paramCount counts the parameters of a Llama/Qwen3-shaped decoder: embeddings, per layer the
// attention and gated MLP projections and two norms (Qwen3's small q/k norms are left out), the
// final norm and an untied head.
func paramCount(c model.Config) int64 {
	headDim := c.HeadDim
	if headDim == 0 && c.Heads > 0 {
		headDim = c.Hidden / c.Heads
	}
	kv := c.KVHeads
	if kv == 0 {
		kv = c.Heads
	}
	h, v := int64(c.Hidden), int64(c.Vocab)
	q, k := int64(c.Heads*headDim), int64(kv*headDim)
	layer := h*q + 2*h*k + q*h + 3*h*int64(c.Intermediate) + 2*h
	n := v*h + int64(c.Layers)*layer + h
	if !c.TiedEmbeddings {
		n += v * h
	}
	return n
}

// formatParams prints a parameter count as ollama lists it: "260K", "596M", "1.7B".
func formatParams(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.1fB", f/1e9)
	case f >= 1e8:
		return fmt.Sprintf("%.0fM", f/1e6)
	case f >= 1e6:
		return fmt.Sprintf("%.1fM", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.0fK", f/1e3)
	}
	return fmt.Sprintf("%d", n)
}
