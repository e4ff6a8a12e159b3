// Package cache owns the state a model keeps between forwards: per-layer key/value rows today,
// recurrent states later. It knows offsets and rewinding; it never computes attention and never
// decides what to keep (the runner does).
//
// There is no whole-state snapshot: nothing ever called one. A verify round keeps the first k of its
// n rows, which one snapshot taken before the round cannot express, and a drafting session
// writes context and block rows in one forward, so it has no moment between them to take one.
// A recurrent (hybrid) cache cannot rewind (Rewinder, CanRewind); it records the state after
// each row inside the verify forward instead, and the kept count chooses one afterwards
// (RowSnapshots, Hybrid).
//
// Invariant: rows [0, Offset()) are exactly the rows of the tokens the owner has processed and
// kept, at their true positions. Rewind drops rows past an offset; a later write at that offset
// overwrites them, so rejected speculative rows leave no trace.
package cache

import "fmt"

// Cache is what the runner needs from any model state: where it stands and how to go back.
type Cache interface {
	// Offset is the number of committed rows.
	Offset() int
	// Rewind drops rows at and beyond offset to. It fails if to is negative or past Offset.
	Rewind(to int) error
}

// KV holds keys and values for every layer: Layers x Capacity rows of Width floats each
// (Width = kv heads * head dim). Memory is allocated once at construction.
type KV struct {
	Layers, Capacity, Width int
	K, V                    [][]float32 // per layer, Capacity*Width
	offset                  int
}

// NewKV allocates a cache for capacity positions: KVBytes(layers, capacity, width) bytes.
func NewKV(layers, capacity, width int) *KV {
	c := &KV{Layers: layers, Capacity: capacity, Width: width, K: make([][]float32, layers), V: make([][]float32, layers)}
	for l := range c.K {
		c.K[l] = make([]float32, capacity*width)
		c.V[l] = make([]float32, capacity*width)
	}
	return c
}

// KVBytes is the memory NewKV allocates: keys and values of layers x capacity rows of width
// float32 each.
func KVBytes(layers, capacity, width int) int64 {
	return 2 * 4 * int64(layers) * int64(capacity) * int64(width)
}

// Bytes is the memory the cache holds, measured from its buffers (their capacities).
func (c *KV) Bytes() int64 {
	var n int64
	for l := range c.K {
		n += int64(cap(c.K[l]) + cap(c.V[l]))
	}
	return 4 * n
}

func (c *KV) Offset() int { return c.offset }

func (c *KV) Rewind(to int) error {
	if to < 0 || to > c.offset {
		return fmt.Errorf("cache: rewind to %d outside [0, %d]", to, c.offset)
	}
	c.offset = to
	return nil
}

// Advance commits n rows that a forward has written at [Offset, Offset+n).
func (c *KV) Advance(n int) error {
	if n < 0 || c.offset+n > c.Capacity {
		return fmt.Errorf("cache: advance %d rows from %d past capacity %d", n, c.offset, c.Capacity)
	}
	c.offset += n
	return nil
}

// Room reports whether n more rows fit.
func (c *KV) Room(n int) bool { return c.offset+n <= c.Capacity }

// Row returns the key and value rows of layer l at position pos.
func (c *KV) Row(l, pos int) (k, v []float32) {
	o := pos * c.Width
	return c.K[l][o : o+c.Width], c.V[l][o : o+c.Width]
}
