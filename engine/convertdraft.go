package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
)

// isDraftFolder says whether src is a folder whose config.json names a DFlash or DFlash2 draft.
func isDraftFolder(src string) bool {
	if dflash.IsFile(src) {
		return false
	}
	hc, err := hf.LoadConfig(src)
	return err == nil && (slices.Contains(hc.Architectures, dflash.Arch) || dflash2.Detect(hc))
}

// convertDraft writes the DFlash or DFlash2 draft folder src as a draft GGUF (dflash.GGUFArch:
// its config.json verbatim in the metadata, every tensor under its folder name) at out. Matrices
// take the type of ft as a target's do (for Q4_K_M: Q6_K for v_proj and down_proj in the layers
// llama.cpp's use_more_bits rule picks, Q4_K elsewhere; the same fallbacks for rows that are not
// whole blocks); DFlash2's codebooks, read a row at a time rather than multiplied, stay BF16
// unless f32 is asked; vectors and convolution kernels stay F32. Every tensor of the folder is
// written, so the file holds what the folder held, and the loaders check it as they check the
// folder.
func convertDraft(src, out string, ft FileType, base quant.Type) (*Conversion, error) {
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", src, err)
	}
	st, err := safetensors.OpenModel(src)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", src, err)
	}
	defer st.Close()
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String(dflash.GGUFArch)},
		{Key: "general.name", Value: gguf.String(filepath.Base(strings.TrimSuffix(src, "/")))},
		{Key: "general.file_type", Value: gguf.Uint32(uint32(ft))},
		{Key: gguf.KeyAlignment, Value: gguf.Uint32(gguf.DefaultAlignment)},
		{Key: dflash.GGUFConfigKey, Value: gguf.String(string(raw))},
	}
	if ft != FileTypeF32 && ft != FileTypeBF16 {
		kvs = append(kvs, gguf.KV{Key: "general.quantization_version", Value: gguf.Uint32(2)})
	}
	layers := 0
	var ts []srcTensor
	for _, name := range st.Names() {
		t, err := st.Tensor(name)
		if err != nil {
			return nil, fmt.Errorf("convert %s: %w", src, err)
		}
		shape := make([]uint64, len(t.Shape))
		for i, s := range t.Shape {
			shape[len(shape)-1-i] = uint64(s) // ggml order: the row length first
		}
		ts = append(ts, srcTensor{name, shape, func() ([]float32, error) { return t.F32() }})
		if l := draftLayer(name); l >= layers {
			layers = l + 1
		}
	}
	conv := &Conversion{FileType: ft, Types: map[quant.Type]int{}}
	infos := make([]gguf.TensorInfo, len(ts))
	for i, t := range ts {
		infos[i] = gguf.TensorInfo{Name: t.name, Shape: t.shape, Type: conv.pickDraft(t, base, ft, layers)}
	}
	if err := conv.write(src, out, kvs, ts, infos); err != nil {
		return nil, err
	}
	return conv, nil
}

// draftLayer is the layer index of a draft tensor named layers.N...., or -1.
func draftLayer(name string) int {
	rest, ok := strings.CutPrefix(name, "layers.")
	if !ok {
		return -1
	}
	l := -1
	if _, err := fmt.Sscanf(rest, "%d.", &l); err != nil {
		return -1
	}
	return l
}

// pickDraft is the type a draft tensor is written in, recording any fallback.
func (c *Conversion) pickDraft(t srcTensor, base quant.Type, ft FileType, layers int) quant.Type {
	if len(t.shape) != 2 {
		return quant.F32
	}
	if strings.HasSuffix(t.name, "_codebook") {
		if base == quant.F32 {
			return quant.F32
		}
		return quant.BF16
	}
	want := base
	if l := draftLayer(t.name); ft == FileTypeQ4_KM && l >= 0 && useMoreBits(l, layers) &&
		(strings.HasSuffix(t.name, ".self_attn.v_proj.weight") || strings.HasSuffix(t.name, ".mlp.down_proj.weight")) {
		want = quant.Q6_K
	}
	return c.fit(t, want)
}
