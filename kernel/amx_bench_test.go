//go:build amd64 && !purego

package kernel

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkAMX compares the amx path (with its 2 activation planes, and 1 to price the split) and avx512 on bf16
// products of Qwen3-0.6B's shapes for 1 to 16 rows, one thread, weights cold (copies spanning
// 128 MiB). The variants of one shape and row count run next to each other, so that a shared
// machine's load shifts them alike. MB/s is weight bytes.
func BenchmarkAMX(b *testing.B) {
	if !slices.Contains(Paths(), "amx") {
		b.Skipf("no amx path: %s", AMXStatus())
	}
	prevPath, prevThreads, prevPasses := Path(), SetMaxThreads(1), amxPasses
	defer func() { SetPath(prevPath); SetMaxThreads(prevThreads); amxPasses = prevPasses }()
	variants := []struct {
		name   string
		path   string
		passes int
	}{{"avx512", "avx512", 2}, {"amx", "amx", 2}, {"amx1", "amx", 1}}
	for _, s := range []struct{ n, k int }{{4096, 1024}, {3072, 1024}, {1024, 3072}} {
		ms := benchMatrix(BF16, s.n, s.k, 128<<20)
		for _, rows := range []int{1, 4, 8, 16} {
			x, y := randVec(rows*s.k, 1), make([]float32, rows*s.n)
			for _, v := range variants {
				b.Run(fmt.Sprintf("%dx%d/rows=%d/%s", s.n, s.k, rows, v.name), func(b *testing.B) {
					if err := SetPath(v.path); err != nil {
						b.Fatal(err)
					}
					amxPasses = v.passes
					b.SetBytes(ms[0].Bytes())
					for i := 0; i < b.N; i++ {
						ms[i%len(ms)].MatMul(y, x, rows)
					}
				})
			}
		}
	}
}

// BenchmarkSplitBF16 measures the activation split of one product of 16 rows, in Go and with
// the generated splitter.
func BenchmarkSplitBF16(b *testing.B) {
	if !slices.Contains(Paths(), "amx") {
		b.Skipf("no amx path: %s", AMXStatus())
	}
	for _, k := range []int{1024, 3072} {
		for _, f := range []struct {
			name  string
			split func(dst []uint16, x []float32, rows, k int)
		}{{"go", splitBF16Go}, {"asm", splitBF16Amx}} {
			b.Run(fmt.Sprintf("%d/%s", k, f.name), func(b *testing.B) {
				const rows = 16
				x := randVec(rows*k, 1)
				h := make([]uint16, amxPlanes*rows*amxRowLen(k))
				for i := 0; i < b.N; i++ {
					f.split(h, x, rows, k)
				}
			})
		}
	}
}

// BenchmarkAMXWarm measures the kernels on weights that stay in L2 (512 KiB), one thread: the
// compute ceiling, without memory.
func BenchmarkAMXWarm(b *testing.B) {
	if !slices.Contains(Paths(), "amx") {
		b.Skipf("no amx path: %s", AMXStatus())
	}
	prevPath, prevThreads, prevPasses := Path(), SetMaxThreads(1), amxPasses
	defer func() { SetPath(prevPath); SetMaxThreads(prevThreads); amxPasses = prevPasses }()
	const n, k = 256, 1024
	m := benchMatrix(BF16, n, k, 0)[0]
	for _, rows := range []int{1, 16} {
		x, y := randVec(rows*k, 1), make([]float32, rows*n)
		for _, v := range []struct {
			name   string
			path   string
			passes int
		}{{"avx512", "avx512", 2}, {"amx", "amx", 2}, {"amx1", "amx", 1}} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, v.name), func(b *testing.B) {
				if err := SetPath(v.path); err != nil {
					b.Fatal(err)
				}
				amxPasses = v.passes
				b.SetBytes(m.Bytes())
				for i := 0; i < b.N; i++ {
					m.MatMul(y, x, rows)
				}
			})
		}
	}
}

// BenchmarkAMXDecode streams one-row bf16 products over 1 GiB of 3072x1024 matrices in
// huge-page weight memory (far past L3), as a decode step streams its weights: on avx512, on
// amx as it decodes (amxEmuBF16P3, the tiles' bits with AVX-512 FMAs) and on amx's tile
// kernels, in turn and mirrored within each iteration so that a shared machine's load falls
// on all alike, on all threads and on one. The metrics are the medians over iterations of
// each variant's GB/s and of the per-iteration ratios to avx512 (use -benchtime=Nx).
func BenchmarkAMXDecode(b *testing.B) {
	if !slices.Contains(Paths(), "amx") {
		b.Skipf("no amx path: %s", AMXStatus())
	}
	prevPath := Path()
	defer SetPath(prevPath)
	defer func(v bool) { amxEmu = v }(amxEmu)
	const n, k = 3072, 1024
	m := benchMatrix(BF16, n, k, 0)[0]
	var ms []*Matrix
	for int64(len(ms))*m.Bytes() < 1<<30 {
		c := *m
		c.mem = nil
		c.bf16 = allocWeights[uint16](&c, len(m.bf16))
		copy(c.bf16, m.bf16)
		ms = append(ms, &c)
	}
	x, y := randVec(k, 1), make([]float32, n)
	// Variants 0-2 on all threads, 3-5 the same on one.
	names := [3]string{"avx512", "amx", "amxtiles"}
	step := func(v int) float64 {
		path := "amx"
		if v%3 == 0 {
			path = "avx512"
		}
		if err := SetPath(path); err != nil {
			b.Fatal(err)
		}
		amxEmu = v%3 != 2
		if v >= 3 {
			defer SetMaxThreads(SetMaxThreads(1))
		}
		start := time.Now()
		for _, m := range ms {
			m.MatMul(y, x, 1)
		}
		return float64(len(ms)) * float64(m.Bytes()) / time.Since(start).Seconds() / 1e9
	}
	for v := range 3 {
		step(v) // warm: pages faulted in, pool started
	}
	var gbs, ratio [6][]float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []int{0, 1, 2, 3, 4, 5}
		if i%2 == 1 {
			order = []int{5, 4, 3, 2, 1, 0}
		}
		for _, v := range order {
			gbs[v] = append(gbs[v], step(v))
		}
		for v := range 6 {
			ratio[v] = append(ratio[v], gbs[v][i]/gbs[v/3*3][i])
		}
	}
	b.StopTimer()
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	for v := range 6 {
		name := names[v%3]
		if v >= 3 {
			name += "-1thr"
		}
		b.ReportMetric(med(gbs[v]), name+"GB/s")
		if v%3 != 0 {
			b.ReportMetric(med(ratio[v]), name+"/avx512")
		}
	}
	runtime.KeepAlive(ms)
}
