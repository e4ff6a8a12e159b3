package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dflash/dflash/cache"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/kernel/kerneltest"
)

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestExp32(t *testing.T) {
	// Against float64 exp over the range softmax and silu use; 4 ulp (about 5e-7 relative) is
	// far inside what a 1e-4 logit tolerance needs.
	for x := -87.0; x <= 88.7; x += 0.0137 {
		got := float64(Exp32(float32(x)))
		want := math.Exp(float64(float32(x)))
		if rel := math.Abs(got-want) / want; rel > 5e-7 {
			t.Fatalf("Exp32(%g) = %g, want %g (rel %g)", x, got, want, rel)
		}
	}
	if Exp32(-100) != 0 || !math.IsInf(float64(Exp32(100)), 1) {
		t.Fatalf("Exp32 saturation: exp(-100)=%g exp(100)=%g", Exp32(-100), Exp32(100))
	}
}

func TestRMSNorm(t *testing.T) {
	// x = [3, 4]: mean square 12.5, so x/rms = [0.8485, 1.1314]; weights scale each element.
	x := []float32{3, 4}
	w := []float32{1, 2}
	RMSNorm(x, x, w, 0)
	inv := 1 / math.Sqrt(12.5)
	want := []float64{3 * inv, 8 * inv}
	for i := range x {
		if math.Abs(float64(x[i])-want[i]) > 1e-6 {
			t.Fatalf("RMSNorm = %v, want %v", x, want)
		}
	}
}

func TestSoftmax(t *testing.T) {
	x := []float32{1, 2, 3, 1000}
	Softmax(x)
	// The 1000 dominates completely; subtracting the max keeps it from overflowing, and the
	// others underflow to (at most) exp(-87.3), about 1e-38.
	if x[3] != 1 || x[0] > 1e-37 {
		t.Fatalf("Softmax = %v, want [0 0 0 1]", x)
	}
	y := []float32{0, float32(math.Log(3))}
	Softmax(y)
	if math.Abs(float64(y[0])-0.25) > 1e-7 || math.Abs(float64(y[1])-0.75) > 1e-7 {
		t.Fatalf("Softmax([0 ln3]) = %v, want [0.25 0.75]", y)
	}
}

func TestRoPEStyles(t *testing.T) {
	const d, pos = 8, 5
	inv := InvFreq(d, 10000)
	r := rand.New(rand.NewPCG(1, 2))
	for _, style := range []RoPEStyle{RotateHalf, AdjacentPair} {
		t.Run(style.String(), func(t *testing.T) {
			x := randVec(r, 2*d)
			orig := append([]float32(nil), x...)
			NewRoPE(style, d, inv, pos+1).Apply(x, 2, pos)
			for h := 0; h < 2; h++ {
				for i := 0; i < d/2; i++ {
					// Pair (a, b) rotated by angle pos*inv[i].
					ia, ib := h*d+i, h*d+i+d/2
					if style == AdjacentPair {
						ia, ib = h*d+2*i, h*d+2*i+1
					}
					c, s := math.Cos(pos*inv[i]), math.Sin(pos*inv[i])
					a, b := float64(orig[ia]), float64(orig[ib])
					if math.Abs(float64(x[ia])-(a*c-b*s)) > 1e-5 || math.Abs(float64(x[ib])-(a*s+b*c)) > 1e-5 {
						t.Fatalf("head %d pair %d: got (%g, %g), want (%g, %g)", h, i, x[ia], x[ib], a*c-b*s, a*s+b*c)
					}
				}
			}
		})
	}
}

func TestRoPEGrowKeepsTable(t *testing.T) {
	inv := InvFreq(4, 10000)
	a := NewRoPE(RotateHalf, 4, inv, 3)
	a.Grow(10)
	b := NewRoPE(RotateHalf, 4, inv, 10)
	x, y := []float32{1, 2, 3, 4}, []float32{1, 2, 3, 4}
	a.Apply(x, 1, 7)
	b.Apply(y, 1, 7)
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("grown table differs at position 7: %v vs %v", x, y)
		}
	}
}

