package engine

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/llama2c"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
	"github.com/dflash/dflash/tokenizer"
)

// ConvertTypes are the --type values ConvertGGUF writes.
var ConvertTypes = []string{"f32", "bf16", "q8_0", "q4_0", "q4_k_m"}

// Conversion is what ConvertGGUF wrote: the tensor count per type and the tensors that were
// written in another type than the mix asked for, each with the reason.
type Conversion struct {
	FileType  FileType
	Tensors   int
	Types     map[quant.Type]int
	Fallbacks []string
	// Warnings say where the file will not behave as the source does (its tokenizer reading a
	// text otherwise, say); the file is written all the same.
	Warnings []string
}

// srcTensor is one tensor of the source model in GGUF naming and ggml shape order, read (and
// permuted) only when it is written, so a conversion holds one tensor at a time.
type srcTensor struct {
	name  string
	shape []uint64
	load  func() ([]float32, error)
}

// ConvertGGUF writes the model at src (a Qwen3 or Llama Hugging Face folder, or a llama2.c
// checkpoint with its tokenizer beside it) as a GGUF file at out, as llama.cpp's converter
// names and lays it out: its tensor names, {arch}.* hyperparameters, general.file_type and
// general.quantization_version 2, the tokenizer as tokenizer.ggml.*, the chat template, and for
// "llama" the q/k rows of Hugging Face checkpoints permuted to interleaved pairs (llama2.c's are
// stored that way already). Norms stay f32. typ is one of ConvertTypes; for q4_k_m the mix is
// llama.cpp's: Q6_K for the output head (token_embd when tied) and for attn_v and ffn_down in
// the layers its use_more_bits rule picks (the first and last eighth, and every third between),
// Q4_K elsewhere. A matrix whose row length is not a multiple of its type's block falls back:
// Q4_K to Q4_0, Q6_K to Q8_0, and to F16 when no 32-block fits either. The file is written
// beside out and renamed into place. A DFlash or DFlash2 draft folder is written as a draft GGUF
// instead (convertDraft).
func ConvertGGUF(src, out, typ string) (*Conversion, error) {
	ft, base, err := convertType(typ)
	if err != nil {
		return nil, err
	}
	if isDraftFolder(src) {
		return convertDraft(src, out, ft, base)
	}
	d, err := Describe(Options{Model: src})
	if err != nil {
		return nil, err
	}
	if d.Format != FormatSafetensors && d.Format != FormatLlama2C {
		return nil, fmt.Errorf("convert %s: a %s model cannot be converted (want a Hugging Face folder or a llama2.c checkpoint)", src, d.Format)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	cfg := d.Config
	arch := "qwen3"
	if cfg.Arch != transformer.ArchQwen3 {
		arch = "llama"
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String(arch)},
		{Key: "general.name", Value: gguf.String(d.Name)},
		{Key: "general.file_type", Value: gguf.Uint32(uint32(ft))},
		{Key: gguf.KeyAlignment, Value: gguf.Uint32(gguf.DefaultAlignment)},
	}
	if ft != FileTypeF32 && ft != FileTypeBF16 {
		kvs = append(kvs, gguf.KV{Key: "general.quantization_version", Value: gguf.Uint32(2)})
	}
	u := func(key string, v int) gguf.KV { return gguf.KV{Key: arch + "." + key, Value: gguf.Uint32(uint32(v))} }
	kvs = append(kvs,
		u("context_length", cfg.MaxSeq), u("embedding_length", cfg.Hidden), u("block_count", cfg.Layers),
		u("feed_forward_length", cfg.Intermediate), u("attention.head_count", cfg.Heads),
		u("attention.head_count_kv", cfg.KVHeads), u("attention.key_length", cfg.HeadDim),
		u("attention.value_length", cfg.HeadDim), u("rope.dimension_count", cfg.HeadDim), u("vocab_size", cfg.Vocab),
		gguf.KV{Key: arch + ".rope.freq_base", Value: gguf.Float32(float32(cfg.RopeTheta))},
		gguf.KV{Key: arch + ".attention.layer_norm_rms_epsilon", Value: gguf.Float32(cfg.RMSEps)},
	)
	var warnings []string
	if d.Tok != nil {
		tkv, g, err := tokenizerKVs(d)
		if err != nil {
			return nil, fmt.Errorf("convert %s: %w", src, err)
		}
		kvs = append(kvs, tkv...)
		warnings = tokenizerWarnings(d.Tok, g)
	}
	var ts []srcTensor
	var closeSrc func() error
	if d.Format == FormatLlama2C {
		ts, err = llama2cTensors(d.Path, cfg)
	} else {
		ts, closeSrc, err = hfTensors(d, arch)
	}
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", src, err)
	}
	if closeSrc != nil {
		defer closeSrc()
	}
	conv := &Conversion{FileType: ft, Types: map[quant.Type]int{}}
	infos := make([]gguf.TensorInfo, len(ts))
	for i, t := range ts {
		infos[i] = gguf.TensorInfo{Name: t.name, Shape: t.shape, Type: conv.pick(t, base, ft, cfg)}
	}
	conv.Warnings = warnings
	if err := conv.write(src, out, kvs, ts, infos); err != nil {
		return nil, err
	}
	return conv, nil
}

