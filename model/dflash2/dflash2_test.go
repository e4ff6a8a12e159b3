package dflash2

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/internal/splitmix"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
)

// tinyConfig is a 2-layer DFlash2 draft for testmodel.TinyQwen3: 3 taps, groups of 8 channels (4 groups),
// rank 8, 5 candidates, blocks of 6.
func tinyConfig() Config {
	return Config{
		Config: dflash.Config{
			Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 97,
			RMSEps: 1e-6, RopeTheta: 10000, BlockSize: 6, TargetLayerCount: 6, MaskID: 96,
			TargetLayers: []int{1, 3, 4},
		},
		ConvKernel: 3, ConvGroup: 8, SelectorRank: 8, SelectorTopK: 5,
	}
}

func randomFloats(n int, seed uint64) []float32 {
	r := splitmix.Stream{State: seed}
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.Float64()*2 - 1)
	}
	return out
}

// TestGroupedConvMatchesLoop compares GroupedConv with the formula written as a direct loop over
// (row, channel, tap), on two blocks of 4 rows, and checks the block boundary: the first row of
// the second block must not see the last row of the first.
func TestGroupedConvMatchesLoop(t *testing.T) {
	const rows, blockLen, hidden, taps, group = 8, 4, 8, 3, 2
	groups := hidden / group
	stride := 2 * taps * groups
	x := randomFloats(rows*hidden, 1)
	delta := randomFloats(rows*stride, 2)
	base := randomFloats(2*taps*hidden, 3)
	for side := 0; side < 2; side++ {
		off := side * taps * groups
		got := make([]float32, rows*hidden)
		GroupedConv(got, x, delta[off:], base[side*taps*hidden:], rows, blockLen, hidden, taps, group, stride)
		for i := 0; i < rows; i++ {
			for c := 0; c < hidden; c++ {
				var want float64
				for tp := 0; tp < taps; tp++ {
					if i%blockLen-tp < 0 { // zero across the block boundary
						continue
					}
					coef := float64(base[side*taps*hidden+tp*hidden+c]) + float64(delta[i*stride+off+tp*groups+c/group])
					want += coef * float64(x[(i-tp)*hidden+c])
				}
				if g := float64(got[i*hidden+c]); math.Abs(g-want) > 1e-5 {
					t.Fatalf("side %d row %d channel %d: got %v, want %v", side, i, c, g, want)
				}
			}
		}
		// Perturbing the first block's last row changes nothing in the second block.
		x2 := append([]float32(nil), x...)
		for c := 0; c < hidden; c++ {
			x2[(blockLen-1)*hidden+c] += 5
		}
		got2 := make([]float32, rows*hidden)
		GroupedConv(got2, x2, delta[off:], base[side*taps*hidden:], rows, blockLen, hidden, taps, group, stride)
		for i := blockLen; i < rows; i++ {
			for c := 0; c < hidden; c++ {
				if got2[i*hidden+c] != got[i*hidden+c] {
					t.Fatalf("side %d: row %d of the second block changed when the first block's last row did", side, i)
				}
			}
		}
		// ... while the perturbed row's own output does change (the test can fail).
		if got2[(blockLen-1)*hidden] == got[(blockLen-1)*hidden] {
			t.Fatalf("side %d: perturbing row %d did not change its output", side, blockLen-1)
		}
	}
}

