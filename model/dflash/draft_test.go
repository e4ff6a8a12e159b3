package dflash

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/format/safetensors"
	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// tinyConfig is a 2-layer draft for testmodel.TinyQwen3 whose attention shape differs from the target's
// (head dim 16, q width 64 != hidden 32) so shape mix-ups fail loudly.
func tinyConfig() Config {
	return Config{
		Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 97,
		RMSEps: 1e-6, RopeTheta: 10000, BlockSize: 6, TargetLayerCount: 6, MaskID: 96,
		TargetLayers: []int{1, 3, 4},
	}
}

// randomCtx returns rows context rows of taps with values in [-1, 1).
func randomCtx(cfg Config, rows int, seed uint64) []float32 {
	w := len(cfg.TargetLayers) * cfg.Hidden
	out := make([]float32, rows*w)
	s := seed
	for i := range out {
		s = splitmix.Mix(s)
		out[i] = float32(float64(s>>11)/(1<<53)*2 - 1)
	}
	return out
}

func ctxRows64(cfg Config, ctx []float32, rows int) [][]float64 {
	w := len(cfg.TargetLayers) * cfg.Hidden
	out := make([][]float64, rows)
	for j := range out {
		out[j] = make([]float64, w)
		for i := range out[j] {
			out[j][i] = float64(ctx[j*w+i])
		}
	}
	return out
}

