package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Q8_0 block (34 bytes, 32 elements): d f16 at bytes 0-1, then 32 int8 quants qs.
// Element i is d*qs[i].
//
// Q4_0 block (18 bytes, 32 elements): d f16 at bytes 0-1, then 16 bytes of nibbles: byte j
// holds element j in its low nibble and element j+16 in its high nibble. Element i is
// d*(nibble-8), so the nibbles 0..15 stand for -8..7.

func dequantizeQ8_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[34*b : 34*b+34]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		y := dst[32*b : 32*b+32]
		for i := range y {
			y[i] = float32(int8(blk[2+i])) * d
		}
	}
}

func dequantizeQ4_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		blk := src[18*b : 18*b+18]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		y := dst[32*b : 32*b+32]
		for j := 0; j < 16; j++ {
			y[j] = float32(int(blk[2+j]&0xf)-8) * d
			y[j+16] = float32(int(blk[2+j]>>4)-8) * d
		}
	}
}

// scaleF16 rounds a block scale to the f16 the block stores, upwards: with a stored scale at
// least the ideal one, the largest magnitude never lands past the top quant level, so no value
// is clamped by more than half a step. The result is the f16 bits and their value.
func scaleF16(d float32) (uint16, float32, error) {
	if d == 0 {
		return 0, 0, nil
	}
	h := F32ToF16(d)
	if F16ToF32(h) < d {
		h++ // d > 0, so the next pattern is the next larger half
	}
	if h >= 0x7c00 {
		return 0, 0, fmt.Errorf("block scale %v overflows f16: %w", d, ErrRange)
	}
	return h, F16ToF32(h), nil
}

// absMax is the largest magnitude in x.
func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > m {
			m = a
		}
	}
	return m
}

// roundClamp rounds v to the nearest integer (halves away from zero) within [lo, hi].
func roundClamp(v float32, lo, hi int) int {
	q := int(math.Round(float64(v)))
	return min(max(q, lo), hi)
}

// quantizeQ8_0 uses d = max|x|/127 (rounded up to f16), so every element is within d/2 of its
// value: |x - d*q| <= d/2 = max|x|/254, up to the f16 rounding of d (a factor 1+2^-10).
func quantizeQ8_0(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	for b := 0; b < len(src)/32; b++ {
		x := src[32*b : 32*b+32]
		blk := dst[34*b : 34*b+34]
		h, d, err := scaleF16(absMax(x) / 127)
		if err != nil {
			return fmt.Errorf("block %d: %w", b, err)
		}
		binary.LittleEndian.PutUint16(blk, h)
		for i, v := range x {
			q := 0
			if d != 0 {
				q = roundClamp(v/d, -127, 127)
			}
			blk[2+i] = byte(int8(q))
		}
	}
	return nil
}

// quantizeQ4_0 uses d = max|x|/7.5 (rounded up to f16): x/d then lies in [-7.5, 7.5], which
// rounds into -8..8, and only +8 is clamped (to 7), by half a step. So |x - d*(q-8)| <= d/2 =
// max|x|/15, up to the f16 rounding of d.
func quantizeQ4_0(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	for b := 0; b < len(src)/32; b++ {
		x := src[32*b : 32*b+32]
		blk := dst[18*b : 18*b+18]
		h, d, err := scaleF16(absMax(x) / 7.5)
		if err != nil {
			return fmt.Errorf("block %d: %w", b, err)
		}
		binary.LittleEndian.PutUint16(blk, h)
		var nib [32]byte
		for i, v := range x {
			q := 8
			if d != 0 {
				q = roundClamp(v/d, -8, 7) + 8
			}
			nib[i] = byte(q)
		}
		for j := 0; j < 16; j++ {
			blk[2+j] = nib[j] | nib[j+16]<<4
		}
	}
	return nil
}
