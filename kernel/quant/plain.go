package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// F16ToF32 widens an IEEE 754 half-precision bit pattern; every half is exact in float32.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		// Zero or subnormal: mant x 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(v) | sign)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 rounds to the nearest half, ties to even. Overflow gives infinity, NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal
		}
		// In units of the smallest subnormal (2^-24) the value is the full mantissa shifted
		// right by 14-e; a rounding carry into the smallest normal is its correct encoding.
		mant |= 0x800000
		shift := uint(14 - e)
		h := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is correct, up to infinity
	}
	return sign | uint16(h)
}

// BF16ToF32 widens a bfloat16 bit pattern exactly.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to nearest even; NaN stays a quiet NaN of the same sign.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// finite reports whether every value is neither NaN nor infinite, else the first bad index.
func finite(src []float32) (int, bool) {
	for i, v := range src {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i, false
		}
	}
	return 0, true
}

func dequantizeF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantizeF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func dequantizeBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// quantizeF32 stores the values as they are, non-finite ones included: F32 loses nothing, so
// there is nothing for it to refuse.
func quantizeF32(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func quantizeF16(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	for i, v := range src {
		h := F32ToF16(v)
		if h&0x7fff == 0x7c00 {
			return fmt.Errorf("element %d = %v overflows f16: %w", i, v, ErrRange)
		}
		binary.LittleEndian.PutUint16(dst[2*i:], h)
	}
	return nil
}

func quantizeBF16(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	for i, v := range src {
		h := F32ToBF16(v)
		if h&0x7fff == 0x7f80 {
			return fmt.Errorf("element %d = %v overflows bf16: %w", i, v, ErrRange)
		}
		binary.LittleEndian.PutUint16(dst[2*i:], h)
	}
	return nil
}
