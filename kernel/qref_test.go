package kernel

import "github.com/dflash/dflash/kernel/quant"

// The test oracle of the quantized products: ggml's vec_dot on each output row read back as
// ggml blocks (nativeRow), so it checks the repack too, with the integer sums and float steps
// listed in qportable.go, computed from the quantized activations' quants alone (not from the
// bias sums the kernels use). Every path, the portable one included, must match it bitwise.

// refProduct computes y (rows x N) for activations x with the oracle.
func refProduct(m *Matrix, x []float32, rows int) []float32 {
	kind := qinfos[m.DType].kind
	var s actScratch
	a := s.quantized(portable, kind, x, rows, m.K)
	nb := m.qblocks()
	stride := nb * kind.blockBytes()
	nat := make([]byte, m.nativeRowBytes())
	y := make([]float32, rows*m.N)
	for j := 0; j < m.N; j++ {
		m.nativeRow(nat, j)
		for r := 0; r < rows; r++ {
			y[r*m.N+j] = dotNative(m.DType, nat, a[r*stride:(r+1)*stride], nb)
		}
	}
	return y
}

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
