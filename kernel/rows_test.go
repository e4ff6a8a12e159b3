package kernel

import (
	"fmt"
	"math"
	"testing"
)

// TestRowsMatchRowByRow checks AxpyRowsMax against clearing y and calling Axpy row by row, and
// DotRows against Dot row by row, bitwise on every path, for every length 0..300 (blocks of 8
// and of 2 vectors, single vectors and masked tails) and 1..9 rows. Values are shifted negative so that a tail lane that
// leaked a 0 into the maximum would show. Elements of y past its length must stay untouched.
func TestRowsMatchRowByRow(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		const ld = 307
		for d := 1; d <= 9; d++ {
			m := randVec(d*ld, uint64(d))
			a := randVec(d, uint64(100+d))
			for i := range a {
				a[i] = float32(math.Abs(float64(a[i])))
			}
			for i := range m {
				m[i] = m[i] - 5
			}
			for n := 0; n <= 300; n++ {
				want := make([]float32, n)
				for j := 0; j < d; j++ {
					Axpy(want, a[j], m[j*ld:])
				}
				wmax := float32(math.Inf(-1))
				for _, v := range want {
					wmax = max(wmax, v)
				}
				y := make([]float32, n+3)
				for i := range y {
					y[i] = 7
				}
				got := AxpyRowsMax(y[:n], a, m, ld)
				for i := 0; i < n; i++ {
					if y[i] != want[i] {
						t.Fatalf("d=%d n=%d: y[%d] = %g, want %g", d, n, i, y[i], want[i])
					}
				}
				if y[n] != 7 {
					t.Fatalf("d=%d n=%d: wrote past len(y)", d, n)
				}
				if got != wmax {
					t.Fatalf("d=%d n=%d: max %g, want %g", d, n, got, wmax)
				}

				out := make([]float32, d+1)
				out[d] = 7
				DotRows(out[:d], m[:n], m[ld-n:], ld)
				for j := 0; j < d; j++ {
					if w := Dot(m[:n], m[ld-n+j*ld:]); out[j] != w {
						t.Fatalf("d=%d n=%d: DotRows[%d] = %g, Dot = %g", d, n, j, out[j], w)
					}
				}
				if out[d] != 7 {
					t.Fatalf("d=%d n=%d: DotRows wrote past len(out)", d, n)
				}
			}
		}
		if got := AxpyRowsMax(make([]float32, 3), nil, nil, 5); got != 0 {
			t.Errorf("no rows: max %g, want 0 (an all-zero y)", got)
		}
	})
}

func BenchmarkAttentionRows(b *testing.B) {
	const d, ld = 8, 512
	m := randVec(d*ld, 1)
	a := randVec(d, 2)
	for _, n := range []int{16, 128, 512} {
		y := make([]float32, n)
		out := make([]float32, d)
		b.Run(fmt.Sprintf("%s/scores/%d", Path(), n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				AxpyRowsMax(y, a, m, ld)
			}
		})
		b.Run(fmt.Sprintf("%s/values/%d", Path(), n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				DotRows(out, y, m, ld)
			}
		})
	}
}
