package model

import "github.com/dflash/dflash/cache"

// BlockDraft is a DFlash-style draft: a few decoder layers conditioned on the target's layer taps
// that predict a whole block of tokens in one forward (DFLASH.md section 2). It borrows the target's
// embedding and output head, so its logits are over the target's vocabulary.
//
// The draft knows nothing of sessions or acceptance: the runner's drafting session decides which
// rows are context, which are a block, and rewinds block rows out of the cache before the next
// context write so that context rows always sit at their true slots.
type BlockDraft interface {
	// BlockSize is B: a block is [anchor, MASK x (B-1)], so at most B-1 tokens are drafted a round.
	BlockSize() int
	// MaskID is the token that fills the block after its anchor (dflash_config.mask_token_id).
	MaskID() int
	// TargetLayers lists the target decoder layers (0-based, ascending) whose outputs form one
	// context row (dflash_config.target_layer_ids).
	TargetLayers() []int
	// NewCache allocates the draft's state for up to capacity rows (context plus one block).
	NewCache(capacity int) cache.Cache
	// Forward writes ctxRows context rows, then the block rows, at slots c.Offset()... and advances
	// c over both. ctx holds ctxRows x (len(TargetLayers()) * target hidden) floats: per row, the
	// taps concatenated in TargetLayers order. block is [anchor, MASK...] or nil for a context-only
	// write. logits are len(block) x vocab (row 0, the anchor's, is computed but unused: row i
	// predicts the token at the anchor's position + i); nil when block is nil. The slice belongs
	// to the draft and stays valid until its next Forward. On error c is unchanged.
	Forward(c cache.Cache, ctx []float32, ctxRows int, block []int) (logits []float32, err error)
}

// BlockSelector is a DFlash2-style draft (DFLASH.md section 5): the same context and block
// forward, but instead of dense logits it returns a Walk that scores a few candidates per slot
// given the previous slot's token. The runner walks the slots (greedy at T = 0, sampling
// softmax(score / T) over the candidates otherwise) and uses that sparse distribution as the
// proposal q in verification.
type BlockSelector interface {
	BlockSize() int
	MaskID() int
	TargetLayers() []int
	NewCache(capacity int) cache.Cache
	// Forward has BlockDraft.Forward's cache contract; the Walk is valid until the next Forward.
	// block must be non-nil to get a Walk; a context-only write returns a nil Walk.
	Forward(c cache.Cache, ctx []float32, ctxRows int, block []int) (Walk, error)
}

// CausalBlock is implemented by a block draft that can say whether its block forward is causal:
// every block row's output depends only on the block rows up to it (and the context). When
// CausalBlock() is true, a forward of [anchor, MASK x n] gives slots 1..n exactly the bits of a
// forward of the whole block, so a session drafting n tokens may forward only those n+1 rows.
// A draft that does not implement it is assumed to need its whole block.
type CausalBlock interface {
	CausalBlock() bool
}

// Walk scores the candidates of one block's slots.
type Walk interface {
	// Candidates appends slot's candidate ids and their edge scores given the token prev chosen
	// for the slot before (the anchor for slot 1) and returns the extended slices. slot is 1-based.
	Candidates(slot, prev int, ids []int32, scores []float32) ([]int32, []float32)
}