func TestLlama3InvFreq(t *testing.T) {
	// Llama 3.1's published scaling: factor 8, low 1, high 4, original context 8192. High
	// frequencies (short wavelengths) stay, the lowest are divided by 8.
	inv := InvFreq(128, 500000)
	got := Llama3InvFreq(inv, 8, 1, 4, 8192)
	if got[0] != inv[0] {
		t.Fatalf("highest frequency changed: %g -> %g", inv[0], got[0])
	}
	last := len(inv) - 1
	if math.Abs(got[last]-inv[last]/8) > 1e-18 {
		t.Fatalf("lowest frequency %g, want %g", got[last], inv[last]/8)
	}
	for i := range got {
		if got[i] > inv[i] || got[i] < inv[i]/8 {
			t.Fatalf("frequency %d scaled outside [f/8, f]: %g vs %g", i, got[i], inv[i])
		}
	}
}

func TestVisibilitySpan(t *testing.T) {
	// A forward over positions [10, 14); the query at 12.
	tests := []struct {
		name   string
		vis    Visibility
		lo, hi int
	}{
		{"causal sees itself and everything before", Causal, 0, 13},
		{"bidirectional block sees its whole block", Visibility{Bidirectional: true}, 0, 14},
		{"window of 4 sees 9..12", Visibility{Window: 4}, 9, 13},
		{"bidirectional window", Visibility{Bidirectional: true, Window: 4}, 9, 14},
		{"window wider than history", Visibility{Window: 100}, 0, 13},
	}
	for _, tc := range tests {
		lo, hi := tc.vis.Span(12, 10, 14)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("%s: span [%d, %d), want [%d, %d)", tc.name, lo, hi, tc.lo, tc.hi)
		}
	}
}

// naiveAttention is the textbook formula in float64, one query row at a time.
func naiveAttention(a Attention, q []float32, n int, k, v []float32, pos int, vis Visibility) []float64 {
	d, qw, w := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	out := make([]float64, n*qw)
	for i := 0; i < n; i++ {
		lo, hi := vis.Span(pos+i, pos, pos+n)
		for h := 0; h < a.Heads; h++ {
			kh := h / (a.Heads / a.KVHeads)
			s := make([]float64, hi-lo)
			m := math.Inf(-1)
			for t := lo; t < hi; t++ {
				var dot float64
				for j := 0; j < d; j++ {
					dot += float64(q[i*qw+h*d+j]) * float64(k[t*w+kh*d+j])
				}
				s[t-lo] = dot / math.Sqrt(float64(d))
				m = math.Max(m, s[t-lo])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			for t := lo; t < hi; t++ {
				for j := 0; j < d; j++ {
					out[i*qw+h*d+j] += s[t-lo] / sum * float64(v[t*w+kh*d+j])
				}
			}
		}
	}
	return out
}

func TestAttentionRows(t *testing.T) {
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, d := range []int{8, 64} { // inline loops and kernel dot
			for _, vis := range []Visibility{Causal, {Bidirectional: true}, {Window: 3}, {Bidirectional: true, Window: 5}} {
				a := NewAttention(4, 2, d)
				r := rand.New(rand.NewPCG(uint64(d), 7))
				const pos, n, capacity = 6, 4, 16
				k := randVec(r, capacity*2*d)
				v := randVec(r, capacity*2*d)
				q := randVec(r, n*4*d)
				out := make([]float32, n*4*d)
				a.Rows(out, q, n, k, v, pos, vis, make([]float32, capacity))
				want := naiveAttention(a, q, n, k, v, pos, vis)
				for i := range out {
					if math.Abs(float64(out[i])-want[i]) > 1e-5 {
						t.Fatalf("d=%d vis=%+v: out[%d] = %g, want %g", d, vis, i, out[i], want[i])
					}
				}
				// Row independence: the last row alone (a decode step) equals its value in the batch
				// for causal visibility, bitwise.
				if vis == Causal {
					one := make([]float32, 4*d)
					a.Rows(one, q[(n-1)*4*d:], 1, k, v, pos+n-1, vis, make([]float32, capacity))
					for j := range one {
						if one[j] != out[(n-1)*4*d+j] {
							t.Fatalf("d=%d: single-row attention differs from batched at %d", d, j)
						}
					}
				}
			}
		}
	})
}

