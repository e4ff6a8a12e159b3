package kernel

import (
	"math"
	"slices"
	"testing"
)

func TestScoresRowsMatchesAxpyRowsMax(t *testing.T) {
	// Each score must carry AxpyRowsMax's bits for the same query on the same path, whatever
	// the number of queries in the call (groups of four and the single-query remainder).
	forEachPath(t, func(t *testing.T) {
		for _, d := range []int{1, 8, 16} {
			for _, nq := range []int{1, 2, 3, 4, 5, 6, 9} {
				for _, n := range []int{1, 15, 16, 17, 33, 150} {
					ldk := Pad16(n) + 16
					kt := randVec(d*ldk, uint64(d*1000+n))
					q := randVec(nq*d, uint64(nq*77+d))
					qt := make([]float32, d*nq)
					for i := 0; i < nq; i++ {
						for j := 0; j < d; j++ {
							qt[j*nq+i] = q[i*d+j]
						}
					}
					ldy := Pad16(n) + 3
					y := make([]float32, nq*ldy)
					ScoresRows(y, ldy, qt, nq, kt, ldk, d, n)
					want := make([]float32, n)
					for i := 0; i < nq; i++ {
						m := AxpyRowsMax(want, q[i*d:(i+1)*d], kt, ldk)
						if !slices.Equal(y[i*ldy:i*ldy+n], want) {
							t.Fatalf("d=%d nq=%d n=%d: query %d differs from AxpyRowsMax", d, nq, n, i)
						}
						if got := MaxF32(y[i*ldy : i*ldy+n]); got != m {
							t.Fatalf("d=%d nq=%d n=%d: MaxF32 %g, AxpyRowsMax's max %g", d, nq, n, got, m)
						}
					}
				}
			}
		}
	})
}

func TestMaxF32(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		if got := MaxF32(nil); !math.IsInf(float64(got), -1) {
			t.Errorf("empty: %g, want -Inf", got)
		}
		for n := 1; n <= 70; n++ {
			x := randVec(n, uint64(n))
			for i := range x {
				x[i] -= 10 // all negative, so a zero from a dead lane would win
			}
			for _, at := range []int{0, n / 2, n - 1} {
				x := slices.Clone(x)
				x[at] = 5
				if got := MaxF32(x[:n]); got != 5 {
					t.Fatalf("n=%d, max at %d: got %g", n, at, got)
				}
			}
		}
	})
}

func TestWeightedRows8(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		const ldv = 40 // a cache row of five heads of 8
		for _, nq := range []int{1, 3, 4, 6} {
			for _, n := range []int{1, 2, 7, 16, 31} {
				v := randVec((n+3)*ldv+8, uint64(n)) // three rows past n for the zero-weight check
				ldp := n + 5
				p := randVec(nq*ldp, uint64(nq*31+n))
				out := make([]float32, nq*8+8)
				out[nq*8] = 42
				WeightedRows8(out, p, ldp, nq, v[8:], ldv, n) // the second head
				if out[nq*8] != 42 {
					t.Fatalf("nq=%d n=%d: wrote past nq*8", nq, n)
				}
				for i := 0; i < nq; i++ {
					for e := 0; e < 8; e++ {
						var want float64
						for s := 0; s < n; s++ {
							want += float64(p[i*ldp+s]) * float64(v[8+s*ldv+e])
						}
						if d := math.Abs(float64(out[i*8+e]) - want); d > 1e-5*(1+math.Abs(want)) {
							t.Fatalf("nq=%d n=%d: out[%d][%d] = %g, want %g", nq, n, i, e, out[i*8+e], want)
						}
					}
					// Alone, and with zero weights past its span, a query gets the same bits.
					alone := make([]float32, 8)
					WeightedRows8(alone, p[i*ldp:], ldp, 1, v[8:], ldv, n)
					padded := make([]float32, n+3)
					copy(padded, p[i*ldp:i*ldp+n])
					longer := make([]float32, 8)
					WeightedRows8(longer, padded, n+3, 1, v[8:], ldv, n+3)
					if !slices.Equal(alone, out[i*8:i*8+8]) || !slices.Equal(longer, alone) {
						t.Fatalf("nq=%d n=%d: query %d depends on its neighbours or on trailing zero weights", nq, n, i)
					}
				}
			}
		}
	})
}
