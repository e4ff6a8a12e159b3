package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// expRef is exp of the float32 argument ExpShift forms, in float64.
func expRef(v, shift, scale float32) float64 { return math.Exp(float64((v - shift) * scale)) }

// TestExpShiftAccuracy compares every path with math.Exp over the softmax range, sweeping the
// argument densely through [-110, 0] (covering both reduction boundaries of every n, the
// denormal range and the flush to zero) plus random scores with a shift and scale. The bound
// 2e-7 relative is under 1.7 ulp: a wrong coefficient, rounding mode or exponent shows as errors
// of 1e-5 or more. Below the smallest normal float32 the result may be off by one denormal step.
func TestExpShiftAccuracy(t *testing.T) {
	var src []float32
	for x := float32(-110); x <= 0; x += 1.0 / 1024 {
		src = append(src, x)
	}
	for _, x := range []float32{0, -0.34657359, 0.34657359 - 0.6931472, -87.33655, -103.27893, -1e30, float32(math.Inf(-1))} {
		src = append(src, x)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	scores := make([]float32, 4099)
	for i := range scores {
		scores[i] = float32(rng.NormFloat64() * 20)
	}
	cases := []struct {
		name         string
		src          []float32
		shift, scale float32
	}{
		{"sweep", src, 0, 1},
		{"scores", scores, 57.3, 0.35355339},
		{"scores-unscaled", scores, 80, 1},
	}
	const tol = 2e-7
	forEachPath(t, func(t *testing.T) {
		for _, c := range cases {
			dst := make([]float32, len(c.src))
			sum := ExpShift(dst, c.src, c.shift, c.scale)
			var want float64
			worst := 0.0
			for i, v := range c.src {
				ref := expRef(v, c.shift, c.scale)
				want += ref
				got := float64(dst[i])
				var bad bool
				if ref >= 0x1p-126 {
					e := math.Abs(got-ref) / ref
					worst = max(worst, e)
					bad = e > tol
				} else {
					bad = math.Abs(got-ref) > 0x1p-149
				}
				if bad {
					t.Fatalf("%s: exp((%g-%g)*%g): got %g, want %g", c.name, v, c.shift, c.scale, got, ref)
				}
			}
			// A float32 sum of n positive terms is within n*2^-24 relative of the exact one.
			if e := math.Abs(float64(sum)-want) / want; e > float64(len(c.src))*0x1p-24 {
				t.Errorf("%s: sum %g, want %g (rel error %g)", c.name, sum, want, e)
			}
			t.Logf("%s: worst relative error %.3g", c.name, worst)
		}
	})
}

// TestExpShiftTailsAndOverflow runs every length 0..70 so that each path's block, single-vector
// and masked tail code is used, checks that the elements past len(dst) are neither read into the
// sum nor written, that the result does not depend on the length of the call (elementwise),
// and that large arguments give +Inf.
func TestExpShiftTailsAndOverflow(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		src := randVec(80, 7)
		full := make([]float32, len(src))
		ExpShift(full, src, 3, 1)
		for n := 0; n <= 70; n++ {
			dst := make([]float32, 80)
			for i := range dst {
				dst[i] = -1
			}
			sum := ExpShift(dst[:n], src, 3, 1)
			var want float32
			for i := 0; i < n; i++ {
				if dst[i] != full[i] {
					t.Fatalf("n=%d: dst[%d] = %g, want %g as in a call over all elements", n, i, dst[i], full[i])
				}
				want += dst[i]
			}
			for i := n; i < len(dst); i++ {
				if dst[i] != -1 {
					t.Fatalf("n=%d: wrote dst[%d] past the end", n, i)
				}
			}
			if math.Abs(float64(sum-want)) > 1e-6*float64(want)+1e-30 {
				t.Fatalf("n=%d: sum %g, elements add to %g", n, sum, want)
			}
		}
		big := []float32{89, 100, float32(math.Inf(1))}
		out := make([]float32, len(big))
		if s := ExpShift(out, big, 0, 1); !math.IsInf(float64(s), 1) {
			t.Errorf("sum of exp(89...) = %g, want +Inf", s)
		}
		for i, v := range out {
			if !math.IsInf(float64(v), 1) {
				t.Errorf("exp(%g) = %g, want +Inf", big[i], v)
			}
		}
	})
}

// TestExpShiftAliasAndNoAlloc checks the in-place use softmax makes of it.
func TestExpShiftAliasAndNoAlloc(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		x := randVec(37, 9)
		want := make([]float32, len(x))
		ExpShift(want, x, 2, 0.5)
		ExpShift(x, x, 2, 0.5)
		for i := range x {
			if x[i] != want[i] {
				t.Fatalf("in place: x[%d] = %g, want %g", i, x[i], want[i])
			}
		}
		if a := testing.AllocsPerRun(10, func() { ExpShift(x, x, 0, 1) }); a != 0 {
			t.Errorf("%g allocations per call", a)
		}
	})
}

func BenchmarkExpShift(b *testing.B) {
	for _, n := range []int{16, 128, 1024} {
		x := randVec(n, 1)
		dst := make([]float32, n)
		b.Run(fmt.Sprintf("%s/%d", Path(), n), func(b *testing.B) {
			var s float32
			for i := 0; i < b.N; i++ {
				s += ExpShift(dst, x, 4, 1)
			}
			probeSink = s
		})
	}
}

func TestSiluMulMatchesExpShift(t *testing.T) {
	// SiluMul must give, on each path, the bits of the scalar product, ExpShift(g, g, 0, -1) and
	// the scalar quotient, for every length (whole vectors and tails) and for arguments whose
	// exponential overflows or underflows.
	forEachPath(t, func(t *testing.T) {
		for n := 0; n <= 40; n++ {
			g := randVec(n, uint64(n)+100)
			u := randVec(n, uint64(n)+200)
			for i := range g {
				g[i] *= 20
			}
			if n > 3 {
				g[0], g[1], g[2] = -120, 95, 0
			}
			wantU := make([]float32, n)
			for i := range g {
				wantU[i] = u[i] * g[i]
			}
			e := make([]float32, n)
			ExpShift(e, g, 0, -1)
			want := make([]float32, n)
			for i := range want {
				want[i] = wantU[i] / (1 + e[i])
			}
			got := append([]float32(nil), g...)
			SiluMul(got, append([]float32(nil), u...))
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d: element %d (g=%g): SiluMul %g, want %g", n, i, g[i], got[i], want[i])
				}
			}
		}
	})
}
