package dflash

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/format/hf"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
	"github.com/dflash/dflash/model/transformer"
)

// Compute picks the element type weight matrices are kept in; it is the target's option so one
// flag serves both.
type Compute = transformer.Compute

const (
	KeepDType = transformer.KeepDType // F32 and BF16 as stored, F16 widened to F32
	ForceF32  = transformer.ForceF32
	ForceBF16 = transformer.ForceBF16
)

// Options tune loading.
type Options struct {
	DType Compute
}

type layer struct {
	inNorm, postNorm []float32 // [Hidden]
	attn             nn.AttnWeights
	gate, up, down   *kernel.Matrix
	vis              nn.Visibility
}

// Draft is a loaded DFlash draft bound to its target. It implements model.BlockDraft. It is not
// safe for concurrent Forward calls (one workspace), nor for NewCache during a Forward (NewCache
// may grow the rotary tables).
type Draft struct {
	cfg        Config
	target     model.Target // its Embed is the draft's input embedding
	head       *kernel.Matrix
	fc         *kernel.Matrix // [Hidden][taps*Hidden]
	hiddenNorm []float32
	norm       []float32
	layers     []layer
	heads      nn.Heads // its Rope grows with the caches (see grow)
	dtype      kernel.DType
	ws         workspace
	// partScores is each block part's attention scratch; its length is the most parts a block
	// is split into.
	partScores nn.PartScratch
	fwd        blockForward
	phases     *nn.Phases // runs fwd, bound once so that a forward allocates nothing
}

// workspace holds every buffer a forward writes, all sized at construction.
type workspace struct {
	*nn.Workspace           // B rows: the block's
	feat          []float32 // nn.ChunkRows x Hidden: context features hidden_norm(fc(taps))
	logits        []float32 // B x Vocab
}

var _ model.BlockDraft = (*Draft)(nil)

// Config returns the draft's config (its TargetLayers are filled even when the file had none).
func (d *Draft) Config() Config {
	c := d.cfg
	c.TargetLayers = slices.Clone(c.TargetLayers)
	c.LayerTypes = slices.Clone(c.LayerTypes)
	return c
}

// DType is the element type of the draft's own matrices.
func (d *Draft) DType() kernel.DType { return d.dtype }

func (d *Draft) BlockSize() int { return d.cfg.BlockSize }

func (d *Draft) MaskID() int { return d.cfg.MaskID }

// TargetLayers returns the tapped target layers; the slice is the draft's and must not be
// modified.
func (d *Draft) TargetLayers() []int { return d.cfg.TargetLayers }

// WeightBytes is the number of weight bytes one block forward streams: the draft's matrices
// and the target's head (fc only streams when context rows are written).
func (d *Draft) WeightBytes() int64 {
	b := d.head.Bytes()
	for i := range d.layers {
		l := &d.layers[i]
		for _, m := range []*kernel.Matrix{l.attn.Q, l.attn.K, l.attn.V, l.attn.O, l.gate, l.up, l.down} {
			b += m.Bytes()
		}
	}
	return b
}

// NewCache allocates keys and values for capacity rows (context plus one block), with the
// head-major copies attention reads for the target's shapes (nn.Attention.NewKV), and grows the
// rotary tables and score buffers so that forwards on it never allocate. Forward also accepts a
// plain *cache.KV, on which attention runs over rows (same values to rounding, other bits).
func (d *Draft) NewCache(capacity int) cache.Cache {
	capacity = max(capacity, 1)
	d.grow(capacity)
	return d.heads.NewKV(d.cfg.Layers, capacity)
}

func (d *Draft) grow(positions int) {
	d.heads.Rope.Grow(positions)
	d.partScores.Grow(positions)
}

