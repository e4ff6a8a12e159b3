package kernel

import "math"

// Split bf16 activations, the input of the AMX path (amx.go); plain Go so that every build can
// test it.
//
// AMX multiplies bf16 by bf16, so an f32 activation x enters as amxPlanes bf16 planes whose sum
// is x: plane 0 is x rounded to bf16 (to nearest even), each next plane the rounded remainder.
// A bf16 holds 8 significant bits and every remainder is exact in f32, so three planes carry
// all 24 bits of x: hi + mid + lo == x exactly for any normal x whose low plane is not a
// bf16 denormal (|x| >= about 2^-110; AMX treats denormal inputs as zero, which loses at most
// the low bits of such tiny activations). The products of bf16 weights with each plane are
// then exact in f32 and only the f32 accumulation rounds, as on the other paths; this is
// what keeps the amx path inside the float32 error bound the tests hold every path to. Two
// planes would leave a representation error of about 2^-17 |x|, above that bound for short
// sums (K of a few dozen), and one plane (x as bf16) about 2^-9 |x|.
//
// A row's planes depend on that row only, so the batch-width invariant carries over. The planes
// of a row are consecutive rows of the kernels' A tiles (amx.go), and the layout is by K-block
// so that a tile of activations is 1 KiB at most, contiguous: for each K-block of 32 inputs
// (amxRowLen(k)/32 of them, zero-padded past k), the 32 values of each row's each plane, row
// by row, planes within a row. A tile of activations never reads another row's values.

// amxPlanes is the number of bf16 planes of an activation (see above): 3 on the amx path, 2
// (hi + lo) only in benchmarks that price the third.
var amxPlanes = 3

// amxPasses is the number of planes the AMX kernels multiply: amxPlanes, or 1 (each row's
// first plane, x as bf16) in benchmarks that price the split.
var amxPasses = 3

// amxRowLen is the elements of one activation row of one plane: k rounded up to whole
// 32-input K-blocks.
func amxRowLen(k int) int { return (k + 31) &^ 31 }

// splitBF16Go writes x (rows x k) as amxPlanes planes into dst: row r, plane p, input i at
// amxIndex(rows, r, p, i), zero from k to amxRowLen(k).
func splitBF16Go(dst []uint16, x []float32, rows, k int) {
	kp := amxRowLen(k)
	dst = dst[:amxPlanes*rows*kp]
	for r := 0; r < rows; r++ {
		for i, v := range x[r*k : (r+1)*k] {
			for p := 0; p < amxPlanes; p++ {
				dst[amxIndex(rows, r, p, i)], v = splitOne(v)
			}
		}
		for i := k; i < kp; i++ {
			for p := 0; p < amxPlanes; p++ {
				dst[amxIndex(rows, r, p, i)] = 0
			}
		}
	}
}

// amxIndex is the position of row r's plane p's input i among the split activations of rows
// rows: K-block i/32 holds amxPlanes*rows plane rows of 32 values.
func amxIndex(rows, r, p, i int) int {
	return ((i/32*rows+r)*amxPlanes+p)*32 + i%32
}

// splitOne returns v's leading bf16 and the f32 remainder v - bf16: v rounded to nearest
// even, or truncated where rounding would overflow to Inf, so that a finite activation keeps
// finite planes. Inf and NaN go whole into the first plane (NaN kept quiet) with a zero
// remainder, where v - v would make a NaN of an Inf.
func splitOne(v float32) (uint16, float32) {
	bits := math.Float32bits(v)
	if bits&0x7f800000 == 0x7f800000 {
		b := uint16(bits >> 16)
		if bits&0x7fffff != 0 {
			b |= 0x40
		}
		return b, 0
	}
	b := F32ToBF16(v)
	if b&0x7f80 == 0x7f80 {
		b = uint16(bits >> 16)
	}
	return b, v - BF16ToF32(b)
}
