package transformer

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// tiny describes a small model written in Hugging Face layout for tests.
type tiny struct {
	arch                    string
	hidden, inter, layers   int
	heads, kvHeads, headDim int
	vocab                   int
	theta                   float64
	eps                     float64
	tied                    bool
	llama3                  bool // rope_scaling llama3 with factor 8, low 1, high 4, original 16
	dtype                   safetensors.DType
	weights                 map[string][]float64 // values exactly as stored (after rounding)
	shapes                  map[string][]int
}

func tinyQwen3(dtype safetensors.DType) *tiny {
	// head_dim 16 differs from hidden/heads = 8, as in real Qwen3 models.
	return &tiny{arch: ArchQwen3, hidden: 32, inter: 48, layers: 2, heads: 4, kvHeads: 2, headDim: 16,
		vocab: 50, theta: 1e6, eps: 1e-6, tied: true, dtype: dtype}
}

func tinyLlama(dtype safetensors.DType) *tiny {
	return &tiny{arch: ArchLlama, hidden: 32, inter: 40, layers: 3, heads: 4, kvHeads: 2, headDim: 8,
		vocab: 60, theta: 10000, eps: 1e-5, llama3: true, dtype: dtype}
}

// tensorNames lists every tensor of t's layout with its shape.
func (t *tiny) tensorNames() ([]string, map[string][]int) {
	h, q, kv := t.hidden, t.heads*t.headDim, t.kvHeads*t.headDim
	shapes := map[string][]int{"model.embed_tokens.weight": {t.vocab, h}, "model.norm.weight": {h}}
	names := []string{"model.embed_tokens.weight", "model.norm.weight"}
	add := func(n string, s ...int) { names = append(names, n); shapes[n] = s }
	for i := 0; i < t.layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", h)
		add(p+"post_attention_layernorm.weight", h)
		add(p+"self_attn.q_proj.weight", q, h)
		add(p+"self_attn.k_proj.weight", kv, h)
		add(p+"self_attn.v_proj.weight", kv, h)
		add(p+"self_attn.o_proj.weight", h, q)
		if t.arch == ArchQwen3 {
			add(p+"self_attn.q_norm.weight", t.headDim)
			add(p+"self_attn.k_norm.weight", t.headDim)
		}
		add(p+"mlp.gate_proj.weight", t.inter, h)
		add(p+"mlp.up_proj.weight", t.inter, h)
		add(p+"mlp.down_proj.weight", h, t.inter)
	}
	if !t.tied {
		add("lm_head.weight", t.vocab, h)
	}
	return names, shapes
}

