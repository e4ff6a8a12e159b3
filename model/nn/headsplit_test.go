package nn

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dflash/dflash/kernel/kerneltest"
)

// TestHeadSplitBitwise: attention spread over the cores by key/value head gives the bits of the
// same rows computed on one core, on every kernel path and cache layout: grouped shapes with
// heads of 8 and 16 (head-major keys), 64 (the fused path), 72 and 128 (row-major, batched per
// key/value head), spans of 1 to 1100 keys, causal, bidirectional and windowed rows, whole
// forwards and a part of one, more buffers than key/value heads and uneven shares. Two sequences
// stacked in one chunk (AttendSeqs) each get the bits of a forward alone.
func TestHeadSplitBitwise(t *testing.T) {
	defer SetHeadSplit(SetHeadSplit(0, 0))
	type shape struct{ heads, kvHeads, d int }
	shapes := []shape{{16, 8, 64}, {8, 2, 64}, {16, 8, 128}, {8, 2, 128}, {16, 8, 72}, {8, 2, 72}, {4, 2, 8}, {6, 3, 16}}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, sh := range shapes {
			for _, committed := range []int{0, 1, 37, 300, 1084} {
				for _, vis := range []Visibility{Causal, {Bidirectional: true}, {Window: 20}} {
					if committed >= 300 && vis.Bidirectional {
						continue // long contexts for verification and windows only
					}
					name := fmt.Sprintf("%+v committed %d vis %+v", sh, committed, vis)
					checkHeadSplit(t, name, NewAttention(sh.heads, sh.kvHeads, sh.d), committed, vis)
				}
			}
		}
	})
}

// checkHeadSplit compares HeadSplit with 2 and 3 buffers against Heads.Attend for forwards of 1,
// 2, 5 and 16 rows after committed rows (spans up to committed+16 keys).
func checkHeadSplit(t *testing.T, name string, a Attention, committed int, vis Visibility) {
	t.Helper()
	h := &Heads{Attention: a}
	qw, w := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	capacity := committed + 16
	r := rand.New(rand.NewPCG(uint64(a.HeadDim*131+committed), uint64(a.Heads)))
	newKV := func() KV {
		kv, _ := AsKV(a.NewKV(1, capacity))
		copy(kv.K[0], randVec(r, capacity*w))
		copy(kv.V[0], randVec(r, capacity*w))
		kv.Publish(0, 0, capacity)
		return kv
	}
	kv, other := newKV(), newKV()
	q := randVec(r, 32*qw)
	one := NewPartScratch(capacity)[:1]
	for _, n := range []int{1, 2, 5, 16} {
		want := make([]float32, n*qw)
		h.Attend(want, q, 0, n, n, kv, 0, committed, vis, one[0])
		for _, buffers := range []int{2, 3} {
			scratch := make(PartScratch, buffers)
			scratch.Grow(capacity)
			var s HeadSplit
			got := make([]float32, n*qw)
			s.Attend(h, got, q, 0, n, n, kv, 0, committed, vis, scratch)
			if !slices.Equal(got, want) {
				t.Fatalf("%s n=%d, %d buffers: the head split differs from one core", name, n, buffers)
			}
			// Rows [mid, n) as a part of the forward.
			mid := n / 2
			part := make([]float32, (n-mid)*qw)
			s.Attend(h, part, q[mid*qw:], mid, n, n, kv, 0, committed, vis, scratch)
			if !slices.Equal(part, want[mid*qw:]) {
				t.Fatalf("%s n=%d, %d buffers: rows [%d, %d) split as a part differ", name, n, buffers, mid, n)
			}
			// A chunk stacking this forward's rows after 3 rows of another sequence (other
			// cache, position 5), seen from chunk row 1 on.
			wantOther := make([]float32, 3*qw)
			h.Attend(wantOther, q[16*qw:], 0, 3, 3, other, 0, 5, vis, one[0])
			stack := append(append([]float32(nil), q[16*qw:19*qw]...), q[:n*qw]...)
			seqs := []Seq{{KV: other, Lo: 0, Hi: 3, Pos: 5}, {KV: kv, Lo: 3, Hi: 3 + n, Pos: committed}}
			chunk := make([]float32, (2+n)*qw)
			s.AttendSeqs(h, chunk, stack[qw:], 1, 3+n, seqs, 0, vis, scratch)
			if !slices.Equal(chunk[:2*qw], wantOther[qw:]) || !slices.Equal(chunk[2*qw:], want) {
				t.Fatalf("%s n=%d, %d buffers: stacked sequences split by heads differ from each alone", name, n, buffers)
			}
		}
	}
}

// TestHeadSplitThreshold: below SetHeadSplit's rows or multiply-adds, or with one buffer,
// attention is not spread; from them on it is, over a part per buffer up to the key/value heads.
// Rows r after 30 causal rows count r*(30+r) keys of 8 heads of 128, twice.
func TestHeadSplitThreshold(t *testing.T) {
	defer SetHeadSplit(SetHeadSplit(0, 0))
	h := &Heads{Attention: NewAttention(8, 2, 128)}
	work := func(rows int) int { return 2 * rows * (30 + rows) * 8 * 128 }
	for _, c := range []struct{ rows, minRows, minWork, buffers, parts int }{
		{3, 4, 0, 3, 1}, {4, 4, 0, 3, 2}, {8, 4, 0, 2, 2}, {1, 0, 0, 2, 2}, {8, 0, 0, 1, 1},
		{4, 2, work(4) + 1, 2, 1}, {4, 2, work(4), 2, 2}, {5, 2, work(4) + 1, 2, 2},
	} {
		SetHeadSplit(c.minRows, c.minWork)
		seqs := []Seq{{Lo: 0, Hi: c.rows, Pos: 30}}
		if got := headSplitParts(h, 0, c.rows, seqs, Causal, c.buffers); got != c.parts {
			t.Errorf("%+v: %d parts, want %d", c, got, c.parts)
		}
	}
	// A shape whose heads do not group evenly is never spread.
	odd := &Heads{Attention: NewAttention(6, 4, 16)}
	SetHeadSplit(0, 0)
	if got := headSplitParts(odd, 0, 8, []Seq{{Lo: 0, Hi: 8, Pos: 30}}, Causal, 2); got != 1 {
		t.Errorf("6 heads over 4: %d parts, want 1", got)
	}
}
