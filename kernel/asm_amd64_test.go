//go:build amd64 && !purego

package kernel

import (
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestAVX2KernelsUseNoAVX512 reads the generated assembly: avo may allocate Y16-Y31 (EVEX-only
// registers) for ymm code, which would make the avx2 path fault on CPUs without AVX-512 while
// passing every test on this one. Functions for the avx2 path end in x256 (and sumF32x256).
func TestAVX2KernelsUseNoAVX512(t *testing.T) {
	src, err := os.ReadFile("asm_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	evex := regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[1-7])\b|AVX512`)
	fn, checked := "", 0
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "// func ") {
			// The doc comment and "// Requires:" line before a TEXT belong to the next
			// function: attribute them to it, not to the one above.
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "// func "), "(")
			fn = "TEXT ·" + name + "(SB), (doc)"
			continue
		}
		if strings.HasPrefix(line, "TEXT ") {
			fn = line
			if strings.Contains(fn, "x256(SB)") {
				checked++
			}
			continue
		}
		if strings.Contains(fn, "x256(SB)") && evex.MatchString(line) {
			t.Errorf("%s: AVX-512 in an AVX2 kernel: %s", strings.Fields(fn)[1], strings.TrimSpace(line))
		}
	}
	// 8 panel kernels, dot, axpy, expShift, axpyRowsMax, dotRows, scoresRows, weightedRows8,
	// maxF32, siluMul, dotsRows and axpyRows (f32 and bf16 keys and values), sum, the 5
	// quantized one-row kernels, the 10 AVX-VNNI ones (1 and 2 rows) and the 2 activation
	// quantizers.
	if checked != 39 {
		t.Errorf("checked %d x256 functions, want 39 (was the generator changed?)", checked)
	}
}

// TestQuantNoVNNI: an AVX-512 CPU without AVX512_VNNI runs quantized products on the portable
// kernels, and an AVX2 CPU without AVX-VNNI on the vpmaddubsw ones, with the bits of the VNNI
// kernels.
func TestQuantNoVNNI(t *testing.T) {
	t.Run("avx512", func(t *testing.T) { testQuantWithout(t, "avx512", &hasVNNI512) })
	t.Run("avx2", func(t *testing.T) { testQuantWithout(t, "avx2", &hasAVXVNNI) })
}

func testQuantWithout(t *testing.T, path string, feature *bool) {
	if !*feature {
		t.Skip("the CPU lacks the feature: the fallback is what every test here runs")
	}
	prev := Path()
	defer SetPath(prev)
	if err := SetPath(path); err != nil {
		t.Fatal(err)
	}
	for _, qt := range quantTypes {
		const n, k, rows = 20, 512, 3
		m, err := NewQuant(qt, randBlocks(qt, n, k, 41, true), n, k)
		if err != nil {
			t.Fatal(err)
		}
		x := randVec(rows*k, 43)
		want, got := make([]float32, rows*n), make([]float32, rows*n)
		m.MatMul(want, x, rows)
		*feature = false
		m.MatMul(got, x, rows)
		*feature = true
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v element %d: fallback %v, VNNI %v", qt, i, got[i], want[i])
			}
		}
	}
}
