package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model"
)

func convertTo(t *testing.T, src, typ string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "model-"+typ+".gguf")
	c, err := ConvertGGUF(src, out, typ)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d tensors %v, %d fallbacks", typ, c.Tensors, c.Types, len(c.Fallbacks))
	if len(c.Warnings) > 0 {
		t.Errorf("%s: conversion warns %q", typ, c.Warnings)
	}
	return out
}

func open(t *testing.T, path string) *Engine {
	t.Helper()
	e, err := Open(Options{Model: path})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func greedy(t *testing.T, m model.Target, prompt []int, n int) []int {
	t.Helper()
	c := m.NewCache(len(prompt) + n)
	ids := slices.Clone(prompt)
	in := prompt
	for range n {
		r, err := m.Forward(c, model.Request{Tokens: in, Logits: model.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for i, v := range r.Logits {
			if v > r.Logits[best] {
				best = i
			}
		}
		ids = append(ids, best)
		in = []int{best}
	}
	return ids
}

// perplexity is exp of the mean next-token NLL over tokens, in windows of ctx positions that each
// start with bos (as the model was trained), computed in float64 from the logits.
func perplexity(t *testing.T, m model.Target, bos int, tokens []int, ctx int) float64 {
	t.Helper()
	vocab := m.Config().Vocab
	var nll float64
	n := 0
	for start := 0; start < len(tokens); start += ctx - 1 {
		win := tokens[start:min(start+ctx-1, len(tokens))]
		in := append([]int{bos}, win[:len(win)-1]...)
		r, err := m.Forward(m.NewCache(ctx), model.Request{Tokens: in, Logits: model.LogitsAll})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range win {
			row := r.Logits[i*vocab : (i+1)*vocab]
			mx := float64(slices.Max(row))
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v) - mx)
			}
			nll += mx + math.Log(z) - float64(row[want])
			n++
		}
	}
	return math.Exp(nll / float64(n))
}