func writeAndLoad(t *testing.T, target model.Target, cfg Config, dtype kernel.DType, opt Options) *Draft {
	t.Helper()
	dir := t.TempDir()
	if err := WriteRandom(dir, cfg, 11, dtype); err != nil {
		t.Fatal(err)
	}
	d, err := Load(dir, target, opt)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func boolp(b bool) *bool { return &b }

// relErr is max |got - want| / max |want| over a row.
func relErr(got []float32, want []float64) float64 {
	var diff, scale float64
	for i, w := range want {
		diff = math.Max(diff, math.Abs(float64(got[i])-w))
		scale = math.Max(scale, math.Abs(w))
	}
	return diff / scale
}

// TestForwardMatchesReference compares the logits of a context+block forward with the naive
// float64 reference, for both storage types, the three attention variants and every kernel path.
// bf16 weights are exact in both computations, so only float32 accumulation separates them:
// 1e-4 of the largest logit leaves a wide margin over the errors observed (below 1e-6).
func TestForwardMatchesReference(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	sliding := tinyConfig()
	sliding.LayerTypes = []string{SlidingAttention, FullAttention}
	sliding.SlidingWindow = 5
	causal := tinyConfig()
	causal.Causal = boolp(true)
	cases := []struct {
		name string
		cfg  Config
	}{{"bidirectional", tinyConfig()}, {"causal", causal}, {"sliding", sliding}}
	for _, dt := range []kernel.DType{kernel.BF16, kernel.F32} {
		for _, tc := range cases {
			t.Run(dt.String()+"/"+tc.name, func(t *testing.T) {
				d := writeAndLoad(t, target, tc.cfg, dt, Options{})
				if d.DType() != dt {
					t.Fatalf("loaded dtype %v, want %v (KeepDType)", d.DType(), dt)
				}
				const nctx = 9
				ctx := randomCtx(tc.cfg, nctx, 3)
				block := []int{5, 96, 96, 96, 96, 96}
				ref := &refDraft{cfg: tc.cfg, w: RandomWeights(tc.cfg, 11, dt), target: target}
				want := ref.forward(ctxRows64(tc.cfg, ctx, nctx), block)
				kerneltest.ForEachPath(t, func(t *testing.T) {
					c := d.NewCache(64)
					logits, err := d.Forward(c, ctx, nctx, block)
					if err != nil {
						t.Fatal(err)
					}
					if c.Offset() != nctx+len(block) {
						t.Fatalf("offset %d after forward, want %d", c.Offset(), nctx+len(block))
					}
					for i := range block {
						if e := relErr(logits[i*tc.cfg.Vocab:(i+1)*tc.cfg.Vocab], want[i]); e > 1e-4 {
							t.Errorf("row %d: relative error %.2g vs reference", i, e)
						}
					}
				})
			})
		}
	}
}

// TestScales: input_embedding_scale multiplies the block embeddings and output_multiplier the
// logits. With LogitScale alone the logits are exactly half; EmbedScale 2 on a draft whose first
// sublayer starts with an RMSNorm changes the residual stream, so logits must differ.
func TestScales(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	base := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	cfg.LogitScale = 0.5
	half := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	cfg.LogitScale, cfg.EmbedScale = 0, 2
	emb := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	ctx := randomCtx(cfg, 4, 1)
	block := []int{3, 96, 96}
	run := func(d *Draft) []float32 {
		l, err := d.Forward(d.NewCache(16), ctx, 4, block)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(l)
	}
	b, h, e := run(base), run(half), run(emb)
	for i := range b {
		if h[i] != b[i]*0.5 {
			t.Fatalf("logit %d: %v with output_multiplier 0.5, want %v", i, h[i], b[i]*0.5)
		}
	}
	if slices.Equal(b, e) {
		t.Fatal("input_embedding_scale 2 left the logits unchanged")
	}
}

// TestBlockNonCausal: in a bidirectional draft every block row sees the whole block, so changing
// the last row's token changes the first rows' logits; with causal true earlier rows must stay
// bitwise identical (they never see the later row).
func TestBlockNonCausal(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	for _, causal := range []bool{false, true} {
		cfg := tinyConfig()
		cfg.Causal = boolp(causal)
		d := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
		ctx := randomCtx(cfg, 5, 9)
		run := func(last int) []float32 {
			l, err := d.Forward(d.NewCache(32), ctx, 5, []int{4, 96, 96, 96, last})
			if err != nil {
				t.Fatal(err)
			}
			return slices.Clone(l)
		}
		a, b := run(96), run(17)
		v := cfg.Vocab
		for i := 0; i < 4; i++ {
			same := slices.Equal(a[i*v:(i+1)*v], b[i*v:(i+1)*v])
			if causal && !same {
				t.Errorf("causal: row %d changed when only row 4's token did", i)
			}
			if !causal && same {
				t.Errorf("bidirectional: row %d unchanged when row 4's token changed", i)
			}
		}
	}
}

// TestContextBatches: context written in several context-only forwards (of uneven sizes, one
// above the 32-row chunk), and a block rewound out before more context comes, gives bitwise the
// logits of one combined forward: context rows land at their true slots whatever the batching.
func TestContextBatches(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	d := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	const n = 45
	ctx := randomCtx(cfg, n, 5)
	w := len(cfg.TargetLayers) * cfg.Hidden
	block := []int{8, 96, 96, 96}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		one := d.NewCache(64)
		want, err := d.Forward(one, ctx, n, block)
		if err != nil {
			t.Fatal(err)
		}
		want = slices.Clone(want)

		split := d.NewCache(64)
		for _, r := range [][2]int{{0, 3}, {3, 39}} {
			if l, err := d.Forward(split, ctx[r[0]*w:r[1]*w], r[1]-r[0], nil); err != nil || l != nil {
				t.Fatalf("context-only forward: logits %v, err %v", l != nil, err)
			}
		}
		// a proposal at 39, rewound as the session does before the next context write
		if _, err := d.Forward(split, nil, 0, []int{1, 96, 96, 96, 96, 96}); err != nil {
			t.Fatal(err)
		}
		if err := split.Rewind(39); err != nil {
			t.Fatal(err)
		}
		got, err := d.Forward(split, ctx[39*w:], n-39, block)
		if err != nil {
			t.Fatal(err)
		}
		if split.Offset() != n+len(block) {
			t.Fatalf("offset %d, want %d", split.Offset(), n+len(block))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("split context writes differ from one combined forward (rel err %.2g)", relErr32(got, want))
		}
		// The cached context rows themselves are identical.
		kv1, _ := nn.AsKV(one)
		kv2, _ := nn.AsKV(split)
		for l := 0; l < cfg.Layers; l++ {
			if !slices.Equal(kv1.K[l][:n*kv1.Width], kv2.K[l][:n*kv2.Width]) || !slices.Equal(kv1.V[l][:n*kv1.Width], kv2.V[l][:n*kv2.Width]) {
				t.Fatalf("layer %d: cached context rows differ", l)
			}
		}
	})
}