// tokenizerProbes are texts the written tokenizer must read as the source's: capitals, digits,
// punctuation, accents, runs of spaces and newlines.
var tokenizerProbes = []string{
	"Once upon a time, Lily said: \"Hello World!\" It was 2024.",
	"The CAT sat on the mat.\n\nThen  it   slept.",
	"caf\u00e9 na\u00efve \u00c9t\u00e9",
}

// tokenizerWarnings says that a normalizer kept under gguf.KeyNormalizer is dflash's alone, and
// reads the probes with the tokenizer dflash builds from g and with the source's own, saying
// where they part: a rule the written keys do not express would otherwise go unnoticed until a
// model reads text it was not trained on.
func tokenizerWarnings(src tokenizer.Tokenizer, g gguf.Tokenizer) []string {
	var warnings []string
	if g.Normalizer != "" {
		warnings = append(warnings, fmt.Sprintf("tokenizer: the source's normalizer %s has no llama.cpp GGUF key: it is kept under %s, which dflash applies but llama.cpp and ollama ignore, so they read text without it", g.Normalizer, gguf.KeyNormalizer))
	}
	back, err := tokenizer.FromGGUF(g)
	if err != nil {
		return append(warnings, fmt.Sprintf("tokenizer: the written tokenizer does not load back: %v", err))
	}
	for _, p := range tokenizerProbes {
		a, b := back.Encode(p), src.Encode(p)
		if slices.Equal(a, b) {
			continue
		}
		i := 0
		for i < min(len(a), len(b)) && a[i] == b[i] {
			i++
		}
		at := "the file's ends there"
		if i < len(a) && i < len(b) {
			at = fmt.Sprintf("the file's %d, the model's %d", a[i], b[i])
		} else if i < len(a) {
			at = "the model's ends there"
		}
		return append(warnings, fmt.Sprintf("tokenizer: the file reads %q otherwise than the model (%d tokens against %d; token %d: %s): the source tokenizer has a rule GGUF's tokenizer keys cannot express, so text given to the file is not read as the model was trained to read it", p, len(a), len(b), i, at))
	}
	return warnings
}

