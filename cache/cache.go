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

import (
	"fmt"

	"github.com/dflash/dflash/kernel/quant"
)

// Cache is what the runner needs from any model state: where it stands and how to go back.
type Cache interface {
	// Offset is the number of committed rows.
	Offset() int
	// Rewind drops rows at and beyond offset to. It fails if to is negative or past Offset.
	Rewind(to int) error
}

// KV holds keys and values for every layer: Layers x Capacity rows of Width elements each
// (Width = kv heads * head dim). Memory is allocated once at construction.
//
// A float32 cache (K, V) keeps each layer row-major: position p's row at [p*Width, (p+1)*Width).
// A bf16 cache (K16, V16; K and V are nil) keeps each layer head-blocked, [head][position][HeadDim]:
// one head's keys over consecutive positions are contiguous, so attention, which reads one head
// over a span of positions at a time, streams them in order instead of taking HeadDim elements
// from every Width-long row (a page apart for long rows, which the hardware prefetchers do not
// follow). Its rows are rounded to nearest even once, when they are stored; every reader widens
// them exactly. So a row reads the same whether a decode step or a verification with other rows
// wrote it, and rejected rows leave no trace either way.
type KV struct {
	Layers, Capacity, Width int
	K, V                    [][]float32 // per layer, Capacity*Width row-major; nil for a bf16 cache
	K16, V16                [][]uint16  // per layer, Capacity*Width head-blocked; nil for a float32 cache
	HeadDim                 int         // of a bf16 cache's blocks (0 for a float32 cache)
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

// NewKVBF16 allocates a bf16 cache of kvHeads heads of headDim for capacity positions:
// KVBytesBF16(layers, capacity, kvHeads*headDim) bytes, half of NewKV's.
func NewKVBF16(layers, capacity, kvHeads, headDim int) *KV {
	w := kvHeads * headDim
	c := &KV{Layers: layers, Capacity: capacity, Width: w, HeadDim: headDim, K16: make([][]uint16, layers), V16: make([][]uint16, layers)}
	for l := range c.K16 {
		c.K16[l] = make([]uint16, capacity*w)
		c.V16[l] = make([]uint16, capacity*w)
	}
	return c
}

// KVBytes is the memory NewKV allocates: keys and values of layers x capacity rows of width
// float32 each.
func KVBytes(layers, capacity, width int) int64 {
	return 2 * 4 * int64(layers) * int64(capacity) * int64(width)
}

// KVBytesBF16 is the memory NewKVBF16 allocates.
func KVBytesBF16(layers, capacity, width int) int64 { return KVBytes(layers, capacity, width) / 2 }

// BF16 reports whether the cache stores bf16 rows (K16, V16).
func (c *KV) BF16() bool { return c.K16 != nil }

// HeadBlock is where head h's elements start in a bf16 layer (K16[l], V16[l]): positions follow
// each other HeadDim elements apart from there.
func (c *KV) HeadBlock(h int) int { return h * c.Capacity * c.HeadDim }

// Bytes is the memory the cache holds, measured from its buffers (their capacities).
func (c *KV) Bytes() int64 {
	var n int64
	for l := range c.K {
		n += 4 * int64(cap(c.K[l])+cap(c.V[l]))
	}
	for l := range c.K16 {
		n += 2 * int64(cap(c.K16[l])+cap(c.V16[l]))
	}
	return n
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

// Row returns the key and value rows of layer l at position pos of a float32 cache (see RowF32
// for either kind).
func (c *KV) Row(l, pos int) (k, v []float32) {
	o := pos * c.Width
	return c.K[l][o : o+c.Width], c.V[l][o : o+c.Width]
}

// RowF32 writes the key and value rows of layer l at position pos into k and v (Width each) as
// float32, widening a bf16 cache's exactly.
func (c *KV) RowF32(l, pos int, k, v []float32) {
	if !c.BF16() {
		o := pos * c.Width
		copy(k[:c.Width], c.K[l][o:o+c.Width])
		copy(v[:c.Width], c.V[l][o:o+c.Width])
		return
	}
	d := c.HeadDim
	for h := range c.Width / d {
		b := c.HeadBlock(h) + pos*d
		for e := range d {
			k[h*d+e] = quant.BF16ToF32(c.K16[l][b+e])
			v[h*d+e] = quant.BF16ToF32(c.V16[l][b+e])
		}
	}
}

// RowsF32 returns new float32 copies of the keys and values of rows [lo, hi) of layer l (a bf16
// cache's widened exactly): for tests and tools that compare caches of either kind.
func (c *KV) RowsF32(l, lo, hi int) (k, v []float32) {
	k, v = make([]float32, (hi-lo)*c.Width), make([]float32, (hi-lo)*c.Width)
	for p := lo; p < hi; p++ {
		c.RowF32(l, p, k[(p-lo)*c.Width:], v[(p-lo)*c.Width:])
	}
	return k, v
}

// Store writes rows rows of keys k and values v (row-major, Width each, float32) into layer l
// at positions [pos, pos+rows): copied into a float32 cache, rounded to nearest even into a
// bf16 one. The rows become committed only when the owner advances past them.
func (c *KV) Store(l, pos, rows int, k, v []float32) {
	if !c.BF16() {
		o, n := pos*c.Width, rows*c.Width
		copy(c.K[l][o:o+n], k[:n])
		copy(c.V[l][o:o+n], v[:n])
		return
	}
	d := c.HeadDim
	for r := range rows {
		for h := range c.Width / d {
			b, s := c.HeadBlock(h)+(pos+r)*d, r*c.Width+h*d
			RoundBF16(c.K16[l][b:b+d], k[s:s+d])
			RoundBF16(c.V16[l][b:b+d], v[s:s+d])
		}
	}
}

// CopyRows copies rows [0, rows) of every layer of src into c, which must have the same shape
// and kind (for a cache cloned at an offset).
func (c *KV) CopyRows(src *KV, rows int) error {
	if src.Layers != c.Layers || src.Width != c.Width || src.BF16() != c.BF16() || src.HeadDim != c.HeadDim || rows > c.Capacity || rows > src.Capacity {
		return fmt.Errorf("cache: copy %d rows of a %d-layer, %d-wide cache (bf16 %v) into a %d-layer, %d-wide one (bf16 %v) of %d rows",
			rows, src.Layers, src.Width, src.BF16(), c.Layers, c.Width, c.BF16(), c.Capacity)
	}
	n := rows * c.Width
	for l := range c.Layers {
		if c.BF16() {
			d := c.HeadDim
			for h := range c.Width / d {
				cb, sb := c.HeadBlock(h), src.HeadBlock(h)
				copy(c.K16[l][cb:cb+rows*d], src.K16[l][sb:sb+rows*d])
				copy(c.V16[l][cb:cb+rows*d], src.V16[l][sb:sb+rows*d])
			}
			continue
		}
		copy(c.K[l][:n], src.K[l][:n])
		copy(c.V[l][:n], src.V[l][:n])
	}
	return nil
}

// RoundBF16 rounds each of src to the nearest bf16 (quant.F32ToBF16: ties to even, a NaN stays
// a quiet NaN of its sign) into dst[:len(src)].
func RoundBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = quant.F32ToBF16(f)
	}
}
