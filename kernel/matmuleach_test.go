package kernel

import (
	"math"
	"runtime"
	"testing"
)

// TestMatMulEachMatchesMatMul runs three products of one input (q/k/v-like shapes of different
// N and dtype, one with a partial panel) through MatMulEach, split and unsplit, many times, and
// compares every output bitwise with separate MatMul calls: one hand-off must not change a bit.
func TestMatMulEachMatchesMatMul(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		const k = 96
		ms := []*Matrix{}
		for i, s := range []struct {
			dt DType
			n  int
		}{{BF16, 640}, {F32, 200}, {BF16, 37}} {
			m, _ := testMatrix(s.dt, s.n, k, uint64(20+i))
			ms = append(ms, m)
		}
		for _, rows := range []int{1, 5} {
			x := randVec(rows*k, 3)
			want := make([][]float32, len(ms))
			for i, m := range ms {
				want[i] = make([]float32, rows*m.N)
				withSplit(false, func() { m.MatMul(want[i], x, rows) })
			}
			for _, split := range []bool{false, true} {
				for round := 0; round < 50; round++ {
					ps := make([]Product, len(ms))
					for i, m := range ms {
						ps[i] = Product{M: m, Y: make([]float32, rows*m.N)}
					}
					var err error
					withSplit(split, func() { err = MatMulEach(x, rows, ps...) })
					if err != nil {
						t.Fatal(err)
					}
					for i, p := range ps {
						for e := range p.Y {
							if math.Float32bits(p.Y[e]) != math.Float32bits(want[i][e]) {
								t.Fatalf("rows=%d split=%v: product %d element %d: %g, MatMul %g", rows, split, i, e, p.Y[e], want[i][e])
							}
						}
					}
				}
			}
		}
		x := randVec(2*k, 4)
		ps := []Product{{M: ms[0], Y: make([]float32, 2*ms[0].N)}, {M: ms[1], Y: make([]float32, 2*ms[1].N)}}
		withSplit(true, func() {
			if n := testing.AllocsPerRun(20, func() { MatMulEach(x, 2, ps...) }); n != 0 {
				t.Errorf("%v allocations per MatMulEach", n)
			}
		})
	})
}

func TestMatMulEachErrors(t *testing.T) {
	a, _ := testMatrix(F32, 16, 8, 1)
	b, _ := testMatrix(F32, 16, 9, 2)
	x := make([]float32, 8)
	y := make([]float32, 16)
	cases := []struct {
		name string
		ps   []Product
	}{
		{"different K", []Product{{a, y}, {b, make([]float32, 16)}}},
		{"short y", []Product{{a, y[:15]}}},
		{"too many", []Product{{a, y}, {a, y}, {a, y}, {a, y}, {a, y}}},
	}
	for _, c := range cases {
		if err := MatMulEach(x, 1, c.ps...); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := MatMulEach(x[:7], 1, Product{a, y}); err == nil {
		t.Error("short x: no error")
	}
}

// TestStallBackoff: after a stall the next products run on the caller alone, counting the
// backoff down, and give the same bits; products too small to split do not count.
func TestStallBackoff(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("GOMAXPROCS=1: products are never split")
	}
	m, _ := testMatrix(BF16, 300, 64, 5)
	x := randVec(64, 6)
	want, got := make([]float32, 300), make([]float32, 300)
	withSplit(true, func() {
		m.MatMul(want, x, 1)
		pool.mu.Lock()
		pool.unsplit = 3
		pool.mu.Unlock()
		for i := 0; i < 2; i++ {
			m.MatMul(got, x, 1)
		}
		if pool.unsplit != 1 {
			t.Errorf("after 2 products of a backoff of 3, %d left", pool.unsplit)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("element %d: %g unsplit, %g split", i, got[i], want[i])
			}
		}
	})
	withSplit(false, func() {
		pool.unsplit = 1
		m.MatMul(got, x, 1)
		if pool.unsplit != 1 {
			t.Errorf("a product below splitMin consumed the backoff")
		}
		pool.unsplit = 0
	})
}

// TestBackoffPolicy drives the backoff policy with a sequence of joins (s: stalled, c: clean)
// and checks the unsplit run and backoff it leaves. Expected values: the first stall starts at
// stallBackoffMin (16), each further stall doubles up to stallBackoffMax (1024), and every
// cleanBeforeShrink (8) clean joins in a row halve the backoff without touching unsplit.
func TestBackoffPolicy(t *testing.T) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	defer func() { pool.unsplit, pool.backoff, pool.clean = 0, 0, 0 }()
	for _, tc := range []struct {
		joins            string
		unsplit, backoff int
	}{
		{"c", 0, 0},
		{"s", 16, 16},
		{"ss", 32, 32},
		{"sssssssss", 1024, 1024}, // 16 << 8 capped
		{"sscccccccc", 32, 16},    // 8 clean joins halve 32
		{"scccccccccccccccc", 16, 4},
		{"sccccccc", 16, 16},   // 7 clean joins: not yet
		{"sccccccccs", 16, 16}, // halved to 8, then a stall doubles it back
	} {
		pool.unsplit, pool.backoff, pool.clean = 0, 0, 0
		for _, j := range tc.joins {
			afterJoin(j == 's')
		}
		if pool.unsplit != tc.unsplit || pool.backoff != tc.backoff {
			t.Errorf("joins %q: unsplit %d backoff %d, want %d %d", tc.joins, pool.unsplit, pool.backoff, tc.unsplit, tc.backoff)
		}
	}
}
