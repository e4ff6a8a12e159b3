//go:build amd64 && !purego

package kernel

import (
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
	// maxF32, siluMul, dotsRows, axpyRows, sum.
	if checked != 20 {
		t.Errorf("checked %d x256 functions, want 20 (was the generator changed?)", checked)
	}
}
