package int8exp

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dflash/dflash/kernel"
)

func normal(n int, seed uint64, sigma float32) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = sigma * float32(rng.NormFloat64())
	}
	return x
}

// symQuant is an independent restatement of the symmetric per-row quantizer: codes in
// [-127, 127] rounded to nearest with halves up, and the scale maxabs/127, with the same float32
// operations as the package.
func symQuant(x []float32) ([]int32, float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	q := make([]int32, len(x))
	if amax == 0 {
		return q, 0
	}
	s := amax / 127
	inv := 1 / s
	for i, v := range x {
		q[i] = int32(math.Floor(float64(float32(v*inv)+128.5))) - 128
	}
	return q, s
}

// naive computes the int8 product from row-major inputs with no panels, no u8 offset and no
// correction term: the exact integer dot product of the codes, then the two scales. The kernels
// must agree bitwise: their offset and correction cancel exactly in int32, and the epilogue
// multiplies in the same order.
func naive(w []float32, n, k int, x []float32, rows int) []float32 {
	y := make([]float32, rows*n)
	qw := make([][]int32, n)
	sw := make([]float32, n)
	for j := range n {
		qw[j], sw[j] = symQuant(w[j*k : (j+1)*k])
	}
	for r := range rows {
		qx, sx := symQuant(x[r*k : (r+1)*k])
		for j := range n {
			var acc int32
			for i := range k {
				acc += qx[i] * qw[j][i]
			}
			y[r*n+j] = float32(acc) * sw[j] * sx
		}
	}
	return y
}

// TestMatMulExact covers the layout's tails: N not a multiple of 16 (partial last panel) and
// below 4 panels (single-panel loop only), K not a multiple of 4 or 8 (zero padding), row
// counts of 1, below, at and above a 16-row block, and the 2-goroutine split (N >= 128).
func TestMatMulExact(t *testing.T) {
	for _, c := range []struct{ n, k, rows int }{
		{1, 1, 1}, {15, 3, 1}, {16, 8, 1}, {17, 9, 2}, {64, 64, 1}, {70, 100, 3}, {100, 7, 16},
		{200, 130, 1}, {200, 130, 17}, {256, 96, 33}, {48, 1000, 16},
	} {
		w := normal(c.n*c.k, uint64(c.n*c.k), 0.05)
		x := normal(c.rows*c.k, uint64(c.rows), 1)
		x[0] = 0 // exercise a zero activation next to nonzero ones
		m, err := Quantize(w, c.n, c.k)
		if err != nil {
			t.Fatal(err)
		}
		want := naive(w, c.n, c.k, x, c.rows)
		for _, threads := range []int{1, 2} {
			y := make([]float32, c.rows*c.n)
			if err := m.MatMul(y, x, c.rows, m.NewScratch(), threads); err != nil {
				t.Fatal(err)
			}
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%dx%d rows=%d threads=%d vnni=%v: y[%d] = %v, want %v", c.n, c.k, c.rows, threads, HasVNNI, i, y[i], want[i])
				}
			}
		}
	}
}

// TestBatchInvariant: a row's result is bitwise the same alone (matrix-vector kernel) and in a
// 16-row block (16-row kernel), since integer sums are exact and activation scales per row.
func TestBatchInvariant(t *testing.T) {
	const n, k, rows = 96, 200, 16
	m, err := Quantize(normal(n*k, 1, 0.05), n, k)
	if err != nil {
		t.Fatal(err)
	}
	x := normal(rows*k, 2, 1)
	all := make([]float32, rows*n)
	if err := m.MatMul(all, x, rows, m.NewScratch(), 1); err != nil {
		t.Fatal(err)
	}
	one := make([]float32, n)
	for r := range rows {
		if err := m.MatMul(one, x[r*k:(r+1)*k], 1, m.NewScratch(), 1); err != nil {
			t.Fatal(err)
		}
		for j := range one {
			if math.Float32bits(one[j]) != math.Float32bits(all[r*n+j]) {
				t.Fatalf("row %d, output %d: alone %v, in a block %v", r, j, one[j], all[r*n+j])
			}
		}
	}
}

