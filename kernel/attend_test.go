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

func TestDotsRowsMatchesDot(t *testing.T) {
	// Every score must be Dot(q_i, k_t)*scale on the same path, whatever the number of queries
	// (pairs and the single remainder) and keys in the call, for heads with every kind of tail
	// (blocks of four vectors, single vectors, scalars); nothing outside the scores is written.
	forEachPath(t, func(t *testing.T) {
		const scale = 0.088388346
		for _, d := range []int{1, 3, 8, 9, 16, 31, 32, 33, 63, 64, 65, 100, 128, 130} {
			for _, nq := range []int{1, 2, 3, 4, 5} {
				for _, n := range []int{1, 2, 7, 33} {
					ldq, ldk, ldy := d+5, d+3, n+2
					q := randVec(nq*ldq, uint64(d*31+nq))
					k := randVec(n*ldk, uint64(d*17+n))
					y := make([]float32, nq*ldy)
					for i := range y {
						y[i] = 42
					}
					DotsRows(y, ldy, q, ldq, nq, k, ldk, d, n, scale)
					for i := 0; i < nq; i++ {
						for tt := 0; tt < ldy; tt++ {
							got := y[i*ldy+tt]
							want := float32(42)
							if tt < n {
								want = Dot(q[i*ldq:i*ldq+d], k[tt*ldk:tt*ldk+d]) * scale
							}
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("d=%d nq=%d n=%d: y[%d][%d] = %g, want %g", d, nq, n, i, tt, got, want)
							}
						}
					}
				}
			}
		}
	})
}

func TestAxpyRowsMatchesAxpy(t *testing.T) {
	// Every output element must carry the bits of Axpy applied for t = 0, 1, ... onto its
	// initial value, whatever the number of queries in the call; nothing past d is written.
	forEachPath(t, func(t *testing.T) {
		for _, d := range []int{1, 3, 8, 9, 16, 31, 32, 33, 63, 64, 65, 100, 128, 130} {
			for _, nq := range []int{1, 2, 3, 4, 5} {
				for _, n := range []int{1, 2, 7, 33} {
					ldo, ldp, ldv := d+4, n+3, d+7
					out := randVec(nq*ldo, uint64(d*13+nq))
					want := slices.Clone(out)
					p := randVec(nq*ldp, uint64(n*7+nq))
					v := randVec(n*ldv, uint64(d*19+n))
					AxpyRows(out, ldo, p, ldp, nq, v, ldv, d, n)
					for i := 0; i < nq; i++ {
						for tt := 0; tt < n; tt++ {
							Axpy(want[i*ldo:i*ldo+d], p[i*ldp+tt], v[tt*ldv:tt*ldv+d])
						}
					}
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
							t.Fatalf("d=%d nq=%d n=%d: out[%d] = %g, want %g", d, nq, n, i, out[i], want[i])
						}
					}
				}
			}
		}
	})
}

// bf16Cache rounds x to bf16 bit patterns (as a bf16 key/value cache stores rows) and returns
// them with their exact f32 values; a few patterns are special (zero, -0, a denormal, an
// infinity is left out: it would make every sum it meets NaN and hide the other elements).
func bf16Cache(x []float32) ([]uint16, []float32) {
	b := make([]uint16, len(x))
	w := make([]float32, len(x))
	for i, v := range x {
		b[i] = F32ToBF16(v)
		switch i % 97 {
		case 5:
			b[i] = 0x8000 // -0
		case 11:
			b[i] = 0x0003 // a denormal
		}
		w[i] = BF16ToF32(b[i])
	}
	return b, w
}

func TestRowsBF16MatchWidened(t *testing.T) {
	// A bf16 cache's attention must compute the f32 kernels' bits over the widened rows, on
	// every path, for every kind of head tail and for heads wider than the portable path's
	// stack buffer; nothing outside the outputs is written.
	forEachPath(t, func(t *testing.T) {
		const scale = 0.088388346
		for _, d := range []int{1, 3, 9, 16, 33, 64, 65, 128, 130, 300} {
			for _, nq := range []int{1, 2, 3, 5} {
				for _, n := range []int{1, 2, 7, 33} {
					ldq, ldk, ldy := d+5, d+3, n+2
					q := randVec(nq*ldq, uint64(d*31+nq))
					k16, k := bf16Cache(randVec(n*ldk, uint64(d*17+n)))
					got := make([]float32, nq*ldy)
					want := make([]float32, nq*ldy)
					for i := range got {
						got[i], want[i] = 42, 42
					}
					DotsRowsBF16(got, ldy, q, ldq, nq, k16, ldk, d, n, scale)
					DotsRows(want, ldy, q, ldq, nq, k, ldk, d, n, scale)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("scores d=%d nq=%d n=%d: y[%d] = %g, want %g", d, nq, n, i, got[i], want[i])
						}
					}
					ldo, ldp, ldv := d+4, n+3, d+7
					out := randVec(nq*ldo, uint64(d*13+nq))
					ref := slices.Clone(out)
					p := randVec(nq*ldp, uint64(n*7+nq))
					v16, v := bf16Cache(randVec(n*ldv, uint64(d*19+n)))
					AxpyRowsBF16(out, ldo, p, ldp, nq, v16, ldv, d, n)
					AxpyRows(ref, ldo, p, ldp, nq, v, ldv, d, n)
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(ref[i]) {
							t.Fatalf("values d=%d nq=%d n=%d: out[%d] = %g, want %g", d, nq, n, i, out[i], ref[i])
						}
					}
				}
			}
		}
	})
}
