package kernel

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/dflash/dflash/kernel/quant"
)

// weightAddr is the address of m's first weight byte.
func weightAddr(m *Matrix) uintptr {
	switch {
	case m.f32 != nil:
		return uintptr(unsafe.Pointer(&m.f32[0]))
	case m.bf16 != nil:
		return uintptr(unsafe.Pointer(&m.bf16[0]))
	}
	return uintptr(unsafe.Pointer(&m.q[0]))
}

// anonHugeKB reads /proc/self/smaps and returns the AnonHugePages (kB) of the mapping that
// contains addr, and whether such a mapping exists.
func anonHugeKB(t testing.TB, addr uintptr) (kb int, found bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := smapsRange(line); ok {
			in = addr >= lo && addr < hi
			found = found || in
			continue
		}
		if in && strings.HasPrefix(line, "AnonHugePages:") {
			kb, _ = strconv.Atoi(strings.Fields(line)[1])
		}
	}
	return kb, found
}

// smapsRange parses the "lo-hi perms ..." header line of one smaps mapping.
func smapsRange(line string) (lo, hi uintptr, ok bool) {
	r, _, _ := strings.Cut(line, " ")
	a, b, ok := strings.Cut(r, "-")
	if !ok {
		return 0, 0, false
	}
	l, err1 := strconv.ParseUint(a, 16, 64)
	h, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(l), uintptr(h), true
}

// thpUsable reports whether the host lets madvise'd memory use transparent huge pages.
func thpUsable() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !strings.Contains(string(b), "[never]")
}

