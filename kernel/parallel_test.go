package kernel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// counter counts how often each part ran; run is the method value Parallel gets.
type counter struct {
	hits   [8]atomic.Int32
	nested bool
	inner  *counter
}

func (c *counter) run(part int) {
	c.hits[part].Add(1)
	if c.nested && part == 0 {
		Parallel(3, c.inner.run) // the pool is taken: must run inline and still cover every part
	}
}

func TestParallelRunsEachPartOnce(t *testing.T) {
	pool.unsplit, pool.backoff, pool.clean = 0, 0, 0
	for _, threads := range []int{1, 0} {
		prev := SetMaxThreads(threads)
		for parts := 0; parts <= 8; parts++ {
			for rep := 0; rep < 50; rep++ {
				c := &counter{nested: true, inner: &counter{}}
				Parallel(parts, c.run)
				for i := 0; i < 8; i++ {
					want := int32(0)
					if i < parts {
						want = 1
					}
					if got := c.hits[i].Load(); got != want {
						t.Fatalf("threads %d, %d parts: part %d ran %d times, want %d", threads, parts, i, got, want)
					}
				}
				if parts > 0 {
					for i := 0; i < 3; i++ {
						if got := c.inner.hits[i].Load(); got != 1 {
							t.Fatalf("nested Parallel: part %d ran %d times, want 1", i, got)
						}
					}
				}
			}
		}
		SetMaxThreads(prev)
	}
}

func TestParallelOneThreadIsInlineInOrder(t *testing.T) {
	defer SetMaxThreads(SetMaxThreads(1))
	var order []int
	split := Parallel(4, func(p int) { order = append(order, p) })
	if split {
		t.Error("Parallel reported a split with one thread allowed")
	}
	for i, p := range order {
		if p != i {
			t.Fatalf("parts ran in order %v, want 0 1 2 3", order)
		}
	}
	if len(order) != 4 {
		t.Fatalf("ran %d parts, want 4", len(order))
	}
}

func TestParallelNoAllocation(t *testing.T) {
	c := &counter{}
	fn := c.run
	if a := testing.AllocsPerRun(100, func() { Parallel(2, fn) }); a != 0 {
		t.Errorf("Parallel allocated %.1f times per call", a)
	}
}

// BenchmarkParallelHandOff is one Parallel call of two empty parts: the cost of a join with a
// worker that is already spinning, which a row-split forward pays once per layer.
func BenchmarkParallelHandOff(b *testing.B) {
	c := &counter{}
	fn := c.run
	for b.Loop() {
		Parallel(2, fn)
	}
}

// TestPoolCounts: a product large enough to split is counted, split or (in a stall's backoff)
// run on one thread, and the counts never go down.
func TestPoolCounts(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one thread: the pool never splits")
	}
	prev := SetMaxThreads(0)
	defer SetMaxThreads(prev)
	m, _ := testMatrix(BF16, 4096, 1024, 3)
	x, y := randVec(1024, 4), make([]float32, 4096)
	s0, u0, st0 := PoolCounts()
	const n = 20
	for i := 0; i < n; i++ {
		m.MatMul(y, x, 1)
	}
	s1, u1, st1 := PoolCounts()
	if s1 < s0 || u1 < u0 || st1 < st0 {
		t.Fatalf("counts went down: split %d -> %d, unsplit %d -> %d, stalls %d -> %d", s0, s1, u0, u1, st0, st1)
	}
	if got := (s1 - s0) + (u1 - u0); got != n {
		t.Fatalf("%d products of 4096x1024 counted %d times (split %d, unsplit %d)", n, got, s1-s0, u1-u0)
	}
	if st1-st0 > s1-s0 {
		t.Fatalf("%d stalls in %d split products", st1-st0, s1-s0)
	}
}
