//go:build amd64 && !purego

package kernel

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// withAMX runs f with the amx path active, or skips the test saying why the CPU or OS has none.
func withAMX(t *testing.T, f func()) {
	t.Helper()
	if !slices.Contains(Paths(), "amx") {
		t.Skipf("no amx path: %s", AMXStatus())
	}
	prev := Path()
	defer SetPath(prev)
	if err := SetPath("amx"); err != nil {
		t.Fatal(err)
	}
	f()
}

// TestAMXStatus: the status agrees with the registry, and the amx path comes first when present.
func TestAMXStatus(t *testing.T) {
	has := slices.Contains(Paths(), "amx")
	if got := strings.HasPrefix(AMXStatus(), "available"); got != has {
		t.Fatalf("AMXStatus %q, but amx registered = %v", AMXStatus(), has)
	}
	if has && Paths()[0] != "amx" {
		t.Fatalf("paths %v: amx is not preferred", Paths())
	}
	t.Logf("AMX: %s", AMXStatus())
}

// amxShapes: K of every tail of the 16-pair blocks (odd and even, below one block and past
// several), N of 1 to 3 panels with and without a partial last one.
func amxShapes() (ns, ks []int) {
	for k := 1; k <= 34; k++ {
		ks = append(ks, k)
	}
	ks = append(ks, 63, 64, 65, 95, 130, 1001)
	return []int{1, 16, 17, 33, 48, 50}, ks
}

// TestAMXMatchesReference compares the amx path with a float64 reference for 1..32 rows, every
// K tail and N tail, with two planes (hi + lo) and with three, each within its amxRel bound: the
// float32 bound of TestMatMulMatchesReference times 1+2^-7, plus for two planes their
// activation term 2^-17 sum|w*x| (derived in bf16split.go). A wrong lane, row, tail or plane is
// off by O(sum|w*x|), and one plane alone (x rounded to bf16) by about 2^-9 of it
// (TestAMXOnePlaneIsInexact shows that the bound catches it). The same pass checks that a
// row's result is bitwise the same for every row count 1..32: the products with fewer rows
// take a prefix of the 32 rows' inputs.
func TestAMXMatchesReference(t *testing.T) {
	withAMX(t, func() {
		prev := amxPlanes
		defer func() { amxPlanes = prev }()
		ns, ks := amxShapes()
		for _, planes := range []int{2, 3} {
			amxPlanes = planes
			for _, n := range ns {
				for _, k := range ks {
					if bad := amxCheck(t, n, k); bad != "" {
						t.Fatalf("%d planes: %s", planes, bad)
					}
				}
			}
		}
	})
}

// TestAMXOnePlaneIsInexact: with activations rounded to a single bf16 plane the amx products
// leave TestAMXMatchesReference's bound, so that test would catch a kernel that dropped a plane
// (the one-plane kernel reads each row's first plane only).
func TestAMXOnePlaneIsInexact(t *testing.T) {
	withAMX(t, func() {
		prev, prevPlanes := amxPasses, amxPlanes
		defer func() { amxPasses, amxPlanes = prev, prevPlanes }()
		amxPasses, amxPlanes = 1, 2 // the two-plane bound, the looser one
		if bad := amxCheck(t, 33, 130); bad == "" {
			t.Fatal("one bf16 plane stayed within the two-plane bound: the reference check cannot see a lost plane")
		}
	})
}

// amxCheck runs the n x k product for rows 1..32 with the active path and returns the first
// disagreement with the float64 reference (amxRel's bound for amxPlanes) or with the 32-row
// bits.
func amxCheck(t *testing.T, n, k int) string {
	return amxCheckTol(t, n, k, amxRel(k, amxPlanes))
}

// amxCheckTol is amxCheck with the bound rel*sum|w*x|.
func amxCheckTol(t *testing.T, n, k int, rel float64) string {
	t.Helper()
	const maxRows = 32
	m, w := testMatrix(BF16, n, k, uint64(n*1000+k))
	x := randVec(maxRows*k, uint64(k))
	all := make([]float32, maxRows*n)
	m.MatMul(all, x, maxRows)
	for r := 0; r < maxRows; r++ {
		for j := 0; j < n; j++ {
			var want, bound float64
			for i := 0; i < k; i++ {
				p := float64(w[j*k+i]) * float64(x[r*k+i])
				want += p
				bound += math.Abs(p)
			}
			tol := rel * bound
			if got := float64(all[r*n+j]); math.Abs(got-want) > tol {
				return fmt.Sprintf("%dx%d y[%d][%d]=%g want %g (tol %g)", n, k, r, j, got, want, tol)
			}
		}
	}
	y := make([]float32, maxRows*n+1)
	for rows := 1; rows < maxRows; rows++ {
		y[rows*n] = 42
		m.MatMul(y, x[:rows*k], rows)
		if y[rows*n] != 42 {
			return fmt.Sprintf("%dx%d rows=%d: wrote past the output", n, k, rows)
		}
		for i := range y[:rows*n] {
			if math.Float32bits(y[i]) != math.Float32bits(all[i]) {
				return fmt.Sprintf("%dx%d rows=%d: y[%d][%d] %x, with 32 rows %x", n, k, rows, i/n, i%n, math.Float32bits(y[i]), math.Float32bits(all[i]))
			}
		}
	}
	return ""
}

