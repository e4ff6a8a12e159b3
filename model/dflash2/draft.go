package dflash2

import (
	"fmt"
	"math"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/nn"
)

// Options tune loading.
type Options struct {
	// ForceF32 widens bf16 matrices and codebooks to f32 (default: bf16 stays bf16, f16 becomes f32).
	ForceF32 bool
}

type convWeights struct {
	base []float32      // [2][taps][hidden]: side 0 prepare, side 1 finish
	proj *kernel.Matrix // [2*taps*groups][hidden]
}

type layer struct {
	attnNorm, mlpNorm []float32
	attn              nn.AttnWeights
	gate, up, down    *kernel.Matrix
	attnConv, mlpConv convWeights
}

// table is a [rows][width] codebook kept as f32 or bf16.
type table struct {
	width int
	f32   []float32
	bf16  []uint16
}

// row writes row id into dst[:width].
func (t *table) row(dst []float32, id int) {
	if t.f32 != nil {
		copy(dst, t.f32[id*t.width:(id+1)*t.width])
		return
	}
	for i, b := range t.bf16[id*t.width : (id+1)*t.width] {
		dst[i] = kernel.BF16ToF32(b)
	}
}

// dot is <row id, x>.
func (t *table) dot(id int, x []float32) float32 {
	if t.f32 != nil {
		return kernel.Dot(x, t.f32[id*t.width:(id+1)*t.width])
	}
	var s float32
	for i, b := range t.bf16[id*t.width : (id+1)*t.width] {
		s += kernel.BF16ToF32(b) * x[i]
	}
	return s
}

// Draft is a loaded DFlash2 draft bound to its target. It implements model.BlockSelector. Not
// safe for concurrent Forward calls.
type Draft struct {
	cfg    Config
	target model.Target
	head   *kernel.Matrix

	fc                 *kernel.Matrix
	hiddenNorm, norm   []float32
	layers             []layer
	selProj            *kernel.Matrix // W_h [rank][hidden]
	selPred, selSucc   table          // A, B: [vocab][rank]
	heads              nn.Heads       // its Rope grows with the caches
	eps                float32
	logitScale, softcp float32

	ws   workspace
	walk walk
}

// workspace holds a forward's buffers for rows = max(nn.ChunkRows, BlockSize) rows: a context
// chunk or the block.
type workspace struct {
	x, xn, xc, tmp, ctx []float32      // rows x hidden
	q, att              []float32      // rows x heads*headDim
	gate, up            []float32      // rows x intermediate
	delta               []float32      // rows x 2*taps*groups
	scratch             nn.PartScratch // attention scratch, one buffer per core (split)
	split               nn.HeadSplit   // the block's attention, its key/value heads over the cores
	logits              []float32      // (block-1) x vocab, grown on first use
}

var (
	_ model.BlockSelector = (*Draft)(nil)
	_ model.CausalBlock   = (*Draft)(nil)
)

// Config is the draft's configuration.
func (d *Draft) Config() Config { return d.cfg }

func (d *Draft) BlockSize() int { return d.cfg.BlockSize }

// CausalBlock reports whether every layer's attention is causal inside the block (the
// convolutions always are): then a forward of [anchor, MASK x n] gives slots 1..n the bits a
// full block gives them, and the runner may forward only the rows it drafts. The reference's
// full-attention layers are bidirectional, so a draft is causal only when its config says so
// (dflash_config.causal) or every layer is a sliding one.
func (d *Draft) CausalBlock() bool {
	for l := range d.cfg.Layers {
		if d.cfg.Visibility(l).Bidirectional {
			return false
		}
	}
	return true
}
func (d *Draft) MaskID() int         { return d.cfg.MaskID }
func (d *Draft) TargetLayers() []int { return d.cfg.TargetLayers }