func writeAndLoad(t *testing.T, target model.Target, cfg Config, w map[string][]float32) *Draft {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, cfg, w, kernel.F32); err != nil {
		t.Fatal(err)
	}
	d, err := Load(dir, target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestIdentityConvMatchesDFlash: with identity base kernels, zero kernel projections and a zero
// successor codebook (SpecForge's initialisation) a DFlash2 draft is the DFlash draft with the
// same backbone weights, so its candidates are the DFlash logits' top-K and every edge score is
// the unary logit. This checks the backbone, the head and the top-K against an independent
// implementation. Random base kernels must then change the scores (the convolution is live).
func TestIdentityConvMatchesDFlash(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	w := RandomWeights(cfg, 5)
	for name, v := range w {
		switch {
		case strings.HasSuffix(name, "base_kernel"):
			h := cfg.Hidden
			for i := range v {
				v[i] = 0
				if (i/h)%cfg.ConvKernel == 0 {
					v[i] = 1
				}
			}
		case strings.HasSuffix(name, "kernel_projection.weight"), name == "candidate_selector.successor_codebook":
			clear(v)
		}
	}
	d2 := writeAndLoad(t, target, cfg, w)
	plain := map[string][]float32{}
	for _, ts := range cfg.Config.Tensors() {
		plain[ts.Name] = w[ts.Name]
	}
	dir := t.TempDir()
	if err := dflash.Write(dir, cfg.Config, plain, kernel.F32); err != nil {
		t.Fatal(err)
	}
	d1, err := dflash.Load(dir, target, dflash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := randomFloats(9*len(cfg.TargetLayers)*cfg.Hidden, 9)
	block := []int{17, 96, 96, 96, 96, 96}
	logits, err := d1.Forward(d1.NewCache(64), ctx, 9, block)
	if err != nil {
		t.Fatal(err)
	}
	walk, err := d2.Forward(d2.NewCache(64), ctx, 9, block)
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.Vocab
	for slot := 1; slot < len(block); slot++ {
		ids, scores := walk.Candidates(slot, 40, nil, nil)
		row := logits[slot*v : (slot+1)*v]
		want := make([]int32, cfg.SelectorTopK)
		wantV := make([]float32, cfg.SelectorTopK)
		TopK(want, wantV, row)
		for j := range ids {
			if ids[j] != want[j] || math.Abs(float64(scores[j]-row[ids[j]])) > 1e-4 {
				t.Fatalf("slot %d candidate %d: got id %d score %v, want id %d logit %v", slot, j, ids[j], scores[j], want[j], row[want[j]])
			}
		}
	}

	// The same draft with its random kernels and codebooks scores differently.
	d3 := writeAndLoad(t, target, cfg, RandomWeights(cfg, 5))
	walk3, err := d3.Forward(d3.NewCache(64), ctx, 9, block)
	if err != nil {
		t.Fatal(err)
	}
	_, s3 := walk3.Candidates(2, 40, nil, nil)
	_, s2 := walk.Candidates(2, 40, nil, nil)
	if s3[0] == s2[0] {
		t.Fatal("random convolutions and codebooks left the top score unchanged: they are not wired in")
	}
}

// TestWalkScores checks the edge formula u[c] + <A[prev] * W_h h, B[c]> against the stored
// factors, that the score depends on prev (the selector is a transition model), and that the
// candidates are sorted by unary value.
func TestWalkScores(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	w := RandomWeights(cfg, 3)
	d := writeAndLoad(t, target, cfg, w)
	ctx := randomFloats(4*len(cfg.TargetLayers)*cfg.Hidden, 4)
	wk, err := d.Forward(d.NewCache(32), ctx, 4, []int{5, 96, 96, 96, 96, 96})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.SelectorRank
	A, B := w["candidate_selector.predecessor_codebook"], w["candidate_selector.successor_codebook"]
	for slot := 1; slot <= 5; slot++ {
		hw := d.walk.w[(slot-1)*r : slot*r]
		unary := d.walk.unary[(slot-1)*cfg.SelectorTopK : slot*cfg.SelectorTopK]
		for j := 1; j < len(unary); j++ {
			if unary[j] > unary[j-1] {
				t.Fatalf("slot %d: unary values not descending: %v", slot, unary)
			}
		}
		var prevScores []float32
		for _, prev := range []int{0, 33, 96} {
			ids, scores := wk.Candidates(slot, prev, nil, nil)
			for j, c := range ids {
				var want float64 = float64(unary[j])
				for k := 0; k < r; k++ {
					want += float64(A[prev*r+k]) * float64(hw[k]) * float64(B[int(c)*r+k])
				}
				if math.Abs(float64(scores[j])-want) > 1e-4 {
					t.Fatalf("slot %d prev %d cand %d: score %v, want %v", slot, prev, c, scores[j], want)
				}
			}
			if prevScores != nil && prevScores[0] == scores[0] {
				t.Fatalf("slot %d: scores do not depend on the predecessor", slot)
			}
			prevScores = scores
		}
	}
	if ids, _ := wk.Candidates(6, 0, nil, nil); len(ids) != 0 {
		t.Fatalf("slot 6 of a 6-row block has no candidates, got %v", ids)
	}
}

// TestContextSplit: writing context in one forward or in several gives the same scores (context
// rows are independent of each other and of how they are batched).
func TestContextSplit(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	d := writeAndLoad(t, target, cfg, RandomWeights(cfg, 8))
	width := len(cfg.TargetLayers) * cfg.Hidden
	ctx := randomFloats(40*width, 6)
	block := []int{3, 96, 96, 96, 96, 96}
	c1 := d.NewCache(64)
	wk, err := d.Forward(c1, ctx, 40, block)
	if err != nil {
		t.Fatal(err)
	}
	_, want := wk.Candidates(3, 7, nil, nil)
	c2 := d.NewCache(64)
	if _, err := d.Forward(c2, ctx[:33*width], 33, nil); err != nil {
		t.Fatal(err)
	}
	wk, err = d.Forward(c2, ctx[33*width:], 7, block)
	if err != nil {
		t.Fatal(err)
	}
	_, got := wk.Candidates(3, 7, nil, nil)
	for j := range want {
		if math.Abs(float64(got[j]-want[j])) > 1e-5 {
			t.Fatalf("candidate %d: split context gives %v, one forward %v", j, got[j], want[j])
		}
	}
	if c1.Offset() != 46 || c2.Offset() != 46 {
		t.Fatalf("cache offsets %d and %d, want 46 (40 context + 6 block)", c1.Offset(), c2.Offset())
	}
	// Errors leave the cache unchanged.
	if _, err := d.Forward(c2, ctx, 1, []int{3, 200}); err == nil || c2.Offset() != 46 {
		t.Fatalf("out-of-vocabulary block: err %v, offset %d", err, c2.Offset())
	}
	if _, err := d.Forward(cache.NewKV(1, 8, 4), ctx, 1, nil); err == nil {
		t.Fatal("a cache of the wrong shape was accepted")
	}
}

// TestLoadMismatch: each selector/convolution field that does not fit the tensors or the target
// is refused, naming the field or the tensor.
func TestLoadMismatch(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	base := tinyConfig()
	dir := t.TempDir()
	if err := Write(dir, base, RandomWeights(base, 1), kernel.F32); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, target, Options{}); err != nil {
		t.Fatalf("the unmodified folder must load: %v", err)
	}
	cases := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"conv_kernel_size vs base_kernel", func(c *Config) { c.ConvKernel = 2 }, "attention_conv.base_kernel"},
		{"conv_kernel_size above block", func(c *Config) { c.ConvKernel = 7 }, "conv_kernel_size 7 exceeds block_size"},
		{"conv_group_size not dividing", func(c *Config) { c.ConvGroup = 5 }, "conv_group_size 5 must divide hidden_size 32"},
		{"conv_group_size vs projection", func(c *Config) { c.ConvGroup = 16 }, "attention_conv.kernel_projection.weight"},
		{"selector_rank vs tensors", func(c *Config) { c.SelectorRank = 16 }, "candidate_selector.hidden_projection.weight"},
		{"selector_top_k zero", func(c *Config) { c.SelectorTopK = 0 }, "selector_top_k 0 must be positive"},
		{"selector_top_k above vocab", func(c *Config) { c.SelectorTopK = 98 }, "selector_top_k 98 exceeds vocab_size 97"},
		{"codebooks over another vocab", func(c *Config) { c.Vocab = 96 }, "vocab_size 96 does not match the target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			js, err := c.JSON("float32")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Load(dir, target, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
	for _, key := range []string{"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"} {
		t.Run("missing "+key, func(t *testing.T) {
			js, _ := base.JSON("float32")
			s := strings.Replace(string(js), `"`+key+`"`, `"x_`+key+`"`, 1)
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir, target, Options{})
			if err == nil || !strings.Contains(err.Error(), "dflash_config."+key+" is missing") {
				t.Fatalf("got error %v, want dflash_config.%s is missing", err, key)
			}
		})
	}
	// A DFlash architecture name is a DFlash2 draft only when it carries the DFlash2 keys.
	t.Run("DFlash architecture with DFlash2 keys", func(t *testing.T) {
		js, _ := base.JSON("float32")
		s := strings.Replace(string(js), Arch, dflash.Arch, 1)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, err := IsDraft(dir); !ok || err != nil {
			t.Fatalf("IsDraft = %v, %v; want true", ok, err)
		}
		if _, err := Load(dir, target, Options{}); err != nil {
			t.Fatalf("got %v, want it loaded", err)
		}
		s = strings.Replace(s, `"selector_rank"`, `"x_selector_rank"`, 1)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, _ := IsDraft(dir); ok {
			t.Fatal("IsDraft is true for a DFlash config lacking selector_rank")
		}
		if _, err := Load(dir, target, Options{}); err == nil || !strings.Contains(err.Error(), "architectures") {
			t.Fatalf("got %v, want an architectures error", err)
		}
	})
}

