package gguf

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/dflash/dflash/kernel/quant"
)

// build writes kvs and F32 tensors of the given shapes (zero data) and parses the result.
func build(t *testing.T, kvs []KV, shapes map[string][]uint64) *File {
	t.Helper()
	var ts []WriteTensor
	for name, shape := range shapes {
		n := uint64(4)
		for _, d := range shape {
			n *= d
		}
		ts = append(ts, WriteTensor{name, quant.F32, shape, make([]byte, n)})
	}
	var buf bytes.Buffer
	if err := Write(&buf, kvs, ts); err != nil {
		t.Fatal(err)
	}
	f, err := Parse("test", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAccessors(t *testing.T) {
	f := build(t, everyValue(), nil)
	m := f.Metadata
	if s, err := m.String("general.architecture"); s != "qwen3" || err != nil {
		t.Errorf("String: %q %v", s, err)
	}
	// Counts are accepted from any integer type that holds a non-negative value.
	for key, want := range map[string]uint64{"t.u8": 255, "t.u16": 65535, "t.u32": 1<<32 - 1, "t.u64": 1<<64 - 1} {
		if u, err := m.Uint(key); u != want || err != nil {
			t.Errorf("Uint(%s) = %d, %v", key, u, err)
		}
	}
	if i, err := m.Int("t.i64"); i != -1<<63 || err != nil {
		t.Errorf("Int(t.i64) = %d, %v", i, err)
	}
	if v, err := m.Float("t.f32"); v != float64(float32(-1.5e-7)) || err != nil {
		t.Errorf("Float(t.f32) = %v, %v", v, err)
	}
	if b, err := m.Bool("t.true"); !b || err != nil {
		t.Errorf("Bool: %v %v", b, err)
	}
	if s, err := m.Strings("t.a_string"); len(s) != 3 || s[2] != "ccc" || err != nil {
		t.Errorf("Strings: %q %v", s, err)
	}
	if s, err := m.Ints("t.a_i8"); len(s) != 2 || s[0] != -1 || s[1] != 127 || err != nil {
		t.Errorf("Ints(int8): %v %v", s, err)
	}
	if s, err := m.Ints("t.a_u32"); len(s) != 3 || s[2] != 3 || err != nil {
		t.Errorf("Ints(uint32): %v %v", s, err)
	}
	if s, err := m.Float32s("t.a_f64"); len(s) != 1 || s[0] != -0.25 || err != nil {
		t.Errorf("Float32s(float64): %v %v", s, err)
	}
	// Each refusal names the key and the type found.
	for _, c := range []struct {
		err  error
		want []string
	}{
		{func() error { _, err := m.String("t.u32"); return err }(), []string{`"t.u32"`, "found uint32, want string"}},
		{func() error { _, err := m.Uint("t.i8"); return err }(), []string{`"t.i8"`, "negative int8 -128"}},
		{func() error { _, err := m.Uint("t.f32"); return err }(), []string{`"t.f32"`, "found float32"}},
		{func() error { _, err := m.Int("t.u64"); return err }(), []string{`"t.u64"`, "found uint64, want an integer"}},
		{func() error { _, err := m.Float("t.i32"); return err }(), []string{`"t.i32"`, "found int32, want a float"}},
		{func() error { _, err := m.Bool("t.u8"); return err }(), []string{`"t.u8"`, "found uint8, want bool"}},
		{func() error { _, err := m.Strings("t.a_i32"); return err }(), []string{`"t.a_i32"`, "found array of int32, want array of string"}},
		{func() error { _, err := m.Ints("t.a_string"); return err }(), []string{`"t.a_string"`, "found array of string"}},
		{func() error { _, err := m.Ints("t.a_u64"); return err }(), []string{`"t.a_u64"`, "does not fit"}},
		{func() error { _, err := m.Float32s("t.a_bool"); return err }(), []string{`"t.a_bool"`, "found array of bool"}},
	} {
		if c.err == nil {
			t.Errorf("no error, want one mentioning %q", c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%v: does not mention %q", c.err, w)
			}
		}
	}
	if _, err := m.String("no.such.key"); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), `"no.such.key"`) {
		t.Errorf("missing key: %v", err)
	}
	if _, err := m.Uint("t.u32"); err != nil {
		t.Error(err)
	}
}