// NewCache allocates context-plus-block K/V for capacity rows and sizes the rope tables and
// attention scratch for them, so forwards on it never allocate.
func (d *Draft) NewCache(capacity int) cache.Cache {
	capacity = max(capacity, 1)
	if d.heads.Rope.MaxPos() < capacity {
		d.heads.Rope.Grow(capacity)
	}
	d.ws.scratch.Grow(capacity)
	// The same layout as DFlash's draft and the target: head-major K/V copies for small heads,
	// so attention runs on the vectorised path.
	return d.heads.NewKV(d.cfg.Layers, capacity)
}

// Load reads a DFlash2 draft folder (config.json and safetensors), or a draft GGUF converted
// from one (dflash.GGUFArch), and binds it to target after checking that it fits: DFlash's
// checks plus the selector's shapes. Every missing or misshaped tensor is reported at once.
func Load(path string, target model.Target, opt Options) (*Draft, error) {
	tc := target.Config()
	hc, err := dflash.LoadConfig(path)
	if err != nil {
		return nil, fmt.Errorf("load dflash2 %s: %w", path, err)
	}
	cfg, err := fromHF(hc, tc.Layers)
	if err != nil {
		return nil, fmt.Errorf("load dflash2 %s: config: %w", path, err)
	}
	if err := cfg.CheckTarget(tc); err != nil {
		return nil, fmt.Errorf("load dflash2 %s: draft does not fit its target: %w", path, err)
	}
	if target.Head() == nil {
		return nil, fmt.Errorf("load dflash2 %s: the target has no output head to borrow", path)
	}
	dtype := dflash.KeepDType
	if opt.ForceF32 {
		dtype = dflash.ForceF32
	}
	w, err := dflash.OpenWeights(path, dtype)
	if err != nil {
		return nil, fmt.Errorf("load dflash2 %s: %w", path, err)
	}
	defer w.Close()

	shapes := map[string][]int{}
	for _, ts := range cfg.Tensors() {
		shapes[ts.Name] = ts.Shape
	}
	vec := func(name string) []float32 { return w.Vector(name, shapes[name]...) }
	mat := func(name string) *kernel.Matrix {
		sh := shapes[name]
		return w.Matrix(name, sh[0], sh[1])
	}
	tab := func(name string) table {
		sh := shapes[name]
		t := table{width: sh[1]}
		t.f32, t.bf16 = w.Table(name, sh[0], sh[1])
		return t
	}
	d := &Draft{cfg: cfg, target: target, head: target.Head(), eps: float32(cfg.RMSEps)}
	d.fc = mat("fc.weight")
	d.hiddenNorm = vec("hidden_norm.weight")
	d.norm = vec("norm.weight")
	d.layers = make([]layer, cfg.Layers)
	for i := range d.layers {
		p := fmt.Sprintf("layers.%d.", i)
		l := &d.layers[i]
		l.attnNorm = vec(p + "input_layernorm.weight")
		l.mlpNorm = vec(p + "post_attention_layernorm.weight")
		l.attn.QNorm = vec(p + "self_attn.q_norm.weight")
		l.attn.KNorm = vec(p + "self_attn.k_norm.weight")
		l.attn.Q = mat(p + "self_attn.q_proj.weight")
		l.attn.K = mat(p + "self_attn.k_proj.weight")
		l.attn.V = mat(p + "self_attn.v_proj.weight")
		l.attn.O = mat(p + "self_attn.o_proj.weight")
		l.gate = mat(p + "mlp.gate_proj.weight")
		l.up = mat(p + "mlp.up_proj.weight")
		l.down = mat(p + "mlp.down_proj.weight")
		l.attnConv = convWeights{base: vec(p + "attention_conv.base_kernel"), proj: mat(p + "attention_conv.kernel_projection.weight")}
		l.mlpConv = convWeights{base: vec(p + "mlp_conv.base_kernel"), proj: mat(p + "mlp_conv.kernel_projection.weight")}
	}
	d.selProj = mat("candidate_selector.hidden_projection.weight")
	d.selPred = tab("candidate_selector.predecessor_codebook")
	d.selSucc = tab("candidate_selector.successor_codebook")
	if err := w.Err(); err != nil {
		return nil, fmt.Errorf("load dflash2 %s: %w", path, err)
	}
	d.init(hc.RopeInvFreq(cfg.HeadDim))
	return d, nil
}

