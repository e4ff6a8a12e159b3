package kernel

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// forEachPath runs f with each path the CPU can run active (kerneltest.ForEachPath cannot be
// used here: it imports this package).
func forEachPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	prev := Path()
	defer SetPath(prev)
	for _, name := range Paths() {
		t.Run(name, func(t *testing.T) {
			if err := SetPath(name); err != nil {
				t.Fatal(err)
			}
			f(t)
		})
	}
}

// withSplit runs f with products split whenever they have two panels (split) or never.
func withSplit(split bool, f func()) {
	prev := splitMin
	defer func() { splitMin = prev }()
	pool.unsplit, pool.backoff, pool.clean = 0, 0, 0 // a stall in an earlier test must not turn this one's splits off
	if split {
		splitMin = 0
	} else {
		splitMin = math.MaxInt64
	}
	f()
}

// testMatrix makes an n x k matrix of random weights and returns it with the row-major f32 values
// it holds (bf16 weights are rounded first, so the reference sees exactly what the kernel sees).
func testMatrix(dt DType, n, k int, seed uint64) (*Matrix, []float32) {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	if dt == F32 {
		return NewF32(slices.Clone(w), n, k), w
	}
	b := make([]uint16, n*k)
	for i, v := range w {
		b[i] = F32ToBF16(v)
		w[i] = BF16ToF32(b[i])
	}
	return NewBF16(b, n, k), w
}

func randVec(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// shapes covers the tails: N not a multiple of 16 (partial last panel), fewer than 4 panels (the
// single-panel loop only), K below and not a multiple of the unroll of 4, and the real shapes of
// stories260K (dim 64, hidden 172, kv_dim 32, vocab 512).
var shapes = []struct{ n, k int }{
	{1, 1}, {3, 2}, {16, 16}, {17, 3}, {33, 5}, {48, 1}, {64, 64}, {32, 64}, {172, 64},
	{64, 172}, {512, 64}, {100, 7}, {129, 130}, {80, 9},
}

// TestMatMulMatchesReference checks every path against a float64 reference. The bound is the
// classic worst case for summing K products in float32, (K+2)*2^-24 * sum|w*x|, with the amx
// path's own for bf16 weights (refTol): a correct kernel can never exceed it, while a wrong
// lane, row or tail is off by O(sum|w*x|).
func TestMatMulMatchesReference(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		for _, dt := range []DType{F32, BF16} {
			for si, s := range shapes {
				m, w := testMatrix(dt, s.n, s.k, uint64(si))
				for _, rows := range []int{1, 3, 5, 16} {
					for _, split := range []bool{false, true} {
						x := randVec(rows*s.k, uint64(100+si))
						y := make([]float32, rows*s.n+1)
						y[rows*s.n] = 42 // sentinel: nothing past rows*N is written
						withSplit(split, func() { m.MatMul(y, x, rows) })
						if y[rows*s.n] != 42 {
							t.Fatalf("%v %dx%d rows=%d: wrote past the output", dt, s.n, s.k, rows)
						}
						for r := 0; r < rows; r++ {
							for j := 0; j < s.n; j++ {
								var want, bound float64
								for i := 0; i < s.k; i++ {
									p := float64(w[j*s.k+i]) * float64(x[r*s.k+i])
									want += p
									bound += math.Abs(p)
								}
								tol := refTol(dt, s.k) * bound
								if got := float64(y[r*s.n+j]); math.Abs(got-want) > tol {
									t.Fatalf("%v %dx%d rows=%d split=%v: y[%d][%d]=%g want %g (tol %g)",
										dt, s.n, s.k, rows, split, r, j, got, want, tol)
								}
							}
						}
					}
				}
			}
		}
	})
}

// refTol is the bound of a product of K terms on the active path, as a fraction of sum|w*x|:
// (K+2)*2^-24 for summing K products in float32 (K-1 roundings and two to spare), and on the amx
// path with bf16 weights amxRel's, where the activations enter as bf16 planes.
func refTol(dt DType, k int) float64 {
	if Path() == "amx" && dt == BF16 {
		return amxRel(k, amxPlanes)
	}
	return float64(k+2) * 0x1p-24
}