func relErr32(got, want []float32) float64 {
	w := make([]float64, len(want))
	for i, v := range want {
		w[i] = float64(v)
	}
	return relErr(got, w)
}

// TestSlidingWindow: with every layer sliding (window 4) and the block at position 10, block row
// i at position 10+i sees keys at positions > 6+i; context keys come straight from the context
// features (no propagation through earlier layers), so context rows 0..6 can change without any
// effect, while row 9 is seen by every block row. A full-attention draft sees row 0.
func TestSlidingWindow(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	cfg.BlockSize = 4
	cfg.LayerTypes = []string{SlidingAttention, SlidingAttention}
	cfg.SlidingWindow = 4
	slide := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	full := writeAndLoad(t, target, tinyConfig(), kernel.BF16, Options{})
	const n = 10
	w := len(cfg.TargetLayers) * cfg.Hidden
	base := randomCtx(cfg, n, 2)
	run := func(d *Draft, ctx []float32) []float32 {
		l, err := d.Forward(d.NewCache(32), ctx, n, []int{3, 96, 96, 96})
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(l)
	}
	perturb := func(row int) []float32 {
		c := slices.Clone(base)
		for i := row * w; i < (row+1)*w; i++ {
			c[i] = -c[i]
		}
		return c
	}
	if !slices.Equal(run(slide, base), run(slide, perturb(0))) || !slices.Equal(run(slide, base), run(slide, perturb(6))) {
		t.Error("sliding window 4: block at 10 changed when context rows 0 or 6 (outside the window) did")
	}
	if slices.Equal(run(slide, base), run(slide, perturb(9))) {
		t.Error("sliding window 4: block unchanged when context row 9 (inside the window) changed")
	}
	if slices.Equal(run(full, base), run(full, perturb(0))) {
		t.Error("full attention: block unchanged when context row 0 changed")
	}
}

// TestLoadDTypes: Options convert either way, and the converted draft agrees with the stored one
// (exactly for bf16 -> f32, since widening is exact; f32 -> bf16 rounds so it only stays close).
func TestLoadDTypes(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	dir := t.TempDir()
	if err := WriteRandom(dir, cfg, 11, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	ctx := randomCtx(cfg, 3, 4)
	logits := func(opt Options, want kernel.DType) []float32 {
		d, err := Load(dir, target, opt)
		if err != nil {
			t.Fatal(err)
		}
		if d.DType() != want {
			t.Fatalf("option %v: dtype %v, want %v", opt.DType, d.DType(), want)
		}
		l, err := d.Forward(d.NewCache(16), ctx, 3, []int{1, 96, 96})
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(l)
	}
	keep := logits(Options{}, kernel.BF16)
	f32 := logits(Options{DType: ForceF32}, kernel.F32)
	if e := relErr32(f32, keep); e > 1e-5 {
		t.Errorf("bf16 file forced to f32: relative error %.2g vs bf16 kernels", e)
	}
	if e := relErr32(logits(Options{DType: ForceBF16}, kernel.BF16), keep); e != 0 {
		t.Errorf("bf16 file forced to bf16 differs from keep: %.2g", e)
	}
}

// TestRandomMatchesFolder: Random builds the draft WriteRandom+Load gives.
func TestRandomMatchesFolder(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	fromFile := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	mem, err := Random(target, cfg, 11, kernel.BF16)
	if err != nil {
		t.Fatal(err)
	}
	ctx := randomCtx(cfg, 4, 8)
	a, err := fromFile.Forward(fromFile.NewCache(16), ctx, 4, []int{2, 96})
	if err != nil {
		t.Fatal(err)
	}
	b, err := mem.Forward(mem.NewCache(16), ctx, 4, []int{2, 96})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Fatal("Random and WriteRandom+Load give different drafts")
	}
}

