package int8exp

import (
	"fmt"
	"testing"
	"time"

	"github.com/dflash/dflash/kernel"
)

// Benchmarks put int8 (this package) and bf16 (package kernel, active path) side by side on
// the shapes of Qwen3-0.6B: attention/MLP projections and the vocabulary head. int8 times
// include quantizing the activations. Threads: int8 splits panels over 1 or 2 goroutines; bf16
// runs kernel's pool capped with kernel.SetMaxThreads.
//
//	go test ./kernel/int8exp/ -run XXX -bench . -benchtime=200ms

var benchShapes = []struct{ n, k int }{{1024, 3072}, {3072, 1024}, {151936, 1024}}

// qwen06Params is Qwen3-0.6B's weights read per decoded token: 28 layers of
// q 1024x2048, k and v 1024x1024, o 2048x1024, gate/up/down 3x1024x3072, plus the tied
// 151936x1024 head. "tok/s" below is the measured weight bandwidth divided by that model's
// bytes at the benchmark's weight type: the decode rate a model-wide kernel at that speed allows.
const qwen06Params = 28*(1024*2048+2*1024*1024+2048*1024+3*1024*3072) + 151936*1024

// span is how many weight bytes a matrix-vector benchmark cycles through: more than the 32 MiB
// L3, so weights come from DRAM as in decoding.
const span = 256 << 20

type benchSet struct {
	q8   []*Matrix
	bf16 []*kernel.Matrix
	f32  *kernel.Matrix // small shapes only
}

var benchCache = map[[2]int]*benchSet{}

// benchMatrices builds (once per shape and process) pseudo-random weights, no RNG as the head
// has 155M of them, in int8, bf16 and for small shapes f32, with copies spanning span bytes.
func benchMatrices(b *testing.B, n, k int) *benchSet {
	if s := benchCache[[2]int{n, k}]; s != nil {
		return s
	}
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(int32(uint32(i)*2654435761)>>20) * 0x1p-12
	}
	q, err := Quantize(w, n, k)
	if err != nil {
		b.Fatal(err)
	}
	wb := make([]uint16, n*k)
	for i, v := range w {
		wb[i] = kernel.F32ToBF16(v)
	}
	s := &benchSet{q8: []*Matrix{q}, bf16: []*kernel.Matrix{kernel.NewBF16(wb, n, k)}}
	if n*k <= 4<<20 {
		s.f32 = kernel.NewF32(w, n, k)
	}
	for int64(len(s.q8))*q.Bytes() < span {
		s.q8 = append(s.q8, q.Clone())
	}
	for int64(len(s.bf16))*int64(n*k*2) < span {
		s.bf16 = append(s.bf16, kernel.NewBF16(wb, n, k))
	}
	benchCache[[2]int{n, k}] = s
	return s
}

func BenchmarkMatVec(b *testing.B) {
	for _, sh := range benchShapes {
		for _, threads := range []int{1, 2} {
			x, y := normal(sh.k, 1, 1), make([]float32, sh.n)
			b.Run(fmt.Sprintf("%dx%d/threads=%d/int8", sh.n, sh.k, threads), func(b *testing.B) {
				ms := benchMatrices(b, sh.n, sh.k).q8
				sc := ms[0].NewScratch()
				bytes := ms[0].Bytes()
				b.SetBytes(bytes)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := ms[i%len(ms)].MatMul(y, x, 1, sc, threads); err != nil {
						b.Fatal(err)
					}
				}
				reportBandwidth(b, bytes, 1, start)
			})
			b.Run(fmt.Sprintf("%dx%d/threads=%d/bf16", sh.n, sh.k, threads), func(b *testing.B) {
				ms := benchMatrices(b, sh.n, sh.k).bf16
				defer kernel.SetMaxThreads(kernel.SetMaxThreads(threads))
				bytes := ms[0].Bytes()
				b.SetBytes(bytes)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					ms[i%len(ms)].MatMul(y, x, 1)
				}
				reportBandwidth(b, bytes, 2, start)
			})
		}
	}
}

// reportBandwidth reports weight GB/s and the Qwen3-0.6B decode rate it allows at esize bytes
// per weight.
func reportBandwidth(b *testing.B, bytes int64, esize int, start time.Time) {
	gbs := float64(bytes) * float64(b.N) / time.Since(start).Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(gbs*1e9/(float64(qwen06Params)*float64(esize)), "tok/s")
}

func BenchmarkMatMul16(b *testing.B) {
	const rows = 16
	for _, sh := range benchShapes {
		for _, threads := range []int{1, 2} {
			x, y := normal(rows*sh.k, 1, 1), make([]float32, rows*sh.n)
			ops := 2 * float64(rows) * float64(sh.n) * float64(sh.k)
			name := fmt.Sprintf("%dx%d/threads=%d/", sh.n, sh.k, threads)
			b.Run(name+"int8", func(b *testing.B) {
				m := benchMatrices(b, sh.n, sh.k).q8[0]
				sc := m.NewScratch()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := m.MatMul(y, x, rows, sc, threads); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(ops*float64(b.N)/time.Since(start).Seconds()/1e9, "GOP/s")
			})
			for _, dt := range []string{"bf16", "f32"} {
				b.Run(name+dt, func(b *testing.B) {
					s := benchMatrices(b, sh.n, sh.k)
					m := s.bf16[0]
					if dt == "f32" {
						if m = s.f32; m == nil {
							b.Skip("f32 copy only for small shapes")
						}
					}
					defer kernel.SetMaxThreads(kernel.SetMaxThreads(threads))
					b.ResetTimer()
					start := time.Now()
					for i := 0; i < b.N; i++ {
						m.MatMul(y, x, rows)
					}
					b.ReportMetric(ops*float64(b.N)/time.Since(start).Seconds()/1e9, "GOP/s")
				})
			}
		}
	}
}

// BenchmarkQuantize16 is the activation side of a 16-row int8 product: quantizing and packing
// 16 rows, which the MatMul16 int8 figures include.
func BenchmarkQuantize16(b *testing.B) {
	for _, k := range []int{1024, 3072} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			m, err := Quantize(make([]float32, Panel*k), Panel, k)
			if err != nil {
				b.Fatal(err)
			}
			s, x := m.NewScratch(), normal(Panel*k, 1, 1)
			for i := 0; i < b.N; i++ {
				for r := 0; r < Panel; r++ {
					s.xs[r] = quantizeRow(s.q[r*Group:], Group*Panel, x[r*k:(r+1)*k], m.kp)
				}
			}
		})
	}
}

// BenchmarkProbeBandwidth reports the DRAM read ceiling (kernel.ProbeBandwidth, GOMAXPROCS
// threads) the matrix-vector figures compare to.
func BenchmarkProbeBandwidth(b *testing.B) {
	var gbs float64
	for i := 0; i < b.N; i++ {
		gbs = kernel.ProbeBandwidth(512<<20, 300*time.Millisecond)
	}
	b.ReportMetric(gbs, "GB/s")
}