// init sizes the rope tables and the workspace.
func (d *Draft) init(inv []float64) {
	c := &d.cfg
	d.heads = nn.Heads{Attention: nn.NewAttention(c.Heads, c.KVHeads, c.HeadDim), Eps: d.eps,
		Rope: nn.NewRoPE(nn.RotateHalf, c.HeadDim, inv, max(c.BlockSize, 256))}
	d.logitScale = 1
	if c.LogitScale > 0 {
		d.logitScale = float32(c.LogitScale)
	}
	d.softcp = float32(c.LogitSoftcap)
	rows := max(nn.ChunkRows, c.BlockSize)
	h, qw := c.Hidden, c.Heads*c.HeadDim
	d.ws = workspace{
		x: make([]float32, rows*h), xn: make([]float32, rows*h), xc: make([]float32, rows*h),
		tmp: make([]float32, rows*h), ctx: make([]float32, rows*h),
		q: make([]float32, rows*qw), att: make([]float32, rows*qw),
		gate: make([]float32, rows*c.Intermediate), up: make([]float32, rows*c.Intermediate),
		delta:   make([]float32, rows*2*c.ConvKernel*c.Groups()),
		scratch: nn.NewPartScratch(256),
	}
	k, r := c.SelectorTopK, c.SelectorRank
	d.walk = walk{
		d: d, k: k, r: r,
		ids:   make([]int32, c.BlockSize*k),
		unary: make([]float32, c.BlockSize*k),
		w:     make([]float32, c.BlockSize*r),
		aw:    make([]float32, r),
		arow:  make([]float32, r),
	}
}

// Forward writes ctxRows context rows and then the block rows at slots c.Offset()... and
// advances c over both (model.BlockSelector). block must be [anchor, MASK...] of at most
// BlockSize rows, or nil for a context-only write (nil Walk). The Walk is valid until the next
// Forward. On error c is unchanged.
func (d *Draft) Forward(cc cache.Cache, ctx []float32, ctxRows int, block []int) (model.Walk, error) {
	cfg := &d.cfg
	kv, ok := nn.AsKV(cc)
	if !ok {
		return nil, fmt.Errorf("dflash2 forward: cache is %T, want one from NewCache", cc)
	}
	if kv.Layers != cfg.Layers || kv.Width != cfg.KVHeads*cfg.HeadDim {
		return nil, fmt.Errorf("dflash2 forward: cache of %d layers x width %d does not fit the draft (%d x %d)", kv.Layers, kv.Width, cfg.Layers, cfg.KVHeads*cfg.HeadDim)
	}
	width := len(cfg.TargetLayers) * cfg.Hidden
	if ctxRows < 0 || len(ctx) < ctxRows*width {
		return nil, fmt.Errorf("dflash2 forward: %d context floats for %d rows of %d", len(ctx), ctxRows, width)
	}
	if len(block) > cfg.BlockSize {
		return nil, fmt.Errorf("dflash2 forward: block of %d rows exceeds block_size %d", len(block), cfg.BlockSize)
	}
	for _, t := range block {
		if t < 0 || t >= cfg.Vocab {
			return nil, fmt.Errorf("dflash2 forward: block token %d outside the vocabulary of %d", t, cfg.Vocab)
		}
	}
	pos := kv.Offset()
	total := ctxRows + len(block)
	if !kv.Room(total) {
		return nil, fmt.Errorf("dflash2 forward: %d rows at offset %d exceed the cache capacity %d", total, pos, kv.Capacity)
	}
	if d.heads.Rope.MaxPos() < pos+total {
		d.heads.Rope.Grow(pos + total)
	}
	d.ws.scratch.Grow(pos + total)
	for start := 0; start < ctxRows; start += nn.ChunkRows {
		rows := min(nn.ChunkRows, ctxRows-start)
		d.context(kv, ctx[start*width:(start+rows)*width], rows, pos+start)
	}
	var w model.Walk
	if len(block) > 0 {
		d.block(kv, block, pos+ctxRows)
		w = &d.walk
	}
	if err := kv.Advance(total); err != nil {
		return nil, fmt.Errorf("dflash2 forward: %w", err) // unreachable: Room was checked
	}
	return w, nil
}

