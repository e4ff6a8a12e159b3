// Package qwen35 owns the Qwen3.5 dense text target: a hybrid decoder whose layers are Gated
// DeltaNet (linear attention with a recurrent state and a causal conv) or gated full attention
// (q/k norms, partial rotary, a sigmoid output gate), with zero-centred RMSNorms (weight 1+w)
// everywhere but the DeltaNet output norm. It loads Hugging Face folders in both published
// layouts, or builds random weights of a real shape, and runs on nn's row-forward engine
// (nn.Phases over a Stack) like model/transformer.
//
// It knows nothing of speculation. Its cache (cache.Hybrid) cannot rewind a recurrent state:
// a verify forward records the state after each of its rows when the cache has snapshots enabled,
// and the runner restores the row it keeps (cache.RowSnapshots). The recurrence runs row by row,
// every row alone, so a row's result never depends on how many rows share its forward: decoding
// and verification agree bitwise, as on every target. Prefill runs the same row-by-row
// recurrence: the chunked form (QWEN35.md section 4) is not implemented, since per row the
// recurrence is about Hv*dk*dv*5 flops a layer against the millions of the weight products.
//
// It is a model.BatchTarget: a batched forward runs the weight products once over the stacked
// rows of several sequences and the conv, the recurrence and attention per sequence on its own
// cache, so a sequence's bits are those it gets alone.
package qwen35

import (
	"fmt"
	"math"
	"slices"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/nn"
)

// Layer is one decoder block. Exactly one of Attn and DeltaNet is set, as Type says. AttnNorm
// and MLPNorm hold 1+w of the checkpoint's zero-centred weights, so nn.RMSNorm applies them as is.
type Layer struct {
	Type              LayerType
	AttnNorm, MLPNorm []float32
	Attn              *AttnWeights
	DeltaNet          *DeltaNetWeights
	Gate, Up, Down    *kernel.Matrix
}

// AttnWeights is a gated full-attention layer. Q is [2*Heads*HeadDim][Hidden], per head h the
// rows [query_h ; gate_h]. QNorm and KNorm hold 1+w ([HeadDim], shared by all heads).
type AttnWeights struct {
	Q, K, V, O   *kernel.Matrix
	QNorm, KNorm []float32
}

// DeltaNetWeights is a Gated DeltaNet layer. QKV is [C][Hidden] with rows [q ; k ; v] head-major;
// Conv is the depthwise kernel [C][K] (w[c][K-1] weighs the current row); Norm is the plain
// weight of the output norm [ValueDim]; NegA is -exp(A_log) per value head, DtBias [ValueHeads].
type DeltaNetWeights struct {
	QKV, Z, B, A, Out *kernel.Matrix
	Conv              []float32
	DtBias, NegA      []float32
	Norm              []float32
	convT             []float32 // Conv transposed, [K][C] (newModel)
}

// Model is a loaded Qwen3.5 target. It is not safe for concurrent Forward calls: the workspace
// is shared by every forward on it.
type Model struct {
	cfg       Config
	embedding *kernel.Matrix
	head      *kernel.Matrix // the embedding when tied
	layers    []Layer
	norm      []float32 // 1+w
	// slot maps a layer to its index among the layers of its type: a full layer's layer of the
	// key/value cache, a linear layer's recurrent state in cache.Hybrid.
	slot  []int
	nFull int
	heads nn.Heads // Rope is nil: rotary is partial, see rope
	rope  *nn.RoPE // over RotaryDim, applied to the leading RotaryDim dims of each head

	ws         workspace
	partScores nn.PartScratch
	fwd        forward
	phases     *nn.Phases
	// items, one and single are a forward's per-sequence views, reused so that a forward
	// allocates nothing once they have grown to the widest batch.
	items  []item
	one    [1]model.BatchItem
	single [1]model.Result
}