func TestAttentionRowsBatchedBitwise(t *testing.T) {
	// The batch-width property of row-major attention: a forward of n rows after committed
	// cached ones gives every row the bits rowEach (one row, one head at a time) gives it, for
	// n = 1..16, causal rows seeing one more key each, windows and bidirectional blocks, heads
	// with vector and scalar tails, and passes cut by the scratch's size; and each row computed
	// as a part of its own, or as a one-row forward at its position (causal), agrees too.
	kerneltest.ForEachPath(t, func(t *testing.T) {
		type shape struct{ heads, kvHeads, d int }
		for _, sh := range []shape{{16, 8, 128}, {4, 1, 100}, {3, 3, 24}} {
			for _, committed := range []int{0, 1, 37, 256, 1024} {
				for _, vis := range []Visibility{Causal, {Bidirectional: true}, {Window: 20}} {
					if committed >= 256 && vis != Causal || committed == 1024 && sh.d != 128 {
						continue // long contexts for verification only, 1024 for Qwen3-0.6B's shape
					}
					a := NewAttention(sh.heads, sh.kvHeads, sh.d)
					qw, w := sh.heads*sh.d, sh.kvHeads*sh.d
					capacity := committed + 16
					r := rand.New(rand.NewPCG(uint64(sh.d*7+committed), 11))
					k, v := randVec(r, capacity*w), randVec(r, capacity*w)
					q := randVec(r, 16*qw)
					full := make([]float32, ScratchLen(capacity))
					small := make([]float32, sh.heads/sh.kvHeads*(capacity+2*sh.d)+5) // passes of one row at the longest span
					for n := 1; n <= 16; n++ {
						want := make([]float32, n*qw)
						for i := 0; i < n; i++ {
							rowEach(a, want, q, i, 0, n, k, v, rowMajor(a), committed, vis, make([]float32, capacity), 0, sh.heads)
						}
						for _, sc := range [][]float32{full, small} {
							out := make([]float32, n*qw)
							a.Rows(out, q, n, k, v, committed, vis, sc)
							if !slices.Equal(out, want) {
								t.Fatalf("%+v committed %d vis %+v n=%d scratch %d: batched rows differ from one row at a time", sh, committed, vis, n, len(sc))
							}
						}
						mid := n / 2
						part := make([]float32, (n-mid)*qw)
						a.RowsPart(part, q[mid*qw:], mid, n, n, k, v, committed, vis, full)
						if !slices.Equal(part, want[mid*qw:]) {
							t.Fatalf("%+v committed %d vis %+v n=%d: rows [%d, %d) as a part differ", sh, committed, vis, n, mid, n)
						}
						if vis == Causal {
							one := make([]float32, qw)
							a.Rows(one, q[(n-1)*qw:], 1, k, v, committed+n-1, vis, full)
							if !slices.Equal(one, want[(n-1)*qw:]) {
								t.Fatalf("%+v committed %d n=%d: the last row as a decode step differs", sh, committed, n)
							}
						}
					}
				}
			}
		}
	})
}

func TestAttentionHeadMajor(t *testing.T) {
	// The same keys and values scattered into the head-major layout give the textbook result
	// too, on the general path and (heads of a multiple of 8, a row-major v, a padded layer) the
	// fused one, in
	// batches of several kernel calls (8 heads over 2 kv heads, 12 rows: 48 queries per kv
	// head). Every row computed alone, as a part of the forward, gets the bits it has in the
	// batch; for causal attention so does a one-row forward (a decode step).
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, fused := range []bool{false, true} {
			for _, d := range []int{8, 12, 16, 48} { // 12 is no multiple of 8: never fused
				for _, shape := range []struct{ heads, kvHeads, n int }{{4, 2, 4}, {8, 2, 12}} {
					for _, vis := range []Visibility{Causal, {Bidirectional: true}, {Window: 3}, {Bidirectional: true, Window: 5}} {
						a := NewAttention(shape.heads, shape.kvHeads, d)
						r := rand.New(rand.NewPCG(uint64(d), 8))
						const pos, capacity = 6, 32
						n, qw, w := shape.n, shape.heads*d, shape.kvHeads*d
						k, v := randVec(r, capacity*w), randVec(r, capacity*w)
						l := HeadMajor{KVHeads: shape.kvHeads, HeadDim: d, Capacity: capacity}
						kt, vt := make([]float32, l.Len()), make([]float32, l.Len())
						l.Scatter(kt, k, capacity, 0)
						l.Scatter(vt, v, capacity, 0)
						rowMajor := v
						if !fused {
							rowMajor = nil
						}
						scratch := make([]float32, ScratchLen(capacity))
						q := randVec(r, n*qw)
						out := make([]float32, n*qw)
						a.RowsHeadMajor(out, q, n, kt, vt, rowMajor, l, pos, vis, scratch)
						want := naiveAttention(a, q, n, k, v, pos, vis)
						for i := range out {
							if math.Abs(float64(out[i])-want[i]) > 1e-5 {
								t.Fatalf("fused %v d=%d %+v vis=%+v: out[%d] = %g, want %g", fused, d, shape, vis, i, out[i], want[i])
							}
						}
						one := make([]float32, qw)
						for i := 0; i < n; i++ {
							a.RowsHeadMajorPart(one, q[i*qw:], i, i+1, n, kt, vt, rowMajor, l, pos, vis, scratch)
							if !slices.Equal(one, out[i*qw:(i+1)*qw]) {
								t.Fatalf("fused %v d=%d %+v vis=%+v: row %d alone differs from the batch", fused, d, shape, vis, i)
							}
						}
						if vis == Causal {
							a.RowsHeadMajor(one, q[(n-1)*qw:], 1, kt, vt, rowMajor, l, pos+n-1, vis, scratch)
							if !slices.Equal(one, out[(n-1)*qw:]) {
								t.Fatalf("fused %v d=%d %+v: single-row attention differs from batched", fused, d, shape)
							}
						}
					}
				}
			}
		}
	})
}