// qwen3KVs are the keys llama.cpp writes for a (tiny) Qwen3.
func qwen3KVs() []KV {
	return []KV{
		{"general.architecture", String("qwen3")},
		{"qwen3.block_count", Uint32(2)},
		{"qwen3.context_length", Uint32(40960)},
		{"qwen3.embedding_length", Uint32(64)},
		{"qwen3.feed_forward_length", Uint32(192)},
		{"qwen3.attention.head_count", Uint32(4)},
		{"qwen3.attention.head_count_kv", Uint32(2)},
		{"qwen3.attention.key_length", Uint32(32)},
		{"qwen3.attention.value_length", Uint32(32)},
		{"qwen3.rope.freq_base", Float32(1000000)},
		{"qwen3.attention.layer_norm_rms_epsilon", Float32(1e-6)},
		{"tokenizer.ggml.model", String("gpt2")},
		{"tokenizer.ggml.pre", String("qwen2")},
		{"tokenizer.ggml.tokens", Array([]string{"a", "b", "ab", "<|im_end|>"})},
		{"tokenizer.ggml.token_type", Array([]int32{1, 1, 1, 3})},
		{"tokenizer.ggml.merges", Array([]string{"a b"})},
		{"tokenizer.ggml.eos_token_id", Uint32(3)},
		{"tokenizer.ggml.padding_token_id", Uint32(3)},
		{"tokenizer.ggml.add_bos_token", Bool(false)},
		{"tokenizer.chat_template", String("{% for m in messages %}{{ m.content }}{% endfor %}")},
	}
}

func TestHyperparamsQwen3(t *testing.T) {
	// Qwen3 with a tied head: no output.weight; attn_q_norm present; vocab from the tokens.
	f := build(t, qwen3KVs(), map[string][]uint64{
		"token_embd.weight":        {64, 4},
		"blk.0.attn_q_norm.weight": {32},
	})
	h, err := f.Hyperparams()
	if err != nil {
		t.Fatal(err)
	}
	want := Hyperparams{Arch: "qwen3", Layers: 2, Embedding: 64, FeedForward: 192, Heads: 4, KVHeads: 2,
		KeyLength: 32, ValueLength: 32, Context: 40960, Vocab: 4, RopeBase: 1e6, RMSEps: float64(float32(1e-6)),
		TiedOutput: true, QKNorm: true}
	if h != want {
		t.Errorf("got  %+v\nwant %+v", h, want)
	}
}

func TestHyperparamsLlamaDefaults(t *testing.T) {
	// A llama2.c-sized Llama that leaves head_count_kv, key_length and rope.freq_base out, has
	// an untied head and stores its counts as uint64 and vocab_size explicitly.
	f := build(t, []KV{
		{"general.architecture", String("llama")},
		{"llama.block_count", Uint64(5)},
		{"llama.context_length", Uint64(512)},
		{"llama.embedding_length", Uint64(64)},
		{"llama.feed_forward_length", Uint64(172)},
		{"llama.attention.head_count", Uint64(8)},
		{"llama.attention.layer_norm_rms_epsilon", Float32(1e-5)},
		{"llama.vocab_size", Uint32(512)},
	}, map[string][]uint64{"output.weight": {64, 512}})
	h, err := f.Hyperparams()
	if err != nil {
		t.Fatal(err)
	}
	// head_count_kv defaults to head_count, key and value length to 64/8 = 8, the RoPE base to
	// llama.cpp's 10000.
	want := Hyperparams{Arch: "llama", Layers: 5, Embedding: 64, FeedForward: 172, Heads: 8, KVHeads: 8,
		KeyLength: 8, ValueLength: 8, Context: 512, Vocab: 512, RopeBase: 10000, RMSEps: float64(float32(1e-5))}
	if h != want {
		t.Errorf("got  %+v\nwant %+v", h, want)
	}
}

func TestHyperparamsRefusals(t *testing.T) {
	kvs := qwen3KVs()
	if _, err := build(t, append([]KV{}, kvs[1:]...), nil).Hyperparams(); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "general.architecture") {
		t.Errorf("no architecture: %v", err)
	}
	gemma := append([]KV{{"general.architecture", String("gemma2")}}, kvs[1:]...)
	if _, err := build(t, gemma, nil).Hyperparams(); !errors.Is(err, ErrArchitecture) || !strings.Contains(err.Error(), `"gemma2"`) {
		t.Errorf("gemma2: %v", err)
	}
	noFF := append(append([]KV{}, kvs[:4]...), kvs[5:]...)
	if _, err := build(t, noFF, nil).Hyperparams(); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "qwen3.feed_forward_length") {
		t.Errorf("no feed_forward_length: %v", err)
	}
	badType := append([]KV{}, kvs...)
	badType[1] = KV{"qwen3.block_count", String("2")}
	if _, err := build(t, badType, nil).Hyperparams(); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "qwen3.block_count") {
		t.Errorf("string block_count: %v", err)
	}
	if _, err := build(t, kvs, map[string][]uint64{"token_embd.weight": {32, 4}}).Hyperparams(); err == nil || !strings.Contains(err.Error(), "token_embd.weight has shape [32 4]") {
		t.Errorf("embedding of the wrong width: %v", err)
	}
}