// amxRel bounds the error of an amx product of K terms with the activations split into planes
// bf16 planes, as a fraction of sum|w*x| (derivation in bf16split.go): the products of bf16
// weights with the planes are exact in f32 and the planes' magnitudes sum to at most
// (1+2^-7)|x|, so summing them in f32 (each plane's K products in order, then the planes, at
// most K+1 roundings of partial sums bounded by (1+2^-7) sum|w*x|) stays within
// (K+2)*(1+2^-7)*2^-24 of it, the float32 bound but for the factor; to this two planes add what
// they leave out of each activation, at most 2^-17 |x|, so 2^-17 sum|w*x| (three planes leave
// nothing). One plane leaves up to 2^-8 |x| and breaks the bound (TestAMXOnePlaneIsInexact).
func amxRel(k, planes int) float64 {
	rel := float64(k+2) * (1 + 0x1p-7) * 0x1p-24
	if planes == 2 {
		rel += 0x1p-17
	}
	return rel
}

// TestBatchWidthInvariant checks the property speculative verification relies on: row r of a
// rows=R product is bitwise equal to the rows=1 product of that row alone, and stays so when the
// other rows hold different values, whether or not the product is split across threads.
func TestBatchWidthInvariant(t *testing.T) {
	big := []struct{ n, k int }{{1024, 96}, {200, 300}} // enough panels for the 4-wide passes
	forEachPath(t, func(t *testing.T) {
		for _, dt := range []DType{F32, BF16} {
			for si, s := range append(slices.Clone(shapes), big...) {
				m, _ := testMatrix(dt, s.n, s.k, uint64(si))
				for _, split := range []bool{false, true} {
					withSplit(split, func() {
						for _, rows := range []int{2, 3, 4, 5, 8, 13, 32} {
							x := randVec(rows*s.k, uint64(rows))
							y := make([]float32, rows*s.n)
							m.MatMul(y, x, rows)
							// Other rows replaced by values of a very different scale.
							x2 := randVec(rows*s.k, uint64(rows+1000))
							for i := range x2 {
								x2[i] *= 1e4
							}
							y1 := make([]float32, s.n)
							y2 := make([]float32, rows*s.n)
							for r := 0; r < rows; r++ {
								xr := x[r*s.k : (r+1)*s.k]
								m.MatMul(y1, xr, 1)
								copy(x2[r*s.k:], xr)
								m.MatMul(y2, x2, rows)
								copy(x2[r*s.k:], randVec(s.k, uint64(r)))
								for j := 0; j < s.n; j++ {
									a, b, c := y[r*s.n+j], y1[j], y2[r*s.n+j]
									if math.Float32bits(a) != math.Float32bits(b) || math.Float32bits(c) != math.Float32bits(b) {
										t.Fatalf("%v %dx%d split=%v rows=%d: row %d col %d: batch %x, alone %x, other rows changed %x",
											dt, s.n, s.k, split, rows, r, j, math.Float32bits(a), math.Float32bits(b), math.Float32bits(c))
									}
								}
							}
						}
					})
				}
			}
		}
	})
}

// TestSplitChangesNoBit compares split and unsplit products of a matrix with many panels, many
// times in a row, so that offers taken, retracted and slept through all occur; and checks that
// a thread cap of 1 (no split) gives the same bits too.
func TestSplitChangesNoBit(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("GOMAXPROCS=1: products are never split")
	}
	forEachPath(t, func(t *testing.T) {
		for _, dt := range []DType{F32, BF16} {
			m, _ := testMatrix(dt, 999, 200, 7)
			for _, rows := range []int{1, 6} {
				x := randVec(rows*200, 8)
				a := make([]float32, rows*999)
				b := make([]float32, rows*999)
				withSplit(false, func() { m.MatMul(a, x, rows) })
				for round := 0; round < 200; round++ {
					clear(b)
					withSplit(true, func() {
						if round == 199 {
							prev := SetMaxThreads(1)
							defer SetMaxThreads(prev)
						}
						m.MatMul(b, x, rows)
					})
					for i := range a {
						if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
							t.Fatalf("%v rows=%d round %d: element %d: unsplit %g, split %g", dt, rows, round, i, a[i], b[i])
						}
					}
				}
			}
		}
	})
}

