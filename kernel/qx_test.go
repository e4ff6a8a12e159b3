//go:build amd64 && qx

package kernel

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkQX alternates the one-row kernel variants that kernel/_gen emits with QX set (see
// quantExperiments there) pass by pass in one process, so that a shared machine's drift falls
// on all alike: one 1024x1024 matrix per type, copied to span QXSPAN MB (default 512, past the
// caches) and streamed on QXT threads (default 1), or with QXHOT set the same matrix 64 times
// (from L2: the kernel's compute ceiling). Each variant must give the current kernel's bits.
// Metrics: weight GB/s per variant, median and best over the passes.
func BenchmarkQX(b *testing.B) {
	span := int64(512)
	fmt.Sscan(os.Getenv("QXSPAN"), &span)
	threads := 1
	fmt.Sscan(os.Getenv("QXT"), &threads)
	for _, dt := range []DType{Q8_0, Q4_K, Q6_K} {
		vs := qxVariants[dt]
		b.Run(dt.String(), func(b *testing.B) {
			const n, k = 1024, 1024
			qt := qinfos[dt].t
			m, err := NewQuant(qt, randBlocks(qt, n, k, 3, true), n, k)
			if err != nil {
				b.Fatal(err)
			}
			ms := []*Matrix{m}
			if os.Getenv("QXHOT") != "" {
				for len(ms) < 64 {
					ms = append(ms, m)
				}
			}
			for int64(len(ms))*m.Bytes() < span<<20 {
				c := *m
				c.mem = nil
				c.q = allocWeights[byte](&c, len(m.q))
				copy(c.q, m.q)
				ms = append(ms, &c)
			}
			kind := qinfos[dt].kind
			a := make([]byte, k/kind.block()*kind.blockBytes())
			quantizeActsGo(kind, a, randVec(k, 1))
			np := n / Panel
			ref := make([]float32, n)
			qkern512(m, 1, 0, np, &a[0], &ref[0], n)
			for vi, f := range vs {
				y := make([]float32, n)
				f(&m.q[0], &a[0], &y[0], m.qblocks(), np, 0, n)
				if !slices.Equal(y, ref) {
					b.Fatalf("variant %d differs from the kernel", vi)
				}
			}
			ys := make([][]float32, threads)
			for t := range ys {
				ys[t] = make([]float32, n)
			}
			gbs := make([][]float64, len(vs))
			pass := func(f func(w, a *byte, y *float32, nb, np, lda, ldy int)) float64 {
				var wg sync.WaitGroup
				start := time.Now()
				for t := 0; t < threads; t++ {
					wg.Add(1)
					go func(t int) {
						defer wg.Done()
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						for i := t; i < len(ms); i += threads {
							f(&ms[i].q[0], &a[0], &ys[t][0], m.qblocks(), np, 0, n)
						}
					}(t)
				}
				wg.Wait()
				return float64(int64(len(ms))*m.Bytes()) / time.Since(start).Seconds() / 1e9
			}
			for _, f := range vs {
				pass(f)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range vs {
					vi := (i + j) % len(vs)
					gbs[vi] = append(gbs[vi], pass(vs[vi]))
				}
			}
			for vi := range vs {
				g := slices.Clone(gbs[vi])
				slices.Sort(g)
				b.ReportMetric(g[len(g)/2], fmt.Sprintf("v%dmed", vi))
				b.ReportMetric(g[len(g)-1], fmt.Sprintf("v%dmax", vi))
			}
			runtime.KeepAlive(ms)
		})
	}
}

func (k actKind) block() int {
	if k == act32 {
		return 32
	}
	return 256
}