func TestTokenizer(t *testing.T) {
	tk, err := build(t, qwen3KVs(), nil).Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if tk.Model != "gpt2" || tk.Pre != "qwen2" || len(tk.Tokens) != 4 || tk.Tokens[3] != "<|im_end|>" ||
		len(tk.Merges) != 1 || tk.Merges[0] != "a b" || tk.TokenTypes[3] != 3 || tk.Scores != nil {
		t.Errorf("tokenizer %+v", tk)
	}
	// BOS and the unknown token are not named (-1); EOS and padding are 3; add_bos_token is an
	// explicit false, add_eos_token absent.
	if tk.BOS != -1 || tk.EOS != 3 || tk.Unknown != -1 || tk.Padding != 3 {
		t.Errorf("special ids bos %d eos %d unk %d pad %d", tk.BOS, tk.EOS, tk.Unknown, tk.Padding)
	}
	if tk.AddBOS == nil || *tk.AddBOS || tk.AddEOS != nil {
		t.Errorf("add_bos %v add_eos %v", tk.AddBOS, tk.AddEOS)
	}
	if !strings.HasPrefix(tk.ChatTemplate, "{% for m in messages %}") {
		t.Errorf("chat template %q", tk.ChatTemplate)
	}

	kvs := qwen3KVs()
	kvs[16] = KV{"tokenizer.ggml.eos_token_id", Uint32(4)}
	if _, err := build(t, kvs, nil).Tokenizer(); err == nil || !strings.Contains(err.Error(), "eos_token_id\" = 4 is not a token id") {
		t.Errorf("eos out of range: %v", err)
	}
	kvs = qwen3KVs()
	kvs[14] = KV{"tokenizer.ggml.token_type", Array([]int32{1})}
	if _, err := build(t, kvs, nil).Tokenizer(); err == nil || !strings.Contains(err.Error(), "1 entries for 4 tokens") {
		t.Errorf("short token_type: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, n := range GlobalTensorNames {
		if g, ok := GGUFName(n.HF); !ok || g != n.GGUF {
			t.Errorf("GGUFName(%s) = %q, %v", n.HF, g, ok)
		}
		if h, ok := HFName(n.GGUF); !ok || h != n.HF {
			t.Errorf("HFName(%s) = %q, %v", n.GGUF, h, ok)
		}
	}
	for _, n := range LayerTensorNames {
		hf, gg := "model.layers.27."+n.HF, "blk.27."+n.GGUF
		if g, ok := GGUFName(hf); !ok || g != gg {
			t.Errorf("GGUFName(%s) = %q, %v", hf, g, ok)
		}
		if h, ok := HFName(gg); !ok || h != hf {
			t.Errorf("HFName(%s) = %q, %v", gg, h, ok)
		}
	}
	if g, _ := GGUFName("model.layers.0.self_attn.o_proj.weight"); g != "blk.0.attn_output.weight" {
		t.Errorf("o_proj -> %q", g)
	}
	if g, _ := GGUFName("model.layers.3.mlp.down_proj.weight"); g != "blk.3.ffn_down.weight" {
		t.Errorf("down_proj -> %q", g)
	}
	for _, bad := range []string{"model.layers.01.mlp.up_proj.weight", "model.layers.x.mlp.up_proj.weight",
		"model.layers.1.mlp.up_proj.bias", "model.layers.1", "blk.1.attn_q.weight", "output.weight"} {
		if g, ok := GGUFName(bad); ok {
			t.Errorf("GGUFName(%s) = %q, want no mapping", bad, g)
		}
	}
	if h, ok := HFName("blk.-1.attn_q.weight"); ok {
		t.Errorf("HFName(blk.-1) = %q", h)
	}
}

func TestUnsupportedTypeRefusedByName(t *testing.T) {
	// A Q3_K tensor parses (its size is known) but dflash refuses to compute with it, by name.
	var buf bytes.Buffer
	if err := Write(&buf, nil, []WriteTensor{{"w", quant.Q3_K, []uint64{256}, make([]byte, 110)}}); err != nil {
		t.Fatal(err)
	}
	f, err := Parse("q3k", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.F32("w"); !errors.Is(err, quant.ErrUnsupportedType) || !strings.Contains(err.Error(), "Q3_K") || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("F32 of Q3_K: %v", err)
	}
	if _, err := f.F32("nope"); !errors.Is(err, ErrNoTensor) {
		t.Errorf("missing tensor: %v", err)
	}
}
