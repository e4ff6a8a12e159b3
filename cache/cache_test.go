package cache

import (
	"testing"
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