func TestQuantizeRejects(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		name string
		w    []float32
		n, k int
	}{
		{"short", make([]float32, 5), 2, 3},
		{"empty", nil, 0, 4},
		{"inf", []float32{1, inf}, 1, 2},
		{"huge K", make([]float32, 70000), 1, 70000}, // 70000*255*127 >= 2^31
	} {
		if _, err := Quantize(c.w, c.n, c.k); err == nil {
			t.Errorf("%s: Quantize succeeded, want an error", c.name)
		}
	}
	m, _ := Quantize(make([]float32, 8), 2, 4)
	if err := m.MatMul(make([]float32, 1), make([]float32, 4), 1, m.NewScratch(), 1); err == nil {
		t.Error("MatMul with a short y succeeded, want an error")
	}
}

// relErr is ||y - ref|| / ||ref||.
func relErr(y, ref []float32) float64 {
	var num, den float64
	for i := range y {
		d := float64(y[i]) - float64(ref[i])
		num += d * d
		den += float64(ref[i]) * float64(ref[i])
	}
	return math.Sqrt(num / den)
}

// TestAccuracy reports the error of int8 and bf16 weights against the f32 product (relative L2
// over all outputs) and fails if int8 is grossly off. Gaussian weights and activations: one
// quantization step is about 3.3 sigma/127 for K=1024 samples, so each operand carries an rms
// error of about 0.75% of its sigma and the product about 1%. The outlier case puts 1 channel
// in 256 at 50 sigma, as LLM activations have: the per-row activation scale is then set by the
// outliers and the error grows several-fold; that, not the weights, is the accuracy risk.
func TestAccuracy(t *testing.T) {
	const n, k, rows = 512, 1024, 4
	w := normal(n*k, 3, 0.02)
	outliers := normal(rows*k, 4, 1)
	for i := 0; i < len(outliers); i += 256 {
		outliers[i] *= 50
	}
	for _, c := range []struct {
		name  string
		x     []float32
		bound float64
	}{
		{"gaussian", normal(rows*k, 4, 1), 0.02},
		{"outliers", outliers, 0.2},
	} {
		ref := make([]float32, rows*n)
		kernel.NewF32(w, n, k).MatMul(ref, c.x, rows)
		wb := make([]uint16, len(w))
		for i, v := range w {
			wb[i] = kernel.F32ToBF16(v)
		}
		yb := make([]float32, rows*n)
		kernel.NewBF16(wb, n, k).MatMul(yb, c.x, rows)
		m, err := Quantize(w, n, k)
		if err != nil {
			t.Fatal(err)
		}
		yq := make([]float32, rows*n)
		if err := m.MatMul(yq, c.x, rows, m.NewScratch(), 1); err != nil {
			t.Fatal(err)
		}
		// Weight-only int8 (f32 activations times dequantized weights) separates the two
		// error sources: it is what a decode kernel that widens int8 to f32 would compute.
		wd := make([]float32, len(w))
		for j := range n {
			q, s := symQuant(w[j*k : (j+1)*k])
			for i := range k {
				wd[j*k+i] = float32(q[i]) * s
			}
		}
		yw := make([]float32, rows*n)
		kernel.NewF32(wd, n, k).MatMul(yw, c.x, rows)
		eq, ew, eb := relErr(yq, ref), relErr(yw, ref), relErr(yb, ref)
		t.Logf("%s activations, %dx%d (vnni=%v): relative L2 error vs f32: int8 x int8 %.3g%%, int8 weights x f32 %.3g%%, bf16 weights x f32 %.3g%%",
			c.name, n, k, HasVNNI, 100*eq, 100*ew, 100*eb)
		if !(eq < c.bound) {
			t.Errorf("%s: int8 relative error %.3g, want < %g", c.name, eq, c.bound)
		}
	}
}
