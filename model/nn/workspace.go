package nn

import "github.com/dflash/dflash/kernel"

// ChunkRows is the most rows one pass of a forward runs through its layers: longer forwards (a
// prompt, a draft's first context write) run in chunks of this many rows, which bounds every
// workspace at construction. It is no limit of the kernel, whose products take any number of
// rows; a row's result does not depend on its chunk, so chunking changes no bit.
const ChunkRows = 32

// Workspace is the scratch one forward of a decoder stack needs for up to Rows rows at a time.
// It is sized once (at model construction) and reused by every forward, so the hot path never
// allocates. A part of a row-split forward views its rows of a shared Workspace, with Scores its
// own (attention scratch, ScratchLen long).
type Workspace struct {
	Rows     int
	X, XN    []float32 // Rows x hidden: residual stream and its normed copy
	Q, Att   []float32 // Rows x heads*headDim: queries and attention output
	Tmp      []float32 // Rows x hidden: a sublayer's output before its residual add
	Gate, Up []float32 // Rows x intermediate
	Scores   []float32 // attention scratch (ScratchLen): set by the owner, not by NewWorkspace
	// K and V stage the keys and values of rows that belong to several sequences (Rows x the
	// key/value width, see StageKV): their products run over all rows at once, and each row
	// then goes to its own sequence's cache. nil unless the owner batches sequences.
	K, V []float32

	hidden, qWidth, intermediate, kvWidth int
}

// NewWorkspace sizes scratch for rows rows of a decoder with the given widths; Scores is left to
// the owner, which sizes it per part (see ScratchLen).
func NewWorkspace(rows, hidden, qWidth, intermediate int) *Workspace {
	return &Workspace{
		Rows: rows,
		X:    make([]float32, rows*hidden), XN: make([]float32, rows*hidden),
		Q: make([]float32, rows*qWidth), Att: make([]float32, rows*qWidth),
		Tmp:  make([]float32, rows*hidden),
		Gate: make([]float32, rows*intermediate), Up: make([]float32, rows*intermediate),
		hidden: hidden, qWidth: qWidth, intermediate: intermediate,
	}
}

// StageKV sizes the key/value staging of a workspace whose forwards stack the rows of several
// sequences (Part.ProjectAttentionSeqs), for keys and values of kvWidth floats per row.
func (ws *Workspace) StageKV(kvWidth int) {
	ws.K, ws.V = make([]float32, ws.Rows*kvWidth), make([]float32, ws.Rows*kvWidth)
	ws.kvWidth = kvWidth
}

// view points v at rows [lo, hi) of ws (Scores aside).
func (ws *Workspace) view(v *Workspace, lo, hi int) {
	h, q, im, kw := ws.hidden, ws.qWidth, ws.intermediate, ws.kvWidth
	v.Rows = hi - lo
	v.X, v.XN, v.Tmp = ws.X[lo*h:hi*h], ws.XN[lo*h:hi*h], ws.Tmp[lo*h:hi*h]
	v.Q, v.Att = ws.Q[lo*q:hi*q], ws.Att[lo*q:hi*q]
	v.Gate, v.Up = ws.Gate[lo*im:hi*im], ws.Up[lo*im:hi*im]
	if ws.K != nil {
		v.K, v.V = ws.K[lo*kw:hi*kw], ws.V[lo*kw:hi*kw]
	}
	v.hidden, v.qWidth, v.intermediate, v.kvWidth = h, q, im, kw
}

// MLPResidual is the second half of a pre-norm decoder layer for rows rows of x (width hidden):
// x += down(silu(gate(n)) * up(n)) with n = RMSNorm(x) under norm. It uses XN, Gate, Up and Tmp.
func (ws *Workspace) MLPResidual(x []float32, rows, hidden int, norm []float32, eps float32, gate, up, down *kernel.Matrix) {
	xn := ws.XN[:rows*hidden]
	RMSNormRows(xn, x, norm, rows, hidden, eps)
	SwiGLU(ws.Tmp, xn, rows, gate, up, down, ws.Gate, ws.Up)
	Add(x[:rows*hidden], ws.Tmp)
}

// Add does x[i] += y[i] over len(x) elements (a residual add).
func Add(x, y []float32) {
	y = y[:len(x)]
	for i := range x {
		x[i] += y[i]
	}
}
