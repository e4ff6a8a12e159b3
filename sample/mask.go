package sample

import (
	"math"
	"math/bits"
)

// Mask is a set of token ids a constrained request may emit next (a grammar's, see package
// sample/grammar). Masking sets every other logit to -Inf before the filters run, so the
// distribution sampled is the target's renormalised over the allowed ids: the filters (top-k,
// top-p, min-p) then act on what may actually be emitted, and can never leave an empty support
// while one id is allowed.
type Mask struct {
	Bits  []uint64 // bit id%64 of word id/64 set: id allowed
	Count int      // allowed ids
}

// NewMask is the empty mask over vocab ids.
func NewMask(vocab int) *Mask { return &Mask{Bits: make([]uint64, (vocab+63)/64)} }

// Allow adds id to the mask.
func (m *Mask) Allow(id int) {
	if id < 0 || id/64 >= len(m.Bits) {
		return
	}
	if w, b := &m.Bits[id/64], uint64(1)<<(id%64); *w&b == 0 {
		*w |= b
		m.Count++
	}
}

// Allows reports whether id is in the mask.
func (m *Mask) Allows(id int) bool {
	return id >= 0 && id/64 < len(m.Bits) && m.Bits[id/64]&(1<<(id%64)) != 0
}

// Apply writes logits into dst with every id outside the mask at -Inf and returns dst (grown
// to len(logits) when short). logits is not modified.
func (m *Mask) Apply(dst, logits []float32) []float32 {
	if cap(dst) < len(logits) {
		dst = make([]float32, len(logits))
	}
	dst = dst[:len(logits)]
	inf := float32(math.Inf(-1))
	if m.Count*16 < len(logits) {
		// Few ids allowed (a grammar's punctuation): fill and copy the allowed ones back.
		for i := range dst {
			dst[i] = inf
		}
		for w, word := range m.Bits {
			for word != 0 {
				id := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if id < len(logits) {
					dst[id] = logits[id]
				}
			}
		}
		return dst
	}
	copy(dst, logits)
	// Most ids allowed (inside a string): visit only the words with a disallowed id.
	for w := 0; w*64 < len(dst); w++ {
		var out uint64 = ^uint64(0)
		if w < len(m.Bits) {
			out = ^m.Bits[w]
		}
		for out != 0 {
			i := w*64 + bits.TrailingZeros64(out)
			out &= out - 1
			if i >= len(dst) {
				break
			}
			dst[i] = inf
		}
	}
	return dst
}