func TestSwiGLU(t *testing.T) {
	// down = identity(2x2), gate and up 2x2: y = silu(gate x) * (up x).
	gate := kernel.NewF32([]float32{1, 0, 0, 1}, 2, 2)
	up := kernel.NewF32([]float32{2, 0, 0, 3}, 2, 2)
	down := kernel.NewF32([]float32{1, 0, 0, 1}, 2, 2)
	x := []float32{1, -2}
	y := make([]float32, 2)
	SwiGLU(y, x, 1, gate, up, down, make([]float32, 2), make([]float32, 2))
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	want := []float64{silu(1) * 2, silu(-2) * -6}
	for i := range y {
		if math.Abs(float64(y[i])-want[i]) > 1e-6 {
			t.Fatalf("SwiGLU = %v, want %v", y, want)
		}
	}
}

func BenchmarkAttentionDecodeSmallHeadMajor(b *testing.B) {
	a := NewAttention(8, 4, 8)
	r := rand.New(rand.NewPCG(1, 1))
	l := HeadMajor{KVHeads: 4, HeadDim: 8, Capacity: 256}
	kt, vt := randVec(r, 256*32), randVec(r, 256*32)
	q, out, sc := randVec(r, 64), make([]float32, 64), make([]float32, 256)
	for b.Loop() {
		a.RowsHeadMajor(out, q, 1, kt, vt, nil, l, 255, Causal, sc)
	}
}

func BenchmarkAttentionDecodeSmallHead(b *testing.B) {
	// stories260K's shape: 8 heads of 8 over 4 kv heads, 256 cached positions.
	a := NewAttention(8, 4, 8)
	r := rand.New(rand.NewPCG(1, 1))
	k, v := randVec(r, 256*32), randVec(r, 256*32)
	q, out, sc := randVec(r, 64), make([]float32, 64), make([]float32, 256)
	for b.Loop() {
		a.Rows(out, q, 1, k, v, 255, Causal, sc)
	}
}

// TestSoftmaxMatchesExp checks Softmax against float64 softmax rows: with exponentials within
// 2e-7 relative and a float32 sum, each probability is within a few 1e-7 relative of the exact
// one; a wrong shift, scale or normalization is off by far more.
func TestSoftmaxMatchesExp(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 1))
	for _, n := range []int{1, 7, 16, 33, 300} {
		x := randVec(r, n)
		for i := range x {
			x[i] *= 30
		}
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		want := make([]float64, n)
		var sum float64
		for i, v := range x {
			// The shift is subtracted in float32, as Softmax does; rounding that difference
			// alone would move exp by up to |v-m|*2^-24 relative.
			want[i] = math.Exp(float64(v - float32(m)))
			sum += want[i]
		}
		Softmax(x)
		for i := range x {
			w := want[i] / sum
			if math.Abs(float64(x[i])-w) > 1e-6*w+1e-30 {
				t.Fatalf("n=%d: p[%d] = %g, want %g", n, i, x[i], w)
			}
		}
	}
}

