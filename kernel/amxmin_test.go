//go:build amd64 && !purego

package kernel

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// TestAMXTimes is a measuring tool, not a check: with DFLASH_AMX_TIMES=1 (threads: 1 unless
// DFLASH_AMX_THREADS=2) it times bf16 products of Qwen3-0.6B's shapes on avx512, amx (two
// planes, hi + lo) and amx with three planes and one (x as bf16: the cost of the split), alternating the variants and keeping each one's
// fastest of 15 rounds of 10 products, which a shared machine's load disturbs least. Weights
// span 128 MiB.
func TestAMXTimes(t *testing.T) {
	if os.Getenv("DFLASH_AMX_TIMES") != "1" {
		t.Skip("a timing tool: set DFLASH_AMX_TIMES=1")
	}
	if !slices.Contains(Paths(), "amx") {
		t.Skipf("no amx path: %s", AMXStatus())
	}
	threads := 1
	if os.Getenv("DFLASH_AMX_THREADS") == "2" {
		threads = 2
	}
	prevThreads, prevPath, prevPasses := SetMaxThreads(threads), Path(), amxPasses
	defer func() { SetMaxThreads(prevThreads); SetPath(prevPath); amxPasses = prevPasses }()
	prevPlanes := amxPlanes
	defer func() { amxPlanes = prevPlanes }()
	vs := []struct {
		name           string
		path           string
		planes, passes int
	}{{"avx512", "avx512", 2, 2}, {"amx", "amx", 2, 2}, {"amx-3planes", "amx", 3, 3}, {"amx-1plane", "amx", 2, 1}}
	for _, s := range []struct{ n, k int }{{4096, 1024}, {3072, 1024}, {1024, 3072}} {
		ms := benchMatrix(BF16, s.n, s.k, 128<<20)
		for _, rows := range []int{1, 4, 8, 16} {
			x, y := randVec(rows*s.k, 1), make([]float32, rows*s.n)
			best := make([]time.Duration, len(vs))
			for rep := 0; rep < 15; rep++ {
				for i, v := range vs {
					if err := SetPath(v.path); err != nil {
						t.Fatal(err)
					}
					amxPlanes, amxPasses = v.planes, v.passes
					t0 := time.Now()
					for j := 0; j < 10; j++ {
						ms[j%len(ms)].MatMul(y, x, rows)
					}
					if d := time.Since(t0) / 10; best[i] == 0 || d < best[i] {
						best[i] = d
					}
				}
			}
			line := fmt.Sprintf("%dx%d rows=%2d threads=%d:", s.n, s.k, rows, threads)
			for i, v := range vs {
				gbs := float64(ms[0].Bytes()) / best[i].Seconds() / 1e9
				line += fmt.Sprintf("  %s %7.1fµs %5.1fGB/s", v.name, float64(best[i].Nanoseconds())/1e3, gbs)
			}
			t.Log(line)
		}
	}
}
