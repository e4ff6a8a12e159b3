package transformer

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dflash/dflash/format/gguf"
	"github.com/dflash/dflash/format/llama2c"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/quant"
	"github.com/dflash/dflash/model"
)

// writeStoriesGGUF writes stories260K as a "llama" GGUF with llama.cpp's names, matrices in typ
// (norms f32) and retype applied to single tensors, independently of dflash convert: the
// checkpoint's q/k rows are already in the interleaved-pair order llama GGUFs use.
func writeStoriesGGUF(t *testing.T, typ quant.Type, retype map[string]quant.Type) string {
	t.Helper()
	ck, err := llama2c.Load(shareddata.Path(t, "stories260K/stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "llama.block_count", Value: gguf.Uint32(uint32(c.Layers))},
		{Key: "llama.embedding_length", Value: gguf.Uint32(uint32(c.Dim))},
		{Key: "llama.feed_forward_length", Value: gguf.Uint32(uint32(c.HiddenDim))},
		{Key: "llama.attention.head_count", Value: gguf.Uint32(uint32(c.Heads))},
		{Key: "llama.attention.head_count_kv", Value: gguf.Uint32(uint32(c.KVHeads))},
		{Key: "llama.context_length", Value: gguf.Uint32(uint32(c.SeqLen))},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.Float32(1e-5)},
		{Key: "llama.rope.freq_base", Value: gguf.Float32(10000)},
	}
	var ts []gguf.WriteTensor
	add := func(name string, w []float32, shape ...uint64) {
		ty := quant.F32
		if len(shape) == 2 && shape[0]%uint64(typ.BlockSize()) == 0 {
			ty = typ // ffn_down's rows of 172 fit no quantized block and stay f32
		}
		if r, ok := retype[name]; ok {
			ty = r
		}
		var data []byte
		if ty.Supported() {
			if data, err = quant.Quantize(ty, w); err != nil {
				t.Fatal(err)
			}
		} else {
			n, _ := ty.RowBytes(len(w))
			data = make([]byte, n)
		}
		ts = append(ts, gguf.WriteTensor{Name: name, Type: ty, Shape: shape, Data: data})
	}
	d, h, kv, v := uint64(c.Dim), uint64(c.HiddenDim), uint64(c.KVDim()), uint64(c.Vocab)
	add("token_embd.weight", ck.TokenEmbedding, d, v)
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", ck.RMSAtt[i], d)
		add(p+"attn_q.weight", ck.WQ[i], d, d)
		add(p+"attn_k.weight", ck.WK[i], d, kv)
		add(p+"attn_v.weight", ck.WV[i], d, kv)
		add(p+"attn_output.weight", ck.WO[i], d, d)
		add(p+"ffn_norm.weight", ck.RMSFFN[i], d)
		add(p+"ffn_gate.weight", ck.W1[i], d, h)
		add(p+"ffn_down.weight", ck.W2[i], h, d)
		add(p+"ffn_up.weight", ck.W3[i], d, h)
	}
	add("output_norm.weight", ck.RMSFinal, d)
	path := filepath.Join(t.TempDir(), "stories260K.gguf")
	if err := gguf.WriteFile(path, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return path
}