// TestForwardAllocs: once the cache is sized by NewCache and a first block has grown the logit
// buffer, a context-plus-block forward and a full walk allocate nothing.
func TestForwardAllocs(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	cfg := tinyConfig()
	d := writeAndLoad(t, target, cfg, RandomWeights(cfg, 2))
	c := d.NewCache(128)
	width := len(cfg.TargetLayers) * cfg.Hidden
	ctx := randomFloats(3*width, 1)
	block := []int{3, 96, 96, 96, 96, 96}
	ids := make([]int32, 0, cfg.SelectorTopK)
	scores := make([]float32, 0, cfg.SelectorTopK)
	step := func() {
		off := c.Offset()
		wk, err := d.Forward(c, ctx, 3, block)
		if err != nil {
			t.Fatal(err)
		}
		for slot := 1; slot < len(block); slot++ {
			ids, scores = wk.Candidates(slot, slot, ids[:0], scores[:0])
		}
		if err := c.Rewind(off); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if a := testing.AllocsPerRun(20, step); a != 0 {
		t.Fatalf("%v allocations per forward and walk, want 0", a)
	}
}

// TestWriteRejects: Write refuses a missing, extra or misshaped weight and an unsupported dtype,
// and writes nothing then.
func TestWriteRejects(t *testing.T) {
	cfg := tinyConfig()
	cases := []struct {
		name  string
		edit  func(w map[string][]float32)
		dtype kernel.DType
		want  string
	}{
		{"missing", func(w map[string][]float32) { delete(w, "candidate_selector.successor_codebook") }, kernel.F32, "candidate_selector.successor_codebook"},
		{"extra", func(w map[string][]float32) { w["lm_head.weight"] = []float32{1} }, kernel.F32, "lm_head.weight is not part"},
		{"misshaped", func(w map[string][]float32) {
			w["layers.1.mlp_conv.base_kernel"] = w["layers.1.mlp_conv.base_kernel"][1:]
		}, kernel.BF16, "layers.1.mlp_conv.base_kernel"},
		{"dtype", func(map[string][]float32) {}, kernel.DType(99), "want f32 or bf16"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := RandomWeights(cfg, 1)
			tc.edit(w)
			dir := filepath.Join(t.TempDir(), "d")
			err := Write(dir, cfg, w, tc.dtype)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("a refused write left %s behind", dir)
			}
		})
	}
}