// context writes the K/V of rows context rows at positions [pos, pos+rows) in every layer:
// ctx_j = hidden_norm(fc(taps_j)), k = k_norm(k_proj(ctx_j)) with RoPE at j, v = v_proj(ctx_j).
func (d *Draft) context(kv nn.KV, taps []float32, rows, pos int) {
	h := d.cfg.Hidden
	x := d.ws.ctx[:rows*h]
	d.fc.MatMul(x, taps, rows)
	nn.RMSNormRows(x, x, d.hiddenNorm, rows, h, d.eps)
	for li := range d.layers {
		d.heads.Project(nil, kv, li, &d.layers[li].attn, x, rows, pos)
		kv.Publish(li, pos, rows)
	}
}

// block runs the block rows at positions [pos, pos+n) through every layer, with the grouped
// convolutions around each sublayer, then scores the selector's inputs for slots 1..n-1 (the
// anchor row's output feeds no slot, so it gets no final norm and no logits). The
// convolutions on both sides of attention read each row's taps-1 predecessors, so a row split
// (nn.Phases) would need more than one join per layer: the block runs on the caller, layer after
// layer, and only its attention spreads over the cores, by key/value head (nn.HeadSplit).
func (d *Draft) block(kv nn.KV, block []int, pos int) {
	cfg := &d.cfg
	ws := &d.ws
	n := len(block)
	h := cfg.Hidden
	taps, group := cfg.ConvKernel, cfg.ConvGroup
	stride := 2 * taps * cfg.Groups()
	side1 := taps * cfg.Groups()
	x, xn, xc, tmp := ws.x[:n*h], ws.xn[:n*h], ws.xc[:n*h], ws.tmp[:n*h]
	delta := ws.delta[:n*stride]
	for i, t := range block {
		row := x[i*h : (i+1)*h]
		d.target.Embed(row, t)
		if s := cfg.EmbedScale; s > 0 && s != 1 {
			for j := range row {
				row[j] *= float32(s)
			}
		}
	}
	for li := range d.layers {
		l := &d.layers[li]
		// Attention sublayer: both sides' coefficients come from one projection of the normed input.
		nn.RMSNormRows(xn, x, l.attnNorm, n, h, d.eps)
		l.attnConv.proj.MatMul(delta, xn, n)
		GroupedConv(xc, xn, delta, l.attnConv.base[:taps*h], n, n, h, taps, group, stride)
		// Every block row's key is in the cache before any block row attends (DFlash's order).
		d.heads.Project(ws.q, kv, li, &l.attn, xc, n, pos)
		kv.Publish(li, pos, n)
		ws.split.Attend(&d.heads, ws.att, ws.q, 0, n, n, kv, li, pos, cfg.Visibility(li), ws.scratch)
		l.attn.O.MatMul(tmp, ws.att, n)
		GroupedConv(xc, tmp, delta[side1:], l.attnConv.base[taps*h:], n, n, h, taps, group, stride)
		nn.Add(x, xc)

		// MLP sublayer, wrapped the same way.
		nn.RMSNormRows(xn, x, l.mlpNorm, n, h, d.eps)
		l.mlpConv.proj.MatMul(delta, xn, n)
		GroupedConv(xc, xn, delta, l.mlpConv.base[:taps*h], n, n, h, taps, group, stride)
		nn.SwiGLU(tmp, xc, n, l.gate, l.up, l.down, ws.gate, ws.up)
		GroupedConv(xc, tmp, delta[side1:], l.mlpConv.base[taps*h:], n, n, h, taps, group, stride)
		nn.Add(x, xc)
	}
	if n > 1 {
		nn.RMSNormRows(xn[h:], x[h:], d.norm, n-1, h, d.eps)
	}
	d.candidates(xn, n)
}