// write puts config.json and model.safetensors into a fresh folder. Norm weights are drawn near 1
// and matrices from N(0, 0.25) so that a mix-up of any two tensors changes the output.
func (t *tiny) write(tb testing.TB, seed uint64, mutate func(*[]safetensors.WriteTensor)) string {
	tb.Helper()
	dir := tb.TempDir()
	r := rand.New(rand.NewPCG(seed, 99))
	names, shapes := t.tensorNames()
	t.weights, t.shapes = map[string][]float64{}, shapes
	var out []safetensors.WriteTensor
	for _, name := range names {
		shape := shapes[name]
		n := 1
		for _, d := range shape {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			if len(shape) == 1 {
				vals[i] = float32(1 + 0.2*r.NormFloat64())
			} else {
				vals[i] = float32(0.25 * r.NormFloat64())
			}
		}
		stored := make([]float64, n)
		wt := safetensors.WriteTensor{Name: name, DType: t.dtype, Shape: shape}
		if t.dtype == safetensors.F16 {
			bits := make([]uint16, n)
			for i, v := range vals {
				bits[i] = safetensors.F16FromF32(v)
				stored[i] = float64(safetensors.F32FromF16(bits[i]))
			}
			wt.Data = safetensors.F16Bytes(bits)
		} else if t.dtype == safetensors.BF16 {
			bits := make([]uint16, n)
			for i, v := range vals {
				bits[i] = kernel.F32ToBF16(v)
				stored[i] = float64(kernel.BF16ToF32(bits[i]))
			}
			wt.Data = safetensors.BF16Bytes(bits)
		} else {
			for i, v := range vals {
				stored[i] = float64(v)
			}
			wt.Data = safetensors.F32Bytes(vals)
		}
		t.weights[name] = stored
		out = append(out, wt)
	}
	if mutate != nil {
		mutate(&out)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	cfg := map[string]any{
		"architectures": []string{t.arch}, "hidden_size": t.hidden, "intermediate_size": t.inter,
		"num_hidden_layers": t.layers, "num_attention_heads": t.heads, "num_key_value_heads": t.kvHeads,
		"head_dim": t.headDim, "vocab_size": t.vocab, "max_position_embeddings": 128,
		"rms_norm_eps": t.eps, "rope_theta": t.theta, "tie_word_embeddings": t.tied,
		"bos_token_id": 1, "eos_token_id": 2, "torch_dtype": map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[t.dtype],
	}
	if t.arch == ArchQwen3 {
		cfg["model_type"] = "qwen3"
	} else {
		cfg["model_type"] = "llama"
	}
	if t.llama3 {
		cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
			"high_freq_factor": 4.0, "original_max_position_embeddings": 16}
	}
	js, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// reference is an independent forward in float64 with plain loops, written from the model
// definitions: it returns every layer's output (taps) and the logits of every row.
func (t *tiny) reference(tokens []int) (taps [][][]float64, logits [][]float64) {
	w := t.weights
	h, d := t.hidden, t.headDim
	n := len(tokens)
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = math.Pow(t.theta, -float64(2*i)/float64(d))
		if t.llama3 {
			// Llama 3.1 scaling: keep wavelengths under 16/4, divide those over 16/1 by 8,
			// interpolate between.
			wave := 2 * math.Pi / inv[i]
			switch {
			case wave < 4:
			case wave > 16:
				inv[i] /= 8
			default:
				s := (16/wave - 1) / (4 - 1)
				inv[i] = (1-s)*inv[i]/8 + s*inv[i]
			}
		}
	}
	rms := func(x []float64, wt []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		k := 1 / math.Sqrt(ss/float64(len(x))+t.eps)
		out := make([]float64, len(x))
		for i := range x {
			out[i] = x[i] * k * wt[i]
		}
		return out
	}
	matvec := func(name string, x []float64) []float64 {
		m := w[name]
		rows := len(m) / len(x)
		out := make([]float64, rows)
		for j := range out {
			for i, v := range x {
				out[j] += m[j*len(x)+i] * v
			}
		}
		return out
	}
	rope := func(v []float64, pos int) {
		for i := 0; i < d/2; i++ {
			c, s := math.Cos(float64(pos)*inv[i]), math.Sin(float64(pos)*inv[i])
			a, b := v[i], v[i+d/2]
			v[i], v[i+d/2] = a*c-b*s, b*c+a*s
		}
	}
	x := make([][]float64, n)
	for i, tok := range tokens {
		x[i] = append([]float64(nil), w["model.embed_tokens.weight"][tok*h:(tok+1)*h]...)
	}
	for l := 0; l < t.layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		qs, ks, vs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range x {
			xn := rms(x[i], w[p+"input_layernorm.weight"])
			qs[i], ks[i], vs[i] = matvec(p+"self_attn.q_proj.weight", xn), matvec(p+"self_attn.k_proj.weight", xn), matvec(p+"self_attn.v_proj.weight", xn)
			for hd := 0; hd < t.heads; hd++ {
				q := qs[i][hd*d : (hd+1)*d]
				if t.arch == ArchQwen3 {
					copy(q, rms(q, w[p+"self_attn.q_norm.weight"]))
				}
				rope(q, i)
			}
			for hd := 0; hd < t.kvHeads; hd++ {
				k := ks[i][hd*d : (hd+1)*d]
				if t.arch == ArchQwen3 {
					copy(k, rms(k, w[p+"self_attn.k_norm.weight"]))
				}
				rope(k, i)
			}
		}
		for i := range x {
			att := make([]float64, t.heads*d)
			for hd := 0; hd < t.heads; hd++ {
				kh := hd / (t.heads / t.kvHeads)
				sc := make([]float64, i+1)
				var sum float64
				for j := 0; j <= i; j++ {
					for e := 0; e < d; e++ {
						sc[j] += qs[i][hd*d+e] * ks[j][kh*d+e]
					}
					sc[j] = math.Exp(sc[j] / math.Sqrt(float64(d)))
					sum += sc[j]
				}
				for j := 0; j <= i; j++ {
					for e := 0; e < d; e++ {
						att[hd*d+e] += sc[j] / sum * vs[j][kh*d+e]
					}
				}
			}
			o := matvec(p+"self_attn.o_proj.weight", att)
			for e := range x[i] {
				x[i][e] += o[e]
			}
			xn := rms(x[i], w[p+"post_attention_layernorm.weight"])
			g, u := matvec(p+"mlp.gate_proj.weight", xn), matvec(p+"mlp.up_proj.weight", xn)
			for e := range g {
				g[e] = g[e] / (1 + math.Exp(-g[e])) * u[e]
			}
			down := matvec(p+"mlp.down_proj.weight", g)
			for e := range x[i] {
				x[i][e] += down[e]
			}
		}
		layer := make([][]float64, n)
		for i := range x {
			layer[i] = append([]float64(nil), x[i]...)
		}
		taps = append(taps, layer)
	}
	head := "lm_head.weight"
	if t.tied {
		head = "model.embed_tokens.weight"
	}
	for i := range x {
		logits = append(logits, matvec(head, rms(x[i], w["model.norm.weight"])))
	}
	return taps, logits
}