// workspace is every buffer a forward writes beyond nn.Workspace's, ChunkRows rows each.
type workspace struct {
	*nn.Workspace
	qg   []float32 // rows x 2*Heads*HeadDim: q_proj output, queries and gates per head
	mix  []float32 // rows x C: in_proj_qkv output, the conv's input
	conv []float32 // rows x C: silu(conv), q and k l2-normed (q scaled by dk^-1/2)
	z    []float32 // rows x Hv*dv
	b, a []float32 // rows x Hv
	y    []float32 // rows x Hv*dv: the norm of the recurrence output, before its gate
	scr  [nn.MaxParts][]float32
	// ones is C floats of 1 and unit, per part, a C-float scratch: kernel.SiluMul(g, u) gives
	// u*silu(g) and consumes u, so the conv's plain silu multiplies by a fresh copy of ones.
	ones []float32
	unit [nn.MaxParts][]float32
	model.Outputs
}

// newModel checks the shape and sizes the workspace; the weights are set.
func newModel(cfg Config, emb, head *kernel.Matrix, layers []Layer, norm []float32) (*Model, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("qwen35: %w", err)
	}
	m := &Model{cfg: cfg, embedding: emb, head: head, layers: layers, norm: norm, slot: make([]int, cfg.Layers)}
	var nLin int
	for i, l := range layers {
		if d := l.DeltaNet; d != nil {
			c, kk := cfg.ConvChannels(), cfg.ConvKernel
			if len(d.Conv) != c*kk {
				return nil, fmt.Errorf("qwen35: layer %d: conv kernel of %d weights, want %d", i, len(d.Conv), c*kk)
			}
			d.convT = make([]float32, len(d.Conv))
			for ch := 0; ch < c; ch++ {
				for j := 0; j < kk; j++ {
					d.convT[j*c+ch] = d.Conv[ch*kk+j]
				}
			}
		}
		if l.Type == Full {
			m.slot[i] = m.nFull
			m.nFull++
		} else {
			m.slot[i] = nLin
			nLin++
		}
	}
	m.heads = nn.Heads{Attention: cfg.Attention(), Eps: cfg.RMSEps}
	m.rope = nn.NewRoPE(nn.RotateHalf, cfg.RotaryDim, nn.InvFreq(cfg.RotaryDim, cfg.RopeTheta), min(cfg.MaxSeq, 256))
	r, c, vw := nn.ChunkRows, cfg.ConvChannels(), cfg.ValueHeads*cfg.ValueDim
	m.ws = workspace{
		Workspace: nn.NewWorkspace(r, cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.Intermediate),
		qg:        make([]float32, r*2*cfg.Heads*cfg.HeadDim),
		mix:       make([]float32, r*c), conv: make([]float32, r*c),
		z: make([]float32, r*vw), y: make([]float32, r*vw),
		b: make([]float32, r*cfg.ValueHeads), a: make([]float32, r*cfg.ValueHeads),
		Outputs: model.NewOutputs(cfg.Vocab, cfg.Layers),
	}
	for i := range m.ws.scr {
		m.ws.scr[i] = make([]float32, 3*cfg.ValueDim)
		m.ws.unit[i] = make([]float32, c)
	}
	m.ws.StageKV(cfg.KVHeads * cfg.HeadDim)
	m.fwd.tokens = make([]int, 0, r)
	m.ws.ones = make([]float32, c)
	for i := range m.ws.ones {
		m.ws.ones[i] = 1
	}
	m.partScores = nn.NewPartScratch(m.rope.MaxPos())
	m.fwd.m = m
	m.fwd.linFn = m.fwd.linPart
	m.phases = nn.NewPhases(&m.fwd, m.ws.Workspace, cfg.Layers)
	return m, nil
}

// Config returns the target's shape (the full-attention layers' heads).
func (m *Model) Config() model.Config { return m.cfg.Config }

// HybridConfig returns the whole shape, layer types and Gated DeltaNet sizes included.
func (m *Model) HybridConfig() Config { return m.cfg }

// Layers exposes the decoder blocks (read-only) for tests.
func (m *Model) Layers() []Layer { return m.layers }

