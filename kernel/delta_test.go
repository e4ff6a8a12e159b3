package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDeltaRule: on every path DeltaRule gives the bits of that path's three Axpy passes per
// row, for widths with and without the one-pass kernel (multiples of 16 and not), several
// groups of 8 vectors and a lone vector after them, and decays near 0 and 1.
func TestDeltaRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (rng.Float32()*2 - 1) * scale
		}
		return v
	}
	for _, path := range Paths() {
		p := pathByName(t, path)
		for _, sh := range [][2]int{{1, 16}, {3, 48}, {128, 128}, {17, 144}, {5, 272}, {7, 7}, {2, 20}, {64, 0}, {0, 32}} {
			dk, dv := sh[0], sh[1]
			for _, decay := range []float32{-0.999, -0.31, -1e-4} {
				s, k, q, u := vec(dk*dv, 1), vec(dk, 0.2), vec(dk, 0.1), vec(dv, 0.5)
				want, wantO := slices.Clone(s), vec(dv, 3)
				got, gotO := slices.Clone(s), vec(dv, 3)
				deltaRuleAxpy(p, want, wantO, k, q, u, decay)
				withPath(t, path, func() { DeltaRule(got, gotO, k, q, u, decay) })
				if !bitsEqual(got, want) || !bitsEqual(gotO, wantO) {
					t.Errorf("%s dk=%d dv=%d decay=%g: DeltaRule differs from three Axpy passes", path, dk, dv, decay)
				}
			}
		}
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func pathByName(t *testing.T, name string) *impl {
	for _, p := range registry {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no path %s", name)
	return nil
}

func withPath(t *testing.T, name string, fn func()) {
	prev := Path()
	if err := SetPath(name); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = SetPath(prev) }()
	fn()
}
