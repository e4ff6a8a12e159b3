package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The K-quants cover a super-block of QK = 256 elements.
//
// Q4_K (144 bytes): d f16 (bytes 0-1), dmin f16 (2-3), 12 bytes of packed 6-bit scales and
// mins (4-15), 128 bytes of nibbles (16-143). The super-block is 8 sub-blocks of 32; sub-block
// j has a 6-bit scale sc_j and a 6-bit min m_j (see ScaleMinK) and element i of it is
// d*sc_j*q - dmin*m_j with q its 4-bit quant. The nibbles come in four 32-byte chunks, one per
// pair of sub-blocks: byte l of chunk c holds element l of sub-block 2c in its low nibble and
// element l of sub-block 2c+1 in its high nibble.
//
// Q5_K (176 bytes): d, dmin and the 12 scale bytes as Q4_K (bytes 0-15), then 32 bytes qh
// (16-47) of fifth bits, then 128 bytes of nibbles (48-175) laid out as Q4_K's. Element l of
// sub-block j takes its fifth bit (worth 16) from bit j of qh[l], so q runs 0..31.
//
// Q6_K (210 bytes): 128 bytes ql of low nibbles (0-127), 64 bytes qh of high bit pairs
// (128-191), 16 int8 scales (192-207), d f16 (208-209). The super-block is 16 sub-blocks of
// 16, element i of sub-block j is d*scales[j]*(q-32) with q a 6-bit quant. It is stored as two
// halves of 128 elements (ql 64 bytes, qh 32 bytes, scales 8 each); within a half, for
// l in 0..31, the elements l, l+32, l+64 and l+96 take their low nibbles from ql[l] low,
// ql[l+32] low, ql[l] high and ql[l+32] high, and their high two bits from bits 0-1, 2-3, 4-5
// and 6-7 of qh[l].

// ScaleMinK unpacks sub-block j's (0..7) 6-bit scale and min from the 12 packed bytes of a
// Q4_K or Q5_K super-block. Bytes 0-3 hold the scales of sub-blocks 0-3 in their low 6 bits
// and bytes 4-7 their mins; sub-blocks 4-7 keep their low 4 bits of scale and min in the two
// nibbles of bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-3 (scales) and
// 4-7 (mins).
func ScaleMinK(scales []byte, j int) (sc, m uint8) {
	if j < 4 {
		return scales[j] & 63, scales[j+4] & 63
	}
	sc = scales[j+4]&0xf | (scales[j-4]>>6)<<4
	m = scales[j+4]>>4 | (scales[j]>>6)<<4
	return sc, m
}

