package kernel

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
)

// Benchmarks run on the active path (choose one with DFLASH_KERNEL). Matvec figures are weight
// bytes per second with the weights cold: the benchmark cycles through enough copies of the
// matrix to exceed the last-level cache, as decoding does through a model's layers.

var benchShapes = []struct{ n, k int }{{1024, 3072}, {3072, 1024}, {151936, 1024}}

// benchMatrix builds a matrix with cheap pseudo-random weights (no RNG: the vocabulary-sized
// matrix has 155M of them) and returns copies of it spanning at least span bytes.
func benchMatrix(dt DType, n, k int, span int64) []*Matrix {
	var m *Matrix
	if dt == F32 {
		w := make([]float32, n*k)
		for i := range w {
			w[i] = float32(int32(uint32(i)*2654435761)>>20) * 0x1p-12
		}
		m = NewF32(w, n, k)
	} else {
		w := make([]uint16, n*k)
		for i := range w {
			w[i] = F32ToBF16(float32(int32(uint32(i)*2654435761)>>20) * 0x1p-12)
		}
		m = NewBF16(w, n, k)
	}
	ms := []*Matrix{m}
	for int64(len(ms))*m.Bytes() < span {
		c := *m
		c.f32 = append([]float32(nil), m.f32...)
		c.bf16 = append([]uint16(nil), m.bf16...)
		ms = append(ms, &c)
	}
	return ms
}

func BenchmarkMatVec(b *testing.B) {
	for _, dt := range []DType{BF16, F32} {
		for _, s := range benchShapes {
			b.Run(fmt.Sprintf("%s/%v/%dx%d", Path(), dt, s.n, s.k), func(b *testing.B) {
				ms := benchMatrix(dt, s.n, s.k, 256<<20)
				x, y := randVec(s.k, 1), make([]float32, s.n)
				b.SetBytes(ms[0].Bytes())
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					ms[i%len(ms)].MatMul(y, x, 1)
				}
			})
		}
	}
}

func BenchmarkMatMul16(b *testing.B) {
	const rows = 16
	for _, dt := range []DType{BF16, F32} {
		for _, s := range benchShapes[:2] {
			b.Run(fmt.Sprintf("%s/%v/%dx%d", Path(), dt, s.n, s.k), func(b *testing.B) {
				m := benchMatrix(dt, s.n, s.k, 0)[0]
				x, y := randVec(rows*s.k, 1), make([]float32, rows*s.n)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					m.MatMul(y, x, rows)
				}
				flops := 2 * float64(rows) * float64(s.n) * float64(s.k) * float64(b.N)
				b.ReportMetric(flops/time.Since(start).Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkSplit measures small products with the thread split forced on and off; the
// crossover sets splitMin. Shapes are stories260K's and a few between it and Qwen3-0.6B's.
func BenchmarkSplit(b *testing.B) {
	for _, s := range []struct{ n, k, rows int }{
		{64, 64, 1}, {512, 64, 1}, {172, 64, 16}, {512, 128, 1}, {1024, 128, 1}, {1024, 256, 1}, {1024, 512, 1},
		{256, 256, 4}, {256, 256, 16}, {512, 256, 16}, {1024, 1024, 1}, {3072, 1024, 1}, {1024, 1024, 16},
	} {
		m := benchMatrix(BF16, s.n, s.k, 0)[0]
		x, y := randVec(s.rows*s.k, 1), make([]float32, s.rows*s.n)
		for _, split := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dx%d/rows=%d/work=%d/split=%v", s.n, s.k, s.rows, work(m, s.rows)>>10, split), func(b *testing.B) {
				withSplit(split, func() {
					for i := 0; i < b.N; i++ {
						m.MatMul(y, x, s.rows)
					}
				})
			})
		}
	}
}

func BenchmarkDot(b *testing.B) {
	for _, n := range []int{64, 128, 1024} {
		x, y := randVec(n, 1), randVec(n, 2)
		b.Run(fmt.Sprintf("%s/%d", Path(), n), func(b *testing.B) {
			var s float32
			for i := 0; i < b.N; i++ {
				s += Dot(x, y)
			}
			probeSink = s
		})
	}
}

func BenchmarkAxpy(b *testing.B) {
	for _, n := range []int{64, 128, 1024} {
		x, y := randVec(n, 1), randVec(n, 2)
		b.Run(fmt.Sprintf("%s/%d", Path(), n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Axpy(y, 1e-9, x)
			}
		})
	}
}

// BenchmarkProbeBandwidth reports the DRAM read ceiling the matvec figures compare to.
func BenchmarkProbeBandwidth(b *testing.B) {
	var gbs float64
	for i := 0; i < b.N; i++ {
		gbs = ProbeBandwidth(512<<20, 300*time.Millisecond)
	}
	b.ReportMetric(gbs, "GB/s")
}

// TestProbeBandwidth only checks that a small probe measures something (speed is for benchmarks).
func TestProbeBandwidth(t *testing.T) {
	if got := ProbeBandwidth(4<<20, 5*time.Millisecond); !(got > 0) || math.IsInf(got, 0) {
		t.Fatalf("ProbeBandwidth = %v, want a positive finite figure", got)
	}
	if got := ProbeBandwidth(0, time.Millisecond); got != 0 {
		t.Fatalf("ProbeBandwidth(0 bytes) = %v, want 0", got)
	}
}

// BenchmarkMatvecVsProbe streams one-row bf16 products over a Qwen3-0.6B-like layer (q, k, v,
// o, gate, up, down), weights cold (more than 256 MiB of copies cycled), and reports their weight
// GB/s next to ProbeBandwidth measured in the same run with the same thread count, and the ratio
// (the fraction of the read ceiling the kernel reaches).
func BenchmarkMatvecVsProbe(b *testing.B) {
	shapes := []struct{ n, k int }{{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024}, {3072, 1024}, {1024, 3072}}
	var layer []*Matrix
	var layerBytes int64
	for _, s := range shapes {
		m := benchMatrix(BF16, s.n, s.k, 0)[0]
		layer = append(layer, m)
		layerBytes += m.Bytes()
	}
	var ms []*Matrix
	for int64(len(ms)/len(shapes))*layerBytes < 320<<20 {
		for _, m := range layer {
			c := *m
			c.bf16 = append([]uint16(nil), m.bf16...)
			ms = append(ms, &c)
		}
	}
	x, y := randVec(3072, 1), make([]float32, 3072)
	// The pool sizes itself from GOMAXPROCS when it starts: start it before the one-thread
	// probe lowers GOMAXPROCS.
	pool.once.Do(startPool)
	for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("%s/threads=%d", Path(), threads), func(b *testing.B) {
			prevT := SetMaxThreads(threads)
			defer SetMaxThreads(prevT)
			prevP := runtime.GOMAXPROCS(threads) // the probe's thread count
			probe := ProbeBandwidth(512<<20, 300*time.Millisecond)
			runtime.GOMAXPROCS(prevP)
			var bytes int64
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				m := ms[i%len(ms)]
				m.MatMul(y[:m.N], x[:m.K], 1)
				bytes += m.Bytes()
			}
			gbs := float64(bytes) / time.Since(start).Seconds() / 1e9
			b.StopTimer()
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(probe, "probeGB/s")
			b.ReportMetric(gbs/probe, "ratio")
		})
	}
}
