package kernel

import (
	"fmt"
	"testing"
	"time"

	"github.com/dflash/dflash/kernel/quant"
)

// Quantized products against bf16 of the same shape, on the active path (DFLASH_KERNEL).
// Figures are weight bytes read per second (Bytes: the repacked blocks), weights cold for one
// row as in BenchmarkMatVec; the 16-row figures also give GFLOP/s (2*rows*N*K per product).

var quantBenchTypes = []DType{BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K}

// quantBenchMatrix builds copies of an n x k matrix of dt spanning at least span bytes.
func quantBenchMatrix(dt DType, n, k int, span int64) []*Matrix {
	if !dt.Quantized() {
		return benchMatrix(dt, n, k, span)
	}
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(int32(uint32(i)*2654435761)>>20) * 0x1p-12
	}
	qt := qinfos[dt].t
	b, err := quant.Quantize(qt, w)
	if err != nil {
		panic(err)
	}
	m, err := NewQuant(qt, b, n, k)
	if err != nil {
		panic(err)
	}
	ms := []*Matrix{m}
	for int64(len(ms))*m.Bytes() < span {
		c := *m
		c.q = append([]byte(nil), m.q...)
		ms = append(ms, &c)
	}
	return ms
}

func BenchmarkQuantMatVec(b *testing.B) {
	for _, s := range benchShapes[:2] {
		for _, dt := range quantBenchTypes {
			b.Run(fmt.Sprintf("%s/%v/%dx%d", Path(), dt, s.n, s.k), func(b *testing.B) {
				ms := quantBenchMatrix(dt, s.n, s.k, 256<<20)
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

func BenchmarkQuantMatMul16(b *testing.B) {
	const rows = 16
	for _, s := range benchShapes[:2] {
		for _, dt := range quantBenchTypes {
			b.Run(fmt.Sprintf("%s/%v/%dx%d", Path(), dt, s.n, s.k), func(b *testing.B) {
				m := quantBenchMatrix(dt, s.n, s.k, 0)[0]
				x, y := randVec(rows*s.k, 1), make([]float32, rows*s.n)
				b.SetBytes(m.Bytes())
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

// BenchmarkQuantizeActs is the activation quantization of one product (both kinds) on the active
// path, per element of x.
func BenchmarkQuantizeActs(b *testing.B) {
	for _, rows := range []int{1, 16} {
		for _, kind := range []actKind{act32, act256} {
			const k = 3072
			x := randVec(rows*k, 1)
			var s actScratch
			b.Run(fmt.Sprintf("%s/kind=%d/rows=%d", Path(), kind, rows), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					s.quantized(active, kind, x, rows, k)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows*k), "ns/elem")
			})
		}
	}
}

// BenchmarkQuantVerifyCost reports c(n)/c(1), the time of an n-row product over a one-row one,
// for n = 2, 4, 8, 16 (the verification cost ratio of BENCHMARKS.md at the kernel level), weights
// cold, per type against bf16 of the same shape, all in one run.
func BenchmarkQuantVerifyCost(b *testing.B) {
	const n, k = 1024, 3072
	for _, dt := range []DType{BF16, Q8_0, Q4_0, Q4_K, Q6_K} {
		b.Run(fmt.Sprintf("%s/%v/%dx%d", Path(), dt, n, k), func(b *testing.B) {
			ms := quantBenchMatrix(dt, n, k, 256<<20)
			x, y := randVec(16*k, 1), make([]float32, 16*n)
			cost := func(rows int) float64 {
				start := time.Now()
				for i := 0; i < b.N; i++ {
					ms[i%len(ms)].MatMul(y, x, rows)
				}
				return time.Since(start).Seconds()
			}
			c1 := cost(1)
			for _, rows := range []int{2, 4, 8, 16} {
				b.ReportMetric(cost(rows)/c1, fmt.Sprintf("c%d/c1", rows))
			}
			b.ReportMetric(c1/float64(b.N)*1e6, "us/c1")
		})
	}
}