// write writes the GGUF of kvs and ts (in the types of infos) beside out and renames it into
// place, quantizing one tensor at a time.
func (c *Conversion) write(src, out string, kvs []gguf.KV, ts []srcTensor, infos []gguf.TensorInfo) error {
	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	defer os.Remove(tmp) // a no-op after the rename
	defer f.Close()
	w, err := gguf.NewWriter(f, kvs, infos)
	if err != nil {
		return fmt.Errorf("convert %s: %w", src, err)
	}
	for i, t := range ts {
		v, err := t.load()
		if err != nil {
			return fmt.Errorf("convert %s: tensor %s: %w", src, t.name, err)
		}
		data, err := quant.Quantize(infos[i].Type, v)
		if err != nil {
			return fmt.Errorf("convert %s: tensor %s: %w", src, t.name, err)
		}
		if err := w.WriteTensor(data); err != nil {
			return fmt.Errorf("convert %s: %w", src, err)
		}
		c.Types[infos[i].Type]++
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("convert %s: %w", src, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	c.Tensors = len(ts)
	return nil
}

func convertType(typ string) (FileType, quant.Type, error) {
	switch typ {
	case "f32":
		return FileTypeF32, quant.F32, nil
	case "bf16":
		return FileTypeBF16, quant.BF16, nil
	case "q8_0":
		return FileTypeQ8_0, quant.Q8_0, nil
	case "q4_0":
		return FileTypeQ4_0, quant.Q4_0, nil
	case "q4_k_m":
		return FileTypeQ4_KM, quant.Q4_K, nil
	}
	return 0, 0, fmt.Errorf("convert: --type %q: want one of %s", typ, strings.Join(ConvertTypes, ", "))
}

// useMoreBits is llama.cpp's choice of the layers that get Q6_K in a Q4_K_M mix: the first and
// last eighth of n, and every third layer between.
func useMoreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// pick is the type a tensor is written in, recording any fallback.
func (c *Conversion) pick(t srcTensor, base quant.Type, ft FileType, cfg model.Config) quant.Type {
	if len(t.shape) != 2 {
		return quant.F32 // norms and rope factors: tiny, and read as f32
	}
	want := base
	if ft == FileTypeQ4_KM {
		layer := -1
		if rest, ok := strings.CutPrefix(t.name, "blk."); ok {
			fmt.Sscanf(rest, "%d.", &layer)
		}
		switch {
		case t.name == "output.weight", t.name == "token_embd.weight" && cfg.TiedEmbeddings:
			want = quant.Q6_K
		case layer >= 0 && (strings.HasSuffix(t.name, ".attn_v.weight") || strings.HasSuffix(t.name, ".ffn_down.weight")) && useMoreBits(layer, cfg.Layers):
			want = quant.Q6_K
		}
	}
	return c.fit(t, want)
}

// fit is want, or the fallback type when t's rows are not whole blocks of it (recorded): Q4_K
// falls back to Q4_0, Q6_K to Q8_0, and to F16 when no 32-block fits either.
func (c *Conversion) fit(t srcTensor, want quant.Type) quant.Type {
	got := want
	fits := func(ty quant.Type) bool { return t.shape[0]%uint64(ty.BlockSize()) == 0 }
	if !fits(got) {
		switch got {
		case quant.Q4_K:
			got = quant.Q4_0
		case quant.Q6_K:
			got = quant.Q8_0
		}
		if !fits(got) {
			got = quant.F16
		}
		c.Fallbacks = append(c.Fallbacks, fmt.Sprintf("%s: rows of %d are not whole %s blocks of %d, written as %s", t.name, t.shape[0], want, want.BlockSize(), got))
	}
	return got
}

// tokenizerKVs spells the description's tokenizer, special ids and chat template as llama.cpp's
// tokenizer.ggml.* keys, and returns the tokenizer as spelled.
func tokenizerKVs(d *Description) ([]gguf.KV, gguf.Tokenizer, error) {
	g, err := tokenizer.ToGGUF(d.Tok, d.Config.Vocab)
	if err != nil {
		return nil, g, err
	}
	kvs := []gguf.KV{{Key: "tokenizer.ggml.model", Value: gguf.String(g.Model)}}
	if g.Pre != "" {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.pre", Value: gguf.String(g.Pre)})
	}
	kvs = append(kvs,
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: gguf.Array(g.Tokens)},
		gguf.KV{Key: "tokenizer.ggml.token_type", Value: gguf.Array(g.TokenTypes)})
	if g.Scores != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.scores", Value: gguf.Array(g.Scores)})
	}
	if g.Merges != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.Array(g.Merges)})
	}
	for _, s := range []struct {
		key string
		id  int
	}{{"bos", g.BOS}, {"eos", g.EOS}, {"unknown", g.Unknown}, {"padding", g.Padding}} {
		if s.id >= 0 {
			kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml." + s.key + "_token_id", Value: gguf.Uint32(uint32(s.id))})
		}
	}
	if g.AddBOS != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(*g.AddBOS)})
	}
	if d.Template.Kind == TemplateModel {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(d.Template.Source)})
	}
	if g.Normalizer != "" {
		// A normalizer GGUF's keys cannot express (the default target's Lowercase) is kept under
		// dflash's own key rather than refused or lost: dflash then reads the file's text exactly
		// as the source's, the one tool that can; llama.cpp loads the file all the same (it
		// ignores keys it does not know) but reads text without the rule, which
		// tokenizerWarnings says.
		kvs = append(kvs, gguf.KV{Key: gguf.KeyNormalizer, Value: gguf.String(g.Normalizer)})
	}
	return kvs, g, nil
}

