package kernel

import (
	"math"
	"testing"
)

// TestSplitBF16Exact: the three bf16 planes of a normal activation sum to it exactly (each
// plane's value is exact in f32, and so are the partial sums from the smallest), rows are
// zero-padded to whole K-blocks, and Inf, NaN and values that would round to Inf stay whole in
// the first plane.
func TestSplitBF16Exact(t *testing.T) {
	prev := amxPlanes
	defer func() { amxPlanes = prev }()
	amxPlanes = 3
	const rows, k = 3, 45
	x := randVec(rows*k, 1)
	for i := range x {
		x[i] *= float32(math.Pow(2, float64(i%60-30)))
	}
	x[7] = math.MaxFloat32
	x[8] = -math.MaxFloat32
	x[9] = float32(math.Inf(-1))
	x[10] = float32(math.NaN())
	x[11] = math.Float32frombits(0x7f800001) // a NaN whose payload is below bf16's bits
	x[12] = 0x1p-100
	kp := amxRowLen(k)
	h := make([]uint16, 3*rows*kp)
	for i := range h {
		h[i] = 0xffff // padding must be overwritten
	}
	splitBF16Go(h, x, rows, k)
	for r := 0; r < rows; r++ {
		for i := 0; i < kp; i++ {
			var p [3]float32
			for q := range p {
				p[q] = BF16ToF32(h[amxIndex(rows, r, q, i)])
			}
			if i >= k {
				if p != [3]float32{} {
					t.Fatalf("row %d pad %d: planes %v", r, i, p)
				}
				continue
			}
			v := x[r*k+i]
			sum := p[0] + (p[1] + p[2])
			switch {
			case math.IsNaN(float64(v)):
				if !math.IsNaN(float64(p[0])) || p[1] != 0 || p[2] != 0 {
					t.Fatalf("x[%d]=NaN: planes %v", r*k+i, p)
				}
			case math.Float32bits(sum) != math.Float32bits(v) || math.IsInf(float64(p[0]), 0) && !math.IsInf(float64(v), 0):
				t.Fatalf("x[%d]=%g (%x): planes %v sum to %g", r*k+i, v, math.Float32bits(v), p, sum)
			}
		}
	}
}

// TestSplitBF16TwoPlanes: the amx path's two planes leave at most 2^-17 |x| of a normal x out
// and their magnitudes sum to at most (1+2^-7)|x| (the bounds derived in bf16split.go), and the
// first bound is nearly reached, so it is not slack.
func TestSplitBF16TwoPlanes(t *testing.T) {
	prev := amxPlanes
	defer func() { amxPlanes = prev }()
	amxPlanes = 2
	const k = 4096
	x := randVec(k, 3)
	for i := range x {
		x[i] *= float32(math.Pow(2, float64(i%200-100)))
	}
	x[0] = 1 + 0x1p-9 + 0x1p-17 // the worst case: hi = 1, lo ties to even at 2^-9
	h := make([]uint16, 2*amxRowLen(k))
	splitBF16Go(h, x, 1, k)
	worst := 0.0
	for i, v := range x {
		hi, lo := float64(BF16ToF32(h[amxIndex(1, 0, 0, i)])), float64(BF16ToF32(h[amxIndex(1, 0, 1, i)]))
		ax := math.Abs(float64(v))
		rel := math.Abs(float64(v)-hi-lo) / ax
		if rel > 0x1p-17 || math.Abs(hi)+math.Abs(lo) > (1+0x1p-7)*ax {
			t.Fatalf("x[%d]=%g: hi %g lo %g: residual %g of |x|, |hi|+|lo| = %g |x|", i, v, hi, lo, rel, (math.Abs(hi)+math.Abs(lo))/ax)
		}
		worst = max(worst, rel)
	}
	if worst < 0x1p-17*(1-0x1p-8) {
		t.Fatalf("largest residual %g of |x|: the worst case 2^-17 was not reached", worst)
	}
}