// closeRows checks got (rows x width) against want within tol relative to each row's largest
// magnitude: float32 arithmetic against float64 loses about 1e-6 of the row's scale.
func closeRows(t *testing.T, what string, got []float32, want [][]float64, tol float64) {
	t.Helper()
	for i, row := range want {
		scale := 1e-3
		for _, v := range row {
			scale = math.Max(scale, math.Abs(v))
		}
		for j, v := range row {
			if diff := math.Abs(float64(got[i*len(row)+j]) - v); diff > tol*scale {
				t.Fatalf("%s row %d col %d: got %g, want %g (diff %g, row scale %g)", what, i, j, got[i*len(row)+j], v, diff, scale)
			}
		}
	}
}

func testTokens(n, vocab int) []int {
	toks := make([]int, n)
	for i := range toks {
		toks[i] = (i*7 + 3) % vocab
	}
	return toks
}

func TestHFMatchesReference(t *testing.T) {
	// 40 rows cross the 32-row chunk boundary.
	tokens := testTokens(40, 50)
	// F16 files load as F32 (an exact widening), so they match the reference as tightly.
	for _, tc := range []*tiny{tinyQwen3(safetensors.F32), tinyQwen3(safetensors.BF16), tinyQwen3(safetensors.F16), tinyLlama(safetensors.F32), tinyLlama(safetensors.BF16)} {
		t.Run(tc.arch+"/"+string(tc.dtype), func(t *testing.T) {
			dir := tc.write(t, 1, nil)
			m, err := LoadHF(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			wantDType := kernel.F32 // also for F16
			if tc.dtype == safetensors.BF16 {
				wantDType = kernel.BF16
			}
			if cfg := m.Config(); cfg.DType != wantDType || cfg.HeadDim != tc.headDim || cfg.TiedEmbeddings != tc.tied {
				t.Fatalf("config %+v: want dtype %v, head dim %d, tied %v", cfg, wantDType, tc.headDim, tc.tied)
			}
			taps, logits := tc.reference(tokens)
			forEachPath(t, func(t *testing.T) {
				// Small heads get head-major caches from NewCache; a plain KV runs the row path.
				for _, c := range []cache.Cache{m.NewCache(64), cache.NewKV(tc.layers, 64, tc.kvHeads*tc.headDim)} {
					all := make([]int, tc.layers)
					for i := range all {
						all[i] = i
					}
					res, err := m.Forward(c, model.Request{Tokens: tokens, Logits: model.LogitsAll, Taps: all})
					if err != nil {
						t.Fatal(err)
					}
					if c.Offset() != len(tokens) {
						t.Fatalf("offset %d after forward of %d", c.Offset(), len(tokens))
					}
					for l := range all {
						closeRows(t, fmt.Sprintf("tap %d", l), res.Taps[l], taps[l], 1e-4)
					}
					closeRows(t, "logits", res.Logits, logits, 1e-4)
				}
			})
		})
	}
}

func TestForceDType(t *testing.T) {
	tc := tinyQwen3(safetensors.F32)
	dir := tc.write(t, 2, nil)
	for _, force := range []struct {
		opt  Compute
		want kernel.DType
	}{{KeepDType, kernel.F32}, {ForceBF16, kernel.BF16}, {ForceF32, kernel.F32}} {
		m, err := LoadHF(dir, Options{DType: force.opt})
		if err != nil {
			t.Fatal(err)
		}
		if m.Config().DType != force.want || m.Layers()[0].Q.DType != force.want {
			t.Errorf("option %v: config dtype %v, q dtype %v, want %v", force.opt, m.Config().DType, m.Layers()[0].Q.DType, force.want)
		}
	}
}

func TestLoadHFErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*[]safetensors.WriteTensor)
		want   []string // every fragment must appear in the error
	}{
		{"missing tensor", func(ts *[]safetensors.WriteTensor) {
			drop := func(name string) {
				for i, w := range *ts {
					if w.Name == name {
						*ts = append((*ts)[:i], (*ts)[i+1:]...)
						return
					}
				}
			}
			drop("model.layers.1.mlp.up_proj.weight")
			drop("model.layers.0.self_attn.k_norm.weight")
		}, []string{"model.layers.1.mlp.up_proj.weight", "[48 32]", "model.layers.0.self_attn.k_norm.weight", "[16]"}},
		{"wrong shape", func(ts *[]safetensors.WriteTensor) {
			for i, w := range *ts {
				if w.Name == "model.layers.0.self_attn.o_proj.weight" {
					(*ts)[i].Shape = []int{64, 32} // same element count, transposed
				}
			}
		}, []string{"model.layers.0.self_attn.o_proj.weight", "[32 64]"}},
		{"unsupported dtype", func(ts *[]safetensors.WriteTensor) {
			for i, w := range *ts {
				if w.Name == "model.layers.0.mlp.down_proj.weight" {
					(*ts)[i].DType = safetensors.I32
				}
			}
		}, []string{"model.layers.0.mlp.down_proj.weight", "I32"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tinyQwen3(safetensors.F32).write(t, 3, tc.mutate)
			_, err := LoadHF(dir, Options{})
			if err == nil {
				t.Fatal("load succeeded")
			}
			for _, frag := range tc.want {
				if !strings.Contains(err.Error(), frag) {
					t.Errorf("error %q does not mention %q", err, frag)
				}
			}
		})
	}
}

