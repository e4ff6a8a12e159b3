package nn

import "runtime"

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

// Parts is how many parts a forward of rows rows splits into: 1 below splitMinRows, else as many
// as there are buffers, each with at least rowsPerPart rows.
func (p PartScratch) Parts(rows int) int {
	if rows < splitMinRows {
		return 1
	}
	return max(1, min(len(p), rows/rowsPerPart))
}

// PartRows is the rows [lo, hi) of part i of n rows cut into parts parts.
func PartRows(i, parts, n int) (lo, hi int) { return i * n / parts, (i + 1) * n / parts }
