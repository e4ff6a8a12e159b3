//go:build amd64 && !purego

package kernel

import (
	"fmt"
	"math"
	"testing"
)

// emuBitsDiffer reports where the one-row products of m on x by the tile kernels and by
// amxEmuBF16P3 differ in their bits ("" when they agree; NaNs of either sign and payload agree).
func emuBitsDiffer(m *Matrix, x []float32) string {
	n := m.N
	tiles, emu := make([]float32, n), make([]float32, n)
	defer func(v bool) { amxEmu = v }(amxEmu)
	amxEmu = false
	m.MatMul(tiles, x, 1)
	amxEmu = true
	m.MatMul(emu, x, 1)
	for j := range n {
		a, b := tiles[j], emu[j]
		if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
			return fmt.Sprintf("%dx%d y[%d]: tiles %x (%g), emulation %x (%g)", n, m.K, j, math.Float32bits(a), a, math.Float32bits(b), b)
		}
	}
	return ""
}

// TestAMXEmuBitwise: for one row, the AVX-512 emulation gives the tile kernels' bits, over
// shapes with and without a K tail and a partial last panel, activations at scales from the
// ordinary down to where the planes and products go denormal (which AMX flushes), with
// cancelling sums, exact zeros and non-finite values.
func TestAMXEmuBitwise(t *testing.T) {
	withAMX(t, func() {
		ns, ks := amxShapes()
		for _, n := range ns {
			for _, k := range ks {
				m, _ := testMatrix(BF16, n, k, uint64(n*31+k))
				for si, scale := range []float32{1, 1e3, 1e-30, 1e-36, 1e-38} {
					x := randVec(k, uint64(k*7+si))
					for i := range x {
						x[i] *= scale
					}
					if d := emuBitsDiffer(m, x); d != "" {
						t.Fatalf("scale %g: %s", scale, d)
					}
				}
				// Cancellation: the row is a weight row's own values with alternating
				// signs, zeros and a few non-finite entries.
				x := randVec(k, uint64(k))
				for i := range x {
					switch i % 5 {
					case 0:
						x[i] = 0
					case 3:
						x[i] = -x[i-1]
					}
				}
				if d := emuBitsDiffer(m, x); d != "" {
					t.Fatalf("cancelling: %s", d)
				}
				x[k/2] = float32(math.Inf(1))
				if d := emuBitsDiffer(m, x); d != "" {
					t.Fatalf("inf: %s", d)
				}
				x[k-1] = float32(math.NaN())
				if d := emuBitsDiffer(m, x); d != "" {
					t.Fatalf("nan: %s", d)
				}
			}
		}
	})
}