// TestAMXPanelRanges: computing a product by any split of its panels into calls gives the bits
// of the whole (what the thread split relies on), for 1, 16 and 20 rows, pairs and single
// panels and the partial last one.
func TestAMXPanelRanges(t *testing.T) {
	withAMX(t, func() {
		const n, k = 150, 77 // 10 panels, the last partial
		m, _ := testMatrix(BF16, n, k, 5)
		for _, rows := range []int{1, 16, 20} {
			x := randVec(rows*k, 6)
			h := make([]uint16, amxPlanes*rows*amxRowLen(k))
			splitBF16Go(h, x, rows, k)
			whole := make([]float32, rows*n)
			panelsAMX(m, whole, h, rows, 0, m.panels())
			for step := 1; step <= 4; step++ {
				y := make([]float32, rows*n)
				for p0 := 0; p0 < m.panels(); p0 += step {
					panelsAMX(m, y, h, rows, p0, min(p0+step, m.panels()))
				}
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(whole[i]) {
						t.Fatalf("rows=%d step %d: element %d: %g, whole %g", rows, step, i, y[i], whole[i])
					}
				}
			}
		}
	})
}

// TestAMXNonFinite: an Inf or NaN activation gives what the portable path gives (Inf of the
// weight's sign, NaN), not the NaN that splitting Inf - Inf would make.
func TestAMXNonFinite(t *testing.T) {
	withAMX(t, func() {
		const n, k = 20, 40
		m, _ := testMatrix(BF16, n, k, 9)
		x := randVec(3*k, 10)
		x[3] = float32(math.Inf(1))
		x[k+5] = float32(math.NaN())
		x[2*k+7] = math.MaxFloat32 / 4 // finite, far from overflow after one product
		got, want := make([]float32, 3*n), make([]float32, 3*n)
		m.MatMul(got, x, 3)
		panelsGo(m, want, x, 3, 0, m.panels())
		for i := range got {
			g, w := float64(got[i]), float64(want[i])
			if math.IsNaN(g) != math.IsNaN(w) || math.IsInf(g, 1) != math.IsInf(w, 1) || math.IsInf(g, -1) != math.IsInf(w, -1) {
				t.Fatalf("element %d: amx %g, portable %g", i, g, w)
			}
			if !math.IsInf(w, 0) && !math.IsNaN(w) && math.Abs(g-w) > 1e-5*math.Abs(w) {
				t.Fatalf("element %d: amx %g, portable %g", i, g, w)
			}
		}
	})
}

// TestSplitBF16Asm: the generated splitters (2 planes, and 3 for tests and tools) write
// splitBF16Go's planes bitwise, for every
// tail of a row (masked loads, zero blocks) and for special values, denormals included.
func TestSplitBF16Asm(t *testing.T) {
	if !slices.Contains(Paths(), "amx") {
		t.Skipf("no amx path: %s", AMXStatus())
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffbfffff), math.MaxFloat32, -math.MaxFloat32,
		math.Float32frombits(0x7f7f8000), 0x1p-130, -0x1p-149, 0x1p-120, 0x1.fffffep-127, 1, 0x1.0081p0}
	prev := amxPlanes
	defer func() { amxPlanes = prev }()
	for _, planes := range []int{2, 3} {
		amxPlanes = planes
		testSplitBF16Asm(t, specials)
	}
}

func testSplitBF16Asm(t *testing.T, specials []float32) {
	for _, rows := range []int{1, 3, 17} {
		for k := 1; k <= 70; k++ {
			x := randVec(rows*k, uint64(k))
			for i := range x {
				x[i] *= float32(math.Pow(2, float64(i%80-40)))
				if i%7 == 3 {
					x[i] = specials[(i/7)%len(specials)]
				}
			}
			n := amxPlanes * rows * amxRowLen(k)
			want, got := make([]uint16, n), make([]uint16, n)
			for i := range got {
				got[i] = 0xffff
			}
			splitBF16Go(want, x, rows, k)
			splitBF16Amx(got, x, rows, k)
			if i := slices.Compare(got, want); i != 0 {
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("planes=%d rows=%d k=%d: element %d: asm %#04x, Go %#04x", amxPlanes, rows, k, j, got[j], want[j])
					}
				}
			}
		}
	}
}