// TestForwardErrors: bad calls fail without touching the cache.
func TestForwardErrors(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	d := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	c := d.NewCache(8)
	if _, err := d.Forward(c, randomCtx(cfg, 2, 1), 2, nil); err != nil {
		t.Fatal(err)
	}
	ctx := randomCtx(cfg, 8, 1)
	cases := []struct {
		name  string
		c     cache.Cache
		ctx   []float32
		rows  int
		block []int
		want  string
	}{
		{"short ctx", c, ctx[:10], 1, nil, "context rows need"},
		{"block too long", c, nil, 0, []int{1, 2, 3, 4, 5, 6, 7}, "exceeds block_size 6"},
		{"token outside vocab", c, nil, 0, []int{1, 97}, "outside vocabulary"},
		{"no room", c, ctx, 5, []int{1, 2}, "exceed cache capacity"},
		{"wrong cache", cache.NewKV(3, 8, 32), nil, 0, []int{1}, "does not fit"},
	}
	for _, tc := range cases {
		_, err := d.Forward(tc.c, tc.ctx, tc.rows, tc.block)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if c.Offset() != 2 {
			t.Fatalf("%s: offset %d after a failed forward, want 2", tc.name, c.Offset())
		}
	}
}

// TestForwardAllocs: a context write plus a block forward on a cache from NewCache allocates
// nothing.
func TestForwardAllocs(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	d := writeAndLoad(t, target, cfg, kernel.BF16, Options{})
	c := d.NewCache(128)
	ctx := randomCtx(cfg, 3, 1)
	block := []int{1, 96, 96, 96, 96, 96}
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := d.Forward(c, ctx, 3, block); err != nil {
			t.Fatal(err)
		}
		if err := c.Rewind(c.Offset() - len(block)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per forward, want 0", allocs)
	}
}

func TestDefaultTargetLayers(t *testing.T) {
	cases := []struct {
		target, draft int
		want          []int
	}{
		{36, 5, []int{1, 9, 17, 25, 33}}, // DFLASH.md's Qwen3 example
		{28, 5, []int{1, 7, 13, 19, 25}}, // span 24, steps of 6
		{36, 1, []int{18}},               // one layer taps the middle
		{7, 3, []int{1, 2, 4}},           // 1 + 1.5 = 2.5 rounds to even, as Python's round
		{6, 2, []int{1, 3}},
	}
	for _, tc := range cases {
		if got := DefaultTargetLayers(tc.target, tc.draft); !slices.Equal(got, tc.want) {
			t.Errorf("DefaultTargetLayers(%d, %d) = %v, want %v", tc.target, tc.draft, got, tc.want)
		}
	}
}

// For shallow targets the rule repeats ids; new drafts get them pushed up into a strictly
// ascending set inside the target, which the loader accepts.
func TestSpreadTargetLayers(t *testing.T) {
	cases := []struct {
		target, draft int
		want          []int
	}{
		{36, 5, []int{1, 9, 17, 25, 33}}, // where the rule is fine it is unchanged
		{5, 3, []int{1, 2, 3}},           // the rule gives [1 2 2]
		{4, 2, []int{1, 2}},              // the rule gives [1 1]
		{2, 3, []int{1}},                 // more taps than layers above the first: what fits
	}
	for _, tc := range cases {
		if got := SpreadTargetLayers(tc.target, tc.draft); !slices.Equal(got, tc.want) {
			t.Errorf("SpreadTargetLayers(%d, %d) = %v, want %v", tc.target, tc.draft, got, tc.want)
		}
	}
}

// TestConfigRoundTrip: JSON then parsing gives back the config, optional fields included.
func TestConfigRoundTrip(t *testing.T) {
	cfg := tinyConfig()
	cfg.Causal = boolp(false)
	cfg.LayerTypes = []string{FullAttention, SlidingAttention}
	cfg.SlidingWindow = 64
	cfg.MaxPositions = 4096
	cfg.RopeScaling = &hf.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
	cfg.LogitSoftcap = 30
	js, err := cfg.JSON("bfloat16")
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hf.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fromHF(hc, 99)
	if err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(cfg)
	if string(gj) != string(wj) {
		t.Fatalf("round trip:\n got %s\nwant %s", gj, wj)
	}
}