// An F32 GGUF of stories260K is the llama2.c checkpoint: the same config and bitwise the same
// logits at every step of a greedy decode, on every kernel path.
func TestLoadGGUFStoriesMatchesCheckpoint(t *testing.T) {
	want := loadStories(t)
	got, err := LoadGGUF(writeStoriesGGUF(t, quant.F32, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	gc, wc := got.Config(), want.Config()
	if gc.Arch != ArchLlama || gc.Hidden != wc.Hidden || gc.Layers != wc.Layers || gc.Vocab != wc.Vocab ||
		gc.MaxSeq != wc.MaxSeq || !gc.TiedEmbeddings || gc.RMSEps != wc.RMSEps || gc.DType != kernel.F32 {
		t.Fatalf("config %+v, want the checkpoint's %+v", gc, wc)
	}
	forEachPath(t, func(t *testing.T) {
		cg, cw := got.NewCache(64), want.NewCache(64)
		tok := 1
		for step := 0; step < 40; step++ {
			rg, err := got.Forward(cg, model.Request{Tokens: []int{tok}, Logits: model.LogitsLast})
			if err != nil {
				t.Fatal(err)
			}
			rw, err := want.Forward(cw, model.Request{Tokens: []int{tok}, Logits: model.LogitsLast})
			if err != nil {
				t.Fatal(err)
			}
			for i := range rw.Logits {
				if math.Float32bits(rg.Logits[i]) != math.Float32bits(rw.Logits[i]) {
					t.Fatalf("step %d logit %d: GGUF %g, checkpoint %g", step, i, rg.Logits[i], rw.Logits[i])
				}
			}
			tok = argmax(rw.Logits)
		}
	})
}

// Quantized tensors stay quantized at load, in the kernel's block panels: each matrix holds
// exactly the file's bytes (stories260K's shapes fill whole panels), its rows are the blocks'
// values bitwise, the model computes in the type, and its logits stay close to the f32 model's.
// --dtype bf16 (ForceBF16) still expands them, rounding each dequantized weight to bf16.
func TestLoadGGUFQuantizedStaysQuantized(t *testing.T) {
	want := loadStories(t)
	for _, c := range []struct {
		typ   quant.Type
		dt    kernel.DType
		bound float64
	}{{quant.Q8_0, kernel.Q8_0, 0.02}, {quant.Q4_0, kernel.Q4_0, 0.3}} {
		path := writeStoriesGGUF(t, c.typ, map[string]quant.Type{"blk.0.ffn_down.weight": quant.F16})
		m, err := LoadGGUF(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		q := m.Layers()[0].Q
		if m.Config().DType != c.dt || q.DType != c.dt || m.Layers()[0].Down.DType != kernel.F32 {
			t.Fatalf("%s: dtype %v, q %v, f16 down %v; want %v with the f16 tensor widened to f32", c.typ, m.Config().DType, q.DType, m.Layers()[0].Down.DType, c.dt)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := f.Tensor("blk.0.attn_q.weight")
		values, err := f.F32("blk.0.attn_q.weight")
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if q.Bytes() != int64(info.Size) {
			t.Errorf("%s: attn_q holds %d bytes, the file's blocks are %d", c.typ, q.Bytes(), info.Size)
		}
		row := make([]float32, q.K)
		for j := 0; j < q.N; j++ {
			q.Row(row, j)
			for i, v := range row {
				if math.Float32bits(v) != math.Float32bits(values[j*q.K+i]) {
					t.Fatalf("%s: attn_q row %d element %d is %g, the block says %g", c.typ, j, i, v, values[j*q.K+i])
				}
			}
		}
		rg, err := m.Forward(m.NewCache(8), model.Request{Tokens: []int{1}, Logits: model.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		rw, err := want.Forward(want.NewCache(8), model.Request{Tokens: []int{1}, Logits: model.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		var diff, norm float64
		for i := range rw.Logits {
			diff += math.Abs(float64(rg.Logits[i] - rw.Logits[i]))
			norm += math.Abs(float64(rw.Logits[i]))
		}
		if diff/norm > c.bound {
			t.Errorf("%s: relative L1 logit error %.3f", c.typ, diff/norm)
		}
		t.Logf("%s: relative L1 logit error %.4f", c.typ, diff/norm)

		b, err := LoadGGUF(path, Options{DType: ForceBF16})
		if err != nil {
			t.Fatal(err)
		}
		if b.Config().DType != kernel.BF16 || b.Layers()[0].Q.DType != kernel.BF16 || b.WeightBytes() <= m.WeightBytes() {
			t.Errorf("%s forced to bf16: dtype %v, q %v, %d weight bytes against %d quantized", c.typ, b.Config().DType, b.Layers()[0].Q.DType, b.WeightBytes(), m.WeightBytes())
		}
	}
}

// A decode step of a quantized GGUF (Q8_0 matrices and a Q8_0 tied embedding, read a row at a
// time by Embed) allocates nothing, as a bf16 model's does (TestDecodeDoesNotAllocate).
func TestQuantizedDecodeDoesNotAllocate(t *testing.T) {
	m, err := LoadGGUF(writeStoriesGGUF(t, quant.Q8_0, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Config().DType != kernel.Q8_0 || !m.Head().DType.Quantized() {
		t.Fatalf("computes in %v with a %v head, want Q8_0", m.Config().DType, m.Head().DType)
	}
	c := m.NewCache(128)
	req := model.Request{Tokens: []int{5}, Logits: model.LogitsLast}
	if _, err := m.Forward(c, req); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := m.Forward(c, req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a quantized decode step allocates %v times", allocs)
	}
}

// A tensor of a type dflash cannot run is refused with the type's name and the tensor's, and a
// missing tensor by its name.
func TestLoadGGUFRefusals(t *testing.T) {
	_, err := LoadGGUF(writeStoriesGGUF(t, quant.F32, map[string]quant.Type{"blk.1.attn_v.weight": quant.Q4_1}), Options{})
	if !errors.Is(err, quant.ErrUnsupportedType) || !strings.Contains(err.Error(), "Q4_1") || !strings.Contains(err.Error(), "blk.1.attn_v.weight") {
		t.Errorf("Q4_1 tensor: %v", err)
	}
	_, err = LoadGGUF(writeStoriesGGUF(t, quant.F32, map[string]quant.Type{"blk.4.ffn_up.weight": quant.Q5_0}), Options{})
	if !errors.Is(err, quant.ErrUnsupportedType) || !strings.Contains(err.Error(), "Q5_0") {
		t.Errorf("Q5_0 tensor: %v", err)
	}
}