// NewCache allocates a *cache.Hybrid for capacity positions (at most MaxSeq): keys and values
// for the full-attention layers (nn.Attention.NewKV picks the layout) and, per linear layer, a
// conv window [(K-1)][C] (time-major, oldest first) and a state [Hv][dk][dv], all zero.
//
// The cache cannot rewind (cache.CanRewind is false): Rewind goes only to the current offset or
// to 0. For speculation, call EnableSnapshots(1 + most drafts a round) once per sequence; a
// Forward of at most that many rows then records the state after each row, and RestoreRow(k)
// afterwards leaves the cache exactly as decoding rows 0..k one by one would (bitwise).
// Config.CacheBytes is its memory.
func (m *Model) NewCache(capacity int) cache.Cache {
	capacity = m.cfg.CacheCapacity(capacity)
	m.grow(capacity)
	kv := m.cfg.Attention().NewKV(m.nFull, capacity) // bf16 keys and values as nn.CacheBF16For says
	return cache.NewHybrid(kv, m.cfg.RecurrentShapes())
}

func (m *Model) grow(positions int) {
	m.rope.Grow(positions)
	m.partScores.Grow(positions)
}

// Embed writes token's raw embedding row into dst[:Hidden].
func (m *Model) Embed(dst []float32, token int) { m.embedding.Row(dst[:m.cfg.Hidden], token) }

// Head is the raw output head (the embedding when tied).
func (m *Model) Head() *kernel.Matrix { return m.head }

// FinalNorm is the final norm's effective weight (1+w), for drafts that share it.
func (m *Model) FinalNorm() []float32 { return m.norm }

// WeightBytes counts the weights one decode step streams: every layer's products and the head.
func (m *Model) WeightBytes() int64 {
	var b int64
	for i := range m.layers {
		l := &m.layers[i]
		ws := []*kernel.Matrix{l.Gate, l.Up, l.Down}
		if l.Attn != nil {
			ws = append(ws, l.Attn.Q, l.Attn.K, l.Attn.V, l.Attn.O)
		} else {
			d := l.DeltaNet
			ws = append(ws, d.QKV, d.Z, d.B, d.A, d.Out)
		}
		for _, w := range ws {
			b += w.Bytes()
		}
	}
	return b + m.head.Bytes()
}

// Forward runs r.Tokens at positions c.Offset()... and commits them to c, which must be a
// *cache.Hybrid from NewCache. It checks everything before touching the cache, so on error the
// cache is unchanged. When c.Records(len(r.Tokens)), the state after each row but the last is
// recorded for RestoreRow. It is ForwardBatch of one item.
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
// through the layers in chunks of nn.ChunkRows rows. Each chunk's weight products (the
// projections, the output projections, the MLP and the head) run once over all its rows; the
// full-attention layers attend per sequence over its own key/value cache, and the Gated DeltaNet
// conv and recurrence run per sequence, row by row, on its own window and state, recording its
// own snapshots when its cache Records its rows. A product's row never depends on the other
// rows, and the per-sequence parts are the code a forward alone runs, so every item gets the
// bits, results and cache state alike, of Forward(item.Cache, item.Request) alone
// (TestForwardBatchBitwise).
func (m *Model) ForwardBatch(items []model.BatchItem) ([]model.Result, error) {
	return m.forwardBatch(items, true)
}

// item is one sequence of a forward: its cache, the offset its rows start at, and whether they
// are recorded for RestoreRow (Records, asked before the forward).
type item struct {
	h      *cache.Hybrid
	kv     nn.KV
	pos    int
	record bool
}