// BenchmarkAttentionBlockHeadMajorStride is a 16-row block (stories260K's heads) over 200
// cached positions with the head-major stride a cache of 512 positions gets unpadded (512
// floats, 2 KiB: a head's 8 key rows share L1 sets) and padded (528).
func BenchmarkAttentionBlockHeadMajorStride(b *testing.B) {
	a := NewAttention(8, 4, 8)
	r := rand.New(rand.NewPCG(1, 1))
	for _, stride := range []int{512, 528} {
		l := HeadMajor{KVHeads: 4, HeadDim: 8, Capacity: stride}
		kt, vt := randVec(r, stride*32), randVec(r, stride*32)
		q, out, sc := randVec(r, 16*64), make([]float32, 16*64), make([]float32, 256)
		b.Run(fmt.Sprintf("stride=%d", stride), func(b *testing.B) {
			for b.Loop() {
				a.RowsHeadMajor(out, q, 16, kt, vt, nil, l, 200, Causal, sc)
			}
		})
	}
}

func TestAttentionBF16CacheBitwise(t *testing.T) {
	// Attention over a bf16 layer gives every row the bits rowEach gives it over the same layer
	// widened to f32: batched or one row at a time, with full or small scratch, as a part, and
	// (causal) as a one-row decode step at its position. So a bf16 cache keeps the batch-width
	// property, and its rounding happens once, where a row is stored.
	kerneltest.ForEachPath(t, func(t *testing.T) {
		type shape struct{ heads, kvHeads, d int }
		for _, sh := range []shape{{16, 8, 128}, {4, 1, 100}, {3, 3, 72}} {
			for _, committed := range []int{0, 37, 300} {
				for _, vis := range []Visibility{Causal, {Bidirectional: true}, {Window: 20}} {
					a := NewAttention(sh.heads, sh.kvHeads, sh.d)
					qw, w := sh.heads*sh.d, sh.kvHeads*sh.d
					capacity := committed + 16
					r := rand.New(rand.NewPCG(uint64(sh.d*5+committed), 13))
					c := cache.NewKVBF16(1, capacity, sh.kvHeads, sh.d)
					c.Store(0, 0, capacity, randVec(r, capacity*w), randVec(r, capacity*w))
					k, v := make([]float32, capacity*w), make([]float32, capacity*w)
					for p := range capacity {
						c.RowF32(0, p, k[p*w:], v[p*w:])
					}
					k16, v16 := c.K16[0], c.V16[0]
					blocked := layerLayout{sh.d, c.HeadBlock(1)}
					q := randVec(r, 16*qw)
					full := make([]float32, ScratchLen(capacity))
					small := make([]float32, sh.heads/sh.kvHeads*(capacity+2*sh.d)+5)
					tiny := make([]float32, capacity) // too small to batch: rowEach's bf16 branch
					for _, n := range []int{1, 2, 5, 16} {
						want := make([]float32, n*qw)
						for i := 0; i < n; i++ {
							rowEach(a, want, q, i, 0, n, k, v, rowMajor(a), committed, vis, make([]float32, capacity), 0, sh.heads)
						}
						for _, sc := range [][]float32{full, small, tiny} {
							out := make([]float32, n*qw)
							for i := range out {
								out[i] = 42 // whatever the output held before must not count
							}
							rowsHeads(a, out, q, 0, n, n, k16, v16, blocked, committed, vis, sc, 0, sh.heads)
							if !slices.Equal(out, want) {
								t.Fatalf("%+v committed %d vis %+v n=%d scratch %d: bf16 rows differ from f32 rows over the widened cache", sh, committed, vis, n, len(sc))
							}
						}
						mid := n / 2
						part := make([]float32, (n-mid)*qw)
						rowsHeads(a, part, q[mid*qw:], mid, n, n, k16, v16, blocked, committed, vis, full, 0, sh.heads)
						if !slices.Equal(part, want[mid*qw:]) {
							t.Fatalf("%+v committed %d vis %+v n=%d: bf16 rows [%d, %d) as a part differ", sh, committed, vis, n, mid, n)
						}
						if vis == Causal {
							one := make([]float32, qw)
							rowsHeads(a, one, q[(n-1)*qw:], 0, 1, 1, k16, v16, blocked, committed+n-1, vis, full, 0, sh.heads)
							if !slices.Equal(one, want[(n-1)*qw:]) {
								t.Fatalf("%+v committed %d n=%d: the last bf16 row as a decode step differs", sh, committed, n)
							}
						}
					}
				}
			}
		}
	})
}