// TestLoadChecks: each way a draft can fail to fit its target is reported with the field, its
// value and what it should be. Each case edits a valid folder in one place.
func TestLoadChecks(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	edit := func(f func(m, dc map[string]any)) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			p := filepath.Join(dir, "config.json")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			f(m, m["dflash_config"].(map[string]any))
			data, _ = json.Marshal(m)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tensors := func(f func(ts []safetensors.WriteTensor) []safetensors.WriteTensor) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			var ts []safetensors.WriteTensor
			w := RandomWeights(cfg, 1, kernel.F32)
			for _, s := range cfg.Tensors() {
				ts = append(ts, encode(s, w[s.Name], kernel.F32))
			}
			if err := writeFolder(dir, cfg, f(ts), kernel.F32); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  []string
	}{
		{"tap out of range", edit(func(m, dc map[string]any) { dc["target_layer_ids"] = []int{1, 3, 6} }),
			[]string{"target_layer_ids[2] = 6", "below 6"}},
		{"taps not ascending", edit(func(m, dc map[string]any) { dc["target_layer_ids"] = []int{3, 1, 4} }),
			[]string{"target_layer_ids", "ascending"}},
		{"taps repeated", edit(func(m, dc map[string]any) { dc["target_layer_ids"] = []int{1, 1, 4} }),
			[]string{"target_layer_ids", "unique"}},
		{"num_target_layers", edit(func(m, dc map[string]any) { m["num_target_layers"] = 8 }),
			[]string{"num_target_layers 8", "want 6"}},
		{"hidden", edit(func(m, dc map[string]any) { m["hidden_size"] = 48 }),
			[]string{"hidden_size 48", "want 32"}},
		{"vocab", edit(func(m, dc map[string]any) { m["vocab_size"] = 98 }),
			[]string{"vocab_size 98", "want 97"}},
		{"mask id", edit(func(m, dc map[string]any) { dc["mask_token_id"] = 97 }),
			[]string{"mask_token_id 97", "below 97"}},
		{"mask id missing", edit(func(m, dc map[string]any) { delete(dc, "mask_token_id") }),
			[]string{"mask_token_id is missing"}},
		{"block size", edit(func(m, dc map[string]any) { m["block_size"] = 1 }),
			[]string{"block_size 1", "at least 2"}},
		{"architecture", edit(func(m, dc map[string]any) { m["architectures"] = []string{"Qwen3ForCausalLM"} }),
			[]string{"architectures", Arch}},
		{"layer type", edit(func(m, dc map[string]any) { m["layer_types"] = []string{"full_attention", "linear"} }),
			[]string{"layer_types[1]", "sliding_attention"}},
		{"bidirectional window below block", edit(func(m, dc map[string]any) {
			m["layer_types"] = []string{"sliding_attention", "full_attention"}
			m["sliding_window"] = 3
			dc["causal"] = false
		}), []string{"sliding_window 3 below block_size 6"}},
		{"missing tensor", tensors(func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
			return slices.DeleteFunc(ts, func(w safetensors.WriteTensor) bool { return w.Name == "layers.1.self_attn.k_norm.weight" })
		}), []string{"layers.1.self_attn.k_norm.weight", "[16]"}},
		{"wrong shape", tensors(func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
			for i := range ts {
				if ts[i].Name == "fc.weight" { // two taps' worth instead of three
					ts[i].Shape = []int{32, 64}
					ts[i].Data = ts[i].Data[:32*64*4]
				}
			}
			return ts
		}), []string{"fc.weight", "[32 64]", "expected [32 96]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteRandom(dir, cfg, 1, kernel.F32); err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, dir)
			_, err := Load(dir, target, Options{})
			if err == nil {
				t.Fatal("loaded a draft that does not fit")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestLoadDefaults: without target_layer_ids the default rule applies (6 target layers, 2 draft
// layers: [1 3]), without num_target_layers the target's count, without block_size 16.
func TestLoadDefaults(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	cfg.TargetLayers = []int{1, 3}
	dir := t.TempDir()
	if err := WriteRandom(dir, cfg, 1, kernel.BF16); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(p)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m["dflash_config"].(map[string]any), "target_layer_ids")
	delete(m, "num_target_layers")
	delete(m, "block_size")
	data, _ = json.Marshal(m)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Load(dir, target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := d.Config()
	if !slices.Equal(got.TargetLayers, []int{1, 3}) || got.TargetLayerCount != 6 || d.BlockSize() != 16 || d.MaskID() != 96 {
		t.Fatalf("defaults: taps %v, num_target_layers %d, block %d, mask %d; want [1 3], 6, 16, 96",
			got.TargetLayers, got.TargetLayerCount, d.BlockSize(), d.MaskID())
	}
}

// TestWriteRejects: Write refuses incomplete or foreign weights.
func TestWriteRejects(t *testing.T) {
	cfg := tinyConfig()
	w := RandomWeights(cfg, 1, kernel.F32)
	delete(w, "norm.weight")
	w["lm_head.weight"] = []float32{1}
	w["fc.weight"] = w["fc.weight"][:10]
	err := Write(t.TempDir(), cfg, w, kernel.F32)
	for _, s := range []string{"norm.weight", "lm_head.weight", "fc.weight has 10 values"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error %v does not mention %q", err, s)
		}
	}
}

// TestCacheLayouts: a draft with small heads attends over head-major copies (NewCache); a plain
// *cache.KV takes the row-major path. Both compute the same attention in a different order, so
// their logits agree to float32 rounding (1e-5 relative), and each keeps the same offset.
func TestCacheLayouts(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	d := writeAndLoad(t, target, cfg, kernel.F32, Options{})
	if _, plain := d.NewCache(8).(*cache.KV); plain {
		t.Fatalf("head_dim %d: NewCache returned a plain *cache.KV, want head-major copies", cfg.HeadDim)
	}
	ctx := randomCtx(cfg, 20, 9)
	block := []int{4, 96, 96, 96, 96, 96}
	hm, err := d.Forward(d.NewCache(32), ctx, 20, block)
	if err != nil {
		t.Fatal(err)
	}
	hm = slices.Clone(hm)
	rm, err := d.Forward(cache.NewKV(cfg.Layers, 32, cfg.KVHeads*cfg.HeadDim), ctx, 20, block)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr32(hm, rm); e > 1e-5 {
		t.Fatalf("head-major and row-major caches differ: relative error %.2g", e)
	}
}

// TestSplitBlockBitwise: a block split into row parts (concurrently on the kernel's pool where
// there are cores) gives the bits of the block run whole, on both cache layouts and with
// bidirectional and causal blocks. Forced part counts exercise the partition on any machine.
func TestSplitBlockBitwise(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	for _, c := range []struct {
		causal  bool
		headDim int // 8 takes nn's fused attention path
	}{{false, 16}, {true, 16}, {false, 8}, {true, 8}} {
		causal := c.causal
		cfg := tinyConfig()
		cfg.Causal = boolp(causal)
		cfg.HeadDim = c.headDim
		d := writeAndLoad(t, target, cfg, kernel.F32, Options{})
		ctx := randomCtx(cfg, 9, 3)
		block := []int{4, 96, 96, 17, 96, 96}
		run := func(t *testing.T, rowMajor bool, parts, threads int) []float32 {
			defer kernel.SetMaxThreads(kernel.SetMaxThreads(threads))
			saved := d.partScores
			defer func() { d.partScores = saved }()
			d.partScores = make(nn.PartScratch, parts) // NewCache sizes the buffers
			c := d.NewCache(32)
			if rowMajor {
				c = cache.NewKV(cfg.Layers, 32, cfg.KVHeads*cfg.HeadDim)
			}
			l, err := d.Forward(c, ctx, 9, block)
			if err != nil {
				t.Fatal(err)
			}
			return slices.Clone(l)
		}
		kerneltest.ForEachPath(t, func(t *testing.T) {
			for _, rowMajor := range []bool{false, true} {
				want := run(t, rowMajor, 1, 1)
				for _, c := range []struct{ parts, threads int }{{3, 1}, {2, 0}, {3, 0}} {
					if got := run(t, rowMajor, c.parts, c.threads); !slices.Equal(got, want) {
						t.Errorf("causal %v, head dim %d, row-major cache %v, %d parts, thread cap %d: logits differ from the whole block", causal, cfg.HeadDim, rowMajor, c.parts, c.threads)
					}
				}
			}
		})
	}
}