// candidates fills the walk for slots 1..n-1 from the final-normed hidden rows hs[h:n*h] (row 0,
// the anchor's, is not read): the unary top-K
// of the target head (after output_multiplier and soft-capping) and W_h h per slot.
func (d *Draft) candidates(hs []float32, n int) {
	cfg := &d.cfg
	h, v := cfg.Hidden, cfg.Vocab
	wk := &d.walk
	wk.slots = n - 1
	if n < 2 {
		return
	}
	if len(d.ws.logits) < (n-1)*v {
		d.ws.logits = make([]float32, (n-1)*v)
	}
	logits := d.ws.logits[:(n-1)*v]
	d.head.MatMul(logits, hs[h:n*h], n-1)
	d.selProj.MatMul(wk.w, hs[h:n*h], n-1)
	for s := 1; s < n; s++ {
		ids := wk.ids[(s-1)*wk.k : s*wk.k]
		vals := wk.unary[(s-1)*wk.k : s*wk.k]
		TopK(ids, vals, logits[(s-1)*v:s*v])
		// The transform is increasing, so the top-K of the raw logits is the top-K after it.
		for j := range vals {
			vals[j] = d.transform(vals[j])
		}
	}
}

// transform is the unary-logit transform: output_multiplier, then soft-capping when set.
func (d *Draft) transform(x float32) float32 {
	x *= d.logitScale
	if d.softcp > 0 {
		x = d.softcp * float32(math.Tanh(float64(x/d.softcp)))
	}
	return x
}

// TopK fills ids/vals with the len(ids) largest logits, descending, the lower id first on ties;
// a NaN logit counts as -Inf, so it is never chosen before a number. It is the selector's
// candidate rule, which the trainer (train/d2.go) shares so that training and inference see the
// same candidates. len(vals) must be at least len(ids), and len(logits) at least len(ids).
func TopK(ids []int32, vals []float32, logits []float32) {
	k := len(ids)
	if k == 0 {
		return
	}
	n := 0
	for id, x := range logits {
		if x != x {
			x = float32(math.Inf(-1))
		}
		if n == k && !(x > vals[k-1]) {
			continue
		}
		j := min(n, k-1)
		// Shift smaller entries down; equal values stay ahead (their ids are lower).
		for j > 0 && x > vals[j-1] {
			vals[j], ids[j] = vals[j-1], ids[j-1]
			j--
		}
		vals[j], ids[j] = x, int32(id)
		if n < k {
			n++
		}
	}
}

// walk is the Draft's model.Walk over the last block's slots.
type walk struct {
	d     *Draft
	k, r  int
	slots int
	ids   []int32   // slots x k candidate ids
	unary []float32 // slots x k transformed unary logits
	w     []float32 // slots x r: W_h h of each slot
	aw    []float32 // r scratch: A[prev] * w
	arow  []float32
}

// Slots is the number of slots the last block can fill (block rows - 1).
func (w *walk) Slots() int { return w.slots }

// Candidates appends slot's K candidates and their edge scores
// u[c] + <A[prev] * W_h h_slot, B[c]>. An out-of-range slot appends nothing; an out-of-range
// prev contributes no transition term (a library never panics on its input).
func (w *walk) Candidates(slot, prev int, ids []int32, scores []float32) ([]int32, []float32) {
	if slot < 1 || slot > w.slots {
		return ids, scores
	}
	base := (slot - 1) * w.k
	cand, unary := w.ids[base:base+w.k], w.unary[base:base+w.k]
	ids = append(ids, cand...)
	if prev < 0 || prev >= w.d.cfg.Vocab {
		return ids, append(scores, unary...)
	}
	ws := w.w[(slot-1)*w.r : slot*w.r]
	w.d.selPred.row(w.arow, prev)
	for i := range w.aw {
		w.aw[i] = w.arow[i] * ws[i]
	}
	for j, c := range cand {
		scores = append(scores, unary[j]+w.d.selSucc.dot(int(c), w.aw))
	}
	return ids, scores
}