// TestCausalBlockRows: with causal attention in the block (the convolutions always are), a
// forward of [anchor, MASK x n] proposes for slots 1..n exactly what the whole block does, bit
// for bit, for every n, and moves the cache by the rows it was given; with the reference's
// bidirectional attention CausalBlock is false, and truncating the block does change a slot.
func TestCausalBlockRows(t *testing.T) {
	target := testmodel.TinyQwen3(t)
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, causal := range []bool{true, false} {
			cfg := tinyConfig()
			if causal {
				cfg.Causal = &causal
			}
			d := writeAndLoad(t, target, cfg, RandomWeights(cfg, 21))
			if d.CausalBlock() != causal {
				t.Fatalf("causal %v: CausalBlock() = %v", causal, d.CausalBlock())
			}
			width := len(cfg.TargetLayers) * cfg.Hidden
			ctx := randomFloats(9*width, 22)
			block := []int{7, 96, 96, 96, 96, 96}
			type slot struct {
				ids    []int32
				scores []float32
			}
			propose := func(rows int) []slot {
				c := d.NewCache(32)
				wk, err := d.Forward(c, ctx, 9, block[:rows])
				if err != nil {
					t.Fatal(err)
				}
				if c.Offset() != 9+rows {
					t.Fatalf("a block of %d rows moved the cache to %d, want %d", rows, c.Offset(), 9+rows)
				}
				var out []slot
				for s := 1; s < rows; s++ {
					ids, scores := wk.Candidates(s, 11*s, nil, nil)
					out = append(out, slot{ids, scores})
				}
				return out
			}
			full := propose(len(block))
			changed := false
			for n := 1; n < len(block); n++ {
				got := propose(n + 1)
				for s := range got {
					same := slices.Equal(got[s].ids, full[s].ids) && slices.Equal(got[s].scores, full[s].scores)
					if causal && !same {
						t.Fatalf("causal block of %d rows: slot %d proposes %v %v, the whole block %v %v", n+1, s+1, got[s].ids, got[s].scores, full[s].ids, full[s].scores)
					}
					changed = changed || !same
				}
			}
			if !causal && !changed {
				t.Fatal("bidirectional block: no truncation changed any slot, so the check above could not fail")
			}
		}
	})
}