func (m *Model) forwardBatch(items []model.BatchItem, batch bool) ([]model.Result, error) {
	cfg := &m.cfg
	m.items = m.items[:0]
	total, maxPos := 0, 0
	for i := range items {
		it, err := m.checkCache(items[i].Cache, len(items[i].Tokens))
		if err == nil {
			for j := 0; j < i; j++ {
				if m.items[j].h == it.h || m.items[j].kv.KV == it.kv.KV {
					err = fmt.Errorf("the cache of sequence %d is also sequence %d's", i, j)
				}
			}
		}
		if err != nil {
			if batch {
				err = fmt.Errorf("sequence %d: %w", i, err)
			}
			clear(m.items)
			return nil, fmt.Errorf("qwen35: %w", err)
		}
		m.items = append(m.items, it)
		total += len(items[i].Tokens)
		maxPos = max(maxPos, it.pos+len(items[i].Tokens))
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
		clear(m.items)
		return nil, fmt.Errorf("qwen35: %w", err)
	}
	m.grow(maxPos)
	for i := range m.items {
		m.items[i].record = m.items[i].h.Records(len(items[i].Tokens))
	}
	f := &m.fwd
	f.logits, f.taps = m.ws.Stacked()
	f.hidden = res[0].Hidden // only a forward alone returns hidden states (PrepareBatch refuses them)
	// Chunks of up to nn.ChunkRows stacked rows; item it and its row ir are where the next chunk
	// starts. A sequence whose rows cross a chunk boundary carries its window and state across,
	// as a forward alone longer than a chunk does.
	it, ir := 0, 0
	for start := 0; start < total; {
		rows := min(nn.ChunkRows, total-start)
		f.seqs, f.attSeqs = f.seqs[:0], f.attSeqs[:0]
		for lo := 0; lo < rows; {
			st := &m.items[it]
			toks := items[it].Tokens
			n := min(len(toks)-ir, rows-lo)
			s := seq{h: st.h, kv: st.kv, lo: lo, hi: lo + n, pos: st.pos + ir, snapRow: -1}
			if st.record {
				s.snapRow, s.snapEnd = ir, len(toks)-1
			}
			f.seqs = append(f.seqs, s)
			f.attSeqs = append(f.attSeqs, nn.Seq{KV: s.kv, Lo: s.lo, Hi: s.hi, Pos: s.pos})
			f.tokens = append(f.tokens[:lo], toks[ir:ir+n]...)
			lo += n
			if ir += n; ir == len(toks) {
				it, ir = it+1, 0
			}
		}
		f.row0 = start
		f.logitRow = m.ws.LogitRow[start : start+rows]
		m.phases.Run(m.partScores, rows)
		start += rows
	}
	clear(f.seqs[:cap(f.seqs)]) // drop the caches' views: the model must not keep them alive
	clear(f.attSeqs[:cap(f.attSeqs)])
	f.taps, f.logits, f.hidden, f.logitRow = nil, nil, nil, nil
	for i := range m.items {
		st := &m.items[i]
		n := len(items[i].Tokens)
		if err := st.kv.Advance(n); err != nil {
			clear(m.items)
			return nil, fmt.Errorf("qwen35: %w", err) // unreachable: Room was checked
		}
		st.h.Committed(st.pos, n, st.record)
	}
	clear(m.items)
	return res, nil
}