// llama2cTensors reads a checkpoint (all of it: the format has no index) and names its tensors.
func llama2cTensors(path string, cfg model.Config) ([]srcTensor, error) {
	ck, err := llama2c.Load(path)
	if err != nil {
		return nil, err
	}
	var ts []srcTensor
	add := func(name string, w []float32, shape ...uint64) {
		ts = append(ts, srcTensor{name, shape, func() ([]float32, error) { return w, nil }})
	}
	h, ff, kv, v := uint64(cfg.Hidden), uint64(cfg.Intermediate), uint64(cfg.KVHeads*cfg.HeadDim), uint64(cfg.Vocab)
	add("token_embd.weight", ck.TokenEmbedding, h, v)
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", ck.RMSAtt[i], h)
		add(p+"attn_q.weight", ck.WQ[i], h, h)
		add(p+"attn_k.weight", ck.WK[i], h, kv)
		add(p+"attn_v.weight", ck.WV[i], h, kv)
		add(p+"attn_output.weight", ck.WO[i], h, h)
		add(p+"ffn_norm.weight", ck.RMSFFN[i], h)
		add(p+"ffn_gate.weight", ck.W1[i], h, ff)
		add(p+"ffn_down.weight", ck.W2[i], ff, h)
		add(p+"ffn_up.weight", ck.W3[i], h, ff)
	}
	add("output_norm.weight", ck.RMSFinal, h)
	if !cfg.TiedEmbeddings {
		add("output.weight", ck.WCls, h, v)
	}
	return ts, nil
}

// hfTensors names a folder's tensors for GGUF, in llama.cpp's order (embedding, layers, norm,
// head), with llama q/k permuted and, for llama3 rope scaling, rope_freqs.weight.
func hfTensors(d *Description, arch string) ([]srcTensor, func() error, error) {
	st, err := safetensors.OpenModel(d.Path)
	if err != nil {
		return nil, nil, err
	}
	cfg := d.Config
	var ts []srcTensor
	for _, want := range TargetTensors(cfg) {
		name, ok := gguf.GGUFName(want.Name)
		if !ok {
			st.Close()
			return nil, nil, fmt.Errorf("tensor %s has no GGUF name", want.Name)
		}
		shape := make([]uint64, len(want.Shape))
		for i, s := range want.Shape {
			shape[len(shape)-1-i] = uint64(s) // ggml order: the row length first
		}
		hfName := want.Name
		heads := 0
		if arch == "llama" && strings.HasSuffix(name, ".attn_q.weight") {
			heads = cfg.Heads
		} else if arch == "llama" && strings.HasSuffix(name, ".attn_k.weight") {
			heads = cfg.KVHeads
		}
		ts = append(ts, srcTensor{name, shape, func() ([]float32, error) {
			t, err := st.Tensor(hfName)
			if err != nil {
				return nil, err
			}
			v, err := t.F32()
			if err != nil || heads == 0 {
				return v, err
			}
			return permuteRoPE(v, heads, cfg.HeadDim, cfg.Hidden), nil
		}})
	}
	if scaled, plain := d.hf.RopeInvFreq(cfg.HeadDim), nn.InvFreq(cfg.HeadDim, cfg.RopeTheta); !slices.Equal(scaled, plain) {
		factors := make([]float32, len(plain))
		for i := range factors {
			factors[i] = float32(plain[i] / scaled[i])
			if math.IsInf(float64(factors[i]), 0) || math.IsNaN(float64(factors[i])) {
				st.Close()
				return nil, nil, fmt.Errorf("rope scaling gives frequency factor %g", factors[i])
			}
		}
		ts = append(ts, srcTensor{"rope_freqs.weight", []uint64{uint64(len(factors))}, func() ([]float32, error) { return factors, nil }})
	}
	return ts, st.Close, nil
}

// permuteRoPE reorders the rows of a Hugging Face q or k projection (rotate-half RoPE) into
// llama.cpp's interleaved-pair order: within each head, row 2i+k is HF row k*headDim/2+i.
func permuteRoPE(w []float32, heads, headDim, cols int) []float32 {
	out := make([]float32, len(w))
	half := headDim / 2
	for h := 0; h < heads; h++ {
		for i := 0; i < half; i++ {
			for k := 0; k < 2; k++ {
				dst := (h*headDim + 2*i + k) * cols
				src := (h*headDim + k*half + i) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}