// packScaleMinK is ScaleMinK's inverse: sc and m are the eight sub-blocks' 6-bit values.
func packScaleMinK(sc, m *[8]uint8, scales []byte) {
	for j := 0; j < 4; j++ {
		scales[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		scales[j+4] = m[j]&63 | (m[j+4]>>4)<<6
		scales[j+8] = sc[j+4]&0xf | (m[j+4]&0xf)<<4
	}
}

// The products below are wrapped in float32 conversions so that the compiler cannot fuse a
// multiply and a subtraction into one FMA: the reference must round each step as ggml's C does,
// on every architecture, or kernels checked against it would disagree in the last bit.

func dequantizeQ4_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK; b++ {
		blk := src[144*b : 144*b+144]
		d := F16ToF32(binary.LittleEndian.Uint16(blk[0:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
		scales, qs := blk[4:16], blk[16:144]
		y := dst[QK*b : QK*b+QK]
		for c := 0; c < 4; c++ {
			sc0, m0 := ScaleMinK(scales, 2*c)
			sc1, m1 := ScaleMinK(scales, 2*c+1)
			d0, min0 := float32(d*float32(sc0)), float32(dmin*float32(m0))
			d1, min1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
			q := qs[32*c : 32*c+32]
			for l := 0; l < 32; l++ {
				y[64*c+l] = float32(d0*float32(q[l]&0xf)) - min0
				y[64*c+32+l] = float32(d1*float32(q[l]>>4)) - min1
			}
		}
	}
}

func dequantizeQ5_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK; b++ {
		blk := src[176*b : 176*b+176]
		d := F16ToF32(binary.LittleEndian.Uint16(blk[0:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:176]
		y := dst[QK*b : QK*b+QK]
		for c := 0; c < 4; c++ {
			sc0, m0 := ScaleMinK(scales, 2*c)
			sc1, m1 := ScaleMinK(scales, 2*c+1)
			d0, min0 := float32(d*float32(sc0)), float32(dmin*float32(m0))
			d1, min1 := float32(d*float32(sc1)), float32(dmin*float32(m1))
			q := qs[32*c : 32*c+32]
			for l := 0; l < 32; l++ {
				lo := q[l]&0xf | (qh[l]>>(2*c)&1)<<4
				hi := q[l]>>4 | (qh[l]>>(2*c+1)&1)<<4
				y[64*c+l] = float32(d0*float32(lo)) - min0
				y[64*c+32+l] = float32(d1*float32(hi)) - min1
			}
		}
	}
}

func dequantizeQ6_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK; b++ {
		blk := src[210*b : 210*b+210]
		d := F16ToF32(binary.LittleEndian.Uint16(blk[208:]))
		y := dst[QK*b : QK*b+QK]
		for h := 0; h < 2; h++ {
			ql, qh := blk[64*h:64*h+64], blk[128+32*h:128+32*h+32]
			sc := blk[192+8*h : 192+8*h+8]
			yh := y[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q0 := int(ql[l]&0xf|(qh[l]&3)<<4) - 32
				q1 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q2 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q3 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				yh[l] = float32(d*float32(int8(sc[is]))) * float32(q0)
				yh[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q1)
				yh[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q2)
				yh[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q3)
			}
		}
	}
}

// quantizeAffineK fills the scales and quants of one Q4_K or Q5_K super-block x, with quants
// 0..top (15 or 31) stored into q. Each sub-block j gets the offset dmin*m_j nearest to
// -min(0, min x_j) and then the smallest step d*sc_j that puts max x_j + dmin*m_j at or
// below the top level; both super-block scales are rounded up to f16 so the 6-bit codes never
// overflow. An element is then within half a step of its value, or below the lowest level by at
// most dmin/2: |x - y| <= max(d*sc_j, dmin)/2, up to float rounding.
func quantizeAffineK(x []float32, top int, hdr []byte, q *[QK]uint8) error {
	var offset, need [8]float32
	var m, sc [8]uint8
	var maxOffset float32
	for j := 0; j < 8; j++ {
		lo := float32(0)
		for _, v := range x[32*j : 32*j+32] {
			lo = min(lo, v)
		}
		offset[j] = -lo
		maxOffset = max(maxOffset, offset[j])
	}
	hmin, dmin, err := scaleF16(maxOffset / 63)
	if err != nil {
		return err
	}
	var maxNeed float32
	for j := 0; j < 8; j++ {
		if dmin != 0 {
			m[j] = uint8(roundClamp(offset[j]/dmin, 0, 63))
		}
		shift := float32(dmin * float32(m[j]))
		hi := float32(0)
		for _, v := range x[32*j : 32*j+32] {
			hi = max(hi, v+shift)
		}
		need[j] = hi / float32(top)
		maxNeed = max(maxNeed, need[j])
	}
	hd, d, err := scaleF16(maxNeed / 63)
	if err != nil {
		return err
	}
	for j := 0; j < 8; j++ {
		if d != 0 {
			sc[j] = uint8(min(math.Ceil(float64(need[j])/float64(d)), 63))
		}
		step := float32(d * float32(sc[j]))
		shift := float32(dmin * float32(m[j]))
		for l, v := range x[32*j : 32*j+32] {
			qv := 0
			if step != 0 {
				qv = roundClamp((v+shift)/step, 0, top)
			}
			q[32*j+l] = uint8(qv)
		}
	}
	binary.LittleEndian.PutUint16(hdr[0:], hd)
	binary.LittleEndian.PutUint16(hdr[2:], hmin)
	packScaleMinK(&sc, &m, hdr[4:16])
	return nil
}

// quantizeQ4_K: see quantizeAffineK for the bound.
func quantizeQ4_K(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	var q [QK]uint8
	for b := 0; b < len(src)/QK; b++ {
		blk := dst[144*b : 144*b+144]
		if err := quantizeAffineK(src[QK*b:QK*b+QK], 15, blk, &q); err != nil {
			return fmt.Errorf("super-block %d: %w", b, err)
		}
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				blk[16+32*c+l] = q[64*c+l] | q[64*c+32+l]<<4
			}
		}
	}
	return nil
}

// quantizeQ5_K: see quantizeAffineK for the bound.
func quantizeQ5_K(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	var q [QK]uint8
	for b := 0; b < len(src)/QK; b++ {
		blk := dst[176*b : 176*b+176]
		if err := quantizeAffineK(src[QK*b:QK*b+QK], 31, blk, &q); err != nil {
			return fmt.Errorf("super-block %d: %w", b, err)
		}
		qh, qs := blk[16:48], blk[48:176]
		clear(qh)
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				lo, hi := q[64*c+l], q[64*c+32+l]
				qs[32*c+l] = lo&0xf | (hi&0xf)<<4
				qh[l] |= (lo>>4)<<(2*c) | (hi>>4)<<(2*c+1)
			}
		}
	}
	return nil
}