// checkCache returns the sequence a forward of n rows on c runs, or why it cannot.
func (m *Model) checkCache(c cache.Cache, n int) (item, error) {
	cfg := &m.cfg
	h, ok := c.(*cache.Hybrid)
	if !ok {
		return item{}, fmt.Errorf("forward needs the *cache.Hybrid NewCache makes, got %T", c)
	}
	kv, ok := nn.AsKV(h.KV)
	if !ok {
		return item{}, fmt.Errorf("hybrid cache holds a %T, not a key/value cache from NewCache", h.KV)
	}
	if kv.Layers != m.nFull || kv.Width != cfg.KVHeads*cfg.HeadDim || len(h.Layers) != cfg.Layers-m.nFull {
		return item{}, fmt.Errorf("cache of %d attention layers x width %d and %d recurrent layers does not fit a model of %d x %d and %d", kv.Layers, kv.Width, len(h.Layers), m.nFull, cfg.KVHeads*cfg.HeadDim, cfg.Layers-m.nFull)
	}
	for i := range h.Layers {
		if len(h.Conv[i]) != (cfg.ConvKernel-1)*cfg.ConvChannels() || len(h.State[i]) != cfg.ValueHeads*cfg.KeyDim*cfg.ValueDim {
			return item{}, fmt.Errorf("recurrent layer %d of the cache has another shape than the model's", i)
		}
	}
	if !kv.Room(n) {
		return item{}, fmt.Errorf("%d rows at offset %d exceed cache capacity %d", n, kv.Offset(), kv.Capacity)
	}
	return item{h: h, kv: kv, pos: kv.Offset()}, nil
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

// seq is one sequence's rows in a chunk of a forward: chunk rows [lo, hi), at positions pos,
// pos+1, ... of its cache h (whose key/value view is kv). Its rows from snapRow (the forward's
// row number of chunk row lo; -1 when not recording) up to its forward's row snapEnd
// (exclusive) get the states after them recorded.
type seq struct {
	h                *cache.Hybrid
	kv               nn.KV
	lo, hi, pos      int
	snapRow, snapEnd int
}

// overlap is the rows of s inside [lo, hi), empty (a >= b) when none are.
func (s *seq) overlap(lo, hi int) (a, b int) { return max(s.lo, lo), min(s.hi, hi) }

// forward is one chunk of a forward, as nn.Phases runs it (see nn.Stack): up to nn.ChunkRows
// stacked rows of one sequence or several (seqs, ascending, covering the chunk). A
// full-attention layer is split at the join like a transformer layer. A Gated DeltaNet layer
// computes its projections in Open, per part; the conv and the recurrence, which run through
// each sequence's rows in order, run in Join split by heads instead of by rows (linPart);
// Close is the output projection and the MLP of the part's rows.
// Chunk row i is stacked row row0+i: tapped layers' outputs go to taps at that row, and its
// logits, when logitRow[i] >= 0, to row logitRow[i] of logits.
type forward struct {
	m        *Model
	seqs     []seq
	attSeqs  []nn.Seq // seqs as full-attention layers read them (nn.Part.AttendSeqs)
	tokens   []int
	row0     int
	taps     [][]float32
	logits   []float32
	logitRow []int
	hidden   []float32 // Request.Hidden of a forward alone: every row's normed state

	li, parts int // the linear layer Join is in, and its parts
	linFn     func(int)
}

func (f *forward) Embed(p *nn.Part) {
	h := f.m.cfg.Hidden
	for i, t := range f.tokens[p.Lo:p.Hi] {
		f.m.embedding.Row(p.X[i*h:(i+1)*h], t)
	}
}

func (f *forward) Open(p *nn.Part, li int) {
	m := f.m
	cfg := &m.cfg
	l := &m.layers[li]
	nn.RMSNormRows(p.XN, p.X, l.AttnNorm, p.Rows, cfg.Hidden, cfg.RMSEps)
	if l.Type == Linear {
		d := l.DeltaNet
		c, vw, hv := cfg.ConvChannels(), cfg.ValueHeads*cfg.ValueDim, cfg.ValueHeads
		ws := &m.ws
		mix, z := ws.mix[p.Lo*c:p.Hi*c], ws.z[p.Lo*vw:p.Hi*vw]
		b, a := ws.b[p.Lo*hv:p.Hi*hv], ws.a[p.Lo*hv:p.Hi*hv]
		if err := kernel.MatMulEach(p.XN, p.Rows, kernel.Product{M: d.QKV, Y: mix}, kernel.Product{M: d.Z, Y: z},
			kernel.Product{M: d.B, Y: b}, kernel.Product{M: d.A, Y: a}); err != nil {
			d.QKV.MatMul(mix, p.XN, p.Rows)
			d.Z.MatMul(z, p.XN, p.Rows)
			d.B.MatMul(b, p.XN, p.Rows)
			d.A.MatMul(a, p.XN, p.Rows)
		}
		return
	}
	f.projectAttention(p, li, l.Attn)
}

// projectAttention writes the part's queries into p.Q (normed, rotated), their gates into qg,
// and their keys and values into their sequences' caches at their positions (k normed and
// rotated). A part inside one sequence projects straight into its float32 cache; a part spanning
// several, or writing a bf16 cache, stages its keys and values (Workspace.StageKV) and stores each
// row in its own cache (KV.Store): the same products, norms and rotations, so the same bits.
func (f *forward) projectAttention(p *nn.Part, li int, w *AttnWeights) {
	m := f.m
	cfg := &m.cfg
	hd, nh, nkv := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	kvw, gw := nkv*hd, 2*nh*hd
	kl := m.slot[li]
	kc, vc := p.K[:p.Rows*kvw], p.V[:p.Rows*kvw]
	staged := true
	for i := range f.seqs {
		if s := &f.seqs[i]; s.lo <= p.Lo && p.Hi <= s.hi && !s.kv.BF16() {
			pos := s.pos + p.Lo - s.lo
			kc, vc = s.kv.K[kl][pos*kvw:(pos+p.Rows)*kvw], s.kv.V[kl][pos*kvw:(pos+p.Rows)*kvw]
			staged = false
			break
		}
	}
	qg := m.ws.qg[p.Lo*gw : p.Hi*gw]
	if err := kernel.MatMulEach(p.XN, p.Rows, kernel.Product{M: w.Q, Y: qg}, kernel.Product{M: w.K, Y: kc}, kernel.Product{M: w.V, Y: vc}); err != nil {
		w.Q.MatMul(qg, p.XN, p.Rows)
		w.K.MatMul(kc, p.XN, p.Rows)
		w.V.MatMul(vc, p.XN, p.Rows)
	}
	rd := cfg.RotaryDim
	for si := range f.seqs {
		s := &f.seqs[si]
		a, b := s.overlap(p.Lo, p.Hi)
		for r := a; r < b; r++ {
			i, pos := r-p.Lo, s.pos+r-s.lo
			for g := 0; g < nkv; g++ {
				k := kc[i*kvw+g*hd : i*kvw+(g+1)*hd]
				nn.RMSNorm(k, k, w.KNorm, cfg.RMSEps)
				m.rope.Apply(k[:rd], 1, pos)
			}
			for hh := 0; hh < nh; hh++ {
				q := p.Q[(i*nh+hh)*hd : (i*nh+hh+1)*hd]
				nn.RMSNorm(q, qg[i*gw+2*hh*hd:i*gw+(2*hh+1)*hd], w.QNorm, cfg.RMSEps)
				m.rope.Apply(q[:rd], 1, pos)
			}
			if staged {
				s.kv.Store(kl, pos, 1, kc[i*kvw:(i+1)*kvw], vc[i*kvw:(i+1)*kvw]) // rounded into a bf16 cache
			}
		}
	}
}

func (f *forward) Join(li int) {
	m := f.m
	if m.layers[li].Type == Full {
		for i := range f.seqs {
			s := &f.seqs[i]
			s.kv.Publish(m.slot[li], s.pos, s.hi-s.lo)
		}
		return
	}
	cfg := &m.cfg
	f.li = li
	f.parts = min(len(m.partScores), cfg.KeyHeads)
	kernel.Parallel(f.parts, f.linFn)
}

// linPart is part i's share of a linear layer's join: the key heads [kh0, kh1) of
// nn.PartRows(i, parts, Hk) and their value heads, Hv/Hk for each. It runs the causal conv of
// those heads' q, k and v channels (convPart), then their recurrence (recurPart), which reads
// only those channels: one hand-off a layer, and no join between the two. The conv of a channel
// and the recurrence of a head never depend on which part runs them.
func (f *forward) linPart(i int) {
	cfg := &f.m.cfg
	kh0, kh1 := nn.PartRows(i, f.parts, cfg.KeyHeads)
	if kh0 == kh1 {
		return
	}
	group := cfg.ValueHeads / cfg.KeyHeads
	f.convPart(i, kh0, kh1)
	f.recurPart(i, kh0*group, kh1*group)
}

// convPart runs the causal conv of the q and k channels of key heads [kh0, kh1) and the v
// channels of their value heads, in units of one head (units 0..Hk-1 are the q heads, then the
// k heads, then the v heads), over every row of each sequence of the chunk in order: silu, then
// the l2 norm of q and k heads (q also scaled by dk^-1/2). It then moves the sequence's conv
// window on, and records the window after each recorded row. part is the caller's scratch.
func (f *forward) convPart(part, kh0, kh1 int) {
	cfg := &f.m.cfg
	hk, dk, dv := cfg.KeyHeads, cfg.KeyDim, cfg.ValueDim
	j0, j1 := kh0*cfg.ValueHeads/hk, kh1*cfg.ValueHeads/hk
	for si := range f.seqs {
		s := &f.seqs[si]
		f.convSeq(s, part, kh0, kh1, kh0*dk, kh1*dk)
		f.convSeq(s, part, hk+kh0, hk+kh1, (hk+kh0)*dk, (hk+kh1)*dk)
		f.convSeq(s, part, 2*hk+j0, 2*hk+j1, 2*hk*dk+j0*dv, 2*hk*dk+j1*dv)
	}
}

// convSeq is convPart's work on the rows of sequence s: units [u0, u1), channels [c0, c1).
func (f *forward) convSeq(s *seq, part, u0, u1, c0, c1 int) {
	m := f.m
	cfg := &m.cfg
	hk, dk, kk := cfg.KeyHeads, cfg.KeyDim, cfg.ConvKernel
	c := cfg.ConvChannels()
	sl := m.slot[f.li]
	w := m.layers[f.li].DeltaNet.convT
	win := s.h.Conv[sl]
	n := s.hi - s.lo
	// The sequence's chunk rows, from its first.
	mix, out := m.ws.mix[s.lo*c:s.hi*c], m.ws.conv[s.lo*c:s.hi*c]
	// in is the part's channels of the conv input at the sequence's row r of the chunk (r < 0
	// reaches into the carried window).
	in := func(r int) []float32 {
		if r < 0 {
			return win[(kk-1+r)*c+c0 : (kk-1+r)*c+c1]
		}
		return mix[r*c+c0 : r*c+c1]
	}
	unit := m.ws.unit[part][:c1-c0]
	for t := 0; t < n; t++ {
		// Channel by channel acc = 0 + w[0]*x[t-K+1] + ... + w[K-1]*x[t], taps in order, as
		// one pass per tap over the part's channels (the kernel transposed, convT).
		o := out[t*c+c0 : t*c+c1]
		clear(o)
		for j := 0; j < kk; j++ {
			x, wj := in(t-kk+1+j), w[j*c+c0:j*c+c1]
			x, wj = x[:len(o)], wj[:len(o)]
			for ch := range o {
				o[ch] += wj[ch] * x[ch]
			}
		}
		// silu(acc) = 1*silu(acc), vectorised; each element's bits depend on it alone
		// (kernel.ExpShift), not on where the part's channels start.
		copy(unit, m.ws.ones)
		kernel.SiluMul(o, unit)
		for u := u0; u < u1 && u < 2*hk; u++ {
			x := out[t*c+u*dk : t*c+(u+1)*dk]
			scale := 1.0
			if u < hk {
				scale = 1 / math.Sqrt(float64(dk))
			}
			l2Norm(x, scale)
		}
		if g := s.snapRow + t; s.snapRow >= 0 && g < s.snapEnd {
			snap, _ := s.h.Snapshot(g, sl)
			for r := 0; r < kk-1; r++ {
				copy(snap[r*c+c0:r*c+c1], in(t-kk+2+r))
			}
		}
	}
	// Window row r becomes input n-(K-1)+r. In ascending r that reads window row n+r >= r (or a
	// chunk row), never one already overwritten.
	for r := 0; r < kk-1; r++ {
		copy(win[r*c+c0:r*c+c1], in(n-kk+1+r))
	}
}

// l2Norm scales x to unit length (eps 1e-6 inside the root) times scale; the sum of squares is
// taken in float64, as nn.RMSNorm's.
func l2Norm(x []float32, scale float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	k := float32(scale / math.Sqrt(ss+1e-6))
	for i := range x {
		x[i] *= k
	}
}

// recurPart runs the gated delta rule for value heads [j0, j1) (part i's scratch) over every row of
// each sequence of the chunk in order, on that sequence's state, then the gated output norm of
// each row. Per value head j (key head
// j/(Hv/Hk)) and row t, with the state S [dk][dv]:
//
//	S ← exp(g_t) S;  u = β_t (v_t − Sᵀk_t);  S ← S + k_t uᵀ;  o_t = Sᵀq_t
//
// the decay before the read (computed as α times the read of the old S, the same in exact
// arithmetic). Each row updates S in place and alone, so its bits depend on the
// rows before it only through S, never on how many rows follow in the forward.
func (f *forward) recurPart(i, j0, j1 int) {
	m := f.m
	cfg := &m.cfg
	hk, hv, dk, dv := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim
	c, vw := cfg.ConvChannels(), hv*dv
	d := m.layers[f.li].DeltaNet
	sl := m.slot[f.li]
	scr := m.ws.scr[i]
	mem, u, o := scr[:dv], scr[dv:2*dv], scr[2*dv:3*dv]
	group := hv / hk
	ws := &m.ws
	for si := range f.seqs {
		sq := &f.seqs[si]
		state := sq.h.State[sl]
		for t := sq.lo; t < sq.hi; t++ {
			row := ws.conv[t*c : (t+1)*c]
			for j := j0; j < j1; j++ {
				kh := j / group
				q := row[kh*dk : (kh+1)*dk]
				k := row[hk*dk+kh*dk : hk*dk+(kh+1)*dk]
				v := row[2*hk*dk+j*dv : 2*hk*dk+(j+1)*dv]
				beta := sigmoid(ws.b[t*hv+j])
				alpha := float32(math.Exp(float64(d.NegA[j]) * softplus(float64(ws.a[t*hv+j])+float64(d.DtBias[j]))))
				s := state[j*dk*dv : (j+1)*dk*dv]
				// The decayed memory's read, (αS)ᵀk, is α(Sᵀk): one pass over the old S.
				kernel.AxpyRowsMax(mem, k, s, dv)
				for x := range u {
					u[x] = beta * (v[x] - alpha*mem[x])
				}
				// Row by row se += (α-1)·se, which is se·α (with a fused multiply-add exactly
				// round(α·se) whenever α >= 1/2, where α-1 is exact); then the delta se += k[e]·u
				// and the read o += q[e]·se: one pass over S (kernel.DeltaRule).
				kernel.DeltaRule(s, o, k, q, u, alpha-1)
				y := ws.y[t*vw+j*dv : t*vw+(j+1)*dv]
				z := ws.z[t*vw+j*dv : t*vw+(j+1)*dv]
				nn.RMSNorm(y, o, d.Norm, cfg.RMSEps)
				// z becomes norm(o)·silu(z), out_proj's input (y is scratch after).
				kernel.SiluMul(z, y)
				if g := sq.snapRow + t - sq.lo; sq.snapRow >= 0 && g < sq.snapEnd {
					_, snap := sq.h.Snapshot(g, sl)
					copy(snap[j*dk*dv:(j+1)*dk*dv], s)
				}
			}
		}
	}
}

func sigmoid(x float32) float32 { return 1 / (1 + nn.Exp32(-x)) }

// softplus is log(1+e^x), with HF's linear branch above 20 (where the two agree in float32).
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

func (f *forward) Close(p *nn.Part, li int) {
	m := f.m
	cfg := &m.cfg
	l := &m.layers[li]
	if l.Type == Linear {
		vw := cfg.ValueHeads * cfg.ValueDim
		l.DeltaNet.Out.MatMul(p.Tmp, m.ws.z[p.Lo*vw:p.Hi*vw], p.Rows)
		nn.Add(p.X, p.Tmp)
	} else {
		hd, nh := cfg.HeadDim, cfg.Heads
		// Each sequence's rows attend over its own cache, as the rows of a forward of it
		// alone (its chunk rows are that forward's rows); a forward of one part spreads the
		// key/value heads over the cores.
		p.AttendSeqs(&m.heads, f.attSeqs, m.slot[li], nn.Causal)
		gw := 2 * nh * hd
		for i := 0; i < p.Rows; i++ {
			qg := m.ws.qg[(p.Lo+i)*gw:]
			for hh := 0; hh < nh; hh++ {
				att := p.Att[(i*nh+hh)*hd : (i*nh+hh+1)*hd]
				gate := qg[(2*hh+1)*hd : (2*hh+2)*hd]
				for x := range att {
					att[x] *= sigmoid(gate[x])
				}
			}
		}
		l.Attn.O.MatMul(p.Tmp, p.Att, p.Rows)
		nn.Add(p.X, p.Tmp)
	}
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