func TestIncrementalEqualsFull(t *testing.T) {
	// Every kernel computes a row the same way whatever the batch, attention reads a row's own
	// query and the keys it sees, and norms work per row: so decoding one token at a time, or in
	// uneven prefill chunks, must give logits and taps bitwise equal to one forward over all rows.
	for _, tc := range []*tiny{tinyQwen3(safetensors.BF16), tinyLlama(safetensors.F32)} {
		m, err := LoadHF(tc.write(t, 4, nil), Options{})
		if err != nil {
			t.Fatal(err)
		}
		tokens := testTokens(45, 50)
		v := m.Config().Vocab
		// Both attention layouts: NewCache's head-major copies for these small heads, and rows.
		for _, newCache := range []func() cache.Cache{
			func() cache.Cache { return m.NewCache(64) },
			func() cache.Cache { return cache.NewKV(tc.layers, 64, tc.kvHeads*tc.headDim) },
		} {
			forEachPath(t, func(t *testing.T) {
				full, err := m.Forward(newCache(), model.Request{Tokens: tokens, Logits: model.LogitsAll, Taps: []int{1}})
				if err != nil {
					t.Fatal(err)
				}
				wantLogits := append([]float32(nil), full.Logits...)
				wantTap := append([]float32(nil), full.Taps[0]...)
				h := m.Config().Hidden
				for _, steps := range [][]int{{1}, {5, 1, 33, 6}, {40, 5}} {
					c := newCache()
					at := 0
					for i := 0; at < len(tokens); i++ {
						n := min(steps[i%len(steps)], len(tokens)-at)
						res, err := m.Forward(c, model.Request{Tokens: tokens[at : at+n], Logits: model.LogitsLast, Taps: []int{1}})
						if err != nil {
							t.Fatal(err)
						}
						last := at + n - 1
						for j := 0; j < v; j++ {
							if res.Logits[j] != wantLogits[last*v+j] {
								t.Fatalf("%s steps %v: logits of row %d differ at %d: %g vs %g", tc.arch, steps, last, j, res.Logits[j], wantLogits[last*v+j])
							}
						}
						for j := 0; j < n*h; j++ {
							if res.Taps[0][j] != wantTap[at*h+j] {
								t.Fatalf("%s steps %v: tap of rows from %d differs", tc.arch, steps, at)
							}
						}
						at += n
					}
				}
			})
		}
	}
}

