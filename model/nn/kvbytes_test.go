package nn

import (
	"testing"

	"github.com/dflash/dflash/cache"
)

// KVBytes is what NewKV allocates, measured from the buffers, for shapes without head-major
// copies (heads of 128), with the keys' only (the fused path, heads of 32) and with both (heads
// of 8), at capacities on and off the head-major stride.
func TestAttentionKVBytes(t *testing.T) {
	for _, a := range []Attention{NewAttention(8, 2, 128), NewAttention(4, 2, 32), NewAttention(4, 4, 8), NewAttention(32, 1, 64)} {
		for _, capacity := range []int{1, 15, 16, 240, 1000} {
			c := a.NewKV(3, capacity)
			b, ok := c.(interface{ Bytes() int64 })
			if !ok {
				t.Fatalf("%T has no Bytes", c)
			}
			if got, want := b.Bytes(), a.KVBytes(3, capacity); got != want {
				t.Errorf("heads %d/%d of %d, capacity %d: the %T holds %d bytes, KVBytes says %d", a.Heads, a.KVHeads, a.HeadDim, capacity, c, got, want)
			}
			if _, hm := c.(*HeadMajorKV); hm != a.HeadMajorKeys() {
				t.Errorf("heads %d/%d of %d: a %T, HeadMajorKeys %v", a.Heads, a.KVHeads, a.HeadDim, c, a.HeadMajorKeys())
			}
		}
	}
	if got, want := NewAttention(8, 2, 128).KVBytes(3, 10), cache.KVBytes(3, 10, 256); got != want {
		t.Errorf("no copies: %d bytes, want the rows' %d", got, want)
	}
}
