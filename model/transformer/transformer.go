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
	"slices"

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
	// kvs, one and single are a forward's per-sequence views, reused so that a forward
	// allocates nothing once they have grown to the widest batch.
	kvs    []nn.KV
	one    [1]model.BatchItem
	single [1]model.Result
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
	m.ws.StageKV(cfg.KVHeads * cfg.HeadDim)
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
//
// The cache stores bf16 keys and values when nn.CacheBF16For the model's dtype says so and the
// shape reads rows (nn.Attention.CacheBF16), f32 otherwise; both kinds are accepted by Forward.
func (m *Model) NewCache(capacity int) cache.Cache {
	capacity = min(max(capacity, 1), m.cfg.MaxSeq)
	m.grow(capacity)
	a := m.heads.Attention
	a.BF16Cache = nn.CacheBF16For(m.cfg.DType)
	return a.NewKV(m.cfg.Layers, capacity)
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
// before touching the cache, so on error the cache is unchanged. It is ForwardBatch of one item.
func (m *Model) Forward(c cache.Cache, r model.Request) (model.Result, error) {
	m.one[0] = model.BatchItem{Cache: c, Request: r}
	res, err := m.forwardBatch(m.one[:], false)
	m.one[0] = model.BatchItem{}
	if err != nil {
		return model.Result{}, err
	}
	return res[0], nil
}

// ForwardBatch implements model.BatchTarget: the rows of every item, stacked in item order, run
// through the layers in chunks of nn.ChunkRows rows, each chunk's products over all its rows and
// its attention per sequence (nn.Seq). A row's bits are those of the same row in a Forward of its
// item alone (TestForwardBatchBitwise).
func (m *Model) ForwardBatch(items []model.BatchItem) ([]model.Result, error) {
	return m.forwardBatch(items, true)
}

func (m *Model) forwardBatch(items []model.BatchItem, batch bool) ([]model.Result, error) {
	cfg := &m.cfg
	m.kvs = m.kvs[:0]
	total, maxPos := 0, 0
	for i := range items {
		it := &items[i]
		kv, err := m.checkCache(it.Cache, len(it.Tokens))
		if err == nil {
			for j := 0; j < i; j++ {
				if m.kvs[j].KV == kv.KV {
					err = fmt.Errorf("the cache of sequence %d is also sequence %d's", i, j)
				}
			}
		}
		if err != nil {
			if batch {
				err = fmt.Errorf("sequence %d: %w", i, err)
			}
			return nil, fmt.Errorf("transformer: %w", err)
		}
		m.kvs = append(m.kvs, kv)
		total += len(it.Tokens)
		maxPos = max(maxPos, kv.Offset()+len(it.Tokens))
	}
	var res []model.Result
	var err error
	if batch {
		res, err = m.ws.PrepareBatch(items, cfg.Vocab, cfg.Hidden)
	} else {
		// One item: Prepare's own messages, and the same LogitRow PrepareBatch would set.
		var r model.Result
		r, err = m.ws.Prepare(items[0].Request, cfg.Vocab, cfg.Hidden)
		if err == nil {
			m.single[0] = r
			res = m.single[:]
			m.ws.LogitRow = singleLogitRows(m.ws.LogitRow, items[0].Request)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("transformer: %w", err)
	}
	m.grow(maxPos)
	f := &m.fwd
	f.logits, f.taps = m.ws.Stacked()
	f.hidden = res[0].Hidden // only a forward alone returns hidden states (PrepareBatch refuses them)
	// Chunks of up to nn.ChunkRows stacked rows; item it and its row ir are where the next chunk
	// starts.
	it, ir := 0, 0
	for start := 0; start < total; {
		rows := min(nn.ChunkRows, total-start)
		f.seqs = f.seqs[:0]
		for lo := 0; lo < rows; {
			n := min(len(items[it].Tokens)-ir, rows-lo)
			f.seqs = append(f.seqs, nn.Seq{KV: m.kvs[it], Lo: lo, Hi: lo + n, Pos: m.kvs[it].Offset() + ir})
			f.tokens = append(f.tokens[:lo], items[it].Tokens[ir:ir+n]...)
			lo += n
			if ir += n; ir == len(items[it].Tokens) {
				it, ir = it+1, 0
			}
		}
		f.row0 = start
		f.logitRow = m.ws.LogitRow[start : start+rows]
		m.phases.Run(m.partScores, rows)
		start += rows
	}
	clear(f.seqs[:cap(f.seqs)]) // drop the caches' views: the model must not keep them alive
	f.taps, f.logits, f.hidden = nil, nil, nil
	for i := range m.kvs {
		if err := m.kvs[i].Advance(len(items[i].Tokens)); err != nil {
			return nil, fmt.Errorf("transformer: %w", err) // unreachable: Room was checked
		}
		m.kvs[i] = nn.KV{}
	}
	return res, nil
}

// checkCache returns the view of c that a forward of n rows on it writes, or why it cannot.
func (m *Model) checkCache(c cache.Cache, n int) (nn.KV, error) {
	cfg := &m.cfg
	kv, ok := nn.AsKV(c)
	if !ok {
		return nn.KV{}, fmt.Errorf("forward needs a cache made by NewCache or a *cache.KV, got %T", c)
	}
	if kv.Layers != cfg.Layers || kv.Width != cfg.KVHeads*cfg.HeadDim {
		return nn.KV{}, fmt.Errorf("cache of %d layers x width %d does not fit a model of %d layers x width %d", kv.Layers, kv.Width, cfg.Layers, cfg.KVHeads*cfg.HeadDim)
	}
	if !kv.Room(n) {
		return nn.KV{}, fmt.Errorf("%d rows at offset %d exceed cache capacity %d", n, kv.Offset(), kv.Capacity)
	}
	return kv, nil
}

// singleLogitRows is Outputs.LogitRow for a forward of r alone.
func singleLogitRows(dst []int, r model.Request) []int {
	n := len(r.Tokens)
	dst = slices.Grow(dst[:0], n)[:n]
	for i := range dst {
		dst[i] = -1
		switch {
		case r.Logits == model.LogitsAll:
			dst[i] = i
		case r.Logits == model.LogitsLast && i == n-1:
			dst[i] = 0
		}
	}
	return dst
}

// forward is one chunk of a forward, as nn.Phases runs it: up to nn.ChunkRows stacked rows (of
// one sequence or several, seqs), split into parts (nn.PartScratch.Parts) that run concurrently
// on the kernel's pool, each taking its rows through a layer, with one join per layer (see
// nn.Stack). Chunk row i is stacked row row0+i: tapped layers' outputs go to taps at that row,
// and its logits, when logitRow[i] >= 0, to row logitRow[i] of logits. A split changes no bit
// (TestSplitForwardBitwise), nor does the batching (TestForwardBatchBitwise).
type forward struct {
	m        *Model
	seqs     []nn.Seq
	tokens   []int
	row0     int
	taps     [][]float32
	logits   []float32
	logitRow []int
	hidden   []float32 // Request.Hidden of a forward alone: every row's normed state
}

func (f *forward) Embed(p *nn.Part) {
	h := f.m.cfg.Hidden
	for i, t := range f.tokens[p.Lo:p.Hi] {
		f.m.embedding.Row(p.X[i*h:(i+1)*h], t)
	}
}

func (f *forward) Open(p *nn.Part, li int) {
	l := &f.m.layers[li]
	p.ProjectAttentionSeqs(&f.m.heads, f.seqs, li, &l.AttnWeights, l.AttnNorm, f.m.cfg.RMSEps)
}

// Join makes the head-major copies of layer li's rows, between the parts that computed the keys
// and those that read them (see nn.KV.Publish).
func (f *forward) Join(li int) { nn.PublishSeqs(f.seqs, li) }

func (f *forward) Close(p *nn.Part, li int) {
	m := f.m
	cfg := &m.cfg
	l := &m.layers[li]
	p.AttentionResidualSeqs(&m.heads, f.seqs, li, l.O, nn.Causal)
	p.MLPResidual(p.X, p.Rows, cfg.Hidden, l.MLPNorm, cfg.RMSEps, l.Gate, l.Up, l.Down)
	if ti := m.ws.TapIdx[li]; ti >= 0 {
		copy(f.taps[ti][(f.row0+p.Lo)*cfg.Hidden:], p.X)
	}
}

// Head runs the final norm and the output head over each run of the part's rows whose logits go
// to consecutive rows (all of a verification, the last row of each decoding sequence), one
// product per run.
func (f *forward) Head(p *nn.Part) {
	m := f.m
	h, vocab := m.cfg.Hidden, m.cfg.Vocab
	if f.hidden != nil {
		// The same norm the head's rows get below, over every row: the bits of a row's
		// embedding state are those its logits are computed from.
		nn.RMSNormRows(f.hidden[(f.row0+p.Lo)*h:], p.X, m.norm, p.Rows, h, m.cfg.RMSEps)
	}
	for a := p.Lo; a < p.Hi; {
		if f.logitRow[a] < 0 {
			a++
			continue
		}
		b := a + 1
		for b < p.Hi && f.logitRow[b] == f.logitRow[a]+b-a {
			b++
		}
		xn := p.XN[(a-p.Lo)*h : (b-p.Lo)*h]
		nn.RMSNormRows(xn, p.X[(a-p.Lo)*h:(b-p.Lo)*h], m.norm, b-a, h, m.cfg.RMSEps)
		m.head.MatMul(f.logits[f.logitRow[a]*vocab:], xn, b-a)
		a = b
	}
}