// stories260K converted by ConvertGGUF: each file describes itself with nothing beside it; the
// F32 file's greedy ids are the numpy reference's (run.c's goldens through the CLI are in
// cmd/dflash); BF16 and Q8_0 run, and their perplexity over 20k tokens of held-out TinyStories
// is within 1% of the f32 model's, the bar.
func TestGGUFStories260K(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	raw, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/numpy_ref_greedy64.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		GreedyIDs []int `json:"greedy_ids"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	base := open(t, bin)
	tokens := base.Tok.Encode(string(text[:120_000]))
	if len(tokens) < 20_000 {
		t.Fatalf("%d tokens of text, want 20000", len(tokens))
	}
	tokens = tokens[:20_000]
	const ctx = 256
	basePPL := perplexity(t, base.Target, 1, tokens, ctx)
	for _, c := range []struct {
		typ, dtype string
		tol        float64 // relative perplexity difference to the checkpoint's
	}{{"f32", "F32", 0}, {"bf16", "BF16", 0.01}, {"q8_0", "Q8_0", 0.01}} {
		path := convertTo(t, bin, c.typ)
		d, err := Describe(Options{Model: path})
		if err != nil {
			t.Fatal(err)
		}
		got := factsOf(d)
		want := facts{format: FormatGGUF, family: "llama", dtype: c.dtype, params: base.Desc.Parameters, context: 512,
			vocab: 512, tokenizer: true, template: TemplatePlain, stop: []int{1, 2}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: described as %+v, want %+v", c.typ, got, want)
		}
		if st, _ := os.Stat(path); d.Size != st.Size() || d.TokenizerPath != path {
			t.Errorf("%s: size %d tokenizer %q", c.typ, d.Size, d.TokenizerPath)
		}
		e := open(t, path)
		ids := greedy(t, e.Target, []int{1}, 64)
		if c.typ == "f32" && !slices.Equal(ids, ref.GreedyIDs) {
			t.Errorf("f32 GGUF greedy ids %v, want the reference's %v", ids, ref.GreedyIDs)
		}
		t.Logf("%s greedy: %q", c.typ, e.Tok.Decode(ids))
		ppl := perplexity(t, e.Target, 1, tokens, ctx)
		t.Logf("%s: perplexity %.4f over %d tokens (checkpoint %.4f, %+.3f%%)", c.typ, ppl, len(tokens), basePPL, 100*(ppl/basePPL-1))
		if c.tol == 0 && ppl != basePPL || math.Abs(ppl/basePPL-1) > c.tol {
			t.Errorf("%s: perplexity %.5f, checkpoint %.5f: off by more than %.0f%%", c.typ, ppl, basePPL, 100*c.tol)
		}
	}
}

// A random Qwen3 folder with the real tokenizer, converted to an F32 GGUF: the file alone gives
// the folder's logits bitwise, its tokenizer, template and stop ids, and its tokenizer encodes
// llama.cpp's 46 Qwen2 cases as the folder's does.
func TestGGUFQwen3MatchesFolder(t *testing.T) {
	dir := testmodel.Qwen3(t, "")
	path := convertTo(t, dir, "f32")
	want, got := open(t, dir), open(t, path)
	if got.Desc.Family != "qwen3" || got.Desc.DType != "F32" || got.Desc.Context != 512 || got.Desc.Config.Vocab != 151936 {
		t.Errorf("described as %+v", factsOf(got.Desc))
	}
	if got.Desc.Template.Kind != TemplateModel || got.Desc.Template.Source != want.Desc.Template.Source {
		t.Errorf("template kind %v, source equal %v", got.Desc.Template.Kind, got.Desc.Template.Source == want.Desc.Template.Source)
	}
	if !slices.Equal(got.Stop, want.Stop) {
		t.Errorf("stop %v, folder %v", got.Stop, want.Stop)
	}
	prompt := []int{9707, 11, 1879, 0, 151644, 872, 198, 3838, 374, 220}
	rg, err := got.Target.Forward(got.Target.NewCache(16), model.Request{Tokens: prompt, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := want.Target.Forward(want.Target.NewCache(16), model.Request{Tokens: prompt, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rw.Logits {
		if math.Float32bits(rg.Logits[i]) != math.Float32bits(rw.Logits[i]) {
			t.Fatalf("logit %d: GGUF %g, folder %g", i, rg.Logits[i], rw.Logits[i])
		}
	}
	inp, err := os.ReadFile(shareddata.Path(t, "tokenizer-tests/ggml-vocab-qwen2.gguf.inp"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	cases := strings.Split(strings.TrimSuffix(string(inp), sep), sep)
	if len(cases) != 46 {
		t.Fatalf("%d cases, want 46", len(cases))
	}
	for i, s := range cases {
		if a, b := got.Tok.Encode(s), want.Tok.Encode(s); !slices.Equal(a, b) {
			t.Errorf("case %d %q: GGUF %v, folder %v", i, s, a, b)
		}
	}
	chat := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if a, b := got.Tok.Encode(chat), want.Tok.Encode(chat); !slices.Equal(a, b) {
		t.Errorf("chat: GGUF %v, folder %v", a, b)
	}
	// The metadata llama.cpp and ollama key on.
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]string{
		"general.architecture": "qwen3", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
	} {
		if v, err := f.Metadata.String(key); err != nil || v != want {
			t.Errorf("%s = %q, %v; want %q", key, v, err, want)
		}
	}
	if v, err := f.Metadata.Uint("general.file_type"); err != nil || v != uint64(FileTypeF32) {
		t.Errorf("general.file_type = %d, %v", v, err)
	}
	if f.Metadata.Has("general.quantization_version") {
		t.Error("an f32 file has general.quantization_version")
	}
}

// writeLlamaFolder writes a random Hugging Face Llama folder (no tokenizer): 4 heads over 2 KV
// heads, vocabulary 96, an untied head.
func writeLlamaFolder(t *testing.T, hidden, inter, layers int) string {
	t.Helper()
	const vocab, heads, kv = 96, 4, 2
	hd := hidden / heads
	dir := t.TempDir()
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
		"max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
		"tie_word_embeddings": false, "torch_dtype": "float32",
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var ts []safetensors.WriteTensor
	add := func(name string, shape ...int) {
		v := make([]float32, shape[0]*max(1, shape[len(shape)-1]))
		if len(shape) == 1 {
			v = v[:shape[0]]
		}
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.2)
			if strings.HasSuffix(name, "norm.weight") {
				v[i] = 1 + v[i]
			}
		}
		ts = append(ts, safetensors.WriteTensor{Name: name, DType: safetensors.F32, Shape: shape, Data: safetensors.F32Bytes(v)})
	}
	add("model.embed_tokens.weight", vocab, hidden)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
		add(p+"self_attn.q_proj.weight", heads*hd, hidden)
		add(p+"self_attn.k_proj.weight", kv*hd, hidden)
		add(p+"self_attn.v_proj.weight", kv*hd, hidden)
		add(p+"self_attn.o_proj.weight", hidden, heads*hd)
		add(p+"mlp.gate_proj.weight", inter, hidden)
		add(p+"mlp.up_proj.weight", inter, hidden)
		add(p+"mlp.down_proj.weight", hidden, inter)
	}
	add("model.norm.weight", hidden)
	add("lm_head.weight", vocab, hidden)
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A Hugging Face Llama folder converted to GGUF has its q/k rows permuted as llama.cpp does; the
// file, run with adjacent-pair RoPE, gives the folder's logits (to float rounding: attention sums
// a head's elements in another order), so the permutation and the rotation agree.
func TestGGUFLlamaPermutedMatchesFolder(t *testing.T) {
	dir := writeLlamaFolder(t, 32, 64, 2)
	want, got := open(t, dir), open(t, convertTo(t, dir, "f32"))
	prompt := []int{1, 5, 17, 42, 95, 3, 3, 60, 11, 0, 7, 8}
	rg, err := got.Target.Forward(got.Target.NewCache(16), model.Request{Tokens: prompt, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := want.Target.Forward(want.Target.NewCache(16), model.Request{Tokens: prompt, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i := range rw.Logits {
		worst = max(worst, math.Abs(float64(rg.Logits[i]-rw.Logits[i])))
	}
	if worst > 1e-4 {
		t.Errorf("GGUF logits differ from the folder's by up to %g", worst)
	}
	t.Logf("largest logit difference %g", worst)
	if got.Desc.Family != "llama" || got.Target.Config().TiedEmbeddings {
		t.Errorf("family %q tied %v", got.Desc.Family, got.Target.Config().TiedEmbeddings)
	}
}

// The q4_k_m mix is llama.cpp's: Q6_K for the head and for attn_v/ffn_down of the layers
// use_more_bits picks (here 2 and 3 of 4), Q4_K elsewhere, f32 norms; the file loads, its
// matrices kept quantized.
func TestGGUFQ4KM(t *testing.T) {
	dir := writeLlamaFolder(t, 256, 512, 4)
	path := convertTo(t, dir, "q4_k_m")
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]quant.Type{
		"token_embd.weight": quant.Q4_K, "output.weight": quant.Q6_K, "output_norm.weight": quant.F32,
		"blk.0.attn_v.weight": quant.Q4_K, "blk.1.ffn_down.weight": quant.Q4_K,
		"blk.2.attn_v.weight": quant.Q6_K, "blk.2.ffn_down.weight": quant.Q6_K,
		"blk.3.attn_v.weight": quant.Q6_K, "blk.3.ffn_down.weight": quant.Q6_K,
		"blk.3.attn_q.weight": quant.Q4_K, "blk.3.ffn_up.weight": quant.Q4_K, "blk.3.attn_norm.weight": quant.F32,
	}
	for name, ty := range want {
		if ti, ok := f.Tensor(name); !ok || ti.Type != ty {
			t.Errorf("%s: type %v, want %v", name, ti.Type, ty)
		}
	}
	if v, err := f.Metadata.Uint("general.quantization_version"); err != nil || v != 2 {
		t.Errorf("general.quantization_version = %d, %v", v, err)
	}
	// Each matrix dequantizes to the folder's weights within its type's rounding: relative RMS
	// error about 0.08 for Q4_K and 0.02 for Q6_K on Gaussian weights. (Logits of a random
	// network are too chaotic to judge a 4-bit type by: bf16 alone moves them 1%.)
	st, err := safetensors.OpenModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for name, ty := range want {
		if ty == quant.F32 || strings.Contains(name, "attn_q") {
			continue // attn_q rows are permuted; the f32 test above covers them
		}
		hfName, _ := gguf.HFName(name)
		src, err := st.Tensor(hfName)
		if err != nil {
			t.Fatal(err)
		}
		w, err := src.F32()
		if err != nil {
			t.Fatal(err)
		}
		g, err := f.F32(name)
		if err != nil {
			t.Fatal(err)
		}
		var e2, w2 float64
		for i := range w {
			e2 += float64(g[i]-w[i]) * float64(g[i]-w[i])
			w2 += float64(w[i]) * float64(w[i])
		}
		bound := map[quant.Type]float64{quant.Q4_K: 0.12, quant.Q6_K: 0.03}[ty]
		rel := math.Sqrt(e2 / w2)
		t.Logf("%s (%v): relative RMS error %.4f", name, ty, rel)
		if rel > bound {
			t.Errorf("%s (%v): relative RMS error %.4f, want <= %.2f", name, ty, rel, bound)
		}
	}
	// A decode step streams every layer matrix and the head, each kept as the file's blocks
	// (the shapes fill whole 16-row panels, so there is no padding; Q4_K's 6-bit scales are
	// unpacked to bytes, 2.8% more per block, kernel/qmatrix.go): the embedding table is only
	// looked up.
	var streamed int64
	for _, ti := range f.Tensors() {
		if len(ti.Shape) == 2 && ti.Name != "token_embd.weight" {
			streamed += int64(ti.Size)
		}
	}
	f.Close()
	d, err := Describe(Options{Model: path})
	if err != nil {
		t.Fatal(err)
	}
	if d.DType != "Q4_K_M" {
		t.Errorf("dtype label %q, want Q4_K_M", d.DType)
	}
	e := open(t, path)
	if wb := e.Target.WeightBytes(); e.Target.Config().DType != kernel.Q4_K || wb < streamed || float64(wb) > 1.03*float64(streamed) {
		t.Errorf("loaded as %v streaming %d bytes a step; want Q4_K and the file's %d (+ at most 3%%)", e.Target.Config().DType, wb, streamed)
	}
	r, err := e.Target.Forward(e.Target.NewCache(8), model.Request{Tokens: []int{1, 5, 17, 42, 95, 3}, Logits: model.LogitsLast})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range r.Logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d = %v", i, v)
		}
	}
}

// rewriteGGUF copies a GGUF with its metadata edited and one tensor retyped (its bytes zeroed).
func rewriteGGUF(t *testing.T, src, dst string, edit func([]gguf.KV) []gguf.KV, retype string, ty quant.Type) {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []gguf.WriteTensor
	for _, ti := range f.Tensors() {
		data, err := f.Data(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		wt := gguf.WriteTensor{Name: ti.Name, Type: ti.Type, Shape: ti.Shape, Data: data}
		if ti.Name == retype {
			n, err := ty.RowBytes(int(ti.Elements()))
			if err != nil {
				t.Fatal(err)
			}
			wt.Type, wt.Data = ty, make([]byte, n)
		}
		ts = append(ts, wt)
	}
	if err := gguf.WriteFile(dst, edit(slices.Clone(f.Metadata.KVs())), ts); err != nil {
		t.Fatal(err)
	}
}

func setKV(key string, v gguf.Value) func([]gguf.KV) []gguf.KV {
	return func(kvs []gguf.KV) []gguf.KV {
		for i := range kvs {
			if kvs[i].Key == key {
				kvs[i].Value = v
			}
		}
		return kvs
	}
}

// An ollama blob (no .gguf name) is told by its magic; an architecture, a tokenizer or a tensor
// type dflash cannot run is refused with its name.
func TestGGUFDescribeAndRefusals(t *testing.T) {
	path := convertTo(t, shareddata.Path(t, "stories260K/stories260K.bin"), "q8_0")
	dir := t.TempDir()
	blob := filepath.Join(dir, "sha256-0123abcd")
	rewriteGGUF(t, path, blob, func(kvs []gguf.KV) []gguf.KV { return kvs }, "", 0)
	if d, err := Describe(Options{Model: blob}); err != nil || d.Format != FormatGGUF || d.DType != "Q8_0" {
		t.Errorf("blob: %v, %+v", err, d)
	}
	for _, c := range []struct {
		name   string
		edit   func([]gguf.KV) []gguf.KV
		retype string
		ty     quant.Type
		want   string
	}{
		{"arch", setKV("general.architecture", gguf.String("gemma3")), "", 0, `"gemma3"`},
		{"tokenizer", setKV("tokenizer.ggml.model", gguf.String("bert")), "", 0, `"bert"`},
		{"type", func(kvs []gguf.KV) []gguf.KV { return kvs }, "blk.3.attn_k.weight", quant.Q4_1, "blk.3.attn_k.weight: tensor type not supported by dflash: Q4_1"},
	} {
		p := filepath.Join(dir, c.name+".gguf")
		rewriteGGUF(t, path, p, c.edit, c.retype, c.ty)
		_, err := Open(Options{Model: p})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to name %s", c.name, err, c.want)
		}
	}
}