// quantizeQ6_K gives sub-block j the step d*sc_j nearest above max|x_j|/31.5, with d (f16,
// rounded up) = the largest such step / 127 and sc_j in 0..127: x/step lies in [-31.5, 31.5],
// which rounds into -32..32 and only +32 is clamped (to 31), by half a step. So
// |x - y| <= d*sc_j/2, up to float rounding.
func quantizeQ6_K(src []float32, dst []byte) error {
	if i, ok := finite(src); !ok {
		return fmt.Errorf("element %d is %v: %w", i, src[i], ErrRange)
	}
	for b := 0; b < len(src)/QK; b++ {
		x := src[QK*b : QK*b+QK]
		blk := dst[210*b : 210*b+210]
		var need [16]float32
		var maxNeed float32
		for j := range need {
			need[j] = absMax(x[16*j:16*j+16]) / 31.5
			maxNeed = max(maxNeed, need[j])
		}
		hd, d, err := scaleF16(maxNeed / 127)
		if err != nil {
			return fmt.Errorf("super-block %d: %w", b, err)
		}
		var q [QK]uint8 // q+32, 0..63
		for j := range need {
			sc := 0
			if d != 0 {
				sc = int(min(math.Ceil(float64(need[j])/float64(d)), 127))
			}
			blk[192+j] = byte(int8(sc))
			step := float32(d * float32(sc))
			for l, v := range x[16*j : 16*j+16] {
				qv := 0
				if step != 0 {
					qv = roundClamp(v/step, -32, 31)
				}
				q[16*j+l] = uint8(qv + 32)
			}
		}
		for h := 0; h < 2; h++ {
			ql, qh := blk[64*h:64*h+64], blk[128+32*h:128+32*h+32]
			qq := q[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				ql[l] = qq[l]&0xf | (qq[l+64]&0xf)<<4
				ql[l+32] = qq[l+32]&0xf | (qq[l+96]&0xf)<<4
				qh[l] = qq[l]>>4 | (qq[l+32]>>4)<<2 | (qq[l+64]>>4)<<4 | (qq[l+96]>>4)<<6
			}
		}
		binary.LittleEndian.PutUint16(blk[208:], hd)
	}
	return nil
}