func TestRewindLeavesNoTrace(t *testing.T) {
	// Verify-and-reject: after decoding past position 20 with tokens that are then rejected, a
	// rewind to 20 and a different continuation must equal never having gone past 20, bitwise.
	tc := tinyQwen3(safetensors.BF16)
	m, err := LoadHF(tc.write(t, 5, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	prefix, rejected, kept := testTokens(20, 50), []int{9, 8, 7, 6, 5, 4, 3}, []int{11, 12, 13}
	clean := m.NewCache(64)
	if _, err := m.Forward(clean, model.Request{Tokens: prefix}); err != nil {
		t.Fatal(err)
	}
	want, err := m.Forward(clean, model.Request{Tokens: kept, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	wantLogits := append([]float32(nil), want.Logits...)

	c := m.NewCache(64)
	if _, err := m.Forward(c, model.Request{Tokens: prefix}); err != nil {
		t.Fatal(err)
	}
	mark := c.Offset()
	if _, err := m.Forward(c, model.Request{Tokens: rejected, Logits: model.LogitsAll}); err != nil {
		t.Fatal(err)
	}
	if err := c.Rewind(mark); err != nil {
		t.Fatal(err)
	}
	got, err := m.Forward(c, model.Request{Tokens: kept, Logits: model.LogitsAll})
	if err != nil {
		t.Fatal(err)
	}
	for i := range wantLogits {
		if got.Logits[i] != wantLogits[i] {
			t.Fatalf("logit %d after rewind: %g, never-went-past: %g", i, got.Logits[i], wantLogits[i])
		}
	}
}

func TestForwardErrorsLeaveCache(t *testing.T) {
	m, err := LoadHF(tinyLlama(safetensors.F32).write(t, 6, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.NewCache(8)
	if _, err := m.Forward(c, model.Request{Tokens: []int{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []model.Request{
		{Tokens: []int{1, 60}},             // 60 is outside a vocabulary of 60
		{Tokens: []int{1, 2, 3, 4, 5, 6}},  // 3 + 6 rows exceed capacity 8
		{Tokens: []int{1}, Taps: []int{3}}, // only layers 0..2 exist
		{Tokens: []int{1}, Taps: []int{1, 1}},
		{Tokens: []int{1}, Logits: model.LogitRows(9)},
		{},
	} {
		if _, err := m.Forward(c, r); err == nil {
			t.Errorf("request %+v accepted", r)
		}
		if c.Offset() != 3 {
			t.Fatalf("request %+v moved the cache to %d", r, c.Offset())
		}
	}
	if _, err := m.Forward(cacheOfOtherShape(), model.Request{Tokens: []int{1}}); err == nil {
		t.Error("forward accepted a cache of another shape")
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	// Every output width a multiple of kernel.Panel: the amd64 kernels' partial-panel tail
	// currently allocates its scratch (reported to the kernel owner); this test is about the
	// model's own code.
	tc := tinyQwen3(safetensors.BF16)
	tc.vocab = 64
	m, err := LoadHF(tc.write(t, 7, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.NewCache(128)
	req := model.Request{Tokens: []int{5}, Logits: model.LogitsLast, Taps: []int{0, 1}}
	if _, err := m.Forward(c, req); err != nil { // first call sizes the tap buffers
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := m.Forward(c, req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("decode step allocates %v times", allocs)
	}
}

func TestLoadLlama2CMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.bin")
	if _, err := LoadLlama2C(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v, want one naming %s", err, p)
	}
}

func TestRegistryLoadsHF(t *testing.T) {
	dir := tinyLlama(safetensors.F32).write(t, 8, nil)
	for _, p := range []string{dir, filepath.Join(dir, "config.json")} {
		tg, err := model.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if tg.Config().Arch != ArchLlama {
			t.Fatalf("model.Load(%s) gave arch %q", p, tg.Config().Arch)
		}
	}
}

func TestSplitForwardBitwise(t *testing.T) {
	// A chunk split into row parts (run concurrently on the kernel's pool when it is free) must
	// give the bits of the same chunk run whole: every row's computation is its own, and each
	// phase joins before any row reads keys another part wrote. Forcing three parts exercises
	// the partition on any machine; the default count exercises the pool where there are cores.
	tc := tinyQwen3(safetensors.F32)
	m, err := LoadHF(tc.write(t, 4, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := testTokens(45, 50)
	run := func(t *testing.T, parts, threads int) (logits, taps, keys []float32) {
		defer kernel.SetMaxThreads(kernel.SetMaxThreads(threads))
		saved := m.partScores
		defer func() { m.partScores = saved }()
		m.partScores = make(nn.PartScratch, parts) // NewCache sizes the buffers
		c := m.NewCache(64)
		// A prefix first, so the split chunk also attends to committed rows.
		if _, err := m.Forward(c, model.Request{Tokens: tokens[:7]}); err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward(c, model.Request{Tokens: tokens[7:], Logits: model.LogitsAll, Taps: []int{0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		kv := c.(*nn.HeadMajorKV).KV
		return append([]float32(nil), res.Logits...), append(append([]float32(nil), res.Taps[0]...), res.Taps[1]...), first(kv.RowsF32(1, 0, 45))
	}
	forEachPath(t, func(t *testing.T) {
		wantL, wantT, wantK := run(t, 1, 1)
		for _, c := range []struct{ parts, threads int }{{3, 1}, {3, 0}, {2, 0}, {8, 0}} {
			l, tp, k := run(t, c.parts, c.threads)
			if !slices.Equal(l, wantL) || !slices.Equal(tp, wantT) || !slices.Equal(k, wantK) {
				t.Errorf("%d parts, thread cap %d: logits, taps or keys differ from the unsplit forward", c.parts, c.threads)
			}
		}
	})
}

func first(k, _ []float32) []float32 { return k }
