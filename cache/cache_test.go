package cache

import (
	"slices"
	"testing"

	"github.com/dflash/dflash/kernel/quant"
)

func TestKVOffsets(t *testing.T) {
	// A verify round: 4 committed rows, 3 speculative rows written, 1 accepted.
	c := NewKV(2, 8, 3)
	if err := c.Advance(4); err != nil {
		t.Fatal(err)
	}
	if err := c.Advance(3); err != nil {
		t.Fatal(err)
	}
	if err := c.Rewind(5); err != nil {
		t.Fatal(err)
	}
	if c.Offset() != 5 {
		t.Fatalf("offset %d after rewind to 5", c.Offset())
	}
	// The next round writes at 5, over the rejected rows.
	if err := c.Advance(2); err != nil || c.Offset() != 7 {
		t.Fatalf("advance after rewind: offset %d, err %v", c.Offset(), err)
	}
}

func TestKVRejects(t *testing.T) {
	tests := []struct {
		name string
		op   func(c *KV) error
	}{
		{"rewind below zero", func(c *KV) error { return c.Rewind(-1) }},
		{"rewind forward", func(c *KV) error { return c.Rewind(4) }},
		{"advance past capacity", func(c *KV) error { return c.Advance(7) }}, // 2 + 7 > 8
		{"advance negative", func(c *KV) error { return c.Advance(-1) }},
	}
	for _, tc := range tests {
		c := NewKV(1, 8, 2)
		if err := c.Advance(3); err != nil {
			t.Fatal(err)
		}
		if err := c.Rewind(2); err != nil {
			t.Fatal(err)
		}
		if err := tc.op(c); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
		if c.Offset() != 2 {
			t.Errorf("%s: failed operation moved the offset to %d", tc.name, c.Offset())
		}
	}
}

func TestKVRoomAndRow(t *testing.T) {
	c := NewKV(2, 4, 3)
	if !c.Room(4) || c.Room(5) {
		t.Fatalf("empty cache of 4: Room(4)=%v Room(5)=%v", c.Room(4), c.Room(5))
	}
	// Row(l, pos) is the slice [pos*Width, (pos+1)*Width) of layer l: writes through it land there.
	k, v := c.Row(1, 2)
	k[0], v[2] = 7, 9
	if c.K[1][6] != 7 || c.V[1][8] != 9 || c.K[0][6] != 0 {
		t.Fatalf("Row(1, 2) does not alias layer 1 position 2")
	}
}

// KVBytes is what NewKV allocates, measured from its buffers.
func TestKVBytes(t *testing.T) {
	for _, s := range [][3]int{{1, 1, 1}, {2, 8, 3}, {5, 100, 64}} {
		if got, want := NewKV(s[0], s[1], s[2]).Bytes(), KVBytes(s[0], s[1], s[2]); got != want {
			t.Errorf("NewKV%v holds %d bytes, KVBytes says %d", s, got, want)
		}
	}
}

func TestKVBF16StoreRound(t *testing.T) {
	// A bf16 cache stores each element rounded to nearest even, head by head at HeadBlock, reads
	// it back exactly, copies rows of the same kind only, and holds KVBytesBF16 bytes.
	const layers, capacity, heads, d = 2, 5, 3, 4
	c := NewKVBF16(layers, capacity, heads, d)
	if got, want := c.Bytes(), KVBytesBF16(layers, capacity, heads*d); got != want {
		t.Fatalf("holds %d bytes, KVBytesBF16 says %d", got, want)
	}
	w := heads * d
	k, v := make([]float32, 2*w), make([]float32, 2*w)
	for i := range k {
		k[i] = 1 + float32(i)/1000 // not bf16-exact: rounding shows
		v[i] = -3 * float32(i) / 7
	}
	k[5] = 1 + 1.0/256 // a tie: rounds to even (1)
	c.Store(1, 3, 2, k, v)
	for r := range 2 {
		gk, gv := make([]float32, w), make([]float32, w)
		c.RowF32(1, 3+r, gk, gv)
		for i := range w {
			wk, wv := quant.BF16ToF32(quant.F32ToBF16(k[r*w+i])), quant.BF16ToF32(quant.F32ToBF16(v[r*w+i]))
			if gk[i] != wk || gv[i] != wv {
				t.Fatalf("row %d element %d: read %g, %g, want %g, %g", 3+r, i, gk[i], gv[i], wk, wv)
			}
			if h, e := i/d, i%d; c.K16[1][c.HeadBlock(h)+(3+r)*d+e] != quant.F32ToBF16(k[r*w+i]) {
				t.Fatalf("row %d element %d is not at head %d's block", 3+r, i, h)
			}
		}
	}
	if quant.BF16ToF32(c.K16[1][c.HeadBlock(5/d)+3*d+5%d]) != 1 { // k[5]: position 3, head 1, element 1
		t.Errorf("the tie 1+2^-8 did not round to even")
	}
	dst := NewKVBF16(layers, capacity, heads, d)
	if err := dst.CopyRows(c, 5); err != nil {
		t.Fatal(err)
	}
	gk, _ := dst.RowsF32(1, 0, 5)
	wk, _ := c.RowsF32(1, 0, 5)
	if !slices.Equal(gk, wk) {
		t.Error("CopyRows changed the rows")
	}
	if err := NewKV(layers, capacity, w).CopyRows(c, 5); err == nil {
		t.Error("a bf16 cache copied into a float32 one")
	}
}
