package nn

import (
	"runtime"

	"github.com/dflash/dflash/kernel"
)

// MaxParts bounds the parts a row-split forward (kernel.Parallel) cuts its rows into: one per
// core on the machines dflash targets.
const MaxParts = 8

// splitMinRows is the least rows a forward splits, and rowsPerPart the least each part gets. A
// decode step (one row) always runs on the caller: its work per layer is a few microseconds,
// about what a hand-off costs on a busy machine.
const (
	splitMinRows = 4
	rowsPerPart  = 2
)

// PartScratch is the attention scratch of each part of a row-split forward, ScratchLen long:
// one buffer per core (at most MaxParts), so its length is the most parts a forward uses.
type PartScratch [][]float32

// NewPartScratch sizes scratch for spans of up to positions keys, one buffer per core.
func NewPartScratch(positions int) PartScratch {
	p := make(PartScratch, min(max(runtime.GOMAXPROCS(0), 1), MaxParts))
	for i := range p {
		p[i] = make([]float32, ScratchLen(positions))
	}
	return p
}

// Grow makes every buffer hold spans of up to positions keys; it allocates only for a new maximum.
func (p PartScratch) Grow(positions int) {
	need := ScratchLen(positions)
	for i, sc := range p {
		if len(sc) < need {
			p[i] = make([]float32, need)
		}
	}
}

// Parts is how many parts a forward of rows rows splits into: 1 below splitMinRows (or below the
// kernel path's kernel.RowSplitFrom, where its products split their panels across cores more
// cheaply), else as many as there are buffers, each with at least rowsPerPart rows.
func (p PartScratch) Parts(rows int) int {
	if rows < max(splitMinRows, kernel.RowSplitFrom()) {
		return 1
	}
	return max(1, min(len(p), rows/rowsPerPart))
}

// PartRows is the rows [lo, hi) of part i of n rows cut into parts parts.
func PartRows(i, parts, n int) (lo, hi int) { return i * n / parts, (i + 1) * n / parts }

// Stack is a decoder forward cut where the parts of a row-split forward must join, for Phases
// to run. A row's attention needs the keys and values of other rows of the forward (every earlier
// row, or the whole block of a draft), which other parts write; everything else a layer does reads
// only the part's own rows. So a layer is Open (norm, queries, keys and values into the cache),
// then the join, then Close (attention and the rest of the layer). Phases runs Close of layer l-1
// and Open of layer l in one hand-off, so a forward costs one join per layer.
//
// The methods run on a part's rows (p.Lo..p.Hi, its view of the workspace), concurrently with
// the other parts, except Join, which runs once on the caller between them.
type Stack interface {
	Embed(p *Part)        // the rows' input embeddings into p.X
	Open(p *Part, l int)  // layer l up to the join: its keys and values go into the cache
	Join(l int)           // every part's layer-l keys and values are written (e.g. KV.Publish)
	Close(p *Part, l int) // the rest of layer l: attention over the cache, MLP, taps
	Head(p *Part)         // after the last layer: final norm and output head
}

// Part is one part of a row-split forward: rows [Lo, Hi) of the forward, the workspace viewed
// at them (Rows = Hi-Lo) and, as Scores, the part's own attention scratch; Index is the part's
// number among those of the forward.
//
// Scratch is the attention scratch the part's rows may use, Scores first: in a forward of one
// part, every core's buffer, and attention (AttentionResidual, AttendSeqs) spreads its key/value
// heads over the cores (HeadSplit); in a forward of several parts, the part's own buffer only,
// since the other cores are busy with their own rows.
type Part struct {
	Index, Lo, Hi int
	Workspace
	Scratch PartScratch
	split   HeadSplit
}

// scratch is p.Scratch, or Scores alone for a part not set up by Phases (which allocates).
func (p *Part) scratch() PartScratch {
	if len(p.Scratch) == 0 {
		return PartScratch{p.Scores}
	}
	return p.Scratch
}

// ProjectAttention is the half of a pre-norm attention sublayer before the join, for the part's
// rows of a forward whose first row is at position pos: XN = RMSNorm(X) under norm, then the rows'
// queries into Q and their keys and values into layer li of c (Heads.Project).
func (p *Part) ProjectAttention(h *Heads, c KV, li int, w *AttnWeights, norm []float32, eps float32, pos int) {
	RMSNormRows(p.XN, p.X, norm, p.Rows, p.hidden, eps)
	h.Project(p.Q, c, li, w, p.XN, p.Rows, pos+p.Lo)
}

// AttentionResidual is the half after the join: the part's rows attend over layer li of c
// (n rows in the forward, the first at position pos) and X += O(attention). It uses Att and Tmp.
func (p *Part) AttentionResidual(h *Heads, c KV, li int, o *kernel.Matrix, n, pos int, vis Visibility) {
	p.split.Attend(h, p.Att, p.Q, p.Lo, p.Hi, n, c, li, pos, vis, p.scratch())
	o.MatMul(p.Tmp, p.Att, p.Rows)
	Add(p.X, p.Tmp)
}

// Phases runs a Stack over the rows of a forward, split into parts on the kernel's pool
// (kernel.Parallel). A row's result never depends on the rows computed with it, so a split
// changes no bit. It is bound to its Stack and Workspace once, so a forward allocates nothing.
type Phases struct {
	stack  Stack
	ws     *Workspace
	layers int
	parts  int
	layer  int // the phase being run: Close of layer-1 (or Embed), then Open of layer (or Head)
	part   [MaxParts]Part
	fn     func(part int) // ph.phase, bound once
}

// NewPhases binds a stack of layers layers to the workspace its parts view.
func NewPhases(s Stack, ws *Workspace, layers int) *Phases {
	ph := &Phases{stack: s, ws: ws, layers: layers}
	ph.fn = ph.phase
	return ph
}

// Run runs rows rows (at most the workspace's) through the stack, in as many parts as
// scratch.Parts gives, each with its own buffer of scratch.
func (ph *Phases) Run(scratch PartScratch, rows int) {
	ph.parts = scratch.Parts(rows)
	for i := 0; i < ph.parts; i++ {
		p := &ph.part[i]
		p.Index = i
		p.Lo, p.Hi = PartRows(i, ph.parts, rows)
		ph.ws.view(&p.Workspace, p.Lo, p.Hi)
		p.Scores = scratch[i]
		p.Scratch = scratch[i : i+1]
		if ph.parts == 1 {
			p.Scratch = scratch
		}
	}
	for l := 0; l <= ph.layers; l++ {
		ph.layer = l
		kernel.Parallel(ph.parts, ph.fn)
		if l < ph.layers {
			ph.stack.Join(l)
		}
	}
}

// phase is phase ph.layer for the rows of part i.
func (ph *Phases) phase(i int) {
	p := &ph.part[i]
	if p.Hi == p.Lo {
		return
	}
	if ph.layer == 0 {
		ph.stack.Embed(p)
	} else {
		ph.stack.Close(p, ph.layer-1)
	}
	if ph.layer == ph.layers {
		ph.stack.Head(p)
	} else {
		ph.stack.Open(p, ph.layer)
	}
}
