package dflash2

import (
	"math"
	"slices"
	"testing"
)

// TestTopK: the candidates are the largest logits, descending, the lower id first on ties, and a
// NaN (a diverged training step, a broken head) is never taken before a number: of
// [1, NaN, 3, 3, -Inf, 2] the top 4 are ids 2 and 3 (both 3, lower id first), 5 (2), 0 (1); the
// NaN and the -Inf only fill what no number can. The trainer's candidates are these too.
func TestTopK(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(-1))
	logits := []float32{1, nan, 3, 3, inf, 2}
	ids, vals := make([]int32, 4), make([]float32, 4)
	TopK(ids, vals, logits)
	if !slices.Equal(ids, []int32{2, 3, 5, 0}) || !slices.Equal(vals, []float32{3, 3, 2, 1}) {
		t.Errorf("top 4 = %v %v, want [2 3 5 0] [3 3 2 1]", ids, vals)
	}
	// Asking for all six: the NaN (id 1) and the -Inf (id 4) tie at -Inf, lower id first.
	ids, vals = make([]int32, 6), make([]float32, 6)
	TopK(ids, vals, logits)
	if !slices.Equal(ids, []int32{2, 3, 5, 0, 1, 4}) || vals[4] != inf || vals[5] != inf {
		t.Errorf("top 6 = %v %v, want [2 3 5 0 1 4] ending in -Inf -Inf", ids, vals)
	}
	// A NaN first never blocks a number: it is displaced like -Inf would be.
	ids, vals = make([]int32, 1), make([]float32, 1)
	TopK(ids, vals, []float32{nan, -5})
	if ids[0] != 1 || vals[0] != -5 {
		t.Errorf("top 1 of [NaN -5] = %v %v, want [1] [-5]", ids, vals)
	}
	TopK(nil, nil, logits) // no candidates asked for: nothing to do, no panic
}