func TestSetMaxThreads(t *testing.T) {
	prev := SetMaxThreads(1)
	defer SetMaxThreads(prev)
	if got := SetMaxThreads(3); got != 1 {
		t.Fatalf("SetMaxThreads returned %d, want the cap set before (1)", got)
	}
	if got := SetMaxThreads(0); got != 3 {
		t.Fatalf("SetMaxThreads returned %d, want 3", got)
	}
	if got := SetMaxThreads(0); got != runtime.GOMAXPROCS(0) {
		t.Fatalf("default cap reported as %d, want GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
}

// TestZeroSizes: K=0 gives zeros (an empty sum), N=0 and rows=0 write nothing.
func TestZeroSizes(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		y := []float32{1, 2, 3}
		NewF32(nil, 3, 0).MatMul(y, nil, 1)
		if y[0] != 0 || y[1] != 0 || y[2] != 0 {
			t.Fatalf("K=0: got %v, want zeros", y)
		}
		y = []float32{5}
		NewBF16(nil, 0, 4).MatMul(y, make([]float32, 4), 1)
		NewF32(make([]float32, 4), 1, 4).MatMul(y, nil, 0)
		if y[0] != 5 {
			t.Fatalf("N=0 or rows=0 wrote %v", y)
		}
	})
}

// TestLoadF32 reloads a matrix in place: its rows then read back as the new weights, and a
// bf16 matrix or a wrong length is refused.
func TestLoadF32(t *testing.T) {
	m, _ := testMatrix(F32, 21, 5, 1)
	_, w := testMatrix(F32, 21, 5, 2)
	if err := m.LoadF32(w); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 5)
	for j := 0; j < 21; j++ {
		m.Row(got, j)
		if !slices.Equal(got, w[j*5:(j+1)*5]) {
			t.Fatalf("row %d after LoadF32: got %v want %v", j, got, w[j*5:(j+1)*5])
		}
	}
	if err := m.LoadF32(w[1:]); err == nil {
		t.Error("LoadF32 with a short slice: no error")
	}
	b, _ := testMatrix(BF16, 21, 5, 1)
	if err := b.LoadF32(w); err == nil {
		t.Error("LoadF32 into a bf16 matrix: no error")
	}
}

func TestRow(t *testing.T) {
	for _, dt := range []DType{F32, BF16} {
		m, w := testMatrix(dt, 37, 11, 3)
		got := make([]float32, 11)
		for j := 0; j < 37; j++ {
			m.Row(got, j)
			if !slices.Equal(got, w[j*11:(j+1)*11]) {
				t.Fatalf("%v row %d: got %v want %v", dt, j, got, w[j*11:(j+1)*11])
			}
		}
	}
}

// TestDotAxpy checks both primitives over lengths around every vector width and unroll (tails
// of 0..15 after 0, 1, 4 vectors) against float64, with the same worst-case bound as MatMul.
func TestDotAxpy(t *testing.T) {
	var lengths []int
	for n := 0; n <= 80; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 127, 128, 1000, 4099)
	forEachPath(t, func(t *testing.T) {
		for _, n := range lengths {
			a, b := randVec(n+3, uint64(n)), randVec(n+3, uint64(n+7))
			var want, bound float64
			for i := 0; i < n; i++ {
				want += float64(a[i]) * float64(b[i])
				bound += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if got := float64(Dot(a[:n], b)); math.Abs(got-want) > float64(n+2)*0x1p-24*bound {
				t.Fatalf("Dot n=%d: got %g want %g", n, got, want)
			}
			y := slices.Clone(b)
			Axpy(y[:n], 0.75, a)
			for i := range y {
				want := b[i]
				if i < n {
					want = float32(float64(b[i]) + 0.75*float64(a[i]))
				}
				// One fused or two rounded operations: at most two roundings of terms no
				// larger than |b|+|0.75a|; untouched past n.
				tol := 0.0
				if i < n {
					tol = 0x1p-23 * (math.Abs(float64(b[i])) + math.Abs(0.75*float64(a[i])))
				}
				if d := math.Abs(float64(y[i] - want)); d > tol {
					t.Fatalf("Axpy n=%d: y[%d]=%g want %g", n, i, y[i], want)
				}
			}
		}
	})
}