// Load reads a draft folder in z-lab's layout, or a draft GGUF converted from one (see GGUFArch),
// and checks it against target: every tensor missing or misshaped is reported at once, and any
// way the draft does not fit the target is an error naming the config field, its value and what
// it should be.
func Load(path string, target model.Target, opt Options) (*Draft, error) {
	hc, err := LoadConfig(path)
	if err != nil {
		return nil, fmt.Errorf("load draft %s: %w", path, err)
	}
	tc := target.Config()
	cfg, err := fromHF(hc, tc.Layers)
	if err != nil {
		return nil, fmt.Errorf("load draft %s: config.json: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("load draft %s: config.json: %w", path, err)
	}
	if err := cfg.CheckTarget(tc); err != nil {
		return nil, fmt.Errorf("load draft %s: config.json: %w", path, err)
	}
	w, err := OpenWeights(path, opt.DType)
	if err != nil {
		return nil, fmt.Errorf("load draft %s: %w", path, err)
	}
	d, berr := build(cfg, target, w)
	// Matrices are repacked and vectors copied, so nothing aliases the mapping any more.
	if err := w.Close(); err != nil {
		w.fail(err)
	}
	if err := w.Err(); err != nil {
		return nil, fmt.Errorf("load draft %s: %w", path, err)
	}
	if berr != nil {
		return nil, fmt.Errorf("load draft %s: %w", path, berr)
	}
	d.dtype = w.DType()
	return d, nil
}

// source supplies weights by name; it records its own errors (a nil result means one was
// recorded), so one load reports every bad tensor.
type source interface {
	matrix(name string, n, k int) *kernel.Matrix
	vector(name string, n int) []float32
	failed() bool
}

func (w *Weights) failed() bool                                { return len(w.errs) > 0 }
func (w *Weights) vector(name string, n int) []float32         { return w.Vector(name, n) }
func (w *Weights) matrix(name string, n, k int) *kernel.Matrix { return w.Matrix(name, n, k) }

// build assembles a draft from src; cfg has been validated and checked against target.
func build(cfg Config, target model.Target, src source) (*Draft, error) {
	tc := target.Config()
	head := target.Head()
	if head == nil || head.N != tc.Vocab || head.K != tc.Hidden {
		return nil, fmt.Errorf("target head is not [%d][%d]", tc.Vocab, tc.Hidden)
	}
	h, qw := cfg.Hidden, cfg.Heads*cfg.HeadDim
	kvw := cfg.KVHeads * cfg.HeadDim
	d := &Draft{cfg: cfg, target: target, head: head}
	d.cfg.TargetLayers = slices.Clone(cfg.TargetLayers)
	d.cfg.LayerTypes = slices.Clone(cfg.LayerTypes)
	d.fc = src.matrix("fc.weight", h, len(cfg.TargetLayers)*h)
	d.hiddenNorm = src.vector("hidden_norm.weight", h)
	d.layers = make([]layer, cfg.Layers)
	for i := range d.layers {
		p := fmt.Sprintf("layers.%d.", i)
		l := &d.layers[i]
		l.inNorm = src.vector(p+"input_layernorm.weight", h)
		l.attn.Q = src.matrix(p+"self_attn.q_proj.weight", qw, h)
		l.attn.K = src.matrix(p+"self_attn.k_proj.weight", kvw, h)
		l.attn.V = src.matrix(p+"self_attn.v_proj.weight", kvw, h)
		l.attn.O = src.matrix(p+"self_attn.o_proj.weight", h, qw)
		l.attn.QNorm = src.vector(p+"self_attn.q_norm.weight", cfg.HeadDim)
		l.attn.KNorm = src.vector(p+"self_attn.k_norm.weight", cfg.HeadDim)
		l.postNorm = src.vector(p+"post_attention_layernorm.weight", h)
		l.gate = src.matrix(p+"mlp.gate_proj.weight", cfg.Intermediate, h)
		l.up = src.matrix(p+"mlp.up_proj.weight", cfg.Intermediate, h)
		l.down = src.matrix(p+"mlp.down_proj.weight", h, cfg.Intermediate)
		l.vis = d.cfg.Visibility(i)
	}
	d.norm = src.vector("norm.weight", h)
	if src.failed() {
		return nil, errors.New("weights incomplete")
	}
	inv := (&hf.Config{RopeTheta: cfg.RopeTheta, RopeScaling: cfg.RopeScaling}).RopeInvFreq(cfg.HeadDim)
	d.heads = nn.Heads{Attention: nn.NewAttention(cfg.Heads, cfg.KVHeads, cfg.HeadDim), Eps: float32(cfg.RMSEps),
		Rope: nn.NewRoPE(nn.RotateHalf, cfg.HeadDim, inv, 256)}
	b := cfg.BlockSize
	d.ws = workspace{
		Workspace: nn.NewWorkspace(b, h, qw, cfg.Intermediate),
		feat:      make([]float32, nn.ChunkRows*h),
		logits:    make([]float32, b*cfg.Vocab),
	}
	d.partScores = nn.NewPartScratch(256)
	d.fwd.d = d
	d.phases = nn.NewPhases(&d.fwd, d.ws.Workspace, cfg.Layers)
	return d, nil
}

// Forward writes ctxRows context rows, then the block rows, at slots c.Offset()... and advances c
// over both (see model.BlockDraft). Context rows only get keys and values: they are never
// queries, and every layer derives its context keys and values from the same features
// hidden_norm(fc(taps)), not from a propagated hidden state. logits has one row per block row,
// row 0 (the anchor's) included; it is nil for a context-only write. Everything is checked
// before the cache is touched, so on error c is unchanged.
func (d *Draft) Forward(c cache.Cache, ctx []float32, ctxRows int, block []int) ([]float32, error) {
	kv, ok := nn.AsKV(c)
	if !ok {
		return nil, fmt.Errorf("dflash: forward needs a cache from NewCache or a *cache.KV, got %T", c)
	}
	cfg := &d.cfg
	kvw := cfg.KVHeads * cfg.HeadDim
	if kv.Layers != cfg.Layers || kv.Width != kvw {
		return nil, fmt.Errorf("dflash: cache of %d layers x width %d does not fit a draft of %d layers x width %d", kv.Layers, kv.Width, cfg.Layers, kvw)
	}
	tapW := len(cfg.TargetLayers) * cfg.Hidden
	if ctxRows < 0 || len(ctx) < ctxRows*tapW {
		return nil, fmt.Errorf("dflash: %d context rows need %d floats (%d taps x hidden %d each), have %d", ctxRows, ctxRows*tapW, len(cfg.TargetLayers), cfg.Hidden, len(ctx))
	}
	n := len(block)
	if n > cfg.BlockSize {
		return nil, fmt.Errorf("dflash: block of %d rows exceeds block_size %d", n, cfg.BlockSize)
	}
	for _, t := range block {
		if t < 0 || t >= cfg.Vocab {
			return nil, fmt.Errorf("dflash: block token %d outside vocabulary of %d", t, cfg.Vocab)
		}
	}
	if !kv.Room(ctxRows + n) {
		return nil, fmt.Errorf("dflash: %d context and %d block rows at offset %d exceed cache capacity %d", ctxRows, n, kv.Offset(), kv.Capacity)
	}
	// A cache from NewCache is covered already; another one costs one allocation here.
	d.grow(kv.Capacity)
	pos := kv.Offset()
	for s := 0; s < ctxRows; s += nn.ChunkRows {
		r := min(nn.ChunkRows, ctxRows-s)
		feat := d.ws.feat[:r*cfg.Hidden]
		d.fc.MatMul(feat, ctx[s*tapW:(s+r)*tapW], r)
		nn.RMSNormRows(feat, feat, d.hiddenNorm, r, cfg.Hidden, float32(cfg.RMSEps))
		for li := range d.layers {
			d.heads.Project(nil, kv, li, &d.layers[li].attn, feat, r, pos+s)
			kv.Publish(li, pos+s, r)
		}
	}
	var logits []float32
	if n > 0 {
		f := &d.fwd
		f.kv, f.block, f.pos = kv, block, pos+ctxRows
		d.phases.Run(d.partScores, n)
		f.kv, f.block = nn.KV{}, nil
		logits = d.ws.logits[:n*cfg.Vocab]
	}
	if err := kv.Advance(ctxRows + n); err != nil {
		return nil, fmt.Errorf("dflash: %w", err) // unreachable: Room was checked
	}
	return logits, nil
}

// blockForward is the block rows of a Forward at positions [pos, pos+len(block)), as nn.Phases
// runs them: with enough rows and an idle core the rows are split into parts that run
// concurrently, each taking its rows through a layer. Block rows attend to each other in both
// directions, so the parts join once per layer, after every row's keys are written (nn.Stack).
// A row's bits do not depend on the part it falls in.
type blockForward struct {
	d     *Draft
	kv    nn.KV
	block []int
	pos   int
}

func (f *blockForward) Embed(p *nn.Part) {
	d := f.d
	h := d.cfg.Hidden
	x := p.X
	for i, t := range f.block[p.Lo:p.Hi] {
		d.target.Embed(x[i*h:(i+1)*h], t)
	}
	if s := float32(d.cfg.EmbedScale); s != 0 && s != 1 {
		for i := range x {
			x[i] *= s
		}
	}
}

func (f *blockForward) Open(p *nn.Part, li int) {
	d := f.d
	l := &d.layers[li]
	// Every block row's key must be in the cache before any block row attends: with
	// bidirectional attention row 0 sees row n-1. The join after this phase guarantees it.
	p.ProjectAttention(&d.heads, f.kv, li, &l.attn, l.inNorm, float32(d.cfg.RMSEps), f.pos)
}

// Join copies layer li's keys of all rows head-major, between the parts that wrote them and
// those that read them, so that no two cores write one cache line of a copy.
func (f *blockForward) Join(li int) { f.kv.Publish(li, f.pos, len(f.block)) }

func (f *blockForward) Close(p *nn.Part, li int) {
	d := f.d
	cfg := &d.cfg
	l := &d.layers[li]
	p.AttentionResidual(&d.heads, f.kv, li, l.attn.O, len(f.block), f.pos, l.vis)
	p.MLPResidual(p.X, p.Rows, cfg.Hidden, l.postNorm, float32(cfg.RMSEps), l.gate, l.up, l.down)
}

func (f *blockForward) Head(p *nn.Part) {
	d := f.d
	cfg := &d.cfg
	nn.RMSNormRows(p.XN, p.X, d.norm, p.Rows, cfg.Hidden, float32(cfg.RMSEps))
	logits := d.ws.logits[p.Lo*cfg.Vocab : p.Hi*cfg.Vocab]
	d.head.MatMul(logits, p.XN, p.Rows)
	if s := float32(cfg.LogitScale); s != 0 && s != 1 {
		for i := range logits {
			logits[i] *= s
		}
	}
	if c := cfg.LogitSoftcap; c > 0 {
		for i, val := range logits {
			logits[i] = float32(c * math.Tanh(float64(val)/c))
		}
	}
}
