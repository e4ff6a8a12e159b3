package sample

import (
	"math"
	"testing"
)

// Apply keeps exactly the allowed logits and sets the others to -Inf, on both of its paths (few
// ids allowed, most allowed), with a vocabulary that is not a multiple of 64.
func TestMaskApply(t *testing.T) {
	const vocab = 200
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(i)
	}
	for _, allowed := range [][]int{{3, 64, 199}, func() (ids []int) {
		for i := range vocab {
			if i%7 != 0 {
				ids = append(ids, i)
			}
		}
		return ids
	}()} {
		m := NewMask(vocab)
		for _, id := range allowed {
			m.Allow(id)
		}
		got := m.Apply(nil, logits)
		for i, v := range got {
			if m.Allows(i) != (v == float32(i)) || !m.Allows(i) && !math.IsInf(float64(v), -1) {
				t.Fatalf("id %d: %v (allowed %v)", i, v, m.Allows(i))
			}
		}
	}
}
