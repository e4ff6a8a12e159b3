package nn

import "github.com/dflash/dflash/kernel"

// Seq is one sequence's rows in a chunk of a forward that stacks the rows of several sequences
// (a batch): chunk rows [Lo, Hi), at positions Pos, Pos+1, ... of the sequence's own cache KV.
//
// A batched layer runs its weight products once over the stacked rows of every sequence, which
// streams the weights once for all of them, and its attention per sequence against that
// sequence's cache. A row's bits depend only on its own input, position and cache: a product's
// row never depends on the other rows (kernel.MatMul), and attention reads only the row's own
// sequence. So a sequence's output does not depend on the sequences batched with it.
type Seq struct {
	KV     KV
	Lo, Hi int
	Pos    int
}

// overlap is the rows of s inside [lo, hi), empty (a >= b) when none are.
func (s *Seq) overlap(lo, hi int) (a, b int) { return max(s.Lo, lo), min(s.Hi, hi) }

// ProjectAttentionSeqs is ProjectAttention for a part of a chunk whose rows belong to the
// sequences seqs (ascending, covering the chunk). A part inside one sequence projects straight
// into its cache (ProjectAttention, the same bits). Otherwise the products of all the part's rows
// run together into the staging K and V (Workspace.StageKV), and each row, normed and rotated at
// its own position as Project does it, is copied to its sequence's cache (KV.Store, which rounds
// it into a bf16 cache; such a cache is always written through the staging, the same bits).
func (p *Part) ProjectAttentionSeqs(h *Heads, seqs []Seq, li int, w *AttnWeights, norm []float32, eps float32) {
	for i := range seqs {
		s := &seqs[i]
		if s.Lo <= p.Lo && p.Hi <= s.Hi && !s.KV.BF16() {
			p.ProjectAttention(h, s.KV, li, w, norm, eps, s.Pos-s.Lo)
			return
		}
	}
	if p.K == nil {
		panic("nn: a part spanning several sequences needs the key/value staging of Workspace.StageKV")
	}
	RMSNormRows(p.XN, p.X, norm, p.Rows, p.hidden, eps)
	kw := p.kvWidth
	kc, vc := p.K[:p.Rows*kw], p.V[:p.Rows*kw]
	if err := kernel.MatMulEach(p.XN, p.Rows, kernel.Product{M: w.Q, Y: p.Q}, kernel.Product{M: w.K, Y: kc}, kernel.Product{M: w.V, Y: vc}); err != nil {
		w.Q.MatMul(p.Q, p.XN, p.Rows)
		w.K.MatMul(kc, p.XN, p.Rows)
		w.V.MatMul(vc, p.XN, p.Rows)
	}
	qw := h.Heads * h.HeadDim
	for i := range seqs {
		s := &seqs[i]
		a, b := s.overlap(p.Lo, p.Hi)
		if a >= b {
			continue
		}
		r := a - p.Lo
		pos := s.Pos + a - s.Lo
		h.finish(w, p.Q[r*qw:(b-p.Lo)*qw], kc[r*kw:(b-p.Lo)*kw], b-a, pos)
		s.KV.Store(li, pos, b-a, kc[r*kw:(b-p.Lo)*kw], vc[r*kw:(b-p.Lo)*kw])
	}
}

// PublishSeqs is KV.Publish of layer li for every sequence of a chunk.
func PublishSeqs(seqs []Seq, li int) {
	for i := range seqs {
		s := &seqs[i]
		s.KV.Publish(li, s.Pos, s.Hi-s.Lo)
	}
}

// AttendSeqs is the attention of a part of a chunk whose rows belong to seqs, into Att: each
// sequence's rows attend over layer li of its own cache, as the rows of a forward of that
// sequence alone (its chunk rows are the forward's rows). In a forward of one part the key/value
// heads are spread over the cores (see Part.Scratch).
func (p *Part) AttendSeqs(h *Heads, seqs []Seq, li int, vis Visibility) {
	p.split.AttendSeqs(h, p.Att, p.Q, p.Lo, p.Hi, seqs, li, vis, p.scratch())
}

// AttentionResidualSeqs is AttendSeqs followed by the output product over all the part's rows
// at once and the residual add.
func (p *Part) AttentionResidualSeqs(h *Heads, seqs []Seq, li int, o *kernel.Matrix, vis Visibility) {
	p.AttendSeqs(h, seqs, li, vis)
	o.MatMul(p.Tmp, p.Att, p.Rows)
	Add(p.X, p.Tmp)
}