func TestCacheKindChoosesBF16(t *testing.T) {
	// auto caches bf16 for bf16 and quantized weights only; heads that read head-major copies
	// always cache f32; explicit kinds override the weights' dtype.
	defer SetCacheKind(SetCacheKind(CacheAuto))
	rowMajor, headMajor := NewAttention(16, 8, 128), NewAttention(8, 2, 64)
	for _, c := range []struct {
		kind    CacheKind
		weights kernel.DType
		want    bool
	}{{CacheAuto, kernel.F32, false}, {CacheAuto, kernel.BF16, true}, {CacheAuto, kernel.Q8_0, true},
		{CacheF32, kernel.BF16, false}, {CacheBF16, kernel.F32, true}} {
		SetCacheKind(c.kind)
		if got := CacheBF16For(c.weights); got != c.want {
			t.Errorf("%v with %v weights: bf16 %v, want %v", c.kind, c.weights, got, c.want)
		}
		a, b := rowMajor, headMajor
		a.BF16Cache, b.BF16Cache = CacheBF16For(c.weights), CacheBF16For(c.weights)
		if got := CacheElem(a.NewKV(2, 10)); got != map[bool]string{true: "bf16", false: "f32"}[c.want] {
			t.Errorf("%v with %v weights: a row-major cache of %s", c.kind, c.weights, got)
		}
		if got := CacheElem(b.NewKV(2, 10)); got != "f32" {
			t.Errorf("a head-major shape cached %s", got)
		}
		if got, want := a.KVBytes(2, 10), a.NewKV(2, 10).(*cache.KV).Bytes(); got != want {
			t.Errorf("KVBytes %d, the cache holds %d", got, want)
		}
	}
	for _, s := range []string{"", "auto", "f32", "bf16"} {
		if _, err := ParseCacheKind(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseCacheKind("f16"); err == nil || !strings.Contains(err.Error(), "f16") {
		t.Errorf("f16: %v", err)
	}
}

// BenchmarkAttentionCache is one decode step's (rows=1) or a 16-row verification's attention over
// every attention layer of a cache of 1024 committed rows, f32 or bf16, on one core, for
// Qwen3-0.6B's shape (28 layers, 8 key/value heads of 128, 16 query heads: 235 or 117 MB, more than
// the caches hold, so this is the stream a long-context step reads) and Qwen3.5-0.8B's full
// attention layers (6 layers, 2 key/value heads of 256, 8 query heads: 4 queries share a head).
// Bytes per op are the cache bytes read.
func BenchmarkAttentionCache(b *testing.B) {
	const at = 1024
	for _, sh := range []struct {
		name                        string
		layers, heads, kvHeads, dim int
	}{{"qwen3-0.6b", 28, 16, 8, 128}, {"qwen3.5-0.8b", 6, 8, 2, 256}} {
		a := NewAttention(sh.heads, sh.kvHeads, sh.dim)
		qw, w := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
		r := rand.New(rand.NewPCG(3, 3))
		for _, bf16 := range []bool{false, true} {
			c := cache.NewKV(sh.layers, at+16, w)
			if bf16 {
				c = cache.NewKVBF16(sh.layers, at+16, a.KVHeads, a.HeadDim)
			}
			for l := range sh.layers {
				c.Store(l, 0, at+16, randVec(r, (at+16)*w), randVec(r, (at+16)*w))
			}
			kv := KV{KV: c}
			h := Heads{Attention: a}
			for _, rows := range []int{1, 16} {
				q, out := randVec(r, rows*qw), make([]float32, rows*qw)
				scores := make([]float32, ScratchLen(at+16))
				b.Run(fmt.Sprintf("%s/bf16=%v/rows=%d", sh.name, bf16, rows), func(b *testing.B) {
					b.SetBytes(c.Bytes() * int64(at) / int64(at+16))
					for b.Loop() {
						for l := range sh.layers {
							h.Attend(out, q, 0, rows, rows, kv, l, at, Causal, scores)
						}
					}
				})
			}
		}
	}
}