// TestHugeWeights checks that large weights of every dtype land in a 2 MiB-aligned mapping
// backed by huge pages, that products on them equal products on the same weights on the Go
// heap bitwise, and that small ones stay on the heap.
func TestHugeWeights(t *testing.T) {
	if runtime.GOOS != "linux" || !hugeWeights {
		t.Skip("weight mappings are Linux-only and on (DFLASH_HUGEPAGES unset)")
	}
	const n, k = 1040, 2048 // 65 panels: 4.1 MiB of bf16, a partial huge page at the end
	w := randVec(n*k, 7)
	wb := make([]uint16, n*k)
	for i, v := range w {
		wb[i] = F32ToBF16(v)
	}
	blocks, err := quant.Quantize(quant.Q8_0, w)
	if err != nil {
		t.Fatal(err)
	}
	q8, err := NewQuant(quant.Q8_0, blocks, n, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Matrix{NewF32(w, n, k), NewBF16(wb, n, k), q8} {
		t.Run(m.DType.String(), func(t *testing.T) {
			if m.mem == nil {
				t.Fatalf("%v %dx%d (%d bytes) is on the Go heap, want a mapping", m.DType, n, k, m.Bytes())
			}
			addr := weightAddr(m)
			if addr%hugeAlign != 0 {
				t.Fatalf("weights at %#x, want 2 MiB alignment", addr)
			}
			kb, found := anonHugeKB(t, addr)
			if !found {
				t.Fatalf("no mapping holds %#x in /proc/self/smaps", addr)
			}
			t.Logf("AnonHugePages %d kB", kb)
			if thpUsable() && kb < hugeAlign>>10 {
				t.Errorf("mapping of %d bytes has AnonHugePages %d kB, want at least one 2 MiB page", m.Bytes(), kb)
			}
			heap := heapCopy(m)
			x := randVec(3*k, 8)
			got, want := make([]float32, 3*n), make([]float32, 3*n)
			m.MatMul(got, x, 3)
			heap.MatMul(want, x, 3)
			if !slices.Equal(got, want) {
				t.Fatal("product on mapped weights differs from the same weights on the heap")
			}
		})
	}
	if tiny := NewBF16(wb[:8*1024], 8, 1024); tiny.mem != nil { // one panel, 32 KiB: below arenaMin
		t.Errorf("a %d-byte matrix got a mapping, want the Go heap", tiny.Bytes())
	}
}

// TestSmallWeightsShareArena checks that matrices below a huge page share one arena of huge
// pages, page-aligned and apart, that products on them equal products on the heap bitwise,
// and that the arena goes back to the OS once none of its matrices is held.
func TestSmallWeightsShareArena(t *testing.T) {
	if runtime.GOOS != "linux" || !hugeWeights {
		t.Skip("weight mappings are Linux-only and on (DFLASH_HUGEPAGES unset)")
	}
	FreeUnused()           // no arena left over from other tests: a fresh one starts here
	const n, k = 500, 1024 // 1000 KiB of bf16 each, not a whole number of pages
	var ms [3]*Matrix
	for i := range ms {
		w := randVec(n*k, uint64(20+i))
		wb := make([]uint16, n*k)
		for j, v := range w {
			wb[j] = F32ToBF16(v)
		}
		ms[i] = NewBF16(wb, n, k)
	}
	for i, m := range ms {
		if m.mem == nil || m.mem != ms[0].mem {
			t.Fatalf("matrix %d: owner %p, want the arena %p of matrix 0", i, m.mem, ms[0].mem)
		}
		if a := weightAddr(m); a%arenaAlign != 0 {
			t.Fatalf("matrix %d at %#x, want 4 KiB alignment", i, a)
		}
		if i > 0 && weightAddr(m) < weightAddr(ms[i-1])+uintptr(ms[i-1].Bytes()) {
			t.Fatalf("matrix %d at %#x overlaps matrix %d", i, weightAddr(m), i-1)
		}
		x := randVec(2*k, 9)
		got, want := make([]float32, 2*n), make([]float32, 2*n)
		m.MatMul(got, x, 2)
		heapCopy(m).MatMul(want, x, 2)
		if !slices.Equal(got, want) {
			t.Fatalf("matrix %d: product in the arena differs from the same weights on the heap", i)
		}
	}
	addr := weightAddr(ms[0])
	kb, found := anonHugeKB(t, addr)
	if !found {
		t.Fatalf("no mapping holds %#x", addr)
	}
	t.Logf("arena AnonHugePages %d kB", kb)
	if thpUsable() && kb < hugeAlign>>10 {
		t.Errorf("arena holding %d bytes has AnonHugePages %d kB, want at least one 2 MiB page", 3*ms[0].Bytes(), kb)
	}
	ms = [3]*Matrix{}
	deadline := time.Now().Add(5 * time.Second)
	for {
		FreeUnused()
		if _, found := anonHugeKB(t, addr); !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("arena at %#x still mapped 5s after its matrices were dropped", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heapCopy is m with its weights copied to the Go heap.
func heapCopy(m *Matrix) *Matrix {
	c := *m
	c.mem = nil
	c.f32 = slices.Clone(m.f32)
	c.bf16 = slices.Clone(m.bf16)
	c.q = slices.Clone(m.q)
	return &c
}

// TestHugeWeightsFreed checks that a mapping goes back to the OS once no matrix holds it, and
// not before: a copy of the Matrix value keeps it.
func TestHugeWeightsFreed(t *testing.T) {
	if runtime.GOOS != "linux" || !hugeWeights {
		t.Skip("weight mappings are Linux-only and on (DFLASH_HUGEPAGES unset)")
	}
	const n, k = 1024, 2048
	wb := make([]uint16, n*k)
	for i := range wb {
		wb[i] = F32ToBF16(float32(i%97) - 48)
	}
	m := NewBF16(wb, n, k)
	addr := weightAddr(m)
	if m.mem == nil {
		t.Fatal("no mapping")
	}
	if got := MappedBytes(); got < m.Bytes() { // other tests' mappings may come and go
		t.Fatalf("MappedBytes %d with a mapped matrix of %d bytes alive", got, m.Bytes())
	}
	c := *m // shares the owner
	m = nil
	x := randVec(k, 3)
	y := make([]float32, n)
	for range 3 {
		FreeUnused()
		time.Sleep(10 * time.Millisecond)
	}
	if _, found := anonHugeKB(t, addr); !found {
		t.Fatal("mapping freed while a copy of its matrix is alive")
	}
	c.MatMul(y, x, 1) // c's last use: from here nothing holds the owner
	deadline := time.Now().Add(5 * time.Second)
	for {
		FreeUnused()
		if _, found := anonHugeKB(t, addr); !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mapping at %#x still present 5s after its last matrix was dropped", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkDecodeStream streams one-row products over a model's weights as a decode step does:
// Qwen3-0.6B's (28 layers of q, k, v, o, gate, up, down and the 151936-row output matrix; 1.2
// GB in bf16) and 12 layers of Qwen3-4B's (3.2 GB in bf16: its K of 2560 and 9728 make chunks
// of several MB; this variant needs about 7 GB of memory), handing them to the pool as a forward
// does (q, k and v in one MatMulEach, gate and up in another), per dtype: with the weights on
// the Go heap (4 KiB pages) and in huge-page mappings, both on all threads, and in mappings on
// one thread (where all threads read much more than one, one core's compute or outstanding
// misses limit it, not the memory system alone). Each iteration is one step of each and a short
// ProbeBandwidth-style probe over heap and over mapped buffers, alternated ABBA (the machine may
// be shared: alternation keeps their conditions alike); the metrics are medians over iterations
// of the figures and of per-iteration ratios (use -benchtime=Nx). The heap probe is what
// ProbeBandwidth measured before weights moved to huge pages; the huge one is what it measures
// now.
func BenchmarkDecodeStream(b *testing.B) {
	if !hugeWeights {
		b.Skip("DFLASH_HUGEPAGES=0")
	}
	for _, sh := range []streamShape{qwen3_06b, qwen3_4b12} {
		for _, dt := range []DType{BF16, Q8_0, Q4_K} {
			if sh.name != qwen3_06b.name && dt == Q8_0 {
				continue // bf16 and Q4_K bracket it
			}
			b.Run(sh.name+"/"+dt.String(), func(b *testing.B) { benchDecodeStream(b, sh, dt) })
			FreeUnused()
		}
	}
}

// streamShape is the weights of a decode step: layers of q, k, v, o, gate, up, down over a
// hidden size, then the output matrix.
type streamShape struct {
	name                         string
	layers, hidden, q, kv, inter int
}

var (
	qwen3_06b  = streamShape{"qwen3-0.6b", 28, 1024, 2048, 1024, 3072}
	qwen3_4b12 = streamShape{"qwen3-4b-12layers", 12, 2560, 4096, 1024, 9728}
)

func benchDecodeStream(b *testing.B, sh streamShape, dt DType) {
	h := sh.hidden
	shapes := []struct{ n, k int }{{sh.q, h}, {sh.kv, h}, {sh.kv, h}, {h, sh.q}, {sh.inter, h}, {sh.inter, h}, {h, sh.inter}, {151936, h}}
	build := func(n, k int) *Matrix {
		if dt == BF16 {
			return benchMatrix(BF16, n, k, 0)[0]
		}
		qt := qinfos[dt].t
		m, err := NewQuant(qt, randBlocks(qt, n, k, uint64(n+k), true), n, k)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	var layer []*Matrix
	for _, s := range shapes {
		layer = append(layer, build(s.n, s.k))
	}
	place := func(m *Matrix, huge bool) *Matrix {
		if !huge {
			return heapCopy(m)
		}
		c := *m
		c.mem = nil
		switch {
		case m.bf16 != nil:
			c.bf16 = allocWeights[uint16](&c, len(m.bf16))
			copy(c.bf16, m.bf16)
		default:
			c.q = allocWeights[byte](&c, len(m.q))
			copy(c.q, m.q)
		}
		return &c
	}
	sets := make([][]*Matrix, 2) // 0: heap, 1: huge
	var stepBytes, mappedSet int64
	for pl := range sets {
		for l := range sh.layers {
			for _, m := range layer[:len(layer)-1] {
				sets[pl] = append(sets[pl], place(m, pl == 1))
			}
			if l == sh.layers-1 {
				sets[pl] = append(sets[pl], place(layer[len(layer)-1], pl == 1))
			}
		}
	}
	for _, m := range sets[1] {
		stepBytes += m.Bytes()
		if m.mem != nil {
			mappedSet += m.Bytes()
		}
	}
	b.Logf("%s %v: %.2f GB per step, %.0f%% of it in mappings", sh.name, dt, float64(stepBytes)/1e9, 100*float64(mappedSet)/float64(stepBytes))
	threads := runtime.GOMAXPROCS(0)
	per := 512 << 20 / 4 / threads
	probes := make([][][]float32, 2)
	holders := make([]Matrix, threads) // own the probe's mappings until the end
	for t := 0; t < threads; t++ {
		probes[0] = append(probes[0], make([]float32, per))
		probes[1] = append(probes[1], allocWeights[float32](&holders[t], per))
	}
	wide := max(sh.q, sh.inter)
	x, y := randVec(wide, 1), make([]float32, 151936)
	// A step hands products to the pool as a forward does: q, k, v together, o, gate and up
	// together, down, and the output matrix.
	ys := make([]float32, 3*wide)
	step := func(ms []*Matrix) float64 {
		start := time.Now()
		for l := 0; l+7 <= len(ms); l += 7 {
			q, k, v, o, gate, up, down := ms[l], ms[l+1], ms[l+2], ms[l+3], ms[l+4], ms[l+5], ms[l+6]
			if err := MatMulEach(x[:h], 1, Product{q, ys[:q.N]}, Product{k, ys[wide : wide+k.N]}, Product{v, ys[2*wide : 2*wide+v.N]}); err != nil {
				b.Fatal(err)
			}
			o.MatMul(y[:o.N], x[:o.K], 1)
			if err := MatMulEach(x[:h], 1, Product{gate, ys[:gate.N]}, Product{up, ys[wide : wide+up.N]}); err != nil {
				b.Fatal(err)
			}
			down.MatMul(y[:down.N], x[:down.K], 1)
		}
		out := ms[len(ms)-1]
		out.MatMul(y[:out.N], x[:out.K], 1)
		return float64(stepBytes) / time.Since(start).Seconds() / 1e9
	}
	one := func() float64 {
		prev := SetMaxThreads(1)
		defer SetMaxThreads(prev)
		return step(sets[1])
	}
	for pl := range sets {
		step(sets[pl]) // warm: pages faulted in, pool started
	}
	var gbs, probe [2][]float64
	var single, ratio, probeRatio, heapOfProbe, hugeOfProbe, oneOfAll []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := [2]int{0, 1}
		if i%2 == 1 {
			order = [2]int{1, 0} // ABBA: drift in the host's load falls on both alike
		}
		for _, pl := range order {
			gbs[pl] = append(gbs[pl], step(sets[pl]))
		}
		single = append(single, one())
		for _, pl := range order {
			probe[pl] = append(probe[pl], probeBuffers(probes[pl], 100*time.Millisecond))
		}
		ratio = append(ratio, gbs[1][i]/gbs[0][i])
		probeRatio = append(probeRatio, probe[1][i]/probe[0][i])
		heapOfProbe = append(heapOfProbe, gbs[0][i]/probe[0][i])
		hugeOfProbe = append(hugeOfProbe, gbs[1][i]/probe[1][i])
		oneOfAll = append(oneOfAll, single[i]/gbs[1][i])
	}
	b.StopTimer()
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	span := func(v []float64) string { return fmt.Sprintf("%.2f [%.2f-%.2f]", med(v), slices.Min(v), slices.Max(v)) }
	b.ReportMetric(med(gbs[0]), "heapGB/s")
	b.ReportMetric(med(gbs[1]), "hugeGB/s")
	b.ReportMetric(med(single), "huge1thrGB/s")
	b.ReportMetric(med(probe[0]), "heapProbeGB/s")
	b.ReportMetric(med(probe[1]), "hugeProbeGB/s")
	b.Logf("%v over %d rounds, median [range]: GB/s heap %s, huge %s, huge on 1 thread %s, heap probe %s, huge probe %s",
		dt, b.N, span(gbs[0]), span(gbs[1]), span(single), span(probe[0]), span(probe[1]))
	b.Logf("%v ratios: huge/heap %s, hugeProbe/heapProbe %s, heap/heapProbe %s, huge/hugeProbe %s, 1 thread/all %s",
		dt, span(ratio), span(probeRatio), span(heapOfProbe), span(hugeOfProbe), span(oneOfAll))
	runtime.KeepAlive(holders)
}
