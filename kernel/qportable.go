package kernel

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/dflash/dflash/kernel/quant"
)

// The portable quantized path is the reference the assembly is checked against. It reads each
// output row back as ggml blocks (nativeRow), so it also checks the repack, and computes ggml's
// vec_dot for the type: exact integer sums per block (per super-block for the K-quants), then a
// fixed float sequence per block, each step rounded to f32 (explicit conversions keep the
// compiler from fusing a multiply and an add):
//
//	Q8_0, Q4_0:  acc = acc + f32(sumi) * (dw*dx)
//	Q4_K, Q5_K:  acc = acc + (f32(sumi)*(d*dx) - f32(summ)*(dmin*dx))
//	             sumi = sum_j sc_j * sum(q*xq over sub-block j), summ = sum_j m_j * sum(xq over j)
//	Q6_K:        acc = acc + f32(sumi) * (d*dx), sumi = sum_s sc_s * sum((q-32)*xq over s)
//
// from acc = 0, blocks in input order. The assembly paths compute the same integers (in another
// order, which integers do not notice) and the same float steps, so every path is bitwise equal
// to this one. Integer bounds (|xq| <= 127): Q8_0 |sumi| <= 32*127*127; Q4_K sumi <= 256*15*127*63
// and Q5_K's <= 256*31*127*63 (< 2^31); Q6_K |sumi| <= 256*32*127*127: all fit in int32.

// rowPool holds per-goroutine scratch for one native row of the portable path.
var rowPool = sync.Pool{New: func() any { return new([]byte) }}

func qpanelsGo(m *Matrix, y []float32, a []byte, rows, p0, p1 int) {
	bp := rowPool.Get().(*[]byte)
	if cap(*bp) < m.nativeRowBytes() {
		*bp = make([]byte, m.nativeRowBytes())
	}
	nat := (*bp)[:m.nativeRowBytes()]
	nb := m.qblocks()
	stride := nb * qinfos[m.DType].kind.blockBytes()
	for j := p0 * Panel; j < min(p1*Panel, m.N); j++ {
		m.nativeRow(nat, j)
		for r := 0; r < rows; r++ {
			y[r*m.N+j] = dotNative(m.DType, nat, a[r*stride:(r+1)*stride], nb)
		}
	}
	rowPool.Put(bp)
}

func le32f(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// dotNative is the dot product of nb native blocks of type dt with one row of quantized
// activations.
func dotNative(dt DType, nat, a []byte, nb int) float32 {
	var acc float32
	switch dt {
	case Q8_0, Q4_0:
		for b := 0; b < nb; b++ {
			ab := a[b*act32Bytes : (b+1)*act32Bytes]
			var s int32
			var dw float32
			if dt == Q8_0 {
				blk := nat[34*b : 34*b+34]
				for i := 0; i < 32; i++ {
					s += int32(int8(blk[2+i])) * int32(int8(ab[i]))
				}
				dw = f16(blk)
			} else {
				blk := nat[18*b : 18*b+18]
				for i := 0; i < 16; i++ {
					s += (int32(blk[2+i]&0xf) - 8) * int32(int8(ab[i]))
					s += (int32(blk[2+i]>>4) - 8) * int32(int8(ab[i+16]))
				}
				dw = f16(blk)
			}
			t := float32(dw * le32f(ab[32:]))
			acc = acc + float32(float32(s)*t)
		}
	case Q4_K, Q5_K:
		bb := 144
		if dt == Q5_K {
			bb = 176
		}
		for b := 0; b < nb; b++ {
			blk := nat[bb*b : bb*b+bb]
			ab := a[b*act256Bytes : (b+1)*act256Bytes]
			qs := blk[16:]
			if dt == Q5_K {
				qs = blk[48:]
			}
			var sumi, summ int32
			for j := 0; j < 8; j++ {
				sc, mn := quant.ScaleMinK(blk[4:16], j)
				var t, sx int32
				for r := 0; r < 32; r++ {
					q := int32(getNib(qs[32*(j/2)+r], j%2 == 1))
					if dt == Q5_K {
						q |= int32(blk[16+r]>>j&1) << 4
					}
					xq := int32(int8(ab[32*j+r]))
					t += q * xq
					sx += xq
				}
				sumi += int32(sc) * t
				summ += int32(mn) * sx
			}
			dx := le32f(ab[256:])
			dd := float32(f16(blk[0:]) * dx)
			dm := float32(f16(blk[2:]) * dx)
			acc = acc + float32(float32(float32(sumi)*dd)-float32(float32(summ)*dm))
		}
	case Q6_K:
		for b := 0; b < nb; b++ {
			blk := nat[210*b : 210*b+210]
			ab := a[b*act256Bytes : (b+1)*act256Bytes]
			var sumi int32
			for s := 0; s < 16; s++ {
				var t int32
				for r := 0; r < 16; r++ {
					q, _, _, _, _ := q6Native(blk, 16*s+r)
					t += (int32(q) - 32) * int32(int8(ab[16*s+r]))
				}
				sumi += int32(int8(blk[192+s])) * t
			}
			dd := float32(f16(blk[208:]) * le32f(ab[256:]))
			acc = acc + float32(float32(sumi)*dd)
		}
	}
	return acc
}
