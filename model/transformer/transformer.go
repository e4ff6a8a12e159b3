// Package transformer owns the dense decoder-only target: one implementation of the pre-norm
// Llama block that covers Qwen3 (per-head q/k RMSNorm before rotate-half RoPE), Hugging Face
// Llama (optionally llama3 rope scaling) and llama2.c checkpoints (adjacent-pair RoPE). It loads
// weights from Hugging Face folders and llama2.c files, or builds random ones of a real shape.
//
// It never knows about speculation or sampling: a forward processes the rows it is given, writes
// their keys and values into the cache, and returns the logits and taps asked for. The decode hot
// path never allocates, never starts goroutines and never looks anything up in a map; every
// buffer lives in the Model's workspace, sized at construction or grown once by a larger request.
package transformer

import (
	"fmt"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// Layer holds one decoder block's weights. QNorm and KNorm are nil for Llama.
type Layer struct {
	AttnNorm, MLPNorm []float32
	nn.AttnWeights    // QNorm and KNorm: per-head RMSNorm weights [HeadDim] (Qwen3)
	Gate, Up, Down    *kernel.Matrix
}

// Model is a loaded decoder. It is not safe for concurrent Forward calls: the workspace is
// shared by every forward on it.
type Model struct {
	cfg       model.Config
	embedding *kernel.Matrix // [Vocab][Hidden]
	layers    []Layer
	norm      []float32
	head      *kernel.Matrix // [Vocab][Hidden]; the embedding when tied
	heads     nn.Heads       // its Rope grows with the caches (see grow)
	ws        workspace
	// partScores is each part's attention scratch (see forward); its length is the most parts
	// a chunk is split into.
	partScores nn.PartScratch
	fwd        forward
	phases     *nn.Phases // runs fwd, bound once so that a forward allocates nothing
}

// workspace holds every buffer a forward writes: the per-chunk scratch of nn.Workspace, plus
// the logits and taps of model.Outputs.
type workspace struct {
	*nn.Workspace
	model.Outputs
}

// spec is what differs between the families this package covers.
type spec struct {
	style nn.RoPEStyle
	inv   []float64 // rotary inverse frequencies, len HeadDim/2
}

// newModel checks the shape and sizes the workspace. The weights are already set.
func newModel(cfg model.Config, sp spec, emb, head *kernel.Matrix, layers []Layer, norm []float32) (*Model, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if len(sp.inv) != cfg.HeadDim/2 {
		return nil, fmt.Errorf("transformer: %d rotary frequencies for head dim %d", len(sp.inv), cfg.HeadDim)
	}
	m := &Model{cfg: cfg, embedding: emb, layers: layers, norm: norm, head: head}
	// Tables for a modest context up front; NewCache grows them to the cache's capacity.
	m.heads = nn.Heads{Attention: nn.NewAttention(cfg.Heads, cfg.KVHeads, cfg.HeadDim), Eps: cfg.RMSEps,
		Rope: nn.NewRoPE(sp.style, cfg.HeadDim, sp.inv, min(cfg.MaxSeq, 256))}
	m.ws = workspace{
		Workspace: nn.NewWorkspace(nn.ChunkRows, cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.Intermediate),
		Outputs:   model.NewOutputs(cfg.Vocab, cfg.Layers),
	}
	m.partScores = nn.NewPartScratch(m.heads.Rope.MaxPos())
	m.fwd.m = m
	m.phases = nn.NewPhases(&m.fwd, m.ws.Workspace, cfg.Layers)
	return m, nil
}

func checkConfig(c model.Config) error {
	switch {
	case c.Layers <= 0 || c.Hidden <= 0 || c.Intermediate <= 0 || c.Vocab <= 0:
		return fmt.Errorf("transformer: config needs positive layers, hidden, intermediate and vocab (have %d, %d, %d, %d)", c.Layers, c.Hidden, c.Intermediate, c.Vocab)
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("transformer: %d attention heads is not a positive multiple of %d kv heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("transformer: head dim %d must be positive and even", c.HeadDim)
	case c.MaxSeq <= 0:
		return fmt.Errorf("transformer: max sequence length %d must be positive", c.MaxSeq)
	}
	return nil
}

// Config returns the model's shape.
func (m *Model) Config() model.Config { return m.cfg }

// Layers exposes the decoder blocks (read-only) for drafts and tests.
func (m *Model) Layers() []Layer { return m.layers }

// NewCache allocates keys and values for capacity positions (at most MaxSeq) and grows the
// rotary tables and score buffer to match, so forwards on it never allocate. Heads of at most 16
// elements, and those the fused attention path takes (a multiple of 8 up to nn.FusedMaxHead), get
// head-major key copies for faster attention (nn.Attention.NewKV); the cache is then not a
// *cache.KV itself (it embeds one). Forward also accepts a plain *cache.KV of the right shape,
// on which attention runs over rows (same values to rounding, other bits).
func (m *Model) NewCache(capacity int) cache.Cache {
	capacity = min(max(capacity, 1), m.cfg.MaxSeq)
	m.grow(capacity)
	return m.heads.NewKV(m.cfg.Layers, capacity)
}

func (m *Model) grow(positions int) {
	m.heads.Rope.Grow(positions)
	m.partScores.Grow(positions)
}

// Embed writes token's raw embedding row into dst[:Hidden]; token must be in [0, Vocab).
func (m *Model) Embed(dst []float32, token int) { m.embedding.Row(dst[:m.cfg.Hidden], token) }

// Head is the raw output head (the embedding when tied).
func (m *Model) Head() *kernel.Matrix { return m.head }

// FinalNorm is the weight of the norm before the head, for drafts that share it.
func (m *Model) FinalNorm() []float32 { return m.norm }

// WeightBytes counts the weights one decode step streams: every layer's products and the head.
// The embedding lookup reads one row, so an untied table does not count.
func (m *Model) WeightBytes() int64 {
	var b int64
	for i := range m.layers {
		l := &m.layers[i]
		for _, w := range []*kernel.Matrix{l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down} {
			b += w.Bytes()
		}
	}
	return b + m.head.Bytes()
}

// Forward runs r.Tokens at positions c.Offset()... and commits them to c. It checks everything
// before touching the cache, so on error the cache is unchanged.
func (m *Model) Forward(c cache.Cache, r model.Request) (model.Result, error) {
	kv, ok := nn.AsKV(c)
	if !ok {
		return model.Result{}, fmt.Errorf("transformer: forward needs a cache made by NewCache or a *cache.KV, got %T", c)
	}
	cfg := &m.cfg
	n := len(r.Tokens)
	pos := kv.Offset()
	if kv.Layers != cfg.Layers || kv.Width != cfg.KVHeads*cfg.HeadDim {
		return model.Result{}, fmt.Errorf("transformer: cache of %d layers x width %d does not fit a model of %d layers x width %d", kv.Layers, kv.Width, cfg.Layers, cfg.KVHeads*cfg.HeadDim)
	}
	if !kv.Room(n) {
		return model.Result{}, fmt.Errorf("transformer: %d rows at offset %d exceed cache capacity %d", n, pos, kv.Capacity)
	}
	res, err := m.ws.Prepare(r, cfg.Vocab, cfg.Hidden)
	if err != nil {
		return model.Result{}, fmt.Errorf("transformer: %w", err)
	}
	m.grow(pos + n)
	for start := 0; start < n; start += nn.ChunkRows {
		rows := min(nn.ChunkRows, n-start)
		lo, hi := 0, 0 // chunk rows whose logits are asked for
		switch {
		case r.Logits == model.LogitsAll:
			lo, hi = 0, rows
		case r.Logits == model.LogitsLast && start+rows == n:
			lo, hi = rows-1, rows
		}
		var dst []float32
		switch {
		case r.Logits == model.LogitsAll:
			dst = res.Logits[start*cfg.Vocab:]
		case hi > lo:
			dst = res.Logits
		}
		f := &m.fwd
		f.kv, f.tokens, f.pos, f.taps, f.tapRow = kv, r.Tokens[start:start+rows], pos+start, res.Taps, start
		f.logits, f.logitLo, f.logitHi, f.hidden = dst, lo, hi, res.Hidden
		m.phases.Run(m.partScores, rows)
		f.kv, f.tokens, f.taps, f.logits, f.hidden = nn.KV{}, nil, nil, nil, nil
	}
	if err := kv.Advance(n); err != nil {
		return model.Result{}, fmt.Errorf("transformer: %w", err) // unreachable: Room was checked
	}
	return res, nil
}

// forward is one chunk of a Forward, as nn.Phases runs it: up to nn.ChunkRows rows at positions
// [pos, pos+len(tokens)), split into parts (nn.PartScratch.Parts) that run concurrently on the
// kernel's pool, each taking its rows through a layer, with one join per layer (see nn.Stack).
// Tapped layers' outputs go to taps at row tapRow; chunk rows [logitLo, logitHi) write their
// logits to logits[(i-logitLo)*Vocab:]. A split changes no bit (TestSplitForwardBitwise).
type forward struct {
	m                *Model
	kv               nn.KV
	tokens           []int
	pos              int
	taps             [][]float32
	tapRow           int
	logits           []float32
	logitLo, logitHi int
	hidden           []float32 // Request.Hidden: every row's normed state, from row tapRow
}

func (f *forward) Embed(p *nn.Part) {
	h := f.m.cfg.Hidden
	for i, t := range f.tokens[p.Lo:p.Hi] {
		f.m.embedding.Row(p.X[i*h:(i+1)*h], t)
	}
}

func (f *forward) Open(p *nn.Part, li int) {
	l := &f.m.layers[li]
	p.ProjectAttention(&f.m.heads, f.kv, li, &l.AttnWeights, l.AttnNorm, f.m.cfg.RMSEps, f.pos)
}

// Join makes the head-major copies of layer li's rows, between the parts that computed the keys
// and those that read them (see nn.KV.Publish).
func (f *forward) Join(li int) { f.kv.Publish(li, f.pos, len(f.tokens)) }

func (f *forward) Close(p *nn.Part, li int) {
	m := f.m
	cfg := &m.cfg
	l := &m.layers[li]
	p.AttentionResidual(&m.heads, f.kv, li, l.O, len(f.tokens), f.pos, nn.Causal)
	p.MLPResidual(p.X, p.Rows, cfg.Hidden, l.MLPNorm, cfg.RMSEps, l.Gate, l.Up, l.Down)
	if ti := m.ws.TapIdx[li]; ti >= 0 {
		copy(f.taps[ti][(f.tapRow+p.Lo)*cfg.Hidden:], p.X)
	}
}

func (f *forward) Head(p *nn.Part) {
	m := f.m
	h := m.cfg.Hidden
	if f.hidden != nil {
		// The same norm the head's rows get below, over every row: the bits of a row's
		// embedding state are those its logits are computed from.
		nn.RMSNormRows(f.hidden[(f.tapRow+p.Lo)*h:], p.X, m.norm, p.Rows, h, m.cfg.RMSEps)
	}
	a, b := max(p.Lo, f.logitLo), min(p.Hi, f.logitHi)
	if a >= b {
		return
	}
	xn := p.XN[(a-p.Lo)*h : (b-p.Lo)*h]
	nn.RMSNormRows(xn, p.X[(a-p.Lo)*h:(b-p.Lo)*h], m.norm, b-a, h, m.cfg.RMSEps)
	m.head.MatMul(f.logits[(a-f.logitLo)*m.cfg.Vocab:], xn, b-a)
}