// TestNoAllocation: a product, split or not, allocates nothing (the pool is started first).
func TestNoAllocation(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		for _, split := range []bool{false, true} {
			m, _ := testMatrix(BF16, 172, 64, 1)
			x, y := randVec(4*64, 1), make([]float32, 4*172)
			withSplit(split, func() {
				m.MatMul(y, x, 4)
				if n := testing.AllocsPerRun(20, func() { m.MatMul(y, x, 4) }); n != 0 {
					t.Errorf("split=%v: %v allocations per MatMul", split, n)
				}
			})
		}
	})
}

// TestPathsFollowCPU fails if the CPU advertises a feature set whose path was not registered, so
// that no path the machine can run goes untested by the loops above.
func TestPathsFollowCPU(t *testing.T) {
	if !hasAsm {
		t.Skip("built without assembly paths (not amd64, or -tags purego)")
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	var flags []string
	for _, line := range strings.Split(string(info), "\n") {
		if strings.HasPrefix(line, "flags") {
			flags = strings.Fields(line)
			break
		}
	}
	have := Paths()
	want := map[string]bool{
		"avx2":   slices.Contains(flags, "avx2") && slices.Contains(flags, "fma"),
		"avx512": slices.Contains(flags, "avx512f"),
		"go":     true,
	}
	for name, w := range want {
		if slices.Contains(have, name) != w {
			t.Errorf("path %s: registered=%v, CPU flags say %v (paths %v)", name, !w, w, have)
		}
	}
	if have[len(have)-1] != "go" {
		t.Errorf("paths %v: portable path must be last", have)
	}
}

func TestSetPathUnknown(t *testing.T) {
	if err := SetPath("sse9"); err == nil || !strings.Contains(err.Error(), "sse9") {
		t.Fatalf("SetPath(sse9) = %v, want an error naming it", err)
	}
}

func TestBF16RoundTrip(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{1 + 0x1p-8, 0x3f80},           // tie, rounds to even (down)
		{1 + 0x1p-7 + 0x1p-8, 0x3f82},  // tie, rounds to even (up)
		{float32(math.Inf(1)), 0x7f80}, // infinity stays infinity
	}
	for _, c := range cases {
		if got := F32ToBF16(c.f); got != c.want {
			t.Errorf("F32ToBF16(%g) = %#x want %#x", c.f, got, c.want)
		}
	}
}

// TestAnyRowCount: MatMul and MatMulEach take any number of rows, not only the 1..32 a verify
// block or a prompt chunk uses: products of 33 and 70 rows (past any chunk a caller might
// cut) give every row the bits of its one-row product, split across threads or not. Forwards
// rely on this when a part of a long block or a draft's context write exceeds 32 rows.
func TestAnyRowCount(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		for _, dt := range []DType{F32, BF16} {
			for si, s := range []struct{ n, k int }{{17, 3}, {172, 64}, {200, 300}} {
				m, _ := testMatrix(dt, s.n, s.k, uint64(si))
				m2, _ := testMatrix(dt, s.n+5, s.k, uint64(si+100))
				for _, split := range []bool{false, true} {
					withSplit(split, func() {
						for _, rows := range []int{33, 70} {
							x := randVec(rows*s.k, uint64(rows))
							y := make([]float32, rows*s.n)
							m.MatMul(y, x, rows)
							ya, yb := make([]float32, rows*s.n), make([]float32, rows*m2.N)
							if err := MatMulEach(x, rows, Product{M: m, Y: ya}, Product{M: m2, Y: yb}); err != nil {
								t.Fatal(err)
							}
							y1, y2 := make([]float32, s.n), make([]float32, m2.N)
							bitsEqual := func(a, b []float32) bool {
								return slices.EqualFunc(a, b, func(u, v float32) bool { return math.Float32bits(u) == math.Float32bits(v) })
							}
							for r := 0; r < rows; r++ {
								m.MatMul(y1, x[r*s.k:(r+1)*s.k], 1)
								m2.MatMul(y2, x[r*s.k:(r+1)*s.k], 1)
								if !bitsEqual(y[r*s.n:(r+1)*s.n], y1) || !bitsEqual(ya[r*s.n:(r+1)*s.n], y1) || !bitsEqual(yb[r*m2.N:(r+1)*m2.N], y2) {
									t.Fatalf("%v %dx%d split=%v rows=%d: row %d differs from its one-row product", dt, s.n, s.k, split, rows, r)
								}
							}
						}
					})
				}
			}
		}
	})
}
